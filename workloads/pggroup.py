"""pggroup: Debian's PostgreSQL server committing for several client sessions at once, so that one WAL
flush covers the commits of several sessions (group commit: ``commit_delay``/``commit_siblings``, and
XLogFlush's leader that flushes for whoever waits behind it).  Runs in the guest, as root, with its
working directory on the filesystem under test (the postgres workload's prepared cluster: see
workloads/postgres.py).

Setup (before the first ``begin``): the prepared cluster unpacked into ``dir`` with the settings under
test, the server started, one psql making the tables ``gc_rows (session, seq, payload)`` (primary key
(session, seq)) and ``gc_sessions (session, count, last, digest)`` with one row per session, its own
``synchronous_commit`` on -- durable through its WAL flush whatever the setting under test says (no
CHECKPOINT: its data file syncs would be syncs before an ack that no ack can race, and an exploration
would spend its budget on them).

The run: ``sessions`` psql processes at once (as root, each its own connection); session ``s``
(1..sessions) runs transactions ``j`` = 1..n in order: ``\\! <mark> begin:s.j``; ``BEGIN``; an INSERT of
row (s, j) (``row_bytes`` drawn from (seed, s, j)); an UPDATE of its session row to (count=j, last=j,
digest=sha256(payload)); ``pg_sleep(think_ms)`` (the transaction open: a sibling for the others'
commits); ``COMMIT``; ``\\! <mark> ack:s.j`` -- stopping at the first error
(ON_ERROR_STOP): each ack follows a COMMIT that returned.  The sessions touch no row in common, so no
commit waits for another's lock: they meet only in the WAL flush.  Marks: psql's ``\\!`` shell writes
``<s> <mark>`` on a pipe to this process and waits for ``ok`` on its session's own pipe; one thread
marks (``powercut.mark``) in arrival order and answers.  Then a fast shutdown.

Params: ``sessions`` (4), ``n`` (4 transactions per session), ``synchronous_commit`` ("on"; on|off|local|
remote_write|remote_apply), ``fsync`` (true), ``commit_delay`` (10000 us: a committing backend waits
that long for others before it flushes, when at least ``commit_siblings`` (1) other transactions are
open), ``think_ms`` (20), ``row_bytes`` (200), ``seed`` (0), ``dir`` ("pgdata"), ``data_checksums`` (true), ``cache``.

PostgreSQL's documented claim (postgresql.org/docs/15/wal-async-commit.html, runtime-config-wal.html):
with synchronous_commit=on a commit is durable once COMMIT returns, group-committed or not;
synchronous_commit=off may lose the most recent commits (up to 3 x wal_writer_delay) after a crash but
never leaves the database inconsistent."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from powercut import Workload
from powercut.workloads import postgres as pg
from powercut.workloads.pgmarks import Marker
from powercut.workloads.pgserver import (
    MISSING,
    append_conf,
    bindir,
    chown_tree,
    psql,
    query,
    start,
    stop,
)

DEFAULTS: dict[str, Any] = {
    "sessions": 4,
    "n": 4,
    "synchronous_commit": "on",
    "fsync": True,
    "commit_delay": 10000,
    "commit_siblings": 1,
    "think_ms": 20,
    "row_bytes": 200,
    "seed": 0,
    "dir": "pgdata",
    "data_checksums": True,
    "cache": pg.CACHE,
}
MAX_SESSIONS = (
    8  # the prepared cluster's max_connections is 10: the setup's and the checker's psql too
)
TABLES = (
    "CREATE TABLE gc_rows (session integer, seq integer, payload bytea NOT NULL, PRIMARY KEY (session, seq));\n"
    "CREATE TABLE gc_sessions (session integer PRIMARY KEY, count integer NOT NULL, last integer NOT NULL, "
    "digest bytea NOT NULL);\n"
)
# How many WAL writes and flushes the server made so far (fewer flushes than commits: group commit)
WAL_QUERY = "SELECT wal_write, wal_sync FROM pg_stat_wal"


@dataclass(frozen=True, slots=True)
class Params:
    """The workload's parameters (the module docstring says what each does), checked."""

    sessions: int
    n: int
    synchronous_commit: str
    fsync: bool
    commit_delay: int
    commit_siblings: int
    think_ms: int
    row_bytes: int
    seed: int
    dir: str
    data_checksums: bool
    cache: str

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        """The parameters from ``given`` (DEFAULTS for the missing ones); a ValueError for a value the
        workload cannot run with."""
        p = Params(**{k: given.get(k, v) for k, v in DEFAULTS.items()})
        if not 1 <= p.sessions <= MAX_SESSIONS:
            raise ValueError(f"pggroup: sessions must be 1..{MAX_SESSIONS}, not {p.sessions}")
        if (
            not 0 <= p.commit_delay <= 100000
            or not 0 <= p.commit_siblings <= 1000
            or not 0 <= p.think_ms <= 60000
        ):
            raise ValueError(
                f"pggroup: commit_delay must be 0..100000 (us), commit_siblings 0..1000 and think_ms "
                f"0..60000 (got {p.commit_delay}, {p.commit_siblings}, {p.think_ms})"
            )
        pg.Params.of(
            postgres_params(p)
        )  # the shared ones (n, synchronous_commit, dir, ...) checked there
        return p


def postgres_params(p: Params) -> dict[str, Any]:
    """The postgres workload's parameters for the shared part (the cluster, its base settings)."""
    return {
        "n": p.n,
        "synchronous_commit": p.synchronous_commit,
        "fsync": p.fsync,
        "row_bytes": p.row_bytes,
        "seed": p.seed,
        "dir": p.dir,
        "data_checksums": p.data_checksums,
        "cache": p.cache,
        "checkpoint_every": 0,
    }


def settings(p: Params) -> dict[str, str]:
    """What this workload adds to postgresql.conf after the postgres workload's settings."""
    return {"commit_delay": str(p.commit_delay), "commit_siblings": str(p.commit_siblings)}


def payload(seed: int, s: int, j: int, size: int) -> bytes:
    """Row (s, j)'s payload: ``size`` bytes drawn from (seed, s, j) -- the checker draws the same."""
    return random.Random(f"pggroup:{seed}:{s}:{j}").randbytes(size)


def key(s: int, j: int) -> str:
    """The mark key of session s's transaction j."""
    return f"{s}.{j}"


def setup_sql(p: Params) -> str:
    """The tables and one row per session, committed with synchronous_commit on (durable at once)."""
    rows = ", ".join(f"({s}, 0, 0, '\\x')" for s in range(1, p.sessions + 1))
    return f"\\set ON_ERROR_STOP 1\nSET synchronous_commit = on;\n{TABLES}INSERT INTO gc_sessions VALUES {rows};\n"


def session_script(p: Params, s: int, mark: str) -> str:
    """Session ``s``'s psql input: its n transactions, each between its begin and ack marks."""
    parts = ["\\set ON_ERROR_STOP 1\n\\o /dev/null\n"]  # pg_sleep's rows
    think = f"SELECT pg_sleep({p.think_ms / 1000:g});\n" if p.think_ms else ""
    for j in range(1, p.n + 1):
        data = payload(p.seed, s, j, p.row_bytes)
        parts.append(
            f"\\! {mark} begin:{key(s, j)}\nBEGIN;\n"
            f"INSERT INTO gc_rows VALUES ({s}, {j}, '\\x{data.hex()}');\n"
            f"UPDATE gc_sessions SET count = {j}, last = {j}, digest = '\\x{hashlib.sha256(data).hexdigest()}' "
            f"WHERE session = {s};\n{think}COMMIT;\n\\! {mark} ack:{key(s, j)}\n"
        )
    return "".join(parts)


def run_sessions(p: Params, bin_dir: str, sockdir: str) -> list[str]:
    """Every session at once; what went wrong, one line each ([] when every transaction committed)."""
    marker = Marker(p.sessions)
    marker.start()
    try:
        with ThreadPoolExecutor(p.sessions) as pool:
            runs = {
                s: pool.submit(
                    psql,
                    bin_dir,
                    sockdir,
                    session_script(p, s, marker.command(s)),
                    check=False,
                    pass_fds=marker.fds(s),
                )
                for s in range(1, p.sessions + 1)
            }
            codes = {s: f.result().returncode for s, f in runs.items()}
    finally:
        marker.close_client_ends()
        marker.join(60)
    problems = [f"pggroup: a mark failed: {marker.error}"] if marker.error is not None else []
    return problems + [
        f"pggroup: session {s}'s psql exited {rc}"
        + (" (killed: a mark's handshake failed)" if rc < 0 else "")
        for s, rc in codes.items()
        if rc
    ]


def wal_counts(bin_dir: str, sockdir: str) -> tuple[int, int] | None:
    """pg_stat_wal's (wal_write, wal_sync) now; None when it cannot be read (a note, not the run's failure)."""
    res = query(bin_dir, sockdir, WAL_QUERY, timeout=120)
    words = res.stdout.split()
    return (
        (int(words[0]), int(words[1]))
        if res.returncode == 0 and len(words) == 2 and all(w.isdigit() for w in words)
        else None
    )


def main(params: dict[str, Any]) -> int:
    """The workload (the module docstring says what it does): 0 when every transaction of every
    session committed and the server shut down cleanly; 1 without PostgreSQL or on a failure said on stderr."""
    p = Params.of(params)
    bin_dir = bindir()
    if bin_dir is None:
        sys.stderr.write(MISSING + "\n")
        return 1
    began = time.monotonic()
    pp = pg.Params.of(postgres_params(p))
    tar_path, origin = pg.cluster_tar(pp, bin_dir)
    datadir = os.path.abspath(p.dir)
    pg.install(tar_path, datadir, pp)
    append_conf(datadir, settings(p))
    os.sync()
    sys.stderr.write(
        f"pggroup: {origin}; unpacked into {p.dir} in {time.monotonic() - began:.1f} s; "
        f"{p.sessions} sessions x {p.n} txns, synchronous_commit = {pg.settings(pp)['synchronous_commit']}"
        f", commit_delay = {p.commit_delay} us, commit_siblings = {p.commit_siblings}\n"
    )
    sys.stderr.flush()
    sockdir = tempfile.mkdtemp(prefix="powercut-pggroup-")
    chown_tree(sockdir)
    server = start(bin_dir, datadir, sockdir, sys.stderr)
    problems: list[str] = []
    try:
        psql(bin_dir, sockdir, setup_sql(p), timeout=600)
        before = wal_counts(bin_dir, sockdir)
        problems = run_sessions(p, bin_dir, sockdir)
        after = wal_counts(bin_dir, sockdir)
        if before and after:
            sys.stderr.write(
                f"pggroup: {p.sessions * p.n} commits, {after[1] - before[1]} WAL flushes by the server "
                f"({after[0] - before[0]} WAL writes)\n"
            )
    finally:
        rc = stop(server)
        shutil.rmtree(sockdir, ignore_errors=True)
    if rc != 0:
        problems.append(f"pggroup: the server's fast shutdown ended with {rc}")
    for line in problems:
        sys.stderr.write(line + "\n")
    return 1 if problems else 0


WORKLOAD = Workload(
    name="pggroup",
    main=main,
    defaults=dict(DEFAULTS),
    minimum={"sessions": 1, "n": 1, "row_bytes": 1},
    description="PostgreSQL group commit: several psql sessions committing at once (INSERT a row + UPDATE its "
    "session's row); synchronous_commit, fsync, commit_delay, commit_siblings",
    choices={"synchronous_commit": pg.SYNC_COMMIT, "sessions": tuple(range(1, MAX_SESSIONS + 1))},
)

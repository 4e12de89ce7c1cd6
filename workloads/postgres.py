"""postgres: Debian's PostgreSQL server, its data directory on the filesystem under test, small
transactions from one ``psql`` session.  Runs in the guest, as root, with its working directory on
the filesystem under test; ``python -m powercut.workloads.postgres --prepare`` runs on the host.

Setup (before the first ``begin``): a prepared cluster -- initdb (``--locale=C``, 1 MiB WAL segments,
data checksums unless ``data_checksums=false``), the schema (``rows``, ``summary`` with its one row,
``amcheck``), a clean shutdown; only the ``postgres`` database and the last WAL segment kept -- is
unpacked into ``dir`` (``postgres``'s, 0700), the settings under test appended to its postgresql.conf,
all synced.  Preparing takes 35-55 s in a TCG guest, so it is done once on the host into ``cache``
(default /var/cache/powercut/postgres, read-only in the guest; else the guest prepares one in /tmp).

The run: the server runs as ``postgres`` (unix socket in a /tmp directory, no TCP); one ``psql`` (as
root, so that its ``\\!`` can mark) reads a script where transaction ``i`` (1..n) is ``\\! powercut-mark
begin:<i>``; ``BEGIN``; an INSERT of row ``i`` (``row_bytes`` from (seed, i)); an UPDATE of the summary
row to (count=i, last=i, digest=sha256(payload)); ``COMMIT``; ``\\! powercut-mark ack:<i>`` -- in order,
stopping at the first error (ON_ERROR_STOP): each ack follows a COMMIT that returned.  A ``CHECKPOINT``
after every ``checkpoint_every``-th ack but the last (0: none) makes later first changes of a page write
a full page image (unless ``full_page_writes=off``) and writes the changed data pages.  Then a fast
shutdown (its checkpoint recorded too).  Autovacuum is off: the writes are the workload's own.

Params: ``n`` (10), ``synchronous_commit`` ("on"; on|off|local|remote_write|remote_apply), ``fsync`` and
``full_page_writes`` (true), ``row_bytes`` (1000), ``seed`` (0), ``dir`` ("pgdata"), ``checkpoint_every`` (3),
``data_checksums`` (true: a torn page fails its checksum), ``cache``, ``data_sync_retry`` (false), ``fault_at`` (0).

``fault_at=K`` (1..the script's CHECKPOINTs): the K-th CHECKPOINT runs while the files of ``rows`` and
``summary`` (main forks, rows' TOAST; ``pg_relation_filepath``) fail with EIO (eio-range), without
ON_ERROR_STOP (the checkpointer runs it in production: no application sees it fail); the device back, it
is retried (as the checkpointer would) while it fails, once per file (a failed fsync ends its checkpoint;
Linux reports each file's writeback error once), then once with ON_ERROR_STOP.  eio-range fails only
allocated blocks: the pages must be ones an earlier checkpoint wrote.  With fault_at=2 and row_bytes=1200
(six rows a heap page) rows 4-6 sit on checkpoint 1's page and row 7 starts the next (at 1000 row 7's
full page image repairs that page).  If psql dies, the workload switches the fault off, waits for the
server, shuts it down and exits 3.

PostgreSQL's documented claims (postgresql.org/docs/15/ runtime-config-wal, wal-reliability, -error-handling):
  defaults (synchronous_commit, fsync, full_page_writes on): a commit is durable once COMMIT returns.
  synchronous_commit=off: may lose the most recent commits after a crash, never corrupts the database.
  fsync=off: may corrupt the database after a power loss (and lose commits).
  full_page_writes=off: risks torn pages -- a page written in part at a power loss corrupts the database.
  data_sync_retry=off (default): a failed data file flush PANICs; the crash recovery replays the WAL.
  data_sync_retry=on: an ERROR, retried later -- which "may be reported as successful, when in fact the data
  has been lost".  Seen (Linux 6.1, ext4, 15.18): off -- PANIC, crash restarts until the fault is off, redo:
  every crash state passes; on -- ERROR (summary), ERROR (rows), then a checkpoint completes without rows
  4-6, acked before the fault: every later state is corrupt-data or lost-ack."""

from __future__ import annotations

import hashlib
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import powercut
from powercut import Workload
from powercut.workloads.pgserver import (
    MISSING,
    START_TIMEOUT_S,
    USER,
    accepts_connections,
    append_conf,
    as_postgres,
    bindir,
    chown_tree,
    major,
    psql,
    query,
    start,
    stop,
)

CACHE = "/var/cache/powercut/postgres"
SYNC_COMMIT = ("on", "off", "local", "remote_write", "remote_apply")
DEFAULTS: dict[str, Any] = {
    "n": 10,
    "synchronous_commit": "on",
    "fsync": True,
    "full_page_writes": True,
    "row_bytes": 1000,
    "seed": 0,
    "dir": "pgdata",
    "checkpoint_every": 3,
    "data_checksums": True,
    "cache": CACHE,
    "data_sync_retry": False,
    "fault_at": 0,
}
SCHEMA = (
    "CREATE TABLE rows (id integer PRIMARY KEY, payload bytea NOT NULL);\n"
    "CREATE TABLE summary (id integer PRIMARY KEY CHECK (id = 1), count integer NOT NULL, "
    "last integer NOT NULL, digest bytea NOT NULL);\n"
    "INSERT INTO summary VALUES (1, 0, 0, '\\x');\n"
    "CREATE EXTENSION amcheck;\n"
)
# Only the database the workload uses stays: fewer files to copy into the filesystem under test
TRIM = (
    "ALTER DATABASE template0 IS_TEMPLATE false;\nDROP DATABASE template0;\n"
    "ALTER DATABASE template1 IS_TEMPLATE false;\nDROP DATABASE template1;\n"
)
INITDB = ("-A", "trust", "-U", USER, "-E", "UTF8", "--locale=C", "--wal-segsize=1", "--no-sync")
# Settings every run gets (a small, quiet server; checkpoints only when asked for)
BASE_SETTINGS: dict[str, str] = {
    "shared_buffers": "16MB",
    "max_connections": "10",
    "dynamic_shared_memory_type": "sysv",
    "max_wal_size": "64MB",
    "min_wal_size": "4MB",
    "checkpoint_timeout": "1d",
    "autovacuum": "off",
    "max_parallel_workers_per_gather": "0",
    "logging_collector": "off",
    "log_checkpoints": "on",
    "log_line_prefix": "'%m [%p] '",
}
# The mark and fault commands psql runs (``\\!``); tests point them at stand-ins.
MARK_CMD = "powercut-mark"
FAULT_CMD = "powercut-fault"
FAULT_FILES_QUERY = (
    "SELECT pg_relation_filepath('rows'), pg_relation_filepath('summary'), "
    "pg_relation_filepath(NULLIF(reltoastrelid, 0)) FROM pg_class WHERE oid = 'rows'::regclass"
)
# The exit status when psql died in a run with a fault (the server crashed)
STOPPED_AFTER_FAULT = 3
# The server's runtime files, left out of the prepared cluster
RUNTIME_FILES = ("postmaster.pid", "postmaster.opts")


def recover_device() -> None:
    """The injected fault switched off (``powercut.recover()``): what the workload does when psql died."""
    powercut.recover()


# A hook, so that tests can put a stand-in in its place
RECOVER: Callable[[], None] = recover_device


@dataclass(frozen=True, slots=True)
class Params:
    """The workload's parameters (the module docstring says what each does), checked."""

    n: int
    synchronous_commit: str
    fsync: bool
    full_page_writes: bool
    row_bytes: int
    seed: int
    dir: str
    checkpoint_every: int
    data_checksums: bool
    cache: str
    data_sync_retry: bool = False
    fault_at: int = 0

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        """The parameters from ``given`` (DEFAULTS for the missing ones); a ValueError for a value the
        workload cannot run with."""
        p = Params(**{k: given.get(k, v) for k, v in DEFAULTS.items()})
        if str(p.synchronous_commit).lower() not in SYNC_COMMIT:
            raise ValueError(
                f"postgres: synchronous_commit must be one of {', '.join(SYNC_COMMIT)}, "
                f"not {p.synchronous_commit!r}"
            )
        if min(p.n, p.row_bytes, p.checkpoint_every, p.fault_at) < 0:
            raise ValueError(
                f"postgres: n, row_bytes, checkpoint_every and fault_at must be >= 0 (got n={p.n}, "
                f"row_bytes={p.row_bytes}, checkpoint_every={p.checkpoint_every}, fault_at={p.fault_at})"
            )
        if not p.dir or os.path.isabs(p.dir) or ".." in p.dir.split("/"):
            raise ValueError(
                f"postgres: dir must be a relative path inside the mount, not {p.dir!r}"
            )
        made = checkpoints(p)
        if p.fault_at and not 1 <= p.fault_at <= made:
            allowed = f"0 or 1..{made}" if made else "0"
            raise ValueError(
                f"postgres: fault_at={p.fault_at} names no CHECKPOINT of the script: with n={p.n} and "
                f"checkpoint_every={p.checkpoint_every} it makes {made or 'none'} "
                f"(fault_at must be {allowed})"
            )
        return p


def checkpoints(p: Params) -> int:
    """How many CHECKPOINTs the script makes: one after every ``checkpoint_every``-th ack but the last."""
    if not p.checkpoint_every or p.n <= 0:
        return 0
    return (p.n - 1) // p.checkpoint_every


def payload(seed: int, i: int, size: int) -> bytes:
    """Row ``i``'s payload: ``size`` bytes drawn from (seed, i) -- the checker draws the same."""
    return random.Random(f"postgres:{seed}:{i}").randbytes(size)


def summary(seed: int, i: int, size: int) -> tuple[int, int, bytes]:
    """The summary row (count, last, digest) once transaction ``i`` committed (0: none did)."""
    return (i, i, hashlib.sha256(payload(seed, i, size)).digest() if i else b"")


def settings(p: Params) -> dict[str, str]:
    """Every setting the workload's server runs with: the base ones and the four under test."""
    onoff = {True: "on", False: "off"}
    return {
        **BASE_SETTINGS,
        "synchronous_commit": str(p.synchronous_commit).lower(),
        "fsync": onoff[p.fsync],
        "full_page_writes": onoff[p.full_page_writes],
        "data_sync_retry": onoff[p.data_sync_retry],
    }


def transaction(p: Params, i: int, mark: str = "") -> str:
    """Transaction ``i`` as psql input, with its marks (``mark``: a command taking the mark, else MARK_CMD)."""
    count, last, digest = summary(p.seed, i, p.row_bytes)
    mark = mark or MARK_CMD
    return (
        f"\\! {mark} begin:{i}\n"
        "BEGIN;\n"
        f"INSERT INTO rows (id, payload) VALUES ({i}, '\\x{payload(p.seed, i, p.row_bytes).hex()}');\n"
        f"UPDATE summary SET count = {count}, last = {last}, digest = '\\x{digest.hex()}' WHERE id = 1;\n"
        "COMMIT;\n"
        f"\\! {mark} ack:{i}\n"
    )


def faulty_checkpoint(files: Sequence[str]) -> str:
    """The ``fault_at``-th CHECKPOINT under the fault, then retried (the module docstring says how).  A
    fault that cannot be switched kills psql ($PPID of the ``\\!`` shell): psql goes on after a failed
    ``\\!`` command."""
    return (
        f"\\! {FAULT_CMD} on eio-range {' '.join(shlex.quote(f) for f in files)} || kill $PPID\n"
        f"\\set ON_ERROR_STOP 0\nCHECKPOINT;\n\\! {FAULT_CMD} off || kill $PPID\nCHECKPOINT;\n"
        + "\\if :ERROR\nCHECKPOINT;\n\\endif\n" * (len(files) - 1)
        + "\\set ON_ERROR_STOP 1\n\\if :ERROR\nCHECKPOINT;\n\\endif\n"
    )


def script(p: Params, fault_files: Sequence[str] = (), *, mark: str = "") -> str:
    """The whole psql input: every transaction, a CHECKPOINT after every ``checkpoint_every``-th; the
    ``fault_at``-th one with ``fault_files`` failing (faulty_checkpoint)."""
    if p.fault_at and not fault_files:
        raise ValueError("postgres: fault_at needs the files to fail")
    parts = ["\\set ON_ERROR_STOP 1\n"]
    k = 0  # the CHECKPOINTs so far
    for i in range(1, p.n + 1):
        parts.append(transaction(p, i, mark))
        if p.checkpoint_every and i % p.checkpoint_every == 0 and i < p.n:
            k += 1
            parts.append(faulty_checkpoint(fault_files) if k == p.fault_at else "CHECKPOINT;\n")
    return "".join(parts)


# -- the run ---------------------------------------------------------------------------------------------


def fault_files(p: Params, bin_dir: str, sockdir: str, datadir: str) -> list[str]:
    """The absolute paths of the files fault_at fails (rows, summary, rows' TOAST if any), said on stderr."""
    rel = query(bin_dir, sockdir, FAULT_FILES_QUERY, timeout=600, check=True).stdout.split()
    sys.stderr.write(
        f"postgres: CHECKPOINT {p.fault_at} of {checkpoints(p)} runs with {', '.join(rel)} (rows, "
        f"summary, rows' TOAST) failing with EIO; data_sync_retry = {settings(p)['data_sync_retry']}\n"
    )
    return [os.path.join(datadir, r) for r in rel]


# -- the prepared cluster ---------------------------------------------------------------------------


def prepared_name(bin_dir: str, checksums: bool) -> str:
    """The prepared cluster's file name: the major version and a hash of the recipe."""
    recipe = repr((SCHEMA, TRIM, INITDB, BASE_SETTINGS, checksums)).encode()
    return f"pgdata-{major(bin_dir)}-{hashlib.sha256(recipe).hexdigest()[:12]}.tar"


def prepare(bin_dir: str, out_tar: str, *, checksums: bool, log: Any) -> None:
    """initdb + schema + clean shutdown in a /tmp directory, packed as ``out_tar`` (atomically)."""
    work = tempfile.mkdtemp(prefix="powercut-pgprep-")
    try:
        os.chmod(work, 0o755)
        datadir = os.path.join(work, "pgdata")
        chown_tree(work)
        initdb = [os.path.join(bin_dir, "initdb"), "-D", datadir, *INITDB] + (
            ["-k"] if checksums else []
        )
        subprocess.run(initdb, stdout=log, stderr=log, check=True, timeout=1800, **as_postgres())
        append_conf(datadir, BASE_SETTINGS)
        server = start(bin_dir, datadir, work, log)
        try:
            psql(bin_dir, work, "\\set ON_ERROR_STOP 1\n" + SCHEMA + TRIM, timeout=600)
        finally:
            rc = stop(server)
        if rc != 0:
            raise RuntimeError(f"postgres: the server's shutdown after the schema exited {rc}")
        drop_spare_wal(bin_dir, datadir)
        os.makedirs(os.path.dirname(out_tar) or ".", exist_ok=True)
        tmp = f"{out_tar}.{os.getpid()}.tmp"
        with tarfile.open(tmp, "w") as tar:
            tar.add(datadir, arcname="pgdata", filter=without_runtime_files)
        os.replace(tmp, out_tar)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def without_runtime_files(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """A tar filter: everything but the server's runtime files (RUNTIME_FILES)."""
    return None if os.path.basename(info.name) in RUNTIME_FILES else info


def drop_spare_wal(bin_dir: str, datadir: str) -> None:
    """After a clean shutdown only the segment of the shutdown checkpoint is needed; the others are
    recycled segments kept for later (the server makes new ones when it needs them)."""
    out = subprocess.run(
        [os.path.join(bin_dir, "pg_controldata"), datadir],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
    ).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    if fields.get("Database cluster state", "").strip() != "shut down":
        raise RuntimeError(f"postgres: the prepared cluster is not shut down cleanly: {out[:200]}")
    keep = fields["Latest checkpoint's REDO WAL file"].strip()
    wal = os.path.join(datadir, "pg_wal")
    for name in os.listdir(wal):
        if len(name) == 24 and name != keep:
            os.unlink(os.path.join(wal, name))


def cluster_tar(p: Params, bin_dir: str) -> tuple[str, str]:
    """The prepared cluster to unpack, and where it came from (the cache, or made here in /tmp)."""
    name = prepared_name(bin_dir, p.data_checksums)
    cached = os.path.join(p.cache, name)
    if os.path.exists(cached):
        return cached, f"prepared cluster {cached}"
    made = os.path.join(tempfile.gettempdir(), name)
    began = time.monotonic()
    prepare(bin_dir, made, checksums=p.data_checksums, log=sys.stderr)
    took = time.monotonic() - began
    return made, (
        f"no prepared cluster in {p.cache}: made one here in {took:.1f} s "
        "(python -m powercut.workloads.postgres --prepare on the host spares that)"
    )


def install(tar_path: str, datadir: str, p: Params) -> None:
    """Unpack the cluster into ``datadir`` with the run's settings, all of it durable."""
    if os.path.exists(datadir):
        shutil.rmtree(datadir)
    parent = os.path.dirname(os.path.abspath(datadir))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".unpack-") as tmp:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="fully_trusted")
        os.rename(os.path.join(tmp, "pgdata"), datadir)
    chown_tree(datadir)
    os.chmod(datadir, 0o700)
    append_conf(datadir, settings(p))
    os.sync()


def main(params: dict[str, Any]) -> int:
    """The workload (the module docstring says what it does): 0 when every transaction committed and
    the server shut down cleanly; 1 without PostgreSQL or on a failure said on stderr;
    STOPPED_AFTER_FAULT when psql died under the injected fault."""
    p = Params.of(params)
    bin_dir = bindir()
    if bin_dir is None:
        sys.stderr.write(MISSING + "\n")
        return 1
    began = time.monotonic()
    tar_path, origin = cluster_tar(p, bin_dir)
    datadir = os.path.abspath(p.dir)
    install(tar_path, datadir, p)
    sys.stderr.write(
        f"postgres: {origin}; unpacked into {p.dir} in {time.monotonic() - began:.1f} s\n"
    )
    sys.stderr.flush()
    sockdir = tempfile.mkdtemp(prefix="powercut-pg-")
    chown_tree(sockdir)
    server = start(bin_dir, datadir, sockdir, sys.stderr)
    stopped = ""  # why the run stopped early, one line
    status = 0
    try:
        files = fault_files(p, bin_dir, sockdir, datadir) if p.fault_at else []
        res = psql(bin_dir, sockdir, script(p, files), check=not p.fault_at)
        if res.returncode:
            stopped, status = after_psql_died(res, p.fault_at, bin_dir, sockdir, server)
    finally:
        rc = stop(server)
        shutil.rmtree(sockdir, ignore_errors=True)
    if rc != 0:
        shutdown = f"postgres: the server's fast shutdown ended with {rc}"
        stopped = f"{shutdown}; {stopped}" if stopped else shutdown
        status = 1
    if stopped:
        sys.stderr.write(f"{stopped}\n")
    return status


def after_psql_died(
    res: subprocess.CompletedProcess[bytes],
    k: int,
    bin_dir: str,
    sockdir: str,
    server: subprocess.Popen[bytes],
) -> tuple[str, int]:
    """psql died in a run with a fault (the server crashed, or the fault could not be switched): the fault
    off, the server's crash recovery awaited; one line, and the exit status (1: the fault never went on)."""
    said = [
        ln.strip() for ln in res.stderr.decode(errors="replace").splitlines() if ln.strip()
    ] or ["-"]
    off = ""  # what became of the fault, when it was not simply switched off
    try:
        RECOVER()
    except Exception as x:  # noqa: BLE001 -- whatever it was, the server must still be shut down
        off = "" if "no fault" in str(x) else f"could NOT be switched off ({type(x).__name__}: {x})"
    if (
        res.returncode == -signal.SIGTERM
    ):  # the script's ``|| kill $PPID``: FAULT_CMD failed, and said why
        return (
            f"postgres: could not switch the fault around CHECKPOINT {k} (psql killed): {said[-1]}"
            + (off and f"; the fault {off}"),
            1,
        )
    # the server refuses connections until its crash recovery is over
    back = "the server is not back"
    deadline = time.monotonic() + START_TIMEOUT_S
    while server.poll() is None and time.monotonic() < deadline:
        if accepts_connections(bin_dir, sockdir):
            back = "the server accepts connections again"
            break
        time.sleep(0.2)
    return (
        f"postgres: psql stopped in a run whose CHECKPOINT {k} ran under an injected EIO (exit {res.returncode}: "
        f"{said[-1]}); the fault {off or 'switched off'}, {back}; the script's later transactions did not run",
        STOPPED_AFTER_FAULT,
    )


def prepare_main(argv: list[str]) -> int:
    """``--prepare [--no-checksums] [DIR]``: make the prepared cluster on the host (as root)."""
    checksums = "--no-checksums" not in argv
    rest = [a for a in argv if not a.startswith("--")]
    bin_dir = bindir()
    if bin_dir is None:
        sys.stderr.write(MISSING + "\n")
        return 1
    out = os.path.join(rest[0] if rest else CACHE, prepared_name(bin_dir, checksums))
    if os.path.exists(out):
        sys.stdout.write(f"{out} (already there)\n")
        return 0
    with tempfile.TemporaryFile() as log:
        try:
            prepare(bin_dir, out, checksums=checksums, log=log)
        except (subprocess.CalledProcessError, RuntimeError) as e:
            log.seek(0)
            sys.stderr.write(f"{e}\n{log.read().decode(errors='replace')[-2000:]}")
            return 1
    sys.stdout.write(f"{out}\n")
    return 0


WORKLOAD = Workload(
    name="postgres",
    main=main,
    defaults=dict(DEFAULTS),
    minimum={"n": 1, "row_bytes": 1},
    description="PostgreSQL transactions (INSERT a row + UPDATE a summary row) from one psql session; "
    "synchronous_commit=on|off, fsync, full_page_writes; data_sync_retry under an EIO",
    choices={"synchronous_commit": SYNC_COMMIT},
)

if __name__ == "__main__":
    if sys.argv[1:2] != ["--prepare"]:
        sys.stderr.write(
            "usage: python -m powercut.workloads.postgres --prepare [--no-checksums] [DIR]\n"
        )
        sys.exit(2)
    sys.exit(prepare_main(sys.argv[2:]))

"""Checker for pggroup (several sessions committing at once): the server's own crash recovery on the
recovered data directory, then every acked transaction of every session whole and byte-exact, and
pg_amcheck clean.  The server is the postgres checker's (checkers/postgres.py: started as ``postgres``
on the recovered, writable mount, ``fsync=off``, always stopped; a server that does not start is
``CheckInput.noticed``).

What was written is rebuilt from the parameters alone: session ``s``'s transaction ``j`` (mark key
``s.j``) inserts row (s, j) (``row_bytes`` drawn from (seed, s, j)) and sets session s's row to
(count=j, last=j, digest=sha256(payload)).  A session's transactions commit in order, so its WAL
records do: any crash leaves each session a prefix.

* corrupt-data -- the server does not start, reading the tables fails, pg_amcheck reports a problem,
  a session row missing or not what its ``last`` transaction wrote, a row whose payload differs, a row
  never begun, a transaction half there (a row its session row does not count, or a session row
  counting a missing row);
* lost-ack -- an acked transaction absent (its row and its session row's count both);
* pass -- otherwise: each session holds transactions 1..last_s, each whole.  A state before the first
  ``begin`` (the cluster being set up) passes without starting the server."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from powercut import Checker, CheckInput, CheckResult
from powercut.checkers import postgres as pgc
from powercut.workloads.pgserver import MISSING, bindir

DEFAULTS = {"sessions": 4, "seed": 0, "row_bytes": 200, "dir": "pgdata"}
QUERY = (
    "SELECT 'row', session, seq, encode(payload, 'hex'), NULL::integer FROM gc_rows UNION ALL "
    "SELECT 'session', session, last, encode(digest, 'hex'), count FROM gc_sessions"
)


def payload(seed: int, s: int, j: int, size: int) -> bytes:
    return random.Random(f"pggroup:{seed}:{s}:{j}").randbytes(size)


def parse_key(k: str) -> tuple[int, int]:
    """A mark key ``s.j`` as (s, j); a ValueError for anything else."""
    s, _, j = k.partition(".")
    if not (s.isdigit() and j.isdigit()):
        raise ValueError(f"pggroup: a mark key is SESSION.TXN, not {k!r}")
    return int(s), int(j)


@dataclass(frozen=True, slots=True)
class Found:
    """The tables as read: rows by (session, seq), session rows by session as (count, last, digest)."""

    rows: dict[tuple[int, int], bytes] = field(default_factory=dict)
    sessions: dict[int, tuple[int, int, bytes]] = field(default_factory=dict)


def parse(text: str) -> Found:
    """psql's unaligned, tuples-only output of QUERY (fields separated by '|')."""
    found = Found()
    for line in text.splitlines():
        if not line:
            continue
        kind, s, j, data, count = line.split("|")
        if kind == "row":
            found.rows[int(s), int(j)] = bytes.fromhex(data)
        else:
            found.sessions[int(s)] = (int(count), int(j), bytes.fromhex(data))
    return found


def _keys(keys: set[tuple[int, int]]) -> str:
    return ", ".join(f"{s}.{j}" for s, j in sorted(keys)[:10]) + (" ..." if len(keys) > 10 else "")


def judge(
    found: Found,
    sessions: int,
    seed: int,
    size: int,
    acked: set[tuple[int, int]],
    begun: set[tuple[int, int]],
    *,
    amcheck: Sequence[str] = (),
    note: str = "",
) -> CheckResult:
    """The verdict (the module docstring says which) for what the server answered against the marks."""
    corrupt = [f"pg_amcheck: {line}" for line in amcheck[:3]]
    known = acked | begun
    lasts: dict[int, int] = {}
    for s in range(1, sessions + 1):
        if s not in found.sessions:
            corrupt.append(f"session {s}'s row is missing (made durable before the first begin)")
            continue
        count, last, digest = found.sessions[s]
        if last and (s, last) not in known:
            corrupt.append(f"session {s}'s row names txn {s}.{last}, which was never begun")
            continue
        want = hashlib.sha256(payload(seed, s, last, size)).digest() if last else b""
        if (count, digest) != (last, want):
            corrupt.append(
                f"session {s}'s row (count={count}, last={last}) is not what txn {s}.{last} wrote"
            )
        lasts[s] = last
    extra = set(found.sessions) - set(range(1, sessions + 1))
    if extra:
        corrupt.append(f"session row(s) {sorted(extra)} present: the workload made 1..{sessions}")
    for (s, j), data in sorted(found.rows.items()):
        if (s, j) not in known:
            corrupt.append(f"row {s}.{j} is committed but was never begun")
        elif data != payload(seed, s, j, size):
            corrupt.append(f"row {s}.{j}: its payload is not what was written")
    for s, last in sorted(lasts.items()):
        have = {j for (t, j) in found.rows if t == s}
        if have - set(range(1, last + 1)):
            corrupt.append(
                f"session {s}: row(s) {_keys({(s, j) for j in have if j > last})} present but its row "
                f"stops at txn {s}.{last}: an INSERT without its UPDATE"
            )
        if set(range(1, last + 1)) - have:
            corrupt.append(
                f"session {s}: its row counts txns 1..{last} but row(s) "
                f"{_keys({(s, j) for j in range(1, last + 1) if j not in have})} are missing"
            )
    lost = {k for k in acked if k not in found.rows}
    held = ", ".join(
        f"{s}: 1..{last}" if last else f"{s}: none" for s, last in sorted(lasts.items())
    )
    lost_line = (
        f"acked txn(s) {_keys(lost)} lost: the sessions hold {held or 'nothing readable'}"
        if lost
        else ""
    )
    if corrupt:
        return CheckResult("corrupt-data", tuple(corrupt + ([lost_line] if lost_line else [])))
    if lost:
        return CheckResult("lost-ack", (lost_line, note) if note else (lost_line,))
    gone = begun - set(found.rows)
    line = (
        f"{len(acked)} acked txn(s) of {sessions} sessions intact; pg_amcheck clean; the sessions hold {held}"
        + (f"; begun, not acked, absent: {_keys(gone)}" if gone else "")
    )
    return CheckResult("pass", (line, note) if note else (line,))


def examine(
    srv: pgc.Server, inp: CheckInput, acked: set[tuple[int, int]], begun: set[tuple[int, int]]
) -> CheckResult:
    """Read both tables, run pg_amcheck, judge."""
    res = srv.run(
        "psql",
        "-X",
        "-A",
        "-t",
        "-F",
        "|",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        "postgres",
        "-c",
        QUERY,
        options=pgc.SCAN_OPTIONS,
    )
    if res.returncode != 0:
        return CheckResult(
            inp.noticed,
            tuple(
                f"reading the tables: {ln}"
                for ln in pgc.error_lines(res.stderr or res.stdout, res.returncode)
            ),
        )
    amc = srv.run("pg_amcheck", "-d", "postgres", "--heapallindexed", "--install-missing")
    problems = (
        []
        if amc.returncode == 0
        else pgc.amcheck_problems(amc.stdout + "\n" + amc.stderr, amc.returncode)
    )
    got = judge(
        parse(res.stdout),
        int(inp.params.get("sessions", DEFAULTS["sessions"])),
        int(inp.params.get("seed", DEFAULTS["seed"])),
        int(inp.params.get("row_bytes", DEFAULTS["row_bytes"])),
        acked,
        begun,
        amcheck=problems,
        note=pgc.recovery_note(srv.log()),
    )
    if (
        problems and got.verdict == "corrupt-data" and inp.noticed != "corrupt-data"
    ):  # pg_amcheck noticed
        return CheckResult(inp.noticed, got.reasons)
    return got


def check(inp: CheckInput) -> CheckResult:
    if not inp.acked and not inp.begun:
        return CheckResult("pass", ("no transaction begun yet: the cluster was being set up",))
    acked = {parse_key(k) for k in inp.acked}
    begun = {parse_key(k) for k in inp.begun}
    name = str(inp.params.get("dir", DEFAULTS["dir"]))
    datadir = os.path.join(inp.mount, name)
    missing = pgc.no_datadir(datadir, _keys(acked))
    if missing is not None:
        return missing
    bin_dir = bindir()
    if bin_dir is None:
        raise RuntimeError(MISSING)
    try:
        with pgc.Server(bin_dir, datadir) as srv:
            return examine(srv, inp, acked, begun)
    except pgc.StartFailed as e:
        return CheckResult(
            inp.noticed, ("the server does not start on the recovered data directory", *e.lines)
        )


CHECKER = Checker(
    name="pggroup",
    description="PostgreSQL's crash recovery, pg_amcheck, every acked transaction of "
    "every session whole and byte-exact, each session a prefix",
    check=check,
)

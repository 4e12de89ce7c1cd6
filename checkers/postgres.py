"""Checker for postgres: the server's own crash recovery on the recovered data directory, then every
acked transaction whole and byte-exact, and amcheck clean.  Runs wherever checks run (host mode or
the checker VM), as root, on the recovered, writable mount (a disposable snapshot).

The server is started directly on ``<mount>/<dir>`` as ``postgres`` (with CAP_DAC_READ_SEARCH, so
the mount may sit under a directory only root can search), in its own process group, its socket in
a fresh /tmp directory, no TCP, ``fsync=off`` (nothing here needs to be durable).  The stale
``postmaster.pid`` of the crashed run is removed first (its pids are the guest's).  The server
always goes down afterwards (SIGQUIT, then SIGKILL to its process group), so nothing keeps the
mount busy.

What was written is rebuilt from the parameters alone (the unit tests pin it to the workload):
transaction ``i`` inserts row ``i`` (``row_bytes`` from (seed, i)) and sets the summary row to
(count=i, last=i, digest=sha256(row i's payload)).

* corrupt-data -- the server does not start (its PANIC/FATAL lines: "could not locate a valid
  checkpoint record", "invalid page in block ..."), reading the tables fails (the error), pg_amcheck
  (every table and btree index of the database, ``--heapallindexed``) reports a problem, a row or
  the summary is not what was written, a row never begun, or a transaction half there (a row the
  summary does not count, or a summary counting a missing row);
* lost-ack -- an acked transaction absent (its row and its summary update both), or no data
  directory while something was acked;
* pass -- otherwise: the database holds transactions 1..last, each whole; a begun-not-acked one is
  there whole or absent whole.  A state before the first ``begin`` (the cluster being unpacked)
  passes without starting the server: nothing was promised yet."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from powercut import Checker, CheckInput, CheckResult
from powercut.checkers.keystate import key_state
from powercut.workloads.pgserver import (
    MISSING,
    USER,
    bindir,
    chown,
    client_argv,
    is_ready,
    read_pidfile,
    server_argv,
    wait_ready,
)

DEFAULTS: dict[str, Any] = {"seed": 0, "row_bytes": 1000, "dir": "pgdata"}
START_TIMEOUT_S = 240.0
QUERY_TIMEOUT_S = 300.0
# A seq scan of both tables (no index involved: amcheck checks the indexes against the heap)
QUERY = (
    "SELECT 'row', id, encode(payload, 'hex'), NULL::integer, NULL::integer FROM rows UNION ALL "
    "SELECT 'summary', id, encode(digest, 'hex'), count, last FROM summary"
)
SCAN_OPTIONS = "-c enable_indexscan=off -c enable_bitmapscan=off -c enable_indexonlyscan=off"
# Start-up failures that are this machine's problem, not the recovered state's
HARNESS_PROBLEMS = (
    "lock file",
    "could not bind",
    "could not create listen socket",
    "shared memory",
    "cannot be run as root",
    "could not change directory",
    "out of memory",
    "could not create semaphores",
    "Permission denied",
)


def payload(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"postgres:{seed}:{i}").randbytes(size)


def summary(seed: int, i: int, size: int) -> tuple[int, int, bytes]:
    """The summary row (count, last, digest) once transaction ``i`` committed (0: none did)."""
    return (i, i, hashlib.sha256(payload(seed, i, size)).digest() if i else b"")


def _keys(keys: set[int]) -> str:
    return ", ".join(map(str, sorted(keys)[:10])) + (" ..." if len(keys) > 10 else "")


def _first_difference(got: bytes, want: bytes) -> str:
    if len(got) != len(want):
        return f"{len(got)} bytes, {len(want)} written"
    at = next(k for k, (a, b) in enumerate(zip(got, want)) if a != b)
    return f"differs from byte {at}" + ("" if got.strip(b"\0") else " (zeros)")


# -- what the server answered -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Found:
    """The tables as read: rows by id, and the summary rows as (id, count, last, digest)."""

    rows: dict[int, bytes] = field(default_factory=dict)
    summaries: tuple[tuple[int, int, int, bytes], ...] = ()


def parse(text: str) -> Found:
    """psql's unaligned, tuples-only output of QUERY (fields separated by '|')."""
    rows: dict[int, bytes] = {}
    sums: list[tuple[int, int, int, bytes]] = []
    for line in text.splitlines():
        if not line:
            continue
        kind, ident, data, count, last = line.split("|")
        if kind == "row":
            rows[int(ident)] = bytes.fromhex(data)
        else:
            sums.append((int(ident), int(count), int(last), bytes.fromhex(data)))
    return Found(rows, tuple(sums))


def startup_failure(log_text: str) -> tuple[bool, list[str]]:
    """Why the server did not start, from its log: (a harness problem?, the telling lines)."""
    lines = [ln.strip() for ln in log_text.splitlines()]
    telling = [ln for ln in lines if any(w in ln for w in ("PANIC:", "FATAL:", "ERROR:"))]
    if not telling:
        telling = lines[-3:]
    harness = any(p in ln for ln in telling for p in HARNESS_PROBLEMS)
    return harness, [_strip_prefix(ln) for ln in telling[:3]]


def _strip_prefix(line: str) -> str:
    """``2026-01-01 10:00:00.000 UTC [123] PANIC:  x`` -> ``PANIC: x``."""
    for level in ("PANIC:", "FATAL:", "ERROR:", "LOG:", "WARNING:", "DETAIL:", "HINT:", "CONTEXT:"):
        at = line.find(level)
        if at >= 0:
            return level + " " + line[at + len(level) :].strip()
    return line


def recovery_note(log_text: str) -> str:
    """What start-up did, in a few words (redo done / clean start)."""
    for ln in log_text.splitlines():
        if "redo done at" in ln:
            return "recovery: " + _strip_prefix(ln).removeprefix("LOG: ").split(" system usage")[0]
    if "database system was shut down at" in log_text:
        return "recovery: none needed (a clean shutdown)"
    return "recovery: no redo"


class Judge:
    """What the server answered against what the marks promise."""

    def __init__(self, seed: int, row_bytes: int, acked: set[int], begun: set[int]) -> None:
        self.seed = seed
        self.size = row_bytes
        self.acked = acked
        self.begun = begun
        self.corrupt: list[str] = []

    def state(self, i: int) -> str:
        return key_state(i, self.acked, self.begun)

    def run(self, found: Found, *, amcheck: Sequence[str] = (), note: str = "") -> CheckResult:
        self.corrupt.extend(f"pg_amcheck: {line}" for line in amcheck[:3])
        last = self.check_summary(found.summaries)
        self.check_rows(found.rows)
        if last is not None:
            self.check_pairs(set(found.rows), last)
        lost = self.acked - set(found.rows)
        if last is None:
            held = f"rows {_keys(set(found.rows)) or 'none'}"
        elif last:
            held = f"txns 1..{last}"
        else:
            held = "no txn"
        lost_line = f"acked txn(s) {_keys(lost)} lost: the database holds {held}" if lost else ""
        if self.corrupt:
            return CheckResult(
                "corrupt-data", tuple(self.corrupt + ([lost_line] if lost_line else []))
            )
        if lost:
            return CheckResult("lost-ack", (lost_line, note) if note else (lost_line,))
        absent = self.begun - set(found.rows)
        gone = f"; begun, not acked, absent: {_keys(absent)}" if absent else ""
        line = f"{len(self.acked)} acked txn(s) intact; pg_amcheck clean; the database holds {held}{gone}"
        return CheckResult("pass", (line, note) if note else (line,))

    def check_summary(self, sums: tuple[tuple[int, int, int, bytes], ...]) -> int | None:
        """The summary row against what its writer wrote; the ``last`` it names (None: not a txn)."""
        if len(sums) != 1 or sums[0][0] != 1:
            self.corrupt.append(
                f"the summary table holds {len(sums)} row(s) {[s[0] for s in sums]}, not just row 1"
            )
            if not sums:
                return None
        _, count, last, digest = sums[0]
        if last < 0 or last and self.state(last) == "never begun":
            self.corrupt.append(f"the summary row names txn {last}, which was never begun")
            return None
        if (count, last, digest) != summary(self.seed, last, self.size):
            self.corrupt.append(
                f"the summary row (count={count}, last={last}) is not what txn {last} wrote"
                + (" (its digest differs)" if count == last else "")
            )
        return last

    def check_rows(self, rows: dict[int, bytes]) -> None:
        for i, data in sorted(rows.items()):
            state = self.state(i)
            want = payload(self.seed, i, self.size)
            if state == "never begun":
                self.corrupt.append(f"row {i} is committed but was never begun")
            elif data != want:
                self.corrupt.append(
                    f"row {i} ({state}): its payload {_first_difference(data, want)}"
                )

    def check_pairs(self, ids: set[int], last: int) -> None:
        """Each transaction all or nothing: rows 1..last exactly, as the summary counts them."""
        extra = {i for i in ids if not 1 <= i <= last}
        missing = set(range(1, last + 1)) - ids
        if extra:
            self.corrupt.append(
                f"row(s) {_keys(extra)} present but the summary stops at txn {last}: an INSERT "
                "without its UPDATE"
            )
        if missing:
            self.corrupt.append(
                f"the summary counts txns 1..{last} but row(s) {_keys(missing)} are missing: "
                "an UPDATE without its INSERT"
            )


# -- the server on the recovered data directory ------------------------------------------------------


class StartFailed(Exception):
    """The server did not start on the recovered data directory (a finding): its telling log lines."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class Server:
    """``with Server(bindir, datadir) as s:`` -- started and ready, or StartFailed (a finding) or
    RuntimeError (a harness problem); always stopped on the way out."""

    def __init__(self, bin_dir: str, datadir: str, options: Sequence[str] = ()) -> None:
        self.bin = bin_dir
        self.datadir = datadir
        self.options = tuple(options)  # more ``-c name=value``, after the checker's own
        self.sock = tempfile.mkdtemp(prefix="powercut-pgcheck-")
        self.log_path = os.path.join(self.sock, "server.log")
        self.proc: subprocess.Popen[bytes] | None = None
        chown(self.sock)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}

    def __enter__(self) -> Server:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        """What the server said so far ("" before it started)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def start(self) -> None:
        """The server started and ready; StartFailed or RuntimeError (the class docstring says which)."""
        pidfile = os.path.join(self.datadir, "postmaster.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)  # the crashed run's: its pids are the guest's
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        options = (
            "-c",
            "fsync=off",
            "-c",
            "logging_collector=off",
            "-c",
            "autovacuum=off",
            *self.options,
        )
        argv = [
            setpriv,
            f"--reuid={USER}",
            f"--regid={USER}",
            "--clear-groups",
            "--inh-caps=+dac_read_search",
            "--ambient-caps=+dac_read_search",
            "--",
            *server_argv(self.bin, self.datadir, self.sock, options),
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                start_new_session=True,
            )
        outcome = wait_ready(self.proc, self._ready, START_TIMEOUT_S, interval=0.05)
        if outcome == "exited":
            harness, lines = startup_failure(self.log())
            if harness:
                raise RuntimeError(
                    f"postgres did not start (not the state's fault?): {'; '.join(lines)}"
                )
            raise StartFailed(lines)
        if outcome == "timeout":
            raise RuntimeError(
                f"postgres: recovery did not finish in {START_TIMEOUT_S:g} s: "
                f"{'; '.join(startup_failure(self.log())[1])}"
            )

    def _ready(self) -> bool:
        """Does the server accept connections yet (its lock file says ``ready``)?"""
        return self.proc is not None and is_ready(read_pidfile(self.datadir), self.proc.pid)

    def run(self, tool: str, *args: str, options: str = "") -> subprocess.CompletedProcess[str]:
        """Client program ``tool`` with ``args`` against the server (``options``: PGOPTIONS), its output
        captured as text; never raises for an exit status."""
        argv = client_argv(self.bin, tool, self.sock, *args)
        env = self.env | ({"PGOPTIONS": options} if options else {})
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=QUERY_TIMEOUT_S,
            check=False,
        )

    def stop(self) -> None:
        """Immediate shutdown, then nothing of its process group left; the socket directory removed."""
        proc = self.proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGQUIT)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(
                    proc.pid, signal.SIGKILL
                )  # backends, and the postmaster if it is still there
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            self.proc = None
        shutil.rmtree(self.sock, ignore_errors=True)


def error_lines(text: str, returncode: int) -> list[str]:
    """A client's complaint, errors first: ``FATAL: invalid page in block 0 of relation base/5/1259``
    (the connection boilerplate before the server's words dropped), then a warning that explains it."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith("psql: error: connection to server") and "failed: " in ln:
            lines[i] = ln.split("failed: ", 1)[1]
    errors = [ln for ln in lines if ln.startswith(("PANIC:", "FATAL:", "ERROR:"))]
    rest = [ln for ln in lines if ln not in errors]
    return [" ".join(ln.split()) for ln in (errors + rest)[:2]] or [f"exited {returncode}"]


def amcheck_problems(text: str, returncode: int) -> list[str]:
    """pg_amcheck's report, one line per problem: a relation's header line (``btree index
    "postgres.public.rows_pkey":``) joined with the indented lines under it; notices dropped."""
    out: list[str] = []
    for ln in text.splitlines():
        if not ln.strip() or ln.lstrip().startswith("NOTICE:"):
            continue
        if (
            out
            and out[-1].endswith(":")
            and (ln[:1].isspace() or ln.startswith(("ERROR:", "DETAIL:")))
        ):
            out[-1] += " " + " ".join(ln.split())
        else:
            out.append(" ".join(ln.split()))
    return out or [f"pg_amcheck exited {returncode}"]


def examine(srv: Server, judge: Judge, noticed: str = "corrupt-data") -> CheckResult:
    """Read both tables, run pg_amcheck, judge.  ``noticed``: the verdict when the server reports the
    damage itself (CheckInput.noticed: ``detected`` under a lying disk)."""
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
        options=SCAN_OPTIONS,
    )
    if (
        res.returncode != 0
    ):  # e.g. "invalid page in block ...", "page verification failed, calculated checksum"
        return CheckResult(
            noticed,
            tuple(
                f"reading the tables: {ln}"
                for ln in error_lines(res.stderr or res.stdout, res.returncode)
            ),
        )
    found = parse(res.stdout)
    amc = srv.run("pg_amcheck", "-d", "postgres", "--heapallindexed", "--install-missing")
    problems = (
        []
        if amc.returncode == 0
        else amcheck_problems(amc.stdout + "\n" + amc.stderr, amc.returncode)
    )
    got = judge.run(found, amcheck=problems, note=recovery_note(srv.log()))
    if (
        problems and got.verdict == "corrupt-data" and noticed != "corrupt-data"
    ):  # pg_amcheck noticed
        return CheckResult(noticed, got.reasons)
    return got


def check(inp: CheckInput) -> CheckResult:
    name = str(inp.params.get("dir", DEFAULTS["dir"]))
    datadir = os.path.join(inp.mount, name)
    if not inp.acked and not inp.begun:
        return CheckResult("pass", ("no transaction begun yet: the cluster was being set up",))
    return judge_datadir(datadir, inp)


def no_datadir(datadir: str, acked: str) -> CheckResult | None:
    """The verdict when the recovered filesystem has no data directory at ``datadir`` (``acked``: the
    acked keys as the reason names them, "" for none); None when it has one."""
    if os.path.exists(os.path.join(datadir, "PG_VERSION")):
        return None
    name = os.path.basename(datadir)
    if acked:
        return CheckResult("lost-ack", (f"no data directory {name} but txn(s) {acked} were acked",))
    return CheckResult(
        "corrupt-data", (f"no data directory {name}, made durable before the first begin",)
    )


def judge_datadir(
    datadir: str, inp: CheckInput, server: Callable[[str, str], Server] = Server
) -> CheckResult:
    """The verdict for the data directory ``datadir`` against ``inp``'s marks: its server (made by
    ``server(bindir, datadir)``) started, the tables read, pg_amcheck; a server that does not start
    is ``inp.noticed``."""
    acked = {int(k) for k in inp.acked}
    begun = {int(k) for k in inp.begun}
    missing = no_datadir(datadir, _keys(acked))
    if missing is not None:
        return missing
    bin_dir = bindir()
    if bin_dir is None:
        raise RuntimeError(MISSING)
    judge = Judge(
        int(inp.params.get("seed", DEFAULTS["seed"])),
        int(inp.params.get("row_bytes", DEFAULTS["row_bytes"])),
        acked,
        begun,
    )
    try:
        with server(bin_dir, datadir) as srv:
            return examine(srv, judge, inp.noticed)
    except StartFailed as e:
        return CheckResult(
            inp.noticed, ("the server does not start on the recovered data directory", *e.lines)
        )


CHECKER = Checker(
    name="postgres",
    description="PostgreSQL's crash recovery, pg_amcheck, every acked transaction "
    "whole and byte-exact, begun ones all or nothing",
    check=check,
)

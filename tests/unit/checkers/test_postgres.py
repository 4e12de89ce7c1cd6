"""The postgres workload and its checker without a VM.  The pure parts: parameters, the rows and the
summary (the workload's writer pinned to the checker's rebuild), the psql script (marks around each
COMMIT), the settings rendered into postgresql.conf, the verdict logic from query results and the
parsing of what the server and its tools say.  Where this machine has PostgreSQL and runs as root,
the real thing too: the workload runs against a real server in a tmp dir (the prepared cluster made
on the way, a stand-in for ``powercut-mark`` recording the marks), then the checker judges copies
of its data directory, intact and damaged."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import postgres as pgc
from powercut.errors import UsageError
from powercut.workloads import pgserver
from powercut.workloads import postgres as pgw

SEED, SIZE = 7, 300


def params(**given: Any) -> pgw.Params:
    return pgw.Params.of(pgw.WORKLOAD.params(given))


def judge(
    rows: dict[int, bytes],
    last: int | None,
    acked: set[int],
    begun: frozenset[int] | set[int] = frozenset(),
    amcheck: tuple[str, ...] = (),
) -> CheckResult:
    sums = () if last is None else ((1, *pgc.summary(SEED, last, SIZE)),)
    return pgc.Judge(SEED, SIZE, acked, begun).run(pgc.Found(rows, sums), amcheck=amcheck)


def txns(*ids: int) -> dict[int, bytes]:
    return {i: pgc.payload(SEED, i, SIZE) for i in ids}


# -- the workload's pure parts ---------------------------------------------------------------------


def test_params_are_checked() -> None:
    assert params().synchronous_commit == "on" and params().fsync and params().full_page_writes
    assert params(fsync="false", full_page_writes="0").fsync is False
    with pytest.raises((ValueError, UsageError), match="synchronous_commit"):
        params(synchronous_commit="sometimes")
    with pytest.raises((ValueError, UsageError), match="n must be at least 1|>= 0"):
        params(n=-1)
    for bad in ("/abs", "../up", ""):
        with pytest.raises(ValueError, match="relative path"):
            params(dir=bad)


def test_the_writer_and_the_checker_agree_on_every_byte() -> None:
    for i in (0, 1, 5, 99):
        assert pgw.payload(SEED, i, SIZE) == pgc.payload(SEED, i, SIZE)
        assert pgw.summary(SEED, i, SIZE) == pgc.summary(SEED, i, SIZE)
    assert (
        pgw.payload(SEED, 1, SIZE) != pgw.payload(SEED, 2, SIZE) != pgw.payload(SEED + 1, 2, SIZE)
    )
    assert pgw.summary(SEED, 3, SIZE) == (3, 3, hashlib.sha256(pgw.payload(SEED, 3, SIZE)).digest())
    assert pgw.summary(SEED, 0, SIZE) == (0, 0, b"")
    assert (
        pgw.DEFAULTS["row_bytes"] == pgc.DEFAULTS["row_bytes"]
        and pgw.DEFAULTS["dir"] == pgc.DEFAULTS["dir"]
    )


def test_each_ack_follows_its_commit_and_each_begin_precedes_it() -> None:
    p = params(n=7, checkpoint_every=3, seed=SEED, row_bytes=SIZE)
    lines = pgw.script(p).splitlines()
    assert lines[0] == "\\set ON_ERROR_STOP 1"
    for i in range(1, 8):
        b, a = (
            lines.index(f"\\! {pgw.MARK_CMD} begin:{i}"),
            lines.index(f"\\! {pgw.MARK_CMD} ack:{i}"),
        )
        assert lines[b + 1] == "BEGIN;"
        assert lines[a - 1] == "COMMIT;" and a - b == 5
        insert = lines[b + 2]
        assert insert.startswith(f"INSERT INTO rows (id, payload) VALUES ({i}, '\\x")
        assert bytes.fromhex(insert.split("'\\x")[1].split("'")[0]) == pgw.payload(SEED, i, SIZE)
        assert (
            f"count = {i}, last = {i}, digest = '\\x{pgw.summary(SEED, i, SIZE)[2].hex()}'"
            in lines[b + 3]
        )
    checkpoints = [k for k, line in enumerate(lines) if line == "CHECKPOINT;"]
    assert [lines[k - 1] for k in checkpoints] == [
        f"\\! {pgw.MARK_CMD} ack:3",
        f"\\! {pgw.MARK_CMD} ack:6",
    ]
    assert "CHECKPOINT;" not in pgw.script(params(n=6, checkpoint_every=0))
    assert (
        pgw.script(params(n=6, checkpoint_every=3)).count("CHECKPOINT;") == 1
    )  # none after the last


def test_the_settings_under_test_reach_postgresql_conf() -> None:
    s = pgw.settings(params(synchronous_commit="OFF", fsync=False, full_page_writes=False))
    assert (s["synchronous_commit"], s["fsync"], s["full_page_writes"]) == ("off", "off", "off")
    assert s["data_sync_retry"] == "off"  # PostgreSQL's default since 11, written out all the same
    assert (
        "data_sync_retry = on"
        in pgserver.render_conf(pgw.settings(params(data_sync_retry="true"))).splitlines()
    )
    assert pgw.settings(params())["fsync"] == "on" and s["autovacuum"] == "off"
    conf = pgserver.render_conf(s).splitlines()
    assert (
        "fsync = off" in conf
        and "full_page_writes = off" in conf
        and "dynamic_shared_memory_type = sysv" in conf
    )
    assert conf[1].startswith("#")  # a commented block appended after initdb's defaults


def test_fault_at_must_name_a_checkpoint_of_the_script() -> None:
    assert [
        pgw.checkpoints(params(n=n, checkpoint_every=e))
        for n, e in ((10, 3), (9, 3), (7, 3), (3, 3), (1, 1), (10, 0))
    ] == [3, 2, 2, 0, 0, 0]
    assert (
        params(fault_at=3).fault_at == 3
        and params().fault_at == 0
        and params().data_sync_retry is False
    )
    with pytest.raises(
        ValueError,
        match=r"^postgres: fault_at=4 names no CHECKPOINT of the script: with n=10 and "
        r"checkpoint_every=3 it makes 3 \(fault_at must be 0 or 1\.\.3\)$",
    ):
        params(fault_at=4)
    with pytest.raises(
        ValueError, match=r"checkpoint_every=0 it makes none \(fault_at must be 0\)$"
    ):
        params(fault_at=1, checkpoint_every=0)
    with pytest.raises(ValueError, match="it makes none"):
        params(n=3, fault_at=1)  # no CHECKPOINT after the last ack
    with pytest.raises((ValueError, UsageError), match="at least 0"):
        params(fault_at=-1)


FILES = ("/mnt/pg data/base/5/16384", "/mnt/pg data/base/5/16391", "/mnt/pg data/base/5/16387")


def test_the_faulty_checkpoint_fails_with_the_files_then_is_retried_until_it_succeeds() -> None:
    p = params(n=10, checkpoint_every=3, fault_at=2, seed=SEED, row_bytes=SIZE)
    text = pgw.script(p, FILES)
    plain = pgw.script(params(n=10, checkpoint_every=3, seed=SEED, row_bytes=SIZE))
    assert pgw.FAULT_CMD not in plain and ":ERROR" not in plain
    lines = text.splitlines()
    on = lines.index(
        f"\\! {pgw.FAULT_CMD} on eio-range '/mnt/pg data/base/5/16384' '/mnt/pg data/base/5/16391' "
        "'/mnt/pg data/base/5/16387' || kill $PPID"
    )
    assert lines[on - 1] == f"\\! {pgw.MARK_CMD} ack:6"  # the 2nd CHECKPOINT's place
    assert lines[on + 1 : on + 15] == [
        "\\set ON_ERROR_STOP 0",
        "CHECKPOINT;",  # under the fault: its error does not stop the script
        f"\\! {pgw.FAULT_CMD} off || kill $PPID",
        "CHECKPOINT;",  # the retry; again while it fails, one more try per file
        "\\if :ERROR",
        "CHECKPOINT;",
        "\\endif",
        "\\if :ERROR",
        "CHECKPOINT;",
        "\\endif",
        "\\set ON_ERROR_STOP 1",  # and once more, which must succeed
        "\\if :ERROR",
        "CHECKPOINT;",
        "\\endif",
    ]
    assert (
        lines[on + 15] == f"\\! {pgw.MARK_CMD} begin:7"
    )  # the script goes on with its transactions
    # everything else as without a fault: the other CHECKPOINTs plain, every transaction the same
    assert text.replace(pgw.faulty_checkpoint(FILES), "CHECKPOINT;\n") == plain
    assert [
        lines[k - 1]
        for k, ln in enumerate(lines)
        if ln == "CHECKPOINT;" and lines[k - 1].startswith("\\! " + pgw.MARK_CMD)
    ] == [f"\\! {pgw.MARK_CMD} ack:3", f"\\! {pgw.MARK_CMD} ack:9"]
    one = pgw.faulty_checkpoint(FILES[:1]).splitlines()
    assert one[3:] == [
        f"\\! {pgw.FAULT_CMD} off || kill $PPID",
        "CHECKPOINT;",
        "\\set ON_ERROR_STOP 1",
        "\\if :ERROR",
        "CHECKPOINT;",
        "\\endif",
    ]
    with pytest.raises(ValueError, match="needs the files"):
        pgw.script(p)


def test_the_prepared_cluster_name_follows_the_major_and_the_recipe() -> None:
    a = pgw.prepared_name("/usr/lib/postgresql/15/bin", True)
    assert a.startswith("pgdata-15-") and a.endswith(".tar")
    assert a != pgw.prepared_name("/usr/lib/postgresql/15/bin", False)
    assert pgw.prepared_name("/usr/lib/postgresql/16/bin", True).startswith("pgdata-16-")


def test_without_postgresql_the_workload_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(pgw, "bindir", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert pgw.WORKLOAD.main(pgw.WORKLOAD.params({})) == 1
    assert capsys.readouterr().err == pgw.MISSING + "\n" and not list(tmp_path.iterdir())


# -- the checker's pure parts ----------------------------------------------------------------------


def test_parse_reads_psqls_unaligned_output() -> None:
    text = f"row|2|{'ab' * 3}||\nsummary|1|{'cd' * 2}|2|2\nrow|1|00||\n"
    found = pgc.parse(text)
    assert found.rows == {2: b"\xab" * 3, 1: b"\0"} and found.summaries == ((1, 2, 2, b"\xcd\xcd"),)


def test_whole_transactions_pass_and_begun_ones_may_be_absent() -> None:
    r = judge(txns(1, 2, 3), 3, {1, 2, 3})
    assert r.verdict == "pass" and "txns 1..3" in r.reasons[0]
    r = judge(txns(1, 2), 2, {1, 2}, {3})
    assert r.verdict == "pass" and "absent: 3" in r.reasons[0]
    assert judge(txns(1, 2, 3), 3, {1, 2}, {3}).verdict == "pass"
    assert judge({}, 0, set(), {1}).verdict == "pass"


def test_a_missing_acked_transaction_is_lost_ack() -> None:
    r = judge(txns(1, 2), 2, {1, 2, 3})
    assert (
        r.verdict == "lost-ack"
        and r.reasons[0] == "acked txn(s) 3 lost: the database holds txns 1..2"
    )


def test_what_was_never_written_that_way_is_corrupt_data() -> None:
    bad = txns(1, 2) | {2: pgc.payload(SEED, 2, SIZE)[:-1] + b"\0"}
    assert "row 2 (acked): its payload differs from byte 299" in judge(bad, 2, {1, 2}).reasons[0]
    assert (
        "never begun" in judge(txns(1, 2, 3), 3, {1, 2}).reasons[0]
    )  # row 3 and summary name txn 3
    r = judge(txns(1, 2, 3), 2, {1, 2}, {3})
    assert r.verdict == "corrupt-data" and "an INSERT without its UPDATE" in r.reasons[0]
    r = judge(txns(1, 3), 3, {1, 2, 3})
    assert r.verdict == "corrupt-data" and "an UPDATE without its INSERT" in r.reasons[0]
    assert r.reasons[-1].startswith("acked txn(s) 2 lost")
    wrong = pgc.Judge(SEED, SIZE, {1}, set()).run(pgc.Found(txns(1), ((1, 1, 1, b"x"),)))
    assert wrong.verdict == "corrupt-data" and "its digest differs" in wrong.reasons[0]
    assert "holds 0 row(s)" in judge(txns(1), None, {1}).reasons[0]
    r = judge(
        txns(1), 1, {1}, amcheck=('heap table "postgres.public.rows", block 0, offset 1: bad',)
    )
    assert r.verdict == "corrupt-data" and r.reasons[0].startswith("pg_amcheck: heap table")


def test_startup_failures_tell_the_states_fault_from_the_machines() -> None:
    log = (
        "2026-01-01 10:00:00.000 UTC [9] LOG:  database system was interrupted\n"
        "2026-01-01 10:00:00.100 UTC [9] PANIC:  could not locate a valid checkpoint record\n"
    )
    assert pgc.startup_failure(log) == (
        False,
        ["PANIC: could not locate a valid checkpoint record"],
    )
    harness, lines = pgc.startup_failure(
        'x [1] FATAL:  could not create lock file "/tmp/a/.s.PGSQL.5432.lock"'
    )
    assert harness and lines[0].startswith("FATAL: could not create lock file")
    assert (
        pgc.recovery_note("x LOG:  redo done at 0/8982B8 system usage: CPU: ...")
        == "recovery: redo done at 0/8982B8"
    )
    assert (
        pgc.recovery_note("LOG:  database system was shut down at 2026")
        == "recovery: none needed (a clean shutdown)"
    )


def test_client_complaints_come_errors_first_without_boilerplate() -> None:
    text = (
        "WARNING:  page verification failed, calculated checksum 1 but expected 2\n"
        'psql: error: connection to server on socket "/tmp/x/.s.PGSQL.5432" failed: FATAL:  invalid page in '
        "block 0 of relation base/5/1259\n"
    )
    assert pgc.error_lines(text, 2) == [
        "FATAL: invalid page in block 0 of relation base/5/1259",
        "WARNING: page verification failed, calculated checksum 1 but expected 2",
    ]
    assert pgc.error_lines("", 3) == ["exited 3"]
    report = (
        'NOTICE:  extension "amcheck" already exists, skipping\nheap table "postgres.public.rows", block 0, '
        "offset 1:\n    line pointer to page offset 32767 is not maximally aligned\n"
    )
    assert pgc.amcheck_problems(report, 2) == [
        (
            'heap table "postgres.public.rows", block 0, offset 1: line pointer '
            "to page offset 32767 is not maximally aligned"
        )
    ]


def test_states_without_a_server_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def inp(acked: tuple[str, ...], begun: tuple[str, ...] = ()) -> CheckInput:
        return CheckInput(str(tmp_path), acked, begun, {})

    assert (
        pgc.check(inp(())).verdict == "pass"
    )  # setup: nothing begun, the server is not even started
    assert pgc.check(inp(("1",))).verdict == "lost-ack"
    assert (
        pgc.check(inp((), ("1",))).verdict == "corrupt-data"
    )  # the cluster was durable before begin:1
    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "PG_VERSION").write_text("15\n")
    monkeypatch.setattr(pgc, "bindir", lambda: None)
    with pytest.raises(RuntimeError, match="apt-get install postgresql"):
        pgc.check(inp(("1",)))


# -- the real thing (root, PostgreSQL installed) ---------------------------------------------------

real = pytest.mark.skipif(
    os.geteuid() != 0 or pgw.bindir() is None,
    reason="needs root and PostgreSQL (apt-get install postgresql)",
)


@pytest.fixture(scope="module")
def ran() -> Iterator[tuple[Path, list[str]]]:
    """The workload (n=4, a CHECKPOINT after ack 2) run for real; its directory and its marks."""
    top = Path(tempfile.mkdtemp(prefix="powercut-test-pg-"))
    try:
        os.chmod(top, 0o755)  # the server runs as postgres: the path must be searchable
        marks = top / "marks"
        fake = top / "fake-mark"
        fake.write_text(f'#!/bin/sh\necho "$1" >> {marks}\n')
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        (top / "run").mkdir()
        with pytest.MonkeyPatch.context() as m:
            m.setattr(pgw, "MARK_CMD", str(fake))
            m.chdir(top / "run")
            given = {
                "n": 4,
                "checkpoint_every": 2,
                "cache": str(top / "cache"),
                "row_bytes": SIZE,
                "seed": SEED,
            }
            assert pgw.WORKLOAD.main(pgw.WORKLOAD.params(given)) == 0
        yield top / "run", marks.read_text().split()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def copy_of(ran: tuple[Path, list[str]], tmp_path: Path) -> Path:
    mnt = tmp_path / "mnt"  # under pytest's 0700 tmp dir: the checker must cope
    subprocess.run(
        ["cp", "-a", str(ran[0]), str(mnt)], check=True, timeout=60
    )  # owners and modes kept
    return mnt


def judged(mnt: Path, acked: list[int], begun: tuple[int, ...] = ()) -> CheckResult:
    return pgc.check(
        CheckInput(
            str(mnt),
            tuple(map(str, acked)),
            tuple(map(str, begun)),
            {"seed": SEED, "row_bytes": SIZE},
        )
    )


@real
def test_a_real_run_marks_in_order_and_its_data_directory_passes(
    ran: tuple[Path, list[str]], tmp_path: Path
) -> None:
    assert ran[1] == [f"{k}:{i}" for i in range(1, 5) for k in ("begin", "ack")]
    st = os.stat(ran[0] / "pgdata")
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == pwd.getpwnam("postgres").pw_uid
    assert "fsync = on" in (ran[0] / "pgdata" / "postgresql.conf").read_text()
    mnt = copy_of(ran, tmp_path)
    r = judged(mnt, [1, 2, 3, 4])
    assert r.verdict == "pass" and "txns 1..4" in r.reasons[0], r
    assert judged(mnt, [1, 2, 3, 4, 5]).verdict == "lost-ack"
    assert not processes_using(mnt)  # the server is gone: nothing would keep the mount busy


def processes_using(path: Path) -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if str(path) in cmd or cwd.startswith(str(path)):
            out.append(f"{pid}: {cmd}")
    return out


@real
def test_a_real_damaged_heap_page_or_control_file_is_corrupt_data(
    ran: tuple[Path, list[str]], tmp_path: Path
) -> None:
    mnt = copy_of(ran, tmp_path)
    pgdata = mnt / "pgdata"
    heap = max(
        (
            p
            for p in (pgdata / "base").rglob("*")
            if p.is_file()
            and p.name.isdigit()
            and p.stat().st_size == 8192
            and pgc.payload(SEED, 1, SIZE) in p.read_bytes()
        ),
        key=str,
    )
    data = bytearray(heap.read_bytes())
    at = bytes(data).index(pgc.payload(SEED, 1, SIZE))
    data[at : at + 4] = b"\xff\xff\xff\xff"
    heap.write_bytes(bytes(data))
    r = judged(mnt, [1, 2, 3, 4])
    assert r.verdict == "corrupt-data" and "invalid page in block 0" in r.reasons[0], (
        r
    )  # the data checksum
    control = pgdata / "global" / "pg_control"
    old = control.read_bytes()
    control.write_bytes(old[:64] + bytes(b ^ 0xFF for b in old[64:68]) + old[68:])  # under its CRC
    r = judged(mnt, [1, 2, 3, 4])
    assert (
        r.verdict == "corrupt-data"
        and r.reasons[0] == "the server does not start on the recovered data directory"
    )
    assert r.reasons[1] == "FATAL: incorrect checksum in control file", r


# -- fault_at for real, with stand-ins for powercut-fault (no device-mapper here) --------------------


def run_with_fault_stand_in(
    top: Path, on: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[str], list[str]]:
    """The workload (n=9, the 2nd CHECKPOINT under ``fault_at``) with a stand-in ``powercut-fault``
    whose ``on`` runs the shell text ``on``; (exit status, marks, the stand-in's and RECOVER's calls)."""
    os.chmod(top, 0o755)
    calls, marks = top / "calls", top / "marks"
    for name, body in (
        ("mark", f'echo "$1" >> {marks}\n'),
        ("fault", f'echo "$*" >> {calls}\nif [ "$1" = on ]; then\n{on}\nfi\n'),
    ):
        (top / name).write_text("#!/bin/sh\n" + body)
        (top / name).chmod(0o755)
    (top / "run").mkdir()
    monkeypatch.setattr(pgw, "MARK_CMD", str(top / "mark"))
    monkeypatch.setattr(pgw, "FAULT_CMD", str(top / "fault"))
    monkeypatch.setattr(pgw, "RECOVER", lambda: calls.open("a").write("RECOVER\n"))
    monkeypatch.chdir(top / "run")
    given = {
        "n": 9,
        "fault_at": 2,
        "cache": str(top.parent / "cache"),
        "row_bytes": SIZE,
        "seed": SEED,
    }
    rc = pgw.WORKLOAD.main(pgw.WORKLOAD.params(given))
    return rc, marks.read_text().split(), calls.read_text().splitlines()


def judged_copy(top: Path, acked: int):
    """The run's directory copied beside it (the checker's server writes to it), judged with 1..acked."""
    mnt = top.parent / "mnt"
    subprocess.run(["cp", "-a", str(top / "run"), str(mnt)], check=True, timeout=60)
    return judged(mnt, list(range(1, acked + 1)))


@pytest.fixture
def top(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = Path(tempfile.mkdtemp(prefix="powercut-test-pgfault-"))
    try:
        os.chmod(base, 0o755)
        (base / "t").mkdir()
        yield base / "t"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@real
def test_a_real_run_names_the_tables_files_and_goes_on_after_the_checkpoint(
    top: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    rc, marks, calls = run_with_fault_stand_in(top, "true", monkeypatch)
    assert rc == 0 and marks == [f"{k}:{i}" for i in range(1, 10) for k in ("begin", "ack")]
    on = calls[0].split()
    assert on[:2] == ["on", "eio-range"] and calls[1:] == [
        "off"
    ]  # no RECOVER: psql switched it off
    pgdata = top / "run" / "pgdata"
    files = [Path(f) for f in on[2:]]
    assert len(files) == 3 and all(
        f.parent.parent == pgdata / "base" and f.is_file() for f in files
    )
    assert (
        files[0].stat().st_size == 8192 and pgc.payload(SEED, 6, SIZE) in files[0].read_bytes()
    )  # rows
    assert files[2].stat().st_size == 0  # rows' TOAST relation: nothing was big enough to go there
    assert "data_sync_retry = off" in (pgdata / "postgresql.conf").read_text()
    assert "postgres: CHECKPOINT 2 of 2 runs with base/" in capfd.readouterr().err
    assert judged_copy(top, 9).verdict == "pass"


@real
def test_a_server_crash_under_the_fault_stops_the_workload_with_one_line(
    top: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The checkpointer killed where a PANIC would end it: the postmaster crash-restarts, psql loses its
    connection; the workload switches the fault off itself, waits for the recovery, shuts down, exits 3."""
    kill = (
        f"PM=$(head -1 {top}/run/pgdata/postmaster.pid)\n"
        "for c in $(pgrep -P $PM); do\n"
        "  case \"$(tr '\\0' ' ' < /proc/$c/cmdline 2>/dev/null)\" in *checkpointer*) kill -KILL $c;; esac\n"
        "done"
    )
    rc, marks, calls = run_with_fault_stand_in(top, kill, monkeypatch)
    assert rc == pgw.STOPPED_AFTER_FAULT
    assert marks == [f"{k}:{i}" for i in range(1, 7) for k in ("begin", "ack")]
    assert calls[0].startswith("on eio-range ") and calls[-1] == "RECOVER"
    assert calls[1:-1] in (
        [],
        ["off"],
    )  # psql may still run the script's ``off`` before it notices the loss
    err = capfd.readouterr().err
    assert (
        "all server processes terminated; reinitializing" in err
        and "database system is shut down" in err
    )
    last = err.rstrip().splitlines()[-1]
    assert last.startswith(
        "postgres: psql stopped in a run whose CHECKPOINT 2 ran under an injected EIO (exit 2: "
    )
    assert last.endswith(
        "the fault switched off, the server accepts connections again; the script's later "
        "transactions did not run"
    )
    assert judged_copy(top, 6).verdict == "pass"


@real
def test_a_fault_that_cannot_be_switched_on_kills_psql_and_fails_the_run(
    top: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    rc, marks, calls = run_with_fault_stand_in(
        top, "echo 'powercut-fault: x: no fixed place' >&2; exit 1", monkeypatch
    )
    assert rc == 1 and marks[-1] == "ack:6" and calls[1:] == ["RECOVER"]
    last = capfd.readouterr().err.rstrip().splitlines()[-1]
    assert (
        last
        == "postgres: could not switch the fault around CHECKPOINT 2 (psql killed): powercut-fault: x: no fixed place"
    )

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
from powercut.workloads import postgres as pgw
from powercut.errors import UsageError

SEED, SIZE = 7, 300


def params(**given: Any) -> pgw.Params:
    return pgw.Params.of(pgw.WORKLOAD.params(given))


def judge(rows: dict[int, bytes], last: int | None, acked: set[int], begun: frozenset[int] | set[int] = frozenset(),
          amcheck: tuple[str, ...] = ()) -> CheckResult:
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
    assert pgw.payload(SEED, 1, SIZE) != pgw.payload(SEED, 2, SIZE) != pgw.payload(SEED + 1, 2, SIZE)
    assert pgw.summary(SEED, 3, SIZE) == (3, 3, hashlib.sha256(pgw.payload(SEED, 3, SIZE)).digest())
    assert pgw.summary(SEED, 0, SIZE) == (0, 0, b"")
    assert pgw.DEFAULTS["row_bytes"] == pgc.DEFAULTS["row_bytes"] and pgw.DEFAULTS["dir"] == pgc.DEFAULTS["dir"]


def test_each_ack_follows_its_commit_and_each_begin_precedes_it() -> None:
    p = params(n=7, checkpoint_every=3, seed=SEED, row_bytes=SIZE)
    lines = pgw.script(p).splitlines()
    assert lines[0] == "\\set ON_ERROR_STOP 1"
    for i in range(1, 8):
        b, a = lines.index(f"\\! {pgw.MARK_CMD} begin:{i}"), lines.index(f"\\! {pgw.MARK_CMD} ack:{i}")
        assert lines[b + 1] == "BEGIN;"
        assert lines[a - 1] == "COMMIT;" and a - b == 5
        insert = lines[b + 2]
        assert insert.startswith(f"INSERT INTO rows (id, payload) VALUES ({i}, '\\x")
        assert bytes.fromhex(insert.split("'\\x")[1].split("'")[0]) == pgw.payload(SEED, i, SIZE)
        assert f"count = {i}, last = {i}, digest = '\\x{pgw.summary(SEED, i, SIZE)[2].hex()}'" in lines[b + 3]
    checkpoints = [k for k, line in enumerate(lines) if line == "CHECKPOINT;"]
    assert [lines[k - 1] for k in checkpoints] == [f"\\! {pgw.MARK_CMD} ack:3", f"\\! {pgw.MARK_CMD} ack:6"]
    assert "CHECKPOINT;" not in pgw.script(params(n=6, checkpoint_every=0))
    assert pgw.script(params(n=6, checkpoint_every=3)).count("CHECKPOINT;") == 1  # none after the last


def test_the_settings_under_test_reach_postgresql_conf() -> None:
    s = pgw.settings(params(synchronous_commit="OFF", fsync=False, full_page_writes=False))
    assert (s["synchronous_commit"], s["fsync"], s["full_page_writes"]) == ("off", "off", "off")
    assert pgw.settings(params())["fsync"] == "on" and s["autovacuum"] == "off"
    conf = pgw.render_conf(s).splitlines()
    assert "fsync = off" in conf and "full_page_writes = off" in conf and "dynamic_shared_memory_type = sysv" in conf
    assert conf[1].startswith("#")  # a commented block appended after initdb's defaults


def test_the_prepared_cluster_name_follows_the_major_and_the_recipe() -> None:
    a = pgw.prepared_name("/usr/lib/postgresql/15/bin", True)
    assert a.startswith("pgdata-15-") and a.endswith(".tar")
    assert a != pgw.prepared_name("/usr/lib/postgresql/15/bin", False)
    assert pgw.prepared_name("/usr/lib/postgresql/16/bin", True).startswith("pgdata-16-")


def test_without_postgresql_the_workload_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
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
    assert r.verdict == "lost-ack" and r.reasons[0] == "acked txn(s) 3 lost: the database holds txns 1..2"


def test_what_was_never_written_that_way_is_corrupt_data() -> None:
    bad = txns(1, 2) | {2: pgc.payload(SEED, 2, SIZE)[:-1] + b"\0"}
    assert "row 2 (acked): its payload differs from byte 299" in judge(bad, 2, {1, 2}).reasons[0]
    assert "never begun" in judge(txns(1, 2, 3), 3, {1, 2}).reasons[0]  # row 3 and summary name txn 3
    r = judge(txns(1, 2, 3), 2, {1, 2}, {3})
    assert r.verdict == "corrupt-data" and "an INSERT without its UPDATE" in r.reasons[0]
    r = judge(txns(1, 3), 3, {1, 2, 3})
    assert r.verdict == "corrupt-data" and "an UPDATE without its INSERT" in r.reasons[0]
    assert r.reasons[-1].startswith("acked txn(s) 2 lost")
    wrong = pgc.Judge(SEED, SIZE, {1}, set()).run(pgc.Found(txns(1), ((1, 1, 1, b"x"),)))
    assert wrong.verdict == "corrupt-data" and "its digest differs" in wrong.reasons[0]
    assert "holds 0 row(s)" in judge(txns(1), None, {1}).reasons[0]
    r = judge(txns(1), 1, {1}, amcheck=('heap table "postgres.public.rows", block 0, offset 1: bad',))
    assert r.verdict == "corrupt-data" and r.reasons[0].startswith("pg_amcheck: heap table")


def test_startup_failures_tell_the_states_fault_from_the_machines() -> None:
    log = ("2026-01-01 10:00:00.000 UTC [9] LOG:  database system was interrupted\n"
           "2026-01-01 10:00:00.100 UTC [9] PANIC:  could not locate a valid checkpoint record\n")
    assert pgc.startup_failure(log) == (False, ["PANIC: could not locate a valid checkpoint record"])
    harness, lines = pgc.startup_failure("x [1] FATAL:  could not create lock file \"/tmp/a/.s.PGSQL.5432.lock\"")
    assert harness and lines[0].startswith("FATAL: could not create lock file")
    assert pgc.recovery_note("x LOG:  redo done at 0/8982B8 system usage: CPU: ...") == \
        "recovery: redo done at 0/8982B8"
    assert pgc.recovery_note("LOG:  database system was shut down at 2026") == \
        "recovery: none needed (a clean shutdown)"


def test_client_complaints_come_errors_first_without_boilerplate() -> None:
    text = ("WARNING:  page verification failed, calculated checksum 1 but expected 2\n"
            "psql: error: connection to server on socket \"/tmp/x/.s.PGSQL.5432\" failed: FATAL:  invalid page in "
            "block 0 of relation base/5/1259\n")
    assert pgc.error_lines(text, 2) == ["FATAL: invalid page in block 0 of relation base/5/1259",
                                        "WARNING: page verification failed, calculated checksum 1 but expected 2"]
    assert pgc.error_lines("", 3) == ["exited 3"]
    report = ('NOTICE:  extension "amcheck" already exists, skipping\nheap table "postgres.public.rows", block 0, '
              "offset 1:\n    line pointer to page offset 32767 is not maximally aligned\n")
    assert pgc.amcheck_problems(report, 2) == [('heap table "postgres.public.rows", block 0, offset 1: line pointer '
                                                "to page offset 32767 is not maximally aligned")]


def test_states_without_a_server_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def inp(acked: tuple[str, ...], begun: tuple[str, ...] = ()) -> CheckInput:
        return CheckInput(str(tmp_path), acked, begun, {})

    assert pgc.check(inp(())).verdict == "pass"  # setup: nothing begun, the server is not even started
    assert pgc.check(inp(("1",))).verdict == "lost-ack"
    assert pgc.check(inp((), ("1",))).verdict == "corrupt-data"  # the cluster was durable before begin:1
    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "PG_VERSION").write_text("15\n")
    monkeypatch.setattr(pgc, "bindir", lambda: None)
    with pytest.raises(RuntimeError, match="apt-get install postgresql"):
        pgc.check(inp(("1",)))


# -- the real thing (root, PostgreSQL installed) ---------------------------------------------------

real = pytest.mark.skipif(os.geteuid() != 0 or pgw.bindir() is None,
                          reason="needs root and PostgreSQL (apt-get install postgresql)")


@pytest.fixture(scope="module")
def ran() -> Iterator[tuple[Path, list[str]]]:
    """The workload (n=4, a CHECKPOINT after ack 2) run for real; its directory and its marks."""
    top = Path(tempfile.mkdtemp(prefix="powercut-test-pg-"))
    try:
        os.chmod(top, 0o755)  # the server runs as postgres: the path must be searchable
        marks = top / "marks"
        fake = top / "fake-mark"
        fake.write_text(f"#!/bin/sh\necho \"$1\" >> {marks}\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
        (top / "run").mkdir()
        with pytest.MonkeyPatch.context() as m:
            m.setattr(pgw, "MARK_CMD", str(fake))
            m.chdir(top / "run")
            given = {"n": 4, "checkpoint_every": 2, "cache": str(top / "cache"), "row_bytes": SIZE, "seed": SEED}
            assert pgw.WORKLOAD.main(pgw.WORKLOAD.params(given)) == 0
        yield top / "run", marks.read_text().split()
    finally:
        shutil.rmtree(top, ignore_errors=True)


def copy_of(ran: tuple[Path, list[str]], tmp_path: Path) -> Path:
    mnt = tmp_path / "mnt"  # under pytest's 0700 tmp dir: the checker must cope
    subprocess.run(["cp", "-a", str(ran[0]), str(mnt)], check=True, timeout=60)  # owners and modes kept
    return mnt


def judged(mnt: Path, acked: list[int], begun: tuple[int, ...] = ()) -> CheckResult:
    return pgc.check(CheckInput(str(mnt), tuple(map(str, acked)), tuple(map(str, begun)),
                                {"seed": SEED, "row_bytes": SIZE}))


@real
def test_a_real_run_marks_in_order_and_its_data_directory_passes(ran: tuple[Path, list[str]], tmp_path: Path) -> None:
    assert ran[1] == [f"{k}:{i}" for i in range(1, 5) for k in ("begin", "ack")]
    st = os.stat(ran[0] / "pgdata")
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == pgw.pwd.getpwnam("postgres").pw_uid
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
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if str(path) in cmd or cwd.startswith(str(path)):
            out.append(f"{pid}: {cmd}")
    return out


@real
def test_a_real_damaged_heap_page_or_control_file_is_corrupt_data(ran: tuple[Path, list[str]], tmp_path: Path) -> None:
    mnt = copy_of(ran, tmp_path)
    pgdata = mnt / "pgdata"
    heap = max((p for p in (pgdata / "base").rglob("*") if p.is_file() and p.name.isdigit()
                and p.stat().st_size == 8192 and pgc.payload(SEED, 1, SIZE) in p.read_bytes()), key=str)
    data = bytearray(heap.read_bytes())
    at = bytes(data).index(pgc.payload(SEED, 1, SIZE))
    data[at:at + 4] = b"\xff\xff\xff\xff"
    heap.write_bytes(bytes(data))
    r = judged(mnt, [1, 2, 3, 4])
    assert r.verdict == "corrupt-data" and "invalid page in block 0" in r.reasons[0], r  # the data checksum
    control = pgdata / "global" / "pg_control"
    old = control.read_bytes()
    control.write_bytes(old[:64] + bytes(b ^ 0xFF for b in old[64:68]) + old[68:])  # under its CRC
    r = judged(mnt, [1, 2, 3, 4])
    assert r.verdict == "corrupt-data" and r.reasons[0] == "the server does not start on the recovered data directory"
    assert r.reasons[1] == "FATAL: incorrect checksum in control file", r

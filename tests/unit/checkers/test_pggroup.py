"""pggroup (PostgreSQL, several sessions committing at once) without a VM.  The pure parts: its
parameters, the sessions' scripts, the per-session mark handshake, the checker's verdict.  Where this
machine has PostgreSQL and runs as root, the real thing: the workload runs in a tmp dir (marks in
timing mode), then the checker judges a copy."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import pggroup as gc
from powercut.errors import UsageError
from powercut.workloads import pggroup as gw
from powercut.workloads import postgres as pgw

# -- the workload's pure parts ---------------------------------------------------------------------


def test_params_are_checked_in_one_line() -> None:
    p = gw.WORKLOAD.params({"sessions": "3", "synchronous_commit": "off"})
    assert p["sessions"] == 3 and p["synchronous_commit"] == "off" and p["commit_delay"] == 10000
    with pytest.raises(UsageError, match="sessions"):  # on the host, before a VM boots
        gw.WORKLOAD.params({"sessions": 9})
    for bad, word in (
        ({"sessions": 9}, "sessions"),
        ({"synchronous_commit": "maybe"}, "synchronous_commit"),
        ({"commit_delay": 200000}, "commit_delay"),
        ({"dir": "/abs"}, "dir"),
    ):
        with pytest.raises((UsageError, ValueError), match=word):
            gw.Params.of(gw.WORKLOAD.params(bad))


def test_the_checker_rebuilds_what_the_workload_wrote_from_the_same_defaults() -> None:
    for k, v in gc.DEFAULTS.items():
        assert gw.DEFAULTS[k] == v, k
    assert gc.payload(7, 2, 3, 50) == gw.payload(7, 2, 3, 50) != gw.payload(7, 3, 2, 50)
    assert gc.parse_key(gw.key(3, 12)) == (3, 12)
    with pytest.raises(ValueError, match="SESSION.TXN"):
        gc.parse_key("12")


def test_a_session_script_is_its_transactions_in_order_each_between_its_marks() -> None:
    p = gw.Params.of({"n": 2, "row_bytes": 8, "seed": 1})
    text = gw.session_script(p, 3, "MARK")
    lines = text.splitlines()
    assert [ln for ln in lines if ln.startswith("\\!")] == [
        "\\! MARK begin:3.1",
        "\\! MARK ack:3.1",
        "\\! MARK begin:3.2",
        "\\! MARK ack:3.2",
    ]
    ack1 = lines.index("\\! MARK ack:3.1")
    assert lines[ack1 - 1] == "COMMIT;" and "WHERE session = 3" in text
    assert (
        gw.payload(1, 3, 2, 8).hex() in text
        and hashlib.sha256(gw.payload(1, 3, 2, 8)).hexdigest() in text
    )
    setup = gw.setup_sql(gw.Params.of({"sessions": 3}))
    assert "(3, 0, 0, '\\x')" in setup and "(4, 0" not in setup
    assert setup.index("SET synchronous_commit = on;") < setup.index(
        "CREATE TABLE"
    )  # durable at its COMMIT
    assert lines[ack1 - 2] == "SELECT pg_sleep(0.02);"  # open while the others commit
    assert "pg_sleep" not in gw.session_script(gw.Params.of({"n": 1, "think_ms": 0}), 1, "MARK")


def handshake(marker: gw.Marker, s: int, word: str) -> int:
    """psql's ``\\!`` as psql runs it (an ``sh -c`` whose parent is killed on failure: here an outer sh)."""
    inner = f"{marker.command(s)} {word}"
    res = subprocess.run(
        ["/bin/sh", "-c", f"/bin/sh -c '{inner}'; exit 0"],
        pass_fds=marker.fds(s),
        timeout=60,
        check=False,
    )
    return res.returncode


def test_each_session_is_answered_on_its_own_pipe_after_its_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERCUT_TIMING", str(tmp_path / "marks"))
    marker = gw.Marker(2)
    marker.start()
    try:
        assert handshake(marker, 2, "begin:2.1") == 0
        assert (tmp_path / "marks").read_text().split()[1:] == [
            "begin:2.1"
        ]  # made before the shell ended
        assert handshake(marker, 1, "ack:1.1") == 0
        assert marker.made == ["begin:2.1", "ack:1.1"]
        assert (
            handshake(marker, 1, "a/" + "x" * 600) != 0
        )  # too long for a mark: its psql (here: sh) is killed
        assert marker.error is not None
    finally:
        marker.close_client_ends()
        marker.join(10)
    assert not marker.is_alive()


# -- the checker's verdict --------------------------------------------------------------------------


def state(p: dict[int, int], seed: int = 0, size: int = 16) -> gc.Found:
    """What the tables hold when session s committed txns 1..p[s]."""
    rows = {
        (s, j): gc.payload(seed, s, j, size) for s, last in p.items() for j in range(1, last + 1)
    }
    sessions = {
        s: (last, last, hashlib.sha256(gc.payload(seed, s, last, size)).digest() if last else b"")
        for s, last in p.items()
    }
    return gc.Found(rows, sessions)


def judged(
    found: gc.Found, acked: set[tuple[int, int]], begun: set[tuple[int, int]] = frozenset()
) -> CheckResult:
    return gc.judge(found, 2, 0, 16, acked, begun | acked)


def test_each_session_a_prefix_holding_its_acks_passes_and_a_missing_ack_is_lost() -> None:
    acked = {(1, 1), (1, 2), (2, 1)}
    assert judged(state({1: 2, 2: 1}), acked).verdict == "pass"
    r = judged(state({1: 2, 2: 2}), acked, {(2, 2)})  # begun-not-acked 2.2 made it: fine
    assert r.verdict == "pass" and "2: 1..2" in r.reasons[0]
    r = judged(state({1: 2, 2: 0}), acked)
    assert r.verdict == "lost-ack" and "2.1" in r.reasons[0] and "1.2" not in r.reasons[0]


def test_a_half_transaction_a_wrong_payload_or_a_row_never_begun_is_corrupt() -> None:
    acked = {(1, 1), (2, 1)}
    half = state({1: 1, 2: 1})
    half.rows[1, 2] = gc.payload(0, 1, 2, 16)  # 1.2's INSERT without its UPDATE
    assert judged(half, acked, {(1, 2)}).verdict == "corrupt-data"
    assert judged(half, acked).verdict == "corrupt-data"  # and never begun
    bad = state({1: 1, 2: 1})
    bad.rows[2, 1] = b"\0" * 16
    r = judged(bad, acked)
    assert r.verdict == "corrupt-data" and any("2.1" in x for x in r.reasons)
    gone = state({1: 1})
    assert (
        judged(gone, {(1, 1)}).verdict == "corrupt-data"
    )  # session 2's row, made before any begin, missing
    assert (
        gc.judge(state({1: 1, 2: 1}), 2, 0, 16, acked, acked, amcheck=["x"]).verdict
        == "corrupt-data"
    )


def test_before_the_first_begin_nothing_is_started(tmp_path: Path) -> None:
    assert gc.check(CheckInput(str(tmp_path), (), (), {}, "s")).verdict == "pass"
    assert (
        gc.check(CheckInput(str(tmp_path), ("1.1",), (), {}, "s")).verdict == "lost-ack"
    )  # no data directory


# -- the real thing ----------------------------------------------------------------------------------

real = pytest.mark.skipif(
    os.geteuid() != 0 or pgw.bindir() is None,
    reason="needs root and PostgreSQL (apt-get install postgresql)",
)


@pytest.fixture(scope="module")
def ran() -> Iterator[tuple[Path, list[str]]]:
    """The workload (3 sessions x 3 txns) run for real in a tmp dir; its marks in order."""
    top = Path(tempfile.mkdtemp(prefix="powercut-test-pggroup-"))
    try:
        os.chmod(top, 0o755)  # the server runs as postgres: the path must be searchable
        (top / "run").mkdir()
        with pytest.MonkeyPatch.context() as m:
            m.setenv("POWERCUT_TIMING", str(top / "marks"))
            m.chdir(top / "run")
            given = {"sessions": 3, "n": 3, "cache": str(top / "cache")}
            assert gw.WORKLOAD.main(gw.WORKLOAD.params(given)) == 0
        yield top / "run", [ln.split()[1] for ln in (top / "marks").read_text().splitlines()]
    finally:
        shutil.rmtree(top, ignore_errors=True)


@real
def test_a_real_run_marks_every_session_in_order_and_its_copy_passes(
    ran: tuple[Path, list[str]], tmp_path: Path
) -> None:
    run, marks = ran
    assert sorted(marks) == sorted(
        f"{k}:{s}.{j}" for s in range(1, 4) for j in range(1, 4) for k in ("begin", "ack")
    )
    for s in range(1, 4):
        mine = [m for m in marks if m.split(":")[1].split(".")[0] == str(s)]
        assert mine == [f"{k}:{s}.{j}" for j in range(1, 4) for k in ("begin", "ack")]
    mnt = tmp_path / "mnt"
    subprocess.run(["cp", "-a", str(run), str(mnt)], check=True, timeout=60)
    acked = tuple(m.split(":")[1] for m in marks if m.startswith("ack:"))
    r = gc.check(CheckInput(str(mnt), acked, (), {"sessions": "3"}, "flush~a"))
    assert r.verdict == "pass", r
    r = gc.check(CheckInput(str(mnt), (*acked, "2.4"), ("2.4",), {"sessions": "3"}, "flush~a"))
    assert r.verdict == "lost-ack" and "2.4" in r.reasons[0], r

"""workloads/leveldb.py and checkers/leveldb.py, with a real LevelDB (plyvel) in a temp directory:
what the workload writes is what the checker expects; every marked moment passes with its marks;
a dropped put is lost-ack; a flipped byte in a table is noticed with paranoid checks (corrupt-data
under power loss, detected under a lying disk), a wrong value served silently is corrupt-data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

plyvel = pytest.importorskip("plyvel")

from powercut import CheckInput, CheckResult  # noqa: E402
from powercut.checkers import leveldb as lc  # noqa: E402
from powercut.workloads import leveldb as lw  # noqa: E402


def run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **given: Any
) -> tuple[Path, list[tuple[str, int]]]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    marks: list[tuple[str, int]] = []
    monkeypatch.setattr(lw.powercut, "begin", lambda i: marks.append(("begin", i)))
    monkeypatch.setattr(lw.powercut, "ack", lambda i: marks.append(("ack", i)))
    monkeypatch.chdir(mnt)
    assert lw.main(lw.WORKLOAD.params(given)) == 0
    return mnt, marks


def judge(
    mnt: Path, acked: Any, state: str = "flush@9", begun: Any = (), **given: Any
) -> CheckResult:
    return lc.check(
        CheckInput(
            str(mnt),
            tuple(map(str, acked)),
            tuple(map(str, begun or ())),
            lw.WORKLOAD.params(given),
            state,
        )
    )


def test_the_checker_reads_what_the_workload_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mnt, marks = run(tmp_path, monkeypatch, n=6)
    assert marks == [(k, i) for i in range(1, 7) for k in ("begin", "ack")]
    assert lc._value(0, 3, 1000) == lw.value(0, 3, 1000)
    assert judge(mnt, range(1, 7), n=6).verdict == "pass"
    lost = judge(mnt, range(1, 9), n=6)
    assert lost.verdict == "lost-ack" and "7, 8" in lost.reasons[0]
    db = plyvel.DB(str(mnt / "app.ldb"))
    db.put(lw.key(2), b"x" * 1000, sync=True)
    db.put(b"k00000099", b"y", sync=True)
    db.close()
    bad = judge(mnt, range(1, 7), n=6)
    assert bad.verdict == "corrupt-data", bad


def test_no_database_is_lost_only_when_something_was_acked(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    assert judge(tmp_path / "mnt", [1]).verdict == "lost-ack"
    assert judge(tmp_path / "mnt", []).verdict == "pass"


def test_a_rotten_table_is_noticed_with_paranoid_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mnt, _ = run(tmp_path, monkeypatch, n=20, value_bytes=4000)
    db = plyvel.DB(str(mnt / "app.ldb"))
    db.compact_range()  # the log into a table file
    db.close()
    table = max((mnt / "app.ldb").glob("*.ldb"), key=lambda p: p.stat().st_size)
    raw = bytearray(table.read_bytes())
    raw[200] ^= 0x10
    table.write_bytes(bytes(raw))
    power = judge(mnt, range(1, 21), n=20, value_bytes=4000)
    assert power.verdict == "corrupt-data" and "LevelDB" in power.reasons[0], power
    lie = judge(mnt, range(1, 21), "corrupt-sector@9/w3:s0:b1", n=20, value_bytes=4000)
    assert lie.verdict == "detected" and "Corruption" in lie.reasons[0], lie
    shutil.rmtree(mnt / "app.ldb")
    os.makedirs(mnt / "app.ldb")
    assert judge(mnt, [1]).verdict == "lost-ack"  # no CURRENT: no database


def test_a_database_that_does_not_open_before_any_put_is_no_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mnt, _ = run(tmp_path, monkeypatch, n=2)
    for f in (mnt / "app.ldb").glob("MANIFEST-*"):
        f.write_bytes(b"")  # a crash while LevelDB wrote its first descriptor
    assert judge(mnt, []).verdict == "pass"
    assert (
        judge(mnt, [], begun=[1]).verdict == "corrupt-data"
    )  # a put had begun: the database must open
    assert judge(mnt, [1]).verdict == "corrupt-data"

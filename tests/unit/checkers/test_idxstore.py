"""idxstore, workload and checker together: each way of replacing the index leaves a store the
checker passes; an empty or missing index with acked records is lost-ack; an entry whose bytes are
gone is lost-ack, one whose bytes are wrong corrupt-data; the checker rebuilds records as the
workload writes them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from powercut.checker import CheckInput, get
from powercut.checkers import idxstore as checker
from powercut.workloads import idxstore as workload

N, SIZE = 4, 200


def verdict(
    mount: Path, acked: list[int], begun: list[int] | None = None
) -> tuple[str, tuple[str, ...]]:
    r = get("idxstore").check(
        CheckInput(
            str(mount),
            tuple(map(str, acked)),
            tuple(map(str, begun or [])),
            {"size": SIZE, "seed": 0},
        )
    )
    return r.verdict, r.reasons


@pytest.fixture
def ran(workload_run):
    return lambda **params: workload_run(workload, n=N, size=SIZE, **params)


@pytest.mark.parametrize(
    "replace", ["tmp-rename", "rename-away", "truncate", "current", "current-first"]
)
def test_every_way_of_replacing_the_index_leaves_a_store_that_passes(
    ran, tmp_path: Path, replace: str
) -> None:
    assert ran(replace=replace) == [m for i in range(N) for m in (f"begin:{i}", f"ack:{i}")]
    v, reasons = verdict(tmp_path, list(range(N)))
    assert v == "pass"
    assert (tmp_path / "store.bak").exists() == (replace == "rename-away")
    assert not (tmp_path / "store.idx.tmp").exists() and not (tmp_path / "CURRENT.tmp").exists()
    if replace.startswith("current"):
        assert (tmp_path / "CURRENT").read_text() == f"index-{N - 1:06d}\n" and not (
            tmp_path / "store.idx"
        ).exists()
        assert reasons == (f"{N} acked records found through index-{N - 1:06d}",)


def test_current_naming_an_index_whose_bytes_are_gone_loses_the_acked_records(
    ran, tmp_path: Path
) -> None:
    ran(replace="current-first")
    (tmp_path / f"index-{N - 1:06d}").write_bytes(b"")  # CURRENT durable before the index it names
    v, reasons = verdict(tmp_path, list(range(N - 1)), [N - 1])
    assert v == "lost-ack" and reasons[0].startswith(
        f"index-{N - 1:06d} is empty (0 bytes): the store finds no"
    )
    (tmp_path / "CURRENT").write_text("../escape\n")
    assert verdict(tmp_path, [0])[1][0].startswith(
        "CURRENT's index (CURRENT names none) is missing"
    )
    assert (
        checker.index_name(None) == "store.idx"
        and checker.index_name(b"index-000002\n") == "index-000002"
    )


def test_the_checker_rebuilds_records_as_the_workload_writes_them() -> None:
    for i in (0, 3, 77):
        assert checker.record(2, i, 50) == workload.record(2, i, 50)


def test_an_empty_or_missing_index_loses_every_acked_record(ran, tmp_path: Path) -> None:
    ran()
    (tmp_path / "store.idx").write_bytes(b"")
    v, reasons = verdict(tmp_path, [0, 1])
    assert v == "lost-ack" and "store.idx is empty" in reasons[0]
    assert verdict(tmp_path, [], [0])[0] == "pass"
    (tmp_path / "store.idx").unlink()
    assert verdict(tmp_path, [0])[0] == "lost-ack" and verdict(tmp_path, [])[0] == "pass"
    (tmp_path / "store.idx").write_bytes(b"\0" * 64)
    assert "empty" in verdict(tmp_path, [0])[1][0]


def test_an_entry_whose_bytes_are_gone_or_wrong(ran, tmp_path: Path) -> None:
    ran()
    dat = tmp_path / "store.dat"
    index = json.loads((tmp_path / "store.idx").read_text())["records"]
    data = bytearray(dat.read_bytes())
    _, off, n = index[1]
    data[off : off + n] = bytes(n)
    dat.write_bytes(bytes(data))
    assert verdict(tmp_path, [0, 1, 2, 3])[0] == "lost-ack"
    data[off + 20] = 7
    dat.write_bytes(bytes(data))
    assert verdict(tmp_path, [0, 1, 2, 3])[0] == "corrupt-data"
    assert verdict(tmp_path, [0], [])[0] == "corrupt-data"  # names records never begun
    os.truncate(dat, index[2][1])
    assert "the file ends" in verdict(tmp_path, [0, 2], [1, 3])[1][0]

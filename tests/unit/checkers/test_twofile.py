"""twofile, workload and checker together: the workload's store (each way ``log_via`` writes its
log) passes; a zeroed acked block is lost-ack; a damaged block, or data past the begun records,
is corrupt-data; the checker rebuilds records as the workload writes them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from powercut.checker import CheckInput, get
from powercut.checkers import twofile as checker
from powercut.workloads import twofile as workload

N, SIZE = 4, 300


def verdict(
    mount: Path, acked: list[int], begun: list[int] | None = None
) -> tuple[str, tuple[str, ...]]:
    r = get("twofile").check(
        CheckInput(
            str(mount),
            tuple(map(str, acked)),
            tuple(map(str, begun or acked)),
            {"size": SIZE, "seed": 0, "n": N},
        )
    )
    return r.verdict, r.reasons


@pytest.fixture
def ran(workload_run):
    return lambda **params: workload_run(workload, n=N, size=SIZE, **params)


@pytest.mark.parametrize("via", ["pwrite", "mmap", "mmap-no-msync"])
@pytest.mark.parametrize("reply_on", ["both", "index"])
def test_every_way_of_writing_the_log_leaves_every_record(
    ran, tmp_path: Path, via: str, reply_on: str
) -> None:
    marks = ran(log_via=via, reply_on=reply_on)
    assert marks == [m for i in range(N) for m in (f"begin:{i}", f"ack:{i}")]
    assert os.path.getsize(tmp_path / "store.log") == N * checker.BLOCK
    assert verdict(tmp_path, list(range(N)))[0] == "pass"


def test_the_checker_rebuilds_records_as_the_workload_writes_them() -> None:
    for i in (0, 3, 1000):
        assert checker.record(5, i, 123) == workload.record(5, i, 123)


def test_a_lost_or_damaged_record(ran, tmp_path: Path) -> None:
    ran()
    log = tmp_path / "store.log"
    data = bytearray(log.read_bytes())
    data[checker.BLOCK : 2 * checker.BLOCK] = bytes(checker.BLOCK)
    log.write_bytes(bytes(data))
    v, reasons = verdict(tmp_path, list(range(N)))
    assert v == "lost-ack" and "acked record 1" in reasons[0]
    assert (
        verdict(tmp_path, [0, 2, 3], list(range(N)))[0] == "pass"
    )  # begun, not acked: may be missing
    data[10] ^= 0xFF
    log.write_bytes(bytes(data))
    assert verdict(tmp_path, list(range(N)))[0] == "corrupt-data"
    assert verdict(tmp_path, [])[0] == "corrupt-data"  # records past the begun ones
    log.unlink()
    assert verdict(tmp_path, [0])[0] == "lost-ack" and verdict(tmp_path, [])[0] == "pass"

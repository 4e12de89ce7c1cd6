"""The append-fsync checker on hand-made files: every verdict it can give."""
from __future__ import annotations

from pathlib import Path

import pytest

from powercut.checker import CheckInput, get
from powercut.workloads.append_fsync import record

SEED, SIZE = 0, 300


def write(tmp_path: Path, data: bytes) -> str:
    (tmp_path / "append.log").write_bytes(data)
    return str(tmp_path)


def recs(*idx: int) -> bytes:
    return b"".join(record(SEED, i, SIZE) for i in idx)


def verdict(mount: str, acked: list[int], begun: list[int] = ()) -> tuple[str, tuple[str, ...]]:
    r = get("append-fsync").check(CheckInput(mount, tuple(map(str, acked)), tuple(map(str, begun)),
                                             {"file": "append.log"}))
    return r.verdict, r.reasons


def test_all_acked_present(tmp_path: Path) -> None:
    assert verdict(write(tmp_path, recs(0, 1, 2)), [0, 1, 2])[0] == "pass"


def test_begun_record_may_be_missing_or_partial(tmp_path: Path) -> None:
    assert verdict(write(tmp_path, recs(0, 1)), [0, 1], [2])[0] == "pass"
    assert verdict(write(tmp_path, recs(0, 1) + record(SEED, 2, SIZE)[:100]), [0, 1], [2])[0] == "pass"
    assert verdict(write(tmp_path, recs(0, 1, 2)), [0, 1], [2])[0] == "pass"


def test_lost_ack(tmp_path: Path) -> None:
    v, reasons = verdict(write(tmp_path, recs(0)), [0, 1])
    assert v == "lost-ack" and "[1]" in reasons[0]
    assert verdict(write(tmp_path, recs(0) + record(SEED, 1, SIZE)[:50]), [0, 1])[0] == "lost-ack"
    # the file size grew but the data blocks are still zeros
    assert verdict(write(tmp_path, recs(0) + b"\0" * 400), [0, 1])[0] == "lost-ack"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verdict(str(empty), [0])[0] == "lost-ack"  # no file at all


def test_corrupt_acked_record(tmp_path: Path) -> None:
    bad = bytearray(recs(0, 1))
    bad[-5] ^= 0xFF
    assert verdict(write(tmp_path, bytes(bad)), [0, 1])[0] == "corrupt-data"


def test_records_never_begun_or_out_of_order(tmp_path: Path) -> None:
    assert verdict(write(tmp_path, recs(0, 1, 2)), [0], [])[0] == "corrupt-data"
    assert verdict(write(tmp_path, recs(1, 0)), [0, 1])[0] == "corrupt-data"


def test_no_ack_no_file_is_fine(tmp_path: Path) -> None:
    assert verdict(str(tmp_path), [], [0])[0] == "pass"


def test_unknown_checker() -> None:
    from powercut.errors import UsageError
    with pytest.raises(UsageError, match="--checker"):
        get("nope")

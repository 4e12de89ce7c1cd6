"""The append-fsync checker on hand-made files: every verdict it can give, and each strict rule
(bodies and header fields against the parameters, no garbage after the last begun record, an
ordering failure behind a hole) on a file the old CRC-only checker would have passed or called a
plain loss."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.checker import CheckInput, get
from powercut.checkers import append_fsync as checker
from powercut.workloads.append_fsync import record

SEED, SIZE = 0, 300


def write(tmp_path: Path, data: bytes) -> str:
    (tmp_path / "append.log").write_bytes(data)
    return str(tmp_path)


def recs(*idx: int) -> bytes:
    return b"".join(record(SEED, i, SIZE) for i in idx)


def verdict(mount: str, acked: list[int], begun: list[int] = ()) -> tuple[str, tuple[str, ...]]:
    r = get("append-fsync").check(
        CheckInput(
            mount,
            tuple(map(str, acked)),
            tuple(map(str, begun)),
            {"file": "append.log", "size": SIZE, "seed": SEED, "n": 20},
        )
    )
    return r.verdict, r.reasons


def hole(i: int, keep_header: bool = False) -> bytes:
    """Record i's place with its data never written: zeros (after its header, with keep_header)."""
    rec = record(SEED, i, SIZE)
    head = rec[: rec.index(b"\n") + 1] if keep_header else b""
    return head + bytes(len(rec) - len(head))


def test_the_checker_rebuilds_records_as_the_workload_writes_them() -> None:
    for i in (0, 9, 10, 12345):
        assert checker.record(7, i, 123) == record(7, i, 123)


def test_all_acked_present(tmp_path: Path) -> None:
    assert verdict(write(tmp_path, recs(0, 1, 2)), [0, 1, 2])[0] == "pass"
    # zeros after the records: the size grew before the data of a later append, never begun: fine
    assert verdict(write(tmp_path, recs(0, 1, 2) + bytes(500)), [0, 1, 2])[0] == "pass"


def test_begun_record_may_be_missing_or_partial(tmp_path: Path) -> None:
    assert verdict(write(tmp_path, recs(0, 1)), [0, 1], [2])[0] == "pass"
    assert (
        verdict(write(tmp_path, recs(0, 1) + record(SEED, 2, SIZE)[:100]), [0, 1], [2])[0] == "pass"
    )
    assert verdict(write(tmp_path, recs(0, 1, 2)), [0, 1], [2])[0] == "pass"
    torn = bytearray(record(SEED, 2, SIZE))
    torn[40:140] = bytes(100)  # a sector of the interrupted append still zeros
    v, reasons = verdict(write(tmp_path, recs(0, 1) + bytes(torn)), [0, 1], [2])
    assert v == "pass" and "partial" in reasons[0]


def test_lost_ack(tmp_path: Path) -> None:
    v, reasons = verdict(write(tmp_path, recs(0)), [0, 1])
    assert v == "lost-ack" and "[1]" in reasons[0] and "the file ends" in reasons[0]
    assert verdict(write(tmp_path, recs(0) + record(SEED, 1, SIZE)[:50]), [0, 1])[0] == "lost-ack"
    # the file size grew but the data blocks are still zeros
    assert verdict(write(tmp_path, recs(0) + b"\0" * 400), [0, 1])[0] == "lost-ack"
    assert verdict(write(tmp_path, recs(0) + hole(1, keep_header=True)), [0, 1])[0] == "lost-ack"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verdict(str(empty), [0])[0] == "lost-ack"  # no file at all


def test_a_partly_written_acked_record_is_a_loss_not_damage(tmp_path: Path) -> None:
    # the old checker called a bad checksum with any non-zero byte damage; zeros are data that never arrived
    torn = bytearray(recs(0, 1))
    torn[-100:] = bytes(100)
    v, reasons = verdict(write(tmp_path, bytes(torn)), [0, 1])
    assert v == "lost-ack" and "record 1 from byte" in reasons[0]


def test_corrupt_acked_record(tmp_path: Path) -> None:
    bad = bytearray(recs(0, 1))
    bad[-5] ^= 0xFF
    v, reasons = verdict(write(tmp_path, bytes(bad)), [0, 1])
    assert v == "corrupt-data" and f"body byte at {len(bad) - 5}" in reasons[0]


def test_records_never_begun_or_out_of_order(tmp_path: Path) -> None:
    assert verdict(write(tmp_path, recs(0, 1, 2)), [0], [])[0] == "corrupt-data"
    v, reasons = verdict(write(tmp_path, recs(1, 0)), [0, 1])
    assert v == "corrupt-data" and "a header for record 1 where record 0 belongs" in reasons[0]


def test_body_is_compared_with_what_seed_and_index_produce(tmp_path: Path) -> None:
    # self-consistent (its checksum matches its body), but not what the workload wrote
    other = recs(0) + record(SEED + 1, 1, SIZE)
    v, reasons = verdict(write(tmp_path, other), [0, 1])
    assert v == "corrupt-data" and "acked record 1" in reasons[0]
    assert (
        verdict(write(tmp_path, other), [0], [1])[0] == "corrupt-data"
    )  # begun: absent or exact only


def test_header_size_is_checked_against_the_parameters(tmp_path: Path) -> None:
    v, reasons = verdict(write(tmp_path, recs(0) + record(SEED, 1, 200)), [0, 1])
    assert v == "corrupt-data" and "its header says 200 bytes, not 300" in reasons[0]


def test_garbage_after_the_last_record(tmp_path: Path) -> None:
    v, reasons = verdict(write(tmp_path, recs(0, 1) + b"junk"), [0, 1])
    assert v == "corrupt-data" and "not a begun record's interrupted tail" in reasons[0]
    # a record's worth of bytes that was never begun
    v, reasons = verdict(write(tmp_path, recs(0, 1) + record(SEED, 2, SIZE)[:100]), [0, 1])
    assert v == "corrupt-data" and "after record 1" in reasons[0]
    # begun, but the tail is not a prefix of the begun record
    assert (
        verdict(write(tmp_path, recs(0, 1) + record(SEED, 3, SIZE)[:100]), [0, 1], [2])[0]
        == "corrupt-data"
    )
    # the begun record whole, then more
    assert verdict(write(tmp_path, recs(0, 1, 2) + b"\0\0x"), [0, 1], [2])[0] == "corrupt-data"
    # nothing begun at all, yet bytes
    assert verdict(write(tmp_path, b"x"), [])[0] == "corrupt-data"


def test_a_later_record_intact_behind_a_lost_acked_one_is_an_ordering_failure(
    tmp_path: Path,
) -> None:
    for gap in (hole(1), hole(1, keep_header=True)):
        data = recs(0) + gap + recs(2)
        v, reasons = verdict(write(tmp_path, data), [0, 1, 2])
        assert v == "corrupt-data" and reasons[0].startswith(
            "ordering: acked record(s) [1] missing"
        )
        assert f"record 2 at byte {len(recs(0, 1))} intact" in reasons[0]
        # the later record only begun: still durable before an acked one
        v, reasons = verdict(write(tmp_path, data), [0, 1], [2])
        assert v == "corrupt-data" and reasons[0].startswith("ordering:")
    # resync on the magic finds it where it does not belong too
    v, reasons = verdict(write(tmp_path, recs(0) + bytes(5) + recs(2)), [0, 1], [2])
    assert (
        v == "corrupt-data"
        and reasons[0].startswith("ordering:")
        and "record 2 at byte" in reasons[0]
    )


def test_no_ack_no_file_is_fine(tmp_path: Path) -> None:
    assert verdict(str(tmp_path), [], [0])[0] == "pass"


def test_unknown_checker() -> None:
    from powercut.errors import UsageError

    with pytest.raises(UsageError, match="--checker"):
        get("nope")

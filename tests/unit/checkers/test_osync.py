"""The osync workload and its checker, without a VM: the workload runs for real in a tmp dir (the
mark hook and os.open/os.write recorded); crash states are made by hand at the file level
(truncation, a write zeroed, a byte flipped, a garbage tail) and judged by the checker."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from powercut import CheckInput, CheckResult
from powercut.checker import get
from powercut.checkers import osync as osc
from powercut.workloads import osync as osw


def run(tmp_path: Path, name: str = "run", **given: object) -> tuple[bytes, list[tuple]]:
    """Run the workload in tmp_path/name: the file's bytes and the events ("begin"|"ack", key),
    ("open", flags), ("write", length), ("pwrite", length), ("fsync",) in order."""
    where = tmp_path / name
    where.mkdir()
    events: list[tuple] = []
    real_open, real_write, real_pwrite, real_fsync = os.open, os.write, os.pwrite, os.fsync

    def open_(path: str, flags: int, *args: object) -> int:
        events.append(("open", flags))
        return real_open(path, flags, *args)

    def write(fd: int, data: bytes) -> int:
        events.append(("write", len(data)))
        return real_write(fd, data)

    def pwrite(fd: int, data: bytes, off: int) -> int:
        events.append(("pwrite", len(data)))
        return real_pwrite(fd, data, off)

    def fsync(fd: int) -> None:
        events.append(("fsync",))
        real_fsync(fd)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(osw, "MARK", lambda kind, key: events.append((kind, key)))
        m.setattr(os, "open", open_)
        m.setattr(os, "write", write)
        m.setattr(os, "pwrite", pwrite)
        m.setattr(os, "fsync", fsync)
        m.chdir(where)
        try:
            assert osw.WORKLOAD.main(osw.WORKLOAD.params(given)) == 0
        except OSError as e:
            if given.get("mode") == "o_direct" and e.errno == errno.EINVAL:
                pytest.skip(f"O_DIRECT is not supported on the filesystem of {where} ({e})")
            raise
    return (where / "osync.dat").read_bytes(), events


def judge(
    tmp_path: Path, data: bytes | None, acked: int = -1, begun: int = -1, **params: object
) -> CheckResult:
    """The checker on a file with these bytes (None: no file), writes 0..acked acked, begun key begun."""
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    (mnt / "osync.dat").unlink(missing_ok=True)
    if data is not None:
        (mnt / "osync.dat").write_bytes(data)
    return get("osync").check(
        CheckInput(
            str(mnt),
            (str(acked),) if acked >= 0 else (),
            (str(begun),) if begun >= 0 else (),
            osw.WORKLOAD.params(params),
        )
    )


def zeroed(data: bytes, start: int, end: int) -> bytes:
    return data[:start] + bytes(end - start) + data[end:]


def flipped(data: bytes, off: int) -> bytes:
    return data[:off] + bytes([data[off] ^ 0xFF or 1]) + data[off + 1 :]


# -- parameters and content ----------------------------------------------------------------------


def test_params_defaults_and_validation() -> None:
    p = osw.Params.of(osw.WORKLOAD.params({}))
    assert (p.mode, p.bs, p.total, p.ack_every, p.writes) == ("o_sync", 4096, 65536, 1, 16)
    assert all(osw.DEFAULTS[k] == v for k, v in osc.DEFAULTS.items())
    with pytest.raises(ValueError, match="mode must be one of o_sync, o_dsync, o_direct, buffered"):
        osw.Params.of({"mode": "o_fsync"})
    with pytest.raises(
        ValueError, match=r"o_direct needs bs and total to be multiples of 4096 \(got bs=512"
    ):
        osw.Params.of({"mode": "o_direct", "bs": 512})
    with pytest.raises(ValueError, match="multiples of 4096"):
        osw.Params.of({"mode": "o_direct", "total": 1_000_000})
    with pytest.raises(ValueError, match=">= 1"):
        osw.Params.of({"bs": 0})
    with pytest.raises(ValueError, match=">= 1"):
        osw.Params.of({"ack_every": 0})
    # TLPI's million one-byte writes: too many marks unless acked in groups
    with pytest.raises(ValueError, match="use ack_every >= 16"):
        osw.Params.of({"bs": 1, "total": 1_000_000})
    assert osw.Params.of({"bs": 1, "total": 1_000_000, "ack_every": 16}).commits == 62500


def test_tlpi_layout_last_write_is_short() -> None:
    p = osw.Params.of({"bs": 4096, "total": 1_000_000})
    assert p.writes == 245 and p.span(244) == (244 * 4096, 1_000_000)
    assert osw.Params.of({"total": 10, "bs": 1, "ack_every": 4}).groups() == [
        (0, 3),
        (4, 7),
        (8, 9),
    ]


def test_content_is_per_position_nonzero_and_the_checker_agrees() -> None:
    big = osw.content(7, 10_000)
    assert osc.content(7, 10_000) == big and 0 not in big
    assert osw.content(7, 4097) == big[:4097]  # byte j depends on (seed, j) only, not on the total
    assert osw.content(8, 10_000) != big


# -- the workload --------------------------------------------------------------------------------

FLAGS = {"o_sync": os.O_SYNC, "o_dsync": os.O_DSYNC, "buffered": 0, "o_direct": os.O_DIRECT}
# TLPI's buffer sizes; o_direct takes multiples of 4096 only (test_params_defaults_and_validation)
CASES = [
    (mode, bs) for mode in FLAGS for bs in (1, 16, 256, 4096) if mode != "o_direct" or bs == 4096
]


@pytest.mark.parametrize("mode,bs", CASES, ids=[f"{m}-{bs}" for m, bs in CASES])
def test_writes_with_the_mode_flags_and_acks_each(tmp_path: Path, mode: str, bs: int) -> None:
    flag = FLAGS[mode]
    total = 3 * 4096 if bs >= 256 else 600
    data, events = run(tmp_path, mode=mode, bs=bs, total=total)
    assert data == osc.content(0, total)
    opens = [e[1] for e in events if e[0] == "open"]
    mode_bits = os.O_SYNC | os.O_DSYNC | os.O_DIRECT
    assert opens[-1] & mode_bits == flag and all(f & mode_bits == 0 for f in opens[:-1])
    n = -(-total // bs)
    body = events[events.index(("begin", 0)) :]
    expect = [
        e for i in range(n) for e in (("begin", i), ("write", min(bs, total - i * bs)), ("ack", i))
    ]
    assert body == expect
    # the file and its directory entry were made durable before the first commit: nothing after it opens
    assert all(e[0] != "open" for e in body)


def test_ack_every_groups_writes_under_the_last_ones_key(tmp_path: Path) -> None:
    _, events = run(tmp_path, bs=1, total=10, ack_every=4, mode="buffered")
    marks = [e for e in events if e[0] in ("begin", "ack")]
    assert marks == [("begin", 3), ("ack", 3), ("begin", 7), ("ack", 7), ("begin", 9), ("ack", 9)]
    assert events.index(("ack", 3)) - events.index(("begin", 3)) == 5  # four writes between


def test_prealloc_fills_zeros_durably_before_the_first_commit(tmp_path: Path) -> None:
    data, events = run(tmp_path, mode="o_direct", prealloc=True, total=8192)
    assert data == osc.content(0, 8192)
    first = events.index(("begin", 0))
    # create (no mode flags) and fill with zeros, fsync the file, open the directory and fsync it,
    # then open O_DIRECT; every data write after begin:0
    assert events[:first] == [
        events[0],
        ("pwrite", 8192),
        ("fsync",),
        events[3],
        ("fsync",),
        events[5],
    ]
    assert events[5][1] & os.O_DIRECT and not events[0][1] & os.O_DIRECT
    assert [e for e in events[first:] if e[0] not in ("begin", "ack")] == [("write", 4096)] * 2


# -- crash states judged by the checker ---------------------------------------------------------

BS, TOTAL = 256, 4096  # 16 writes


@pytest.fixture()
def full(tmp_path: Path) -> bytes:
    data, _ = run(tmp_path, bs=BS, total=TOTAL)
    return data


def test_whole_file_passes(tmp_path: Path, full: bytes) -> None:
    assert judge(tmp_path, full, 15, bs=BS, total=TOTAL).verdict == "pass"
    assert judge(tmp_path, full, 14, 15, bs=BS, total=TOTAL).verdict == "pass"


def test_truncated_file(tmp_path: Path, full: bytes) -> None:
    cut = full[: 5 * BS + 100]  # write 5 half there
    r = judge(tmp_path, cut, 4, 5, bs=BS, total=TOTAL)
    assert r.verdict == "pass" and "partial" in r.reasons[0]
    r = judge(tmp_path, cut, 5, bs=BS, total=TOTAL)
    assert r.verdict == "lost-ack" and r.reasons[0].startswith(
        f"acked write 5 lost at offset {5 * BS + 100}: the file ends"
    )
    assert (
        judge(tmp_path, b"", 0, bs=BS, total=TOTAL).verdict == "lost-ack"
    )  # buffered: nothing written back
    assert judge(tmp_path, b"", -1, 0, bs=BS, total=TOTAL).verdict == "pass"


def test_zeroed_write(tmp_path: Path, full: bytes) -> None:
    hole = zeroed(full, 3 * BS + 10, 4 * BS)  # a sector of write 3 that did not reach the disk
    r = judge(tmp_path, hole, 15, bs=BS, total=TOTAL)
    assert (
        r.verdict == "lost-ack"
        and f"acked write 3 lost at offset {3 * BS + 10}: zero where" in r.reasons[0]
    )
    assert (
        judge(tmp_path, zeroed(full, 15 * BS, 16 * BS), 14, 15, bs=BS, total=TOTAL).verdict
        == "pass"
    )
    # o_direct with prealloc: the size is there, the data is not
    r = judge(tmp_path, bytes(TOTAL), 0, bs=BS, total=TOTAL)
    assert r.verdict == "lost-ack" and "acked write 0 lost at offset 0" in r.reasons[0]


def test_flipped_byte(tmp_path: Path, full: bytes) -> None:
    r = judge(tmp_path, flipped(full, 2 * BS + 7), 15, bs=BS, total=TOTAL)
    assert r.verdict == "corrupt-data" and r.reasons[0].startswith(
        f"acked write 2 at offset {2 * BS + 7}: byte"
    )
    r = judge(
        tmp_path, flipped(full, 15 * BS), 14, 15, bs=BS, total=TOTAL
    )  # a begun write: zero or exact only
    assert r.verdict == "corrupt-data" and "begun (not acked) write 15" in r.reasons[0]
    # a wrong byte after a zeroed one: corrupt, and the loss is named too
    r = judge(tmp_path, flipped(zeroed(full, BS, 2 * BS), 9 * BS), 15, bs=BS, total=TOTAL)
    assert r.verdict == "corrupt-data" and any("acked write 1 lost" in x for x in r.reasons)


def test_garbage_tail(tmp_path: Path, full: bytes) -> None:
    r = judge(tmp_path, full[: 4 * BS] + b"\0" * 50 + b"x", 3, bs=BS, total=TOTAL)
    assert r.verdict == "corrupt-data" and r.reasons[0].startswith(
        f"garbage: byte 0x78 at offset {4 * BS + 50}"
    )
    # the next write's bytes, never begun, are garbage too; zeros there are fine
    assert judge(tmp_path, full[: 5 * BS], 3, bs=BS, total=TOTAL).verdict == "corrupt-data"
    assert judge(tmp_path, full[: 4 * BS] + bytes(TOTAL), 3, bs=BS, total=TOTAL).verdict == "pass"
    assert judge(tmp_path, full, -1, bs=BS, total=TOTAL).reasons[0].startswith("garbage")


def test_missing_file(tmp_path: Path) -> None:
    assert judge(tmp_path, None, 0).verdict == "lost-ack"
    assert judge(tmp_path, None, -1, 0).verdict == "pass"


def test_a_key_covers_every_write_up_to_it(tmp_path: Path) -> None:
    data, _ = run(tmp_path, bs=1, total=10, ack_every=4)
    assert judge(tmp_path, data[:8], 7, 9, bs=1, total=10, ack_every=4).verdict == "pass"
    r = judge(tmp_path, zeroed(data, 6, 7), 7, 9, bs=1, total=10, ack_every=4)
    assert r.verdict == "lost-ack" and "acked write 6 lost at offset 6" in r.reasons[0]


def test_tlpi_size_with_one_byte_writes_is_checked_quickly(tmp_path: Path) -> None:
    data = osw.content(0, 1_000_000)
    params = {"bs": 1, "total": 1_000_000, "ack_every": 16}
    assert judge(tmp_path, data, 999_999, **params).verdict == "pass"
    r = judge(tmp_path, zeroed(data, 500_000, 1_000_000), 999_999, **params)
    assert r.verdict == "lost-ack" and "acked write 500000 lost" in r.reasons[0]

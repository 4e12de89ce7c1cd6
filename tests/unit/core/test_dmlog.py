"""The dm-log-writes reader: round trips, every stop reason, BadLog cases, stats, fuzzing."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from powercut.core.log.dmlog import DISCARD, FLUSH, FUA, MARK, METADATA, Entry, open_log, stats
from powercut.core.log.dmlog_writer import LogWriter
from powercut.errors import BadLog

MAGIC = 0x6A736677736872
SS = 512


def payload(i: int, nr: int, ss: int = SS) -> bytes:
    return bytes([(i * 7 + j) % 251 for j in range(nr * ss)])


def sample_log(p: Path, ss: int = SS) -> Path:
    with LogWriter(p, ss) as w:
        w.write(10, payload(0, 2, ss))
        w.mark("mkfs")
        w.mark("begin:a")
        w.write(12, payload(3, 1, ss), METADATA)
        w.flush()
        w.mark("ack:a")
        w.discard(40, 16)
        w.fua(50, payload(7, 3, ss))
        w.mark("begin:b")
    return p


def append(p: Path, data: bytes) -> Path:
    with open(p, "ab") as f:
        f.write(data)
    return p


def hdr(sec: int, nr: int, flags: int, dlen: int = 0, inline: bytes = b"") -> bytes:
    return (struct.pack("<QQQQ", sec, nr, flags, dlen) + inline).ljust(SS, b"\0")


# -- round trips ------------------------------------------------------------------------------------
@pytest.mark.parametrize("ss", [512, 4096])
def test_sample_log_fields_and_zero_copy_data(tmp_path: Path, ss: int) -> None:
    with open_log(sample_log(tmp_path / "a.log", ss), strict=True) as idx:
        assert idx.sectorsize == ss and idx.super_nr_entries == 9 and not idx.stale_super
        assert idx.stop_reason == "end of file" and idx.clean
        e = idx.entries
        assert [x.index for x in e] == list(range(9))
        assert (e[0].sector, e[0].nr_sectors, e[0].flags, e[0].data_offset) == (10, 2, 0, 2 * ss)
        assert e[0].is_write and not (
            e[0].is_flush or e[0].is_fua or e[0].is_mark or e[0].is_discard
        )
        assert e[0].byte_offset(ss) == 10 * ss and e[0].length(ss) == 2 * ss
        view = idx.data(e[0])
        assert isinstance(view, memoryview) and view.readonly and bytes(view) == payload(0, 2, ss)
        assert (
            e[1].mark == "mkfs"
            and e[1].data_offset == 4 * ss + 32
            and bytes(idx.data(e[1])) == b"mkfs"
        )
        assert e[3].is_metadata and e[3].data_offset == 7 * ss
        assert (
            e[4].is_flush
            and not e[4].is_write
            and e[4].nr_sectors == 0
            and bytes(idx.data(e[4])) == b""
        )
        assert (
            e[6].is_discard
            and not e[6].is_write
            and e[6].changes_device
            and e[6].length(ss) == 16 * ss
        )
        assert bytes(idx.data(e[6])) == b""
        assert e[7].is_fua and e[7].is_write and bytes(idx.data(e[7])) == payload(7, 3, ss)
        assert bytes(idx.sector_data(e[7], 2)) == payload(7, 3, ss)[2 * ss :]
        assert idx.marks() == [(1, "mkfs"), (2, "begin:a"), (5, "ack:a"), (8, "begin:b")]
        assert idx.acks() == [(5, "a")] and idx.begun() == [(2, "a"), (8, "b")]
        assert idx.find_mark("ack:a") == 5 and idx.find_mark("nope") is None
        assert e[5].ack_key == "a" and e[2].begin_key == "a" and e[0].ack_key is None


def test_stats(tmp_path: Path) -> None:
    with open_log(sample_log(tmp_path / "a.log")) as idx:
        s = stats(idx)
    assert (s.entries, s.writes, s.flushes, s.fuas, s.discards, s.marks, s.acks) == (
        9,
        3,
        1,
        1,
        1,
        4,
        1,
    )
    assert (
        s.bytes_written == 6 * SS
        and s.sectorsize == SS
        and s.super_nr_entries == 9
        and not s.stale_super
    )
    d = s.to_dict()
    assert (
        d["stop_reason"] == "end of file"
        and d["writes"] == 3
        and set(d) >= {"entries", "bytes_written"}
    )


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("w"),
            st.integers(0, 2**40),
            st.integers(1, 4),
            st.sampled_from([0, FUA, FLUSH, FLUSH | FUA, METADATA]),
        ),
        st.tuples(st.just("flush"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("discard"), st.integers(0, 2**40), st.integers(1, 2**20), st.just(0)),
        st.tuples(st.just("mark"), st.integers(0, 5), st.just(0), st.just(0)),
    ),
    max_size=30,
)


def write_ops(p: Path, ops: list, ss: int = SS, stale: bool = False) -> None:  # type: ignore[type-arg]
    with LogWriter(p, ss) as w:
        for i, (kind, a, b, flags) in enumerate(ops):
            if kind == "w":
                w.write(a, payload(i, b, ss), flags)
            elif kind == "flush":
                w.flush()
            elif kind == "discard":
                w.discard(a, b)
            else:
                w.mark(["mkfs", f"ack:k{a}", f"begin:k{a}", "é-ünïcode"][a % 4])
        w.close(stale_super=stale)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, ss=st.sampled_from([512, 4096]), stale=st.booleans())
def test_round_trip(ops: list, ss: int, stale: bool) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.log"
        write_ops(p, ops, ss, stale)
        with open_log(p, strict=True) as idx:
            assert len(idx.entries) == len(ops) and idx.stop_reason == "end of file"
            if not stale:
                assert idx.super_nr_entries == len(ops)
            for i, ((kind, a, b, flags), e) in enumerate(zip(ops, idx.entries)):
                if kind == "w":
                    assert (e.sector, e.nr_sectors, e.flags) == (a, b, flags)
                    assert bytes(idx.data(e)) == payload(i, b, ss)
                elif kind == "flush":
                    assert e.flags == FLUSH and e.nr_sectors == 0
                elif kind == "discard":
                    assert (e.flags, e.sector, e.nr_sectors) == (DISCARD, a, b)
                else:
                    assert (
                        e.flags == MARK
                        and e.mark == ["mkfs", f"ack:k{a}", f"begin:k{a}", "é-ünïcode"][a % 4]
                    )


# -- not a log at all -------------------------------------------------------------------------------
def super_bytes(magic: int = MAGIC, version: int = 1, nr: int = 0, ss: int = SS) -> bytes:
    return struct.pack("<QQQI", magic, version, nr, ss).ljust(
        max(ss, 28) if ss <= 65536 else 512, b"\0"
    )


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"", "empty file"),
        (b"x" * 27, "shorter than a log super"),
        (super_bytes(magic=0x1234), "not a dm-log-writes log"),
        (super_bytes(version=2), "version 2"),
        (super_bytes(ss=1000)[:512], "sectorsize 1000"),
        (super_bytes(ss=256)[:512], "sectorsize 256"),
        (super_bytes(ss=131072)[:512], "sectorsize 131072"),
        (super_bytes(ss=0)[:512], "sectorsize 0"),
        (super_bytes(ss=4096)[:1000], "shorter than the 4096-byte super sector"),
    ],
)
def test_not_a_log(tmp_path: Path, content: bytes, fragment: str) -> None:
    p = tmp_path / "bad.log"
    p.write_bytes(content)
    with pytest.raises(BadLog) as ei:
        open_log(p)
    assert fragment in str(ei.value) and ei.value.path == str(p)


def test_missing_directory_fifo_nul(tmp_path: Path) -> None:
    for path, fragment in [(tmp_path / "nope.log", "no such file"), (tmp_path, "is a directory")]:
        with pytest.raises(BadLog, match=fragment):
            open_log(path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(BadLog, match="not a regular file"):
        open_log(fifo)  # must not block
    with pytest.raises(BadLog, match="cannot stat"):
        open_log(str(tmp_path) + "/a\0b")


def test_empty_log_with_only_a_super(tmp_path: Path) -> None:
    p = tmp_path / "e.log"
    LogWriter(p).close()
    with open_log(p, strict=True) as idx:
        assert idx.entries == () and idx.stop_reason == "end of file" and not idx.stale_super
        assert stats(idx).entries == 0


# -- where and why a scan stops ------------------------------------------------------------------
STOPS = [
    (hdr(1, 1, 0x40), "unknown flags 0x40", False),
    (hdr(0, 0, MARK, 480, b"x" * 480), "mark length 480 exceeds 479", False),
    (hdr(0, 1, MARK, 1, b"x"), "mark entry with nr_sectors 1", False),
    (hdr(0, 0, MARK | FUA, 1, b"x"), "mark entry with other flags", False),
    (hdr(0, 0, MARK, 3, b"a\0b"), "NUL byte in mark text", False),
    (hdr(2**63, 1, 0), "overflows", False),
    (hdr(2**60, 2**60, DISCARD), "overflows", False),
    (hdr(5, 4, DISCARD, 7), "discard entry with data_len", False),
    (hdr(5, 0, 0), "write entry without data or flush", False),
    (hdr(5, 0, METADATA), "write entry without data or flush", False),
    (hdr(5, 1, 0, 513) + b"d" * 512, "data_len 513 exceeds 1 sectors", False),
    (hdr(5, 3, 0) + b"d" * 1024, "data of 3 sectors past end of file (1024 bytes left)", False),
    (hdr(5, 1, 0)[:100], "truncated entry header (100 of 512 bytes)", False),
    (b"\0" * 512 + hdr(5, 1, 0) + b"d" * 512, "all-zero entry header (end of log)", True),
    (hdr(0, 0, MARK, 17, b"dm-log-writes-end") + hdr(5, 1, 0) + b"d" * 512, "end mark", True),
]


@pytest.mark.parametrize("tail, fragment, clean", STOPS)
def test_scan_stops(tmp_path: Path, tail: bytes, fragment: str, clean: bool) -> None:
    p = append(sample_log(tmp_path / "a.log"), tail)
    good_end = 16 * SS  # super + the sample's 15 header/data sectors
    with open_log(p) as idx:
        assert fragment in idx.stop_reason
        assert idx.clean is clean
        end_mark = fragment == "end mark"
        assert len(idx.entries) == 9 + end_mark
        assert idx.stop_offset == good_end + (SS if end_mark else 0)
        assert idx.stale_super is end_mark  # super says 9; the end mark is a 10th entry
    if clean:
        with open_log(p, strict=True) as idx:
            assert len(idx.entries) == 9 + end_mark
    else:
        with pytest.raises(BadLog) as ei:
            open_log(p, strict=True)
        assert ei.value.offset == good_end and fragment.split(" (")[0] in ei.value.reason


def test_dax_inline_data_len_is_accepted(tmp_path: Path) -> None:
    p = append(sample_log(tmp_path / "a.log"), hdr(5, 2, 0, 1000) + b"d" * 1024)
    with open_log(p, strict=True) as idx:
        assert idx.entries[-1].nr_sectors == 2 and bytes(idx.data(idx.entries[-1])) == b"d" * 1024


def test_stale_super_counts_real_entries(tmp_path: Path) -> None:
    p = tmp_path / "s.log"
    write_ops(p, [("mark", 1, 0, 0), ("w", 0, 1, 0), ("w", 1, 1, 0)], stale=True)
    append(p, b"\0" * 4096)  # the rest of a pre-allocated log device
    with open_log(p, strict=True) as idx:
        assert (idx.super_nr_entries, len(idx.entries), idx.stale_super) == (1, 3, True)
        assert "all-zero" in idx.stop_reason and stats(idx).stale_super


def test_data_checks_entry_and_close(tmp_path: Path) -> None:
    idx = open_log(sample_log(tmp_path / "a.log"))
    with pytest.raises(ValueError):
        idx.data(Entry(0, 0, 99, 1, 1024))
    with pytest.raises(ValueError):
        idx.sector_data(idx.entries[0], 2)
    view = idx.data(idx.entries[0])
    idx.close()  # a live view must not make close() raise
    assert bytes(view[:3]) == payload(0, 2)[:3]
    del view
    with pytest.raises(ValueError):
        idx.data(idx.entries[0])
    idx.close()


# -- fuzzing --------------------------------------------------------------------------------------
def check_index(p: Path) -> None:
    """open_log must raise only BadLog; a returned index must be internally consistent."""
    try:
        idx = open_log(p)
    except BadLog:
        return
    with idx:
        size = p.stat().st_size
        for i, e in enumerate(idx.entries):
            assert e.index == i and e.flags & ~31 == 0
            if e.is_write:
                assert e.data_offset + e.nr_sectors * idx.sectorsize <= size
                assert len(idx.data(e)) == e.nr_sectors * idx.sectorsize
            assert (e.mark is not None) == e.is_mark
        assert idx.stop_reason and 0 < idx.stop_offset <= size
        stats(idx)
    try:
        open_log(p, strict=True).close()
    except BadLog:
        assert not idx.clean


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=OPS,
    cut=st.integers(0, 2**16),
    edits=st.lists(st.tuples(st.integers(0, 2**16), st.binary(min_size=1, max_size=9)), max_size=4),
)
def test_fuzz_mutated_and_truncated_logs(ops: list, cut: int, edits: list) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.log"
        write_ops(p, ops)
        data = bytearray(p.read_bytes())
        for at, blob in edits:
            at %= len(data)
            data[at : at + len(blob)] = blob
        p.write_bytes(bytes(data[: cut % (len(data) + 1)]))
        check_index(p)


@settings(max_examples=100, deadline=None)
@given(ops=OPS, cut=st.integers(0, 2**20))
def test_truncation_keeps_exactly_the_complete_entries(ops: list, cut: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.log"
        write_ops(p, ops)
        with open_log(p) as full:
            ends = [
                (e.data_offset - 32 + SS)
                if e.is_mark
                else e.data_offset + (e.nr_sectors * SS if e.is_write else 0)
                for e in full.entries
            ]
            original = full.entries
        cut %= p.stat().st_size + 1
        os.truncate(p, cut)
        if cut < SS:
            with pytest.raises(BadLog):
                open_log(p)
            return
        with open_log(p) as idx:
            assert idx.entries == original[: sum(end <= cut for end in ends)]
            assert idx.clean == (cut in ends or cut == SS)

"""LogWriter: byte-exact kernel format, stale supers, argument checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from powercut.core.log.dmlog import DISCARD, FLUSH, FUA, MARK, METADATA, open_log
from powercut.core.log.dmlog_writer import LogWriter

MAGIC = 0x6A736677736872


def sector(payload: bytes, ss: int) -> bytes:
    assert len(payload) <= ss
    return payload + b"\0" * (ss - len(payload))


def header(
    sec: int, nr: int, flags: int, dlen: int = 0, inline: bytes = b"", ss: int = 512
) -> bytes:
    return sector(struct.pack("<QQQQ", sec, nr, flags, dlen) + inline, ss)


@pytest.mark.parametrize("ss", [512, 4096])
def test_byte_exact_layout(tmp_path: Path, ss: int) -> None:
    p = tmp_path / "x.log"
    a, b = b"A" * ss, bytes(range(256)) * (2 * ss // 256)
    with LogWriter(p, sectorsize=ss) as w:
        assert w.write(7, a) == 0
        assert w.write(9, b, METADATA) == 1
        assert w.flush() == 2
        assert w.mark("ack:k1") == 3
        assert w.discard(100, 8) == 4
        assert w.fua(3, a) == 5
        assert w.write(4, a, FLUSH | FUA) == 6
    expected = (
        sector(struct.pack("<QQQI", MAGIC, 1, 7, ss), ss)
        + header(7, 1, 0, ss=ss)
        + a
        + header(9, 2, METADATA, ss=ss)
        + b
        + header(0, 0, FLUSH, ss=ss)
        + header(0, 0, MARK, 6, b"ack:k1", ss=ss)
        + header(100, 8, DISCARD, ss=ss)
        + header(3, 1, FUA, ss=ss)
        + a
        + header(4, 1, FLUSH | FUA, ss=ss)
        + a
    )
    assert p.read_bytes() == expected


def test_stale_super_is_count_after_last_fua_or_mark(tmp_path: Path) -> None:
    p = tmp_path / "s.log"
    w = LogWriter(p)
    w.write(0, b"x" * 512)
    w.mark("ack:1")  # super rewritten: 2
    w.write(1, b"y" * 512)
    w.fua(2, b"z" * 512)  # super rewritten: 4
    w.write(3, b"w" * 512)
    w.flush()  # FLUSH alone does not rewrite the super
    assert (w.count, w.super_count) == (6, 4)
    w.close(stale_super=True)
    assert struct.unpack_from("<Q", p.read_bytes(), 16)[0] == 4
    with open_log(p) as idx:
        assert len(idx.entries) == 6 and idx.super_nr_entries == 4 and idx.stale_super


def test_stale_super_explicit_value_and_fresh_super(tmp_path: Path) -> None:
    p = tmp_path / "s.log"
    with LogWriter(p) as w:
        w.write(0, b"x" * 512)
    assert struct.unpack_from("<Q", p.read_bytes(), 16)[0] == 1
    w = LogWriter(p)
    w.write(0, b"x" * 512)
    w.close(stale_super=0)
    with open_log(p) as idx:
        assert idx.super_nr_entries == 0 and len(idx.entries) == 1
    w.close()  # closing twice is harmless


@pytest.mark.parametrize(
    "call",
    [
        lambda w: w.write(0, b""),
        lambda w: w.write(0, b"x" * 100),
        lambda w: w.write(-1, b"x" * 512),
        lambda w: w.write(0, b"x" * 512, DISCARD),
        lambda w: w.write(0, b"x" * 512, MARK),
        lambda w: w.discard(0, 0),
        lambda w: w.discard(2**64 - 1, 1),
        lambda w: w.mark("a\0b"),
        lambda w: w.mark("x" * (512 - 32)),
        lambda w: w.flush(DISCARD),
    ],
)
def test_rejects_what_the_kernel_cannot_log(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    with LogWriter(tmp_path / "bad.log") as w:
        with pytest.raises(ValueError):
            call(w)
        assert w.count == 0


def test_longest_mark_fits(tmp_path: Path) -> None:
    p = tmp_path / "m.log"
    with LogWriter(p) as w:
        w.mark("m" * (512 - 33))
    with open_log(p, strict=True) as idx:
        assert idx.entries[0].mark == "m" * 479


def test_bad_sectorsize_and_closed_writer(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LogWriter(tmp_path / "a.log", sectorsize=1000)
    w = LogWriter(tmp_path / "b.log")
    w.close()
    with pytest.raises(ValueError):
        w.flush()

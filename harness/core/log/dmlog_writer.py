"""Write dm-log-writes logs byte-exactly in the kernel's format (pure; host and guest): LogWriter for
tests and fixtures, ``trim_log`` for repro bundles (a log's first entries, byte for byte).

The layout matches drivers/md/dm-log-writes.c: a super sector (magic, version, nr_entries,
sectorsize, zero padded), then per entry one header sector (sector, nr_sectors, flags, data_len,
mark text inline, zero padded) followed by the data sectors.  The kernel rewrites the super's
nr_entries only after FUA and MARK entries; ``close(stale_super=True)`` leaves it as the kernel
would have if the device vanished before teardown.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self

from powercut.core.log.dmlog import (
    DISCARD,
    FLUSH,
    FUA,
    HEADER,
    MAGIC,
    MARK,
    METADATA,
    SUPER,
    VERSION,
    mark_limit,
    open_log,
)
from powercut.errors import UsageError

log = logging.getLogger(__name__)


class LogWriter:
    """Append entries to a new log file.  Use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike[str], sectorsize: int = 512) -> None:
        if sectorsize not in {1 << s for s in range(9, 17)}:
            raise ValueError(f"sectorsize {sectorsize} is not a power of two in 512..65536")
        self.path = os.fspath(path)
        self.sectorsize = sectorsize
        self.count = 0
        self.super_count = 0  # nr_entries as the kernel last wrote it (after a FUA or MARK entry)
        self._f: BinaryIO | None = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        self._write_super(0)

    def _file(self) -> BinaryIO:
        if self._f is None:
            raise ValueError(f"{self.path}: LogWriter is closed")
        return self._f

    def _write_super(self, nr_entries: int) -> None:
        f = self._file()
        pos = f.tell()
        f.seek(0)
        f.write(
            SUPER.pack(MAGIC, VERSION, nr_entries, self.sectorsize).ljust(self.sectorsize, b"\0")
        )
        f.seek(max(pos, self.sectorsize))

    def _entry(
        self,
        sector: int,
        nr_sectors: int,
        flags: int,
        data_len: int = 0,
        inline: bytes = b"",
        data: bytes = b"",
    ) -> int:
        f = self._file()
        f.write(
            (HEADER.pack(sector, nr_sectors, flags, data_len) + inline).ljust(
                self.sectorsize, b"\0"
            )
        )
        f.write(data)
        index = self.count
        self.count += 1
        if flags & (FUA | MARK):
            self.super_count = self.count
        return index

    def _check_sector(self, sector: int) -> None:
        if not isinstance(sector, int) or sector < 0 or sector >= 2**64:
            raise ValueError(f"bad sector {sector!r}")

    # -- entries ----------------------------------------------------------------------------------
    def write(self, sector: int, data: bytes, flags: int = 0) -> int:
        """A completed write of ``data`` (whole sectors) at ``sector``; ``flags`` may add FLUSH
        (a PREFLUSH write with payload), FUA and METADATA.  Returns the entry index."""
        self._check_sector(sector)
        if flags & ~(FLUSH | FUA | METADATA):
            raise ValueError(f"write() flags {flags:#x}: use discard() or mark() for those")
        data = bytes(data)
        if not data or len(data) % self.sectorsize:
            raise ValueError(
                f"write data must be a non-empty multiple of {self.sectorsize} bytes, got {len(data)}"
            )
        return self._entry(sector, len(data) // self.sectorsize, flags, data=data)

    def fua(self, sector: int, data: bytes, flags: int = 0) -> int:
        return self.write(sector, data, flags | FUA)

    def flush(self, flags: int = 0) -> int:
        """An empty flush bio completed (the FLUSH entry after the writes it covered)."""
        if flags & ~(FUA | METADATA):
            raise ValueError(f"flush() flags {flags:#x}")
        return self._entry(0, 0, FLUSH | flags)

    def discard(self, sector: int, nr_sectors: int) -> int:
        self._check_sector(sector)
        if not isinstance(nr_sectors, int) or nr_sectors < 1 or sector + nr_sectors >= 2**64:
            raise ValueError(f"bad discard length {nr_sectors!r}")
        return self._entry(sector, nr_sectors, DISCARD)

    def mark(self, text: str) -> int:
        raw = text.encode("utf-8")
        if b"\0" in raw or len(raw) > mark_limit(self.sectorsize):
            raise ValueError(
                f"mark text must have no NUL and at most {mark_limit(self.sectorsize)} bytes"
            )
        return self._entry(0, 0, MARK, len(raw), inline=raw)

    # -- end --------------------------------------------------------------------------------------
    def close(self, stale_super: bool | int = False) -> None:
        """Write the final super.  ``stale_super=True``: nr_entries as of the last FUA/MARK entry
        (what the kernel leaves when not torn down); an int: exactly that value."""
        if self._f is None:
            return
        if isinstance(stale_super, bool):
            n = self.super_count if stale_super else self.count
        else:
            n = int(stale_super)
        self._write_super(n)
        self._f.close()
        self._f = None
        log.debug("%s: wrote %d entries (super says %d)", self.path, self.count, n)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# -- copying a prefix of a log ----------------------------------------------------------------


def trim_log(src: Path, dst: Path, cut: int) -> int:
    """Copy the log's first ``cut`` entries (0: all) byte for byte, its super saying how many."""
    with open_log(src) as index:
        n = len(index.entries) if not cut else min(cut, len(index.entries))
        ss = index.sectorsize
        end = ss if n == 0 else max(entry_end(e, ss) for e in index.entries[:n])
    with open(src, "rb") as f, open(dst, "wb") as out:
        remaining = end
        while remaining:
            chunk = f.read(min(remaining, 1 << 20))
            if not chunk:
                raise UsageError(f"{src}: shorter than its own entries")
            out.write(chunk)
            remaining -= len(chunk)
        out.seek(16)
        out.write(n.to_bytes(8, "little"))  # the super's nr_entries
    return n


def entry_end(e: Any, ss: int) -> int:
    """Byte offset just past an entry: a mark's text is inline in its header sector (at +32), a
    discard has no data, a write or flush ``nr_sectors`` sectors after its header."""
    if e.is_mark:
        return e.data_offset - 32 + ss
    return e.data_offset + (0 if e.is_discard else e.nr_sectors * ss)

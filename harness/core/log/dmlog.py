"""Reader and index for dm-log-writes logs (pure: no subprocess, reads only the log file).

Format (drivers/md/dm-log-writes.c), all little endian:

* super, at byte 0, one sector of ``sectorsize`` bytes:
  ``<Q magic 0x6a736677736872, <Q version 1, <Q nr_entries, <I sectorsize``;
* entries from byte ``sectorsize`` on: one header sector ``<Q sector, <Q nr_sectors, <Q flags,
  <Q data_len`` (sector and nr_sectors in units of sectorsize), then ``nr_sectors`` data sectors,
  except for DISCARD entries (no data) and MARK entries (nr_sectors 0, the text -- data_len bytes,
  no NUL -- sits inline right after the 32-byte header).  A non-mark entry may carry a non-zero
  data_len (DAX "inline data", at most nr_sectors sectors, zero padded); its data still occupies
  nr_sectors sectors.

``nr_entries`` in the super is only rewritten after FUA and MARK entries, so it can be stale: the
reader never trusts it.  It scans entry by entry until one fails validation and records why it
stopped (``LogIndex.stop_reason``).  Clean stops are the end of the file, an all-zero header (the
rest of a pre-allocated log device) and the teardown mark ``dm-log-writes-end`` (nothing can be
logged after it, so whatever follows is left-over data and is not scanned).  Any other stop is
corruption: kept silently (entries before it are indexed) unless ``strict=True``.

The index maps the file with mmap; ``LogIndex.data`` returns zero-copy memoryviews.  The scan drops
the pages it has read from the process's mapping as it goes (``madvise(MADV_DONTNEED)``: they stay
in the page cache and fault back in when read again), so a process's resident set does not grow to
the size of the log; ``LogIndex.release`` does the same for a walk over the entries' data.
"""

from __future__ import annotations

import logging
import mmap
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Self

from powercut.core.log.marknames import ACK_PREFIX, BEGIN_PREFIX, END_MARK, ORDER_BEGIN, ORDER_END
from powercut.errors import BadLog

log = logging.getLogger(__name__)

MAGIC = 0x6A736677736872
VERSION = 1
FLUSH = 1
FUA = 2
DISCARD = 4
MARK = 8
METADATA = 16
KNOWN_FLAGS = FLUSH | FUA | DISCARD | MARK | METADATA

SUPER = struct.Struct("<QQQI")
HEADER = struct.Struct("<QQQQ")
_U64 = struct.Struct("<Q")
MAX_BYTE = 2**63 - 1  # device byte offsets must fit an off_t
RELEASE_BYTES = 16 << 20  # the scan drops its read pages from the mapping every this many bytes


def mark_limit(sectorsize: int) -> int:
    """Longest mark text the kernel accepts for this sectorsize (``sectorsize - 32 - 1``)."""
    return sectorsize - HEADER.size - 1


@dataclass(frozen=True, slots=True)
class Entry:
    """One logged entry.  ``data_offset`` is the byte offset in the log file of the entry's data
    (or of the mark text); for entries without data it is where data would start."""

    index: int
    flags: int
    sector: int
    nr_sectors: int
    data_offset: int
    mark: str | None = None

    @property
    def is_flush(self) -> bool:
        return bool(self.flags & FLUSH)

    @property
    def is_fua(self) -> bool:
        return bool(self.flags & FUA)

    @property
    def is_discard(self) -> bool:
        return bool(self.flags & DISCARD)

    @property
    def is_mark(self) -> bool:
        return bool(self.flags & MARK)

    @property
    def is_metadata(self) -> bool:
        return bool(self.flags & METADATA)

    @property
    def is_write(self) -> bool:
        """Carries payload data (not a discard, not a mark, at least one sector)."""
        return not self.flags & (DISCARD | MARK) and self.nr_sectors > 0

    @property
    def changes_device(self) -> bool:
        """Changes the data device when replayed: a write, or a non-empty discard (zeros)."""
        return not self.flags & MARK and self.nr_sectors > 0

    @property
    def ack_key(self) -> str | None:
        m = self.mark
        return m[len(ACK_PREFIX) :] if m is not None and m.startswith(ACK_PREFIX) else None

    @property
    def begin_key(self) -> str | None:
        m = self.mark
        return m[len(BEGIN_PREFIX) :] if m is not None and m.startswith(BEGIN_PREFIX) else None

    @property
    def is_order_mark(self) -> bool:
        """One of the marks the marking code puts around its ordering flush (never a key mark)."""
        return self.mark in (ORDER_BEGIN, ORDER_END)

    def byte_offset(self, sectorsize: int) -> int:
        """Byte offset on the data device."""
        return self.sector * sectorsize

    def length(self, sectorsize: int) -> int:
        """Bytes of the data device this entry covers (0 for marks)."""
        return 0 if self.flags & MARK else self.nr_sectors * sectorsize

    def describe(self) -> str:
        names = [
            n
            for bit, n in (
                (FLUSH, "FLUSH"),
                (FUA, "FUA"),
                (DISCARD, "DISCARD"),
                (MARK, "MARK"),
                (METADATA, "META"),
            )
            if self.flags & bit
        ]
        if self.is_mark:
            return f"#{self.index} MARK {self.mark!r}"
        return (
            f"#{self.index} {'|'.join(names) or 'WRITE'} sector={self.sector} nr={self.nr_sectors}"
        )


class LogIndex:
    """The scanned log.  Holds an mmap of the file: use as a context manager or call close()."""

    def __init__(
        self,
        path: str,
        mm: mmap.mmap | None,
        size: int,
        sectorsize: int,
        super_nr_entries: int,
        entries: tuple[Entry, ...],
        stop_reason: str,
        stop_offset: int,
        clean: bool,
    ) -> None:
        self.path = path
        self.size = size
        self.sectorsize = sectorsize
        self.super_nr_entries = super_nr_entries
        self.entries = entries
        self.stop_reason = stop_reason
        self.stop_offset = stop_offset
        self.clean = clean
        self._mm = mm

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # memoryviews still alive: the mapping goes when they do
                log.debug("%s: data views still referenced; mapping released later", self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __repr__(self) -> str:
        return (
            f"LogIndex({self.path!r}, sectorsize={self.sectorsize}, entries={len(self.entries)}, "
            f"super_nr_entries={self.super_nr_entries}, stop={self.stop_reason!r})"
        )

    @property
    def stale_super(self) -> bool:
        """The super's nr_entries differs from the number of entries the scan found."""
        return self.super_nr_entries != len(self.entries)

    # -- data ------------------------------------------------------------------------------------
    def _view(self) -> memoryview:
        if self._mm is None:
            raise ValueError(f"{self.path}: log index is closed")
        return memoryview(self._mm)

    def _check(self, entry: Entry) -> None:
        if not (0 <= entry.index < len(self.entries)) or self.entries[entry.index] != entry:
            raise ValueError(f"entry {entry.index} does not belong to {self.path}")

    def data(self, entry: Entry) -> memoryview:
        """Zero-copy view of the entry's payload (the mark text for marks; empty if none)."""
        self._check(entry)
        view = self._view()
        if entry.is_mark:
            (n,) = _U64.unpack_from(view, entry.data_offset - 8)
            return view[entry.data_offset : entry.data_offset + n]
        if not entry.is_write:
            return view[0:0]
        return view[entry.data_offset : entry.data_offset + entry.nr_sectors * self.sectorsize]

    def sector_data(self, entry: Entry, offset: int) -> memoryview:
        """Zero-copy view of sector ``offset`` (0-based, within the write) of a write's payload."""
        self._check(entry)
        if not entry.is_write or not 0 <= offset < entry.nr_sectors:
            raise ValueError(f"entry {entry.index} has no data sector {offset}")
        start = entry.data_offset + offset * self.sectorsize
        return self._view()[start : start + self.sectorsize]

    def release(self, start: int, stop: int) -> None:
        """Drop the pages of entries[start:stop] from this process's mapping (not from the page
        cache): a walk that has written them out calls this so that its resident set stays small.
        Reading them again just faults them back in."""
        if self._mm is not None and 0 <= start < stop <= len(self.entries):
            first, last = self.entries[start], self.entries[stop - 1]
            _release(
                self._mm, _entry_start(first, self.sectorsize), _entry_end(last, self.sectorsize)
            )

    # -- marks -----------------------------------------------------------------------------------
    def marks(self) -> list[tuple[int, str]]:
        """(entry index, text) of every mark, in log order."""
        return [(e.index, e.mark) for e in self.entries if e.mark is not None]

    def acks(self) -> list[tuple[int, str]]:
        """(entry index, key) of every ``ack:<key>`` mark, in log order."""
        return [
            (e.index, e.mark[len(ACK_PREFIX) :])
            for e in self.entries
            if e.mark is not None and e.mark.startswith(ACK_PREFIX)
        ]

    def begun(self) -> list[tuple[int, str]]:
        """(entry index, key) of every ``begin:<key>`` mark, in log order."""
        return [
            (e.index, e.mark[len(BEGIN_PREFIX) :])
            for e in self.entries
            if e.mark is not None and e.mark.startswith(BEGIN_PREFIX)
        ]

    def find_mark(self, text: str) -> int | None:
        """Entry index of the first mark with exactly this text."""
        for e in self.entries:
            if e.mark == text:
                return e.index
        return None


@dataclass(frozen=True, slots=True)
class LogStats:
    entries: int
    writes: int
    flushes: int
    fuas: int
    discards: int
    marks: int
    acks: int
    bytes_written: int
    sectorsize: int
    super_nr_entries: int
    stale_super: bool
    stop_reason: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def stats(index: LogIndex) -> LogStats:
    writes = flushes = fuas = discards = marks = acks = sectors = 0
    for e in index.entries:
        f = e.flags
        if f & MARK:
            marks += 1
            acks += e.mark is not None and e.mark.startswith(ACK_PREFIX)
            continue
        flushes += bool(f & FLUSH)
        fuas += bool(f & FUA)
        if f & DISCARD:
            discards += 1
        elif e.nr_sectors:
            writes += 1
            sectors += e.nr_sectors
    return LogStats(
        entries=len(index.entries),
        writes=writes,
        flushes=flushes,
        fuas=fuas,
        discards=discards,
        marks=marks,
        acks=acks,
        bytes_written=sectors * index.sectorsize,
        sectorsize=index.sectorsize,
        super_nr_entries=index.super_nr_entries,
        stale_super=index.stale_super,
        stop_reason=index.stop_reason,
    )


# ---------------------------------------------------------------------------------------------------
def _entry_start(e: Entry, ss: int) -> int:
    return e.data_offset - (HEADER.size if e.flags & MARK else ss)


def _entry_end(e: Entry, ss: int) -> int:
    if e.flags & MARK:
        return e.data_offset - HEADER.size + ss
    return e.data_offset + (0 if e.flags & DISCARD else e.nr_sectors * ss)


def _release(mm: mmap.mmap, start: int, end: int) -> None:
    """madvise(MADV_DONTNEED) the whole pages of [start, end) of a read-only file mapping."""
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, min(end, len(mm)) // page * page
    if hi > lo and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        try:
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        except (OSError, ValueError) as e:  # an optimisation only
            log.debug("madvise(DONTNEED, %d, %d): %s", lo, hi - lo, e)


def _map(path: str) -> tuple[mmap.mmap, int]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadLog(path, 0, "no such file") from None
    except (OSError, ValueError) as e:
        raise BadLog(path, 0, f"cannot stat: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadLog(path, 0, "is a directory, not a log file")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISBLK(st.st_mode)):
        raise BadLog(path, 0, "not a regular file or block device")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise BadLog(path, 0, f"cannot open: {e.strerror or e}") from None
    try:
        size = os.lseek(fd, 0, os.SEEK_END)  # also right for block devices (st_size is 0 there)
        if size < SUPER.size:
            raise BadLog(
                path,
                0,
                "empty file" if size == 0 else f"only {size} bytes: shorter than a log super",
            )
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ), size
        except (OSError, ValueError, OverflowError) as e:
            raise BadLog(path, 0, f"cannot map: {e}") from None
    finally:
        os.close(fd)


def open_log(path: str | os.PathLike[str], strict: bool = False, quiet: bool = False) -> LogIndex:
    """Scan a dm-log-writes log.  Raises BadLog if it is not a log at all (or, with ``strict``, if
    the scan stops on corruption rather than at a clean end).  ``quiet``: an early stop is the
    caller's to report (logged at debug level, not as a warning)."""
    spath = os.fsdecode(os.fspath(path))
    mm, size = _map(spath)
    try:
        magic, version, nr_entries, sectorsize = SUPER.unpack_from(mm, 0)
        if magic != MAGIC:
            raise BadLog(
                spath, 0, f"not a dm-log-writes log (magic {magic:#x}, expected {MAGIC:#x})"
            )
        if version != VERSION:
            raise BadLog(spath, 8, f"unsupported log version {version} (expected {VERSION})")
        if not 512 <= sectorsize <= 65536 or sectorsize & (sectorsize - 1):
            raise BadLog(spath, 24, f"sectorsize {sectorsize} is not a power of two in 512..65536")
        if size < sectorsize:
            raise BadLog(
                spath, 0, f"only {size} bytes: shorter than the {sectorsize}-byte super sector"
            )
        entries, reason, offset, clean = _scan(mm, size, sectorsize)
        _release(mm, 0, size)
    except BaseException:
        mm.close()
        raise
    if not clean:
        if strict:
            mm.close()
            raise BadLog(spath, offset, reason.rsplit(" at byte ", 1)[0])
        (log.debug if quiet else log.warning)(
            "%s: scan stopped early after %d entries: %s", spath, len(entries), reason
        )
    if len(entries) != nr_entries:
        log.info("%s: super says %d entries, scan found %d", spath, nr_entries, len(entries))
    return LogIndex(spath, mm, size, sectorsize, nr_entries, entries, reason, offset, clean)


def _scan(mm: mmap.mmap, size: int, ss: int) -> tuple[tuple[Entry, ...], str, int, bool]:
    """Walk the entries.  Returns (entries, stop reason, stop offset, clean stop?)."""
    unpack = HEADER.unpack_from
    entries: list[Entry] = []
    append = entries.append
    max_mark = mark_limit(ss)
    max_sector = MAX_BYTE // ss
    off = ss
    i = 0
    released, next_release = 0, RELEASE_BYTES
    while True:
        if off >= next_release:  # keep the resident set small: drop the pages read so far
            _release(mm, released, off)
            released, next_release = off, off + RELEASE_BYTES
        if off == size:
            return tuple(entries), "end of file", off, True
        if off + ss > size:
            return (
                tuple(entries),
                f"truncated entry header ({size - off} of {ss} bytes) at byte {off}",
                off,
                False,
            )
        sector, nr, flags, dlen = unpack(mm, off)
        why = None
        if not (sector | nr | flags | dlen):
            return tuple(entries), f"all-zero entry header (end of log) at byte {off}", off, True
        if flags & ~KNOWN_FLAGS:
            why = f"unknown flags {flags:#x}"
        elif flags & MARK:
            if flags != MARK:
                why = f"mark entry with other flags {flags:#x}"
            elif nr:
                why = f"mark entry with nr_sectors {nr}"
            elif dlen > max_mark:
                why = f"mark length {dlen} exceeds {max_mark}"
            else:
                raw = mm[off + 32 : off + 32 + dlen]
                if b"\0" in raw:
                    why = "NUL byte in mark text"
                else:
                    text = raw.decode("utf-8", "backslashreplace")
                    append(Entry(i, flags, sector, 0, off + 32, text))
                    i += 1
                    off += ss
                    if text == END_MARK and off != size:
                        reason = f"end mark {END_MARK!r} at byte {off - ss}; {size - off} trailing bytes not scanned"
                        return tuple(entries), reason, off, True
                    continue
        elif sector > max_sector or nr > max_sector - sector:
            why = f"sector range {sector}+{nr} overflows the device address space"
        elif flags & DISCARD:
            if dlen:
                why = f"discard entry with data_len {dlen}"
            else:
                append(Entry(i, flags, sector, nr, off + ss))
                i += 1
                off += ss
                continue
        elif not nr and not flags & (FLUSH | FUA):
            why = "write entry without data or flush"
        elif dlen > nr * ss:
            why = f"data_len {dlen} exceeds {nr} sectors"
        elif off + ss + nr * ss > size:
            why = f"data of {nr} sectors past end of file ({size - off - ss} bytes left)"
        else:
            append(Entry(i, flags, sector, nr, off + ss))
            i += 1
            off += ss + nr * ss
            continue
        return tuple(entries), f"entry {i}: {why} at byte {off}", off, False


def is_key_mark(e: Entry) -> bool:
    """An ``ack:`` or ``begin:`` mark: it changes what the checker is told."""
    return e.ack_key is not None or e.begin_key is not None

"""osync: fixed-size sequential writes whose durability comes (or not) from the open flags.  Runs in
the guest, with its working directory on the filesystem under test.

TLPI's table 13-3 (``filebuff/write_bytes.c``): write ``total`` bytes (TLPI: 1,000,000) to a new
file in ``write(2)`` calls of ``bs`` bytes (TLPI: 1, 16, 256, 4096; the last write is short when
``bs`` does not divide ``total``), sequentially from offset 0, the file opened with ``mode``:

* ``o_sync`` / ``o_dsync``: ``O_SYNC`` / ``O_DSYNC`` -- write(2) returns once the data (and the
  metadata needed to read it back: an append's new size and blocks) is on stable storage; ext4
  does an fsync / fdatasync inside the write: a journal commit with a cache flush;
* ``o_direct``: ``O_DIRECT``, no sync -- the page cache is bypassed, but nothing flushes the
  device's volatile write cache; ``bs`` and ``total`` must be multiples of 4096 and the buffer is
  page-aligned (an anonymous mmap);
* ``buffered``: plain write(2) -- the data sits in the page cache until writeback.

**Commits and marks.**  Write i covers bytes ``[i*bs, min((i+1)*bs, total))``.  Writes are acked in
groups of ``ack_every`` (default 1: one commit per write): the group's key is the index of its last
write, ``begin:<key>`` before its first write and ``ack:<key>`` after its last write returns, so
**an acked key i promises writes 0..i**, and a begun-not-acked key i the writes after the previous
key up to i.  TLPI's 1,000,000 one-byte writes would be 2,000,000 marks (a log of about 1 GB):
more than ``MAX_COMMITS`` commits is refused; raise ``ack_every`` (e.g. 16 for that run).

**Content.**  Byte j of the file is a function of (seed, j) alone, never 0 (see ``content``): a
checker knows every position's expected byte and tells an unwritten (zero) byte from a wrong one.

**Creation** (truncate, with ``prealloc=true`` zeros over the whole ``total``, fsync of the file and
of its directory) is durable before the first commit, whatever the mode.

**Expected verdicts** (ext4, data=ordered; the crash models: docs/crash-models.md):

* o_sync, o_dsync: pass under every model (no-cache, flush, write-cache, torn).
* buffered: lost-ack under every model, no-cache included: at the ack the data is only in memory;
  a short run's writeback happens at unmount.
* o_direct, appending (``prealloc=false``): lost-ack under every model.  The data bio carries no
  FUA and no flush follows (write-cache loses it), and an appending O_DIRECT write also changes
  i_size and the extent tree in the *running* jbd2 transaction, committed only at the next journal
  commit (``commit=``, 5 s, or unmount): until then, after a crash the file is shorter even with
  the cache off.
* o_direct, ``prealloc=true`` (overwrites of allocated, written blocks: no metadata the data
  needs): on real hardware durable with the cache off, lost with it on.  Write-cache catches it
  (lost-ack); no-cache and flush pass, because marks are ordered (core/log/markorder.py): without that,
  dm-log-writes would log each plain write only at the next flush, after the ack that followed it,
  a false lost-ack."""

from __future__ import annotations

import mmap
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import powercut
from powercut import Workload

MODES: dict[str, int] = {
    "o_sync": os.O_SYNC,
    "o_dsync": os.O_DSYNC,
    "o_direct": getattr(os, "O_DIRECT", 0),
    "buffered": 0,
}
DIRECT_ALIGN = 4096
MAX_COMMITS = 65536
CONTENT_BLOCK = (
    4096  # content is generated per 4096-byte block of the file: byte j depends on (seed, j) only
)
NONZERO = bytes(x or 0xA5 for x in range(256))  # a translate table: 0 -> 0xA5, the rest unchanged
PREALLOC_CHUNK = 64 * 1024

DEFAULTS: dict[str, Any] = {
    "mode": "o_sync",
    "bs": 4096,
    "total": 64 * 1024,
    "ack_every": 1,
    "prealloc": False,
    "seed": 0,
    "file": "osync.dat",
}


def _mark(kind: str, key: int) -> None:
    (powercut.begin if kind == "begin" else powercut.ack)(key)


# The mark hook: ("begin" | "ack", key).  Tests replace it (real marks need a dm-log-writes device).
MARK: Callable[[str, int], None] = _mark


@dataclass(frozen=True, slots=True)
class Params:
    mode: str
    bs: int
    total: int
    ack_every: int
    prealloc: bool
    seed: int
    file: str

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        p = Params(**{k: given.get(k, v) for k, v in DEFAULTS.items()})
        if p.mode not in MODES:
            raise ValueError(f"osync: mode must be one of {', '.join(MODES)}, not {p.mode!r}")
        if p.bs < 1 or p.total < 1 or p.ack_every < 1:
            raise ValueError(
                f"osync: bs, total and ack_every must be >= 1 (got bs={p.bs}, total={p.total}, "
                f"ack_every={p.ack_every})"
            )
        if p.mode == "o_direct" and (p.bs % DIRECT_ALIGN or p.total % DIRECT_ALIGN):
            raise ValueError(
                f"osync: mode o_direct needs bs and total to be multiples of {DIRECT_ALIGN} "
                f"(got bs={p.bs}, total={p.total})"
            )
        if p.commits > MAX_COMMITS:
            raise ValueError(
                f"osync: {p.writes} writes with ack_every={p.ack_every} are {p.commits} commits, "
                f"more than {MAX_COMMITS}; use ack_every >= {-(-p.writes // MAX_COMMITS)}"
            )
        return p

    @property
    def writes(self) -> int:
        return -(-self.total // self.bs)

    @property
    def commits(self) -> int:
        return -(-self.writes // self.ack_every)

    def span(self, i: int) -> tuple[int, int]:
        """Write i's byte range [start, end)."""
        return i * self.bs, min((i + 1) * self.bs, self.total)

    def groups(self) -> list[tuple[int, int]]:
        """(first write, last write = the commit key) of each commit, in order."""
        k = self.ack_every
        return [(g, min(g + k, self.writes) - 1) for g in range(0, self.writes, k)]


def content(seed: int, size: int) -> bytes:
    """Bytes [0, size) of the file: a keyed PRNG stream per 4096-byte block, zeros mapped to 0xA5."""
    blocks = (
        random.Random(f"osync:{seed}:{b}").randbytes(CONTENT_BLOCK)
        for b in range(-(-size // CONTENT_BLOCK))
    )
    return b"".join(blocks)[:size].translate(NONZERO)


def _fsync_dir() -> None:
    dirfd = os.open(".", os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def create(p: Params) -> None:
    """The new (empty, or zero-filled with prealloc) file and its directory entry, made durable."""
    fd = os.open(p.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if p.prealloc:
            for off in range(0, p.total, PREALLOC_CHUNK):
                zeros = bytes(min(PREALLOC_CHUNK, p.total - off))
                if os.pwrite(fd, zeros, off) != len(zeros):
                    raise OSError(f"osync: short write while preallocating {p.file}")
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir()


def write_all(fd: int, p: Params, data: bytes) -> None:
    """Every write in order, one os.write each from a page-aligned buffer, with the commit marks."""
    buf = mmap.mmap(-1, p.bs)  # anonymous: page-aligned, as O_DIRECT requires
    try:
        with memoryview(buf) as view:
            for first, key in p.groups():
                MARK("begin", key)
                for i in range(first, key + 1):
                    start, end = p.span(i)
                    n = end - start
                    view[:n] = data[start:end]
                    done = os.write(fd, view[:n])
                    if done != n:
                        raise OSError(
                            f"osync: short write {i}: {done} of {n} bytes at offset {start}"
                        )
                MARK("ack", key)
    finally:
        buf.close()


def main(params: dict[str, Any]) -> int:
    p = Params.of(params)
    data = content(p.seed, p.total)
    create(p)
    fd = os.open(p.file, os.O_WRONLY | MODES[p.mode])
    try:
        write_all(fd, p, data)
    finally:
        os.close(fd)
    return 0


WORKLOAD = Workload(
    name="osync",
    description="TLPI 13-3: total bytes in bs-byte write(2)s to a new file opened o_sync|o_dsync|o_direct|buffered, "
    "ack after each write (or each ack_every writes)",
    main=main,
    defaults=dict(DEFAULTS),
    choices={"mode": tuple(MODES)},
    minimum={"bs": 1, "total": 1, "ack_every": 1},
)

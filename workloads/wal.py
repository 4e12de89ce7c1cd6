"""wal: a write-ahead log with full page images, group commit, checkpoints and segment rotation.
Runs in the guest, with its working directory on the filesystem under test.

Files under ``dir`` (every integer little-endian)::

    wal.ctl       magic b"PCWALCTL" | ckpt_lsn u64 | ckpt_txn u64 | committed_lsn u64
                  | committed_txn u64 | ckpt_seg u32 | crc32c u32 (over the 44 bytes before it)
                  48 bytes, rewritten in place (one 4 KiB unit: never torn)
    data.db       npages pages of page_bytes, zeros at creation, written at checkpoints
    NNNNNNNN.seg  segment NNNNNNNN, preallocated (zeros, at least segment_bytes): header magic
                  b"PCWALSEG" | segno u32 | start_lsn u64 | crc32c u32, then records; the LSN of
                  a byte is its segment's start_lsn + its file offset
    record        length u32 (payload bytes) | lsn u64 | type u32 | crc32c u32 | payload, padded to 8;
                  the CRC32C (Castagnoli) covers the header with crc=0 and the payload.  No record
                  starts in the last 19 bytes of a 4 KiB file block (they are skipped, zeros).
                  PAGE 1: txn u64 | page u32 | 0 u32 | full page image (page_bytes)
                  COMMIT 2: txn u64 | records u32 | txn_crc u32 (CRC32C of the txn's PAGE records)
                  FILL 3: zeros (padding)      SWITCH 4: next segno u32 | 0 u32 (last in a segment)

Transaction t updates page ``(t-1) % npages`` and, when t % 3 == 0, also page
``(t-1+npages//2) % npages``; its image of page p is b"WALP" | p u32 | t u64 then
``Random(f"{seed}:{t}:{p}").randbytes(page_bytes-16)``, so a checker rebuilds every state.

A commit group (``group`` txns): rotate if the group might not fit in the segment (SWITCH, fsync
the old segment, create the next preallocated one, fsync it, fsync the directory), then per txn
``begin:<t>`` and one pwrite of its records + commit, then one fsync of the segment, then
``ack:<t>`` for the whole group.  Every ``checkpoint_every`` commits (after a group): write the
pages dirtied since the last checkpoint into data.db, fsync it, rewrite wal.ctl (the checkpoint:
redo starts at ckpt_lsn in ckpt_seg, txns <= ckpt_txn are in data.db), fsync it, unlink the older
segments, fsync the directory.  Creating the files is durable (file and directory fsyncs) before
the first ``begin:`` in every variant.

Variants, and the crash model expected to catch each (the verdict matrix confirms or refutes):

* ``correct``: as above; recovery checks every record's CRC and the commit's txn CRC, so a torn
  or partly durable txn is dropped and full page images repair torn data.db pages: passes all.
* ``no-fsync``: the log is never fsynced (setup, data.db and wal.ctl still are): acked txns after
  the last checkpoint are lost under every model (lost-ack).
* ``no-crc``: CRC fields are 0 and recovery checks only structure (lengths, LSNs, txn numbers):
  a txn whose write spans >= 3 units, persisted with its middle unit lost (torn; use
  page_bytes=8192 so every txn does) is applied with zeros inside a page (corrupt-data).  Only
  torn can split one bio; write-cache keeps or drops it whole.
* ``commit-before-data``: the commit point is wal.ctl's committed_lsn, rewritten per group; txn
  CRCs are 0; the segment write and the wal.ctl write share ONE ``os.sync()``.  Recovery trusts
  wal.ctl: a log that cannot be read up to committed_lsn cannot be opened (corrupt-data).  Prefix
  models log the segment data before wal.ctl, so only write-cache (segment write dropped, wal.ctl
  kept) shows it.  A FILL record keeps each txn inside one 4 KiB log block when it fits, so with
  group=1 and page_bytes <= 1536 (matrix row: page_bytes=1024) each commit writes one log unit and
  torn has no data write to split; at the default 4096 a txn spans two units and torn shows it too
  (as may torn + drops of a multi-unit journal write in the same window).  Rotation (its own
  sync, before the commit that uses the new segment) and checkpoints use os.sync() too; with
  preallocated segments a commit changes no file size, so no journal commit orders it.
* ``no-dir-fsync``: a new segment is made durable only by its own fsync, never the directory's
  (nor after unlinking old ones).  ext4, xfs and btrfs persist a new file's name with its fsync:
  expected pass.  The default run rotates 5 times and checkpoints twice.
* ``checkpoint-early``: the checkpoint rewrites wal.ctl and unlinks the old segments before it
  fsyncs data.db: a crash then leaves acked txns in neither (lost-ack, from the flush model up).

Coverage is relative to log order (docs/crash-models.md): a 4 KiB unit is never torn inside."""

from __future__ import annotations

import errno
import os
import random
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import powercut
from powercut import Workload

VARIANTS = (
    "correct",
    "no-fsync",
    "no-crc",
    "commit-before-data",
    "no-dir-fsync",
    "checkpoint-early",
)
DEFAULTS: dict[str, Any] = {
    "variant": "correct",
    "n": 12,
    "group": 1,
    "page_bytes": 4096,
    "npages": 8,
    "segment_bytes": 16384,
    "checkpoint_every": 5,
    "seed": 0,
    "dir": "wal",
    "fault_at": 0,
    "on_error": "stop",
}
ON_ERROR = ("stop", "retry")
BLOCK = 4096
REC = struct.Struct("<IQII")  # length, lsn, type, crc32c
PAGE = struct.Struct("<QII")  # txn, page, 0 (then the image)
COMMIT = struct.Struct("<QII")  # txn, records, txn crc32c
SWITCH = struct.Struct("<II")  # next segno, 0
SEG = struct.Struct("<8sIQI")  # magic, segno, start lsn, crc32c
CTL = struct.Struct(
    "<8sQQQQII"
)  # magic, ckpt lsn, ckpt txn, committed lsn, committed txn, ckpt seg, crc
IMG = struct.Struct("<4sIQ")  # b"WALP", page, txn
T_PAGE = 1
T_COMMIT = 2
T_FILL = 3
T_SWITCH = 4
CTL_NAME, DATA_NAME = "wal.ctl", "data.db"


def _table() -> tuple[int, ...]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return tuple(out)


CRC_TABLE = _table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C (Castagnoli, reflected poly 0x82F63B78), table-driven."""
    table = CRC_TABLE
    crc = crc ^ 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _mark(kind: str, txn: int) -> None:
    (powercut.begin if kind == "begin" else powercut.ack)(txn)


# The mark hook: ("begin" | "ack", txn).  Tests replace it (real marks need a dm-log-writes device).
MARK: Callable[[str, int], None] = _mark
# The fault hooks (powercut.fault / powercut.recover); tests replace them too.
FAULT: Callable[..., None] = lambda kind, ranges: powercut.fault(kind, ranges)  # noqa: E731  (hooks)
RECOVER: Callable[[], None] = lambda: powercut.recover()  # noqa: E731


@dataclass(frozen=True, slots=True)
class Params:
    variant: str
    n: int
    group: int
    page_bytes: int
    npages: int
    segment_bytes: int
    checkpoint_every: int
    seed: int
    dir: str
    fault_at: int = 0
    on_error: str = "stop"

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        p = Params(**{k: given.get(k, v) for k, v in DEFAULTS.items()})
        bad = p.problem()
        if bad:
            raise ValueError(f"wal: {bad}")
        return p

    def problem(self) -> str:
        if self.variant not in VARIANTS:
            return f"variant must be one of {', '.join(VARIANTS)}, not {self.variant!r}"
        if self.n < 0 or self.group < 1 or self.npages < 1 or self.checkpoint_every < 0:
            return (
                f"n >= 0, group >= 1, npages >= 1 and checkpoint_every >= 0 (0: never) are required "
                f"(got n={self.n}, group={self.group}, npages={self.npages}, "
                f"checkpoint_every={self.checkpoint_every})"
            )
        if self.page_bytes % 512 or not 512 <= self.page_bytes <= 1 << 20:
            return f"page_bytes must be a multiple of 512 from 512 to 1 MiB, not {self.page_bytes}"
        if self.segment_bytes < BLOCK:
            return f"segment_bytes must be at least {BLOCK}, not {self.segment_bytes}"
        if self.on_error not in ON_ERROR or self.fault_at < 0:
            return f"on_error must be one of {', '.join(ON_ERROR)} and fault_at >= 0 (0: no fault)"
        if not self.dir or os.path.isabs(self.dir) or ".." in self.dir.split("/"):
            return f"dir must be a relative path inside the working directory, not {self.dir!r}"
        return ""

    @property
    def crc(self) -> bool:
        return self.variant != "no-crc"

    @property
    def sync_all_variant(self) -> bool:
        return self.variant == "commit-before-data"


def txn_pages(t: int, npages: int) -> list[int]:
    first = (t - 1) % npages
    second = (t - 1 + npages // 2) % npages
    return [first, second] if t % 3 == 0 and second != first else [first]


def image(seed: int, t: int, page: int, page_bytes: int) -> bytes:
    return IMG.pack(b"WALP", page, t) + random.Random(f"{seed}:{t}:{page}").randbytes(
        page_bytes - IMG.size
    )


def record(lsn: int, rtype: int, payload: bytes, with_crc: bool) -> bytes:
    crc = crc32c(REC.pack(len(payload), lsn, rtype, 0) + payload) if with_crc else 0
    return REC.pack(len(payload), lsn, rtype, crc) + payload + bytes(-(REC.size + len(payload)) % 8)


def rec_size(payload_len: int) -> int:
    return -(-(REC.size + payload_len) // 8) * 8


def txn_size(p: Params, t: int) -> int:
    return len(txn_pages(t, p.npages)) * rec_size(PAGE.size + p.page_bytes) + rec_size(COMMIT.size)


def groups(p: Params) -> list[range]:
    return [range(t, min(p.n, t + p.group - 1) + 1) for t in range(1, p.n + 1, p.group)]


def group_bytes(p: Params, group: range) -> int:
    """At most what a group appends, a SWITCH after it included (and the block-tail skips, or in
    commit-before-data one FILL per txn)."""
    fill = p.variant == "commit-before-data"
    return (
        sum(
            txn_size(p, t) + (BLOCK if fill else REC.size * (len(txn_pages(t, p.npages)) + 1))
            for t in group
        )
        + rec_size(SWITCH.size)
        + REC.size
    )


def segment_size(p: Params) -> int:
    """Every segment is preallocated with zeros (as PostgreSQL does) so that commits overwrite
    blocks in place and never change a file's size: segment_bytes, or more for the largest group."""
    need = SEG.size + max((group_bytes(p, g) for g in groups(p)), default=0)
    return -(-max(p.segment_bytes, need) // BLOCK) * BLOCK


def seg_name(segno: int) -> str:
    return f"{segno:08d}.seg"


def seg_header(segno: int, start: int) -> bytes:
    return SEG.pack(b"PCWALSEG", segno, start, crc32c(SEG.pack(b"PCWALSEG", segno, start, 0)[:-4]))


def control(ckpt_lsn: int, ckpt_txn: int, lsn: int, txn: int, ckpt_seg: int) -> bytes:
    body = CTL.pack(b"PCWALCTL", ckpt_lsn, ckpt_txn, lsn, txn, ckpt_seg, 0)[:-4]
    return body + struct.pack("<I", crc32c(body))


def _pwrite_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, pos)
        view, pos = view[done:], pos + done


def _create(path: str, data: bytes) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    _pwrite_all(fd, data, 0)
    return fd


class Writer:
    """The log writer's mutable state: the open segment, the pages, what is dirty since the last
    checkpoint."""

    def __init__(self, p: Params) -> None:
        self.p = p
        self.pages = [bytes(p.page_bytes)] * p.npages
        self.dirty: set[int] = set()
        self.segno = 1
        self.oldest = 1
        self.seg_start = 0
        self.off = SEG.size
        self.end_lsn, self.last = SEG.size, 0  # after the last commit record; the last txn written
        self.ckpt = (SEG.size, 0, 1)  # lsn, txn, segno
        os.mkdir(p.dir)
        self.fsync_dir(".", always=True)
        self.data_fd = _create(self.path(DATA_NAME), bytes(p.npages * p.page_bytes))
        self.seg_bytes = segment_size(p)
        self.seg_fd = self.new_segment()
        self.ctl_fd = _create(self.path(CTL_NAME), control(SEG.size, 0, SEG.size, 0, 1))
        for fd in (self.data_fd, self.seg_fd, self.ctl_fd):
            os.fsync(fd)
        self.fsync_dir(p.dir, always=True)

    def path(self, name: str) -> str:
        return os.path.join(self.p.dir, name)

    def new_segment(self) -> int:
        head = seg_header(self.segno, self.seg_start)
        return _create(self.path(seg_name(self.segno)), head + bytes(self.seg_bytes - len(head)))

    def close(self) -> None:
        for fd in (self.data_fd, self.seg_fd, self.ctl_fd):
            os.close(fd)

    @property
    def sync_all(self) -> bool:
        return self.p.variant == "commit-before-data"

    def fsync_dir(self, path: str, always: bool = False) -> None:
        if always or self.p.variant not in ("no-dir-fsync", "commit-before-data"):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def fsync_log(self, fd: int) -> None:
        if self.p.variant not in ("no-fsync", "commit-before-data"):
            os.fsync(fd)

    def lay(
        self, buf: bytearray, start: int, rtype: int, payload: bytes, crc: bool
    ) -> tuple[bytes, int]:
        """Append one record at self.off (skipping a block tail too short for a header) to buf,
        which starts at file offset ``start``; the record and the (possibly moved) start."""
        gap = BLOCK - self.off % BLOCK
        if gap < REC.size:
            self.off += gap
            if buf:
                buf += bytes(gap)
            else:
                start = self.off
        rec = record(self.seg_start + self.off, rtype, payload, crc)
        buf += rec
        self.off += len(rec)
        return rec, start

    def write_txn(self, t: int) -> None:
        """One pwrite: the txn's PAGE records, its COMMIT, and in commit-before-data a FILL to the
        block's end when the next txn would not fit in what is left of it."""
        p = self.p
        buf = bytearray()
        start = self.off
        recs = []
        for page in txn_pages(t, p.npages):
            img = image(p.seed, t, page, p.page_bytes)
            rec, start = self.lay(buf, start, T_PAGE, PAGE.pack(t, page, 0) + img, p.crc)
            recs.append(rec)
            self.pages[page] = img
            self.dirty.add(page)
        txn_crc = crc32c(b"".join(recs)) if p.crc and not self.sync_all else 0
        _rec, start = self.lay(buf, start, T_COMMIT, COMMIT.pack(t, len(recs), txn_crc), p.crc)
        self.end_lsn, self.last = self.seg_start + self.off, t
        gap = BLOCK - self.off % BLOCK
        if (
            self.sync_all
            and gap >= REC.size
            and txn_size(p, t + 1) > gap
            and txn_size(p, t + 1) <= BLOCK - SEG.size
        ):
            self.lay(buf, start, T_FILL, bytes(gap - REC.size), p.crc)
        _pwrite_all(self.seg_fd, bytes(buf), start)

    def rotate(self) -> None:
        """Close the segment with a SWITCH record and open the next one."""
        buf = bytearray()
        _rec, start = self.lay(buf, self.off, T_SWITCH, SWITCH.pack(self.segno + 1, 0), self.p.crc)
        _pwrite_all(self.seg_fd, bytes(buf), start)
        self.fsync_log(self.seg_fd)
        os.close(self.seg_fd)
        self.segno, self.seg_start = self.segno + 1, self.seg_start + self.off
        self.seg_fd = self.new_segment()
        self.off = SEG.size
        self.fsync_log(self.seg_fd)
        self.fsync_dir(self.p.dir)
        if self.sync_all:
            os.sync()  # the new segment exists before a commit point can lie in it

    def commit(self) -> None:
        """Make the group written since the last commit durable."""
        if self.sync_all:
            _pwrite_all(
                self.ctl_fd, control(*self.ckpt[:2], self.end_lsn, self.last, self.ckpt[2]), 0
            )
            os.sync()
        else:
            self.fsync_log(self.seg_fd)

    def commit_through_error(self, sectors: list[tuple[int, int]]) -> bool:
        """The commit of the group holding txn ``fault_at``: the segment's sectors fail (an injected
        EIO, core/log/faultwindows.py) before its fsync.  ``retry`` fsyncs again once the device is back and
        acks -- the fsyncgate bug: the kernel marked the failed pages clean, so the second fsync
        reports success for data that never reached the disk.  ``stop`` acks nothing more (what
        PostgreSQL does since 2018: PANIC, then recovery from its own log).  True: ack the group."""
        FAULT("eio-range", sectors)
        try:
            self.fsync_log(self.seg_fd)
            RECOVER()
            return True
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            RECOVER()
        if self.p.on_error == "retry":
            self.fsync_log(self.seg_fd)
            return True
        return False

    def checkpoint(self) -> None:
        p = self.p
        for page in sorted(self.dirty):
            _pwrite_all(self.data_fd, self.pages[page], page * p.page_bytes)
        if p.variant != "checkpoint-early":
            self.durable(self.data_fd)
        self.ckpt = (self.end_lsn, self.last, self.segno)
        _pwrite_all(
            self.ctl_fd, control(self.end_lsn, self.last, self.end_lsn, self.last, self.segno), 0
        )
        self.durable(self.ctl_fd)
        for segno in range(self.oldest, self.segno):
            os.unlink(self.path(seg_name(segno)))
        self.oldest = self.segno
        if self.sync_all:
            os.sync()
        else:
            self.fsync_dir(p.dir)
        if p.variant == "checkpoint-early":
            self.durable(self.data_fd)
        self.dirty.clear()

    def durable(self, fd: int) -> None:
        if self.sync_all:
            os.sync()
        else:
            os.fsync(fd)


def main(params: dict[str, Any]) -> int:
    p = Params.of(params)
    w = Writer(p)
    try:
        since = 0
        for group in groups(p):
            if w.off + group_bytes(p, group) > w.seg_bytes:
                w.rotate()
            faulty = p.fault_at in group and not p.sync_all_variant
            # the segment's sectors, asked before its writes (the segment is preallocated and fsynced)
            sectors = powercut.file_sectors(w.path(seg_name(w.segno))) if faulty else []
            for u in group:
                MARK("begin", u)
                w.write_txn(u)
            if faulty:
                if not w.commit_through_error(sectors):
                    print(
                        f"wal: fsync of segment {w.segno} failed (EIO) for txns {list(group)}: stopping without "
                        "acking them",
                        file=sys.stderr,
                    )
                    return 3
            else:
                w.commit()
            for u in group:
                MARK("ack", u)
            since += len(group)
            if p.checkpoint_every and since >= p.checkpoint_every:
                w.checkpoint()
                since = 0
    finally:
        w.close()
    return 0


WORKLOAD = Workload(
    name="wal",
    description="a write-ahead log: full page images with LSN and CRC32C, group commit, checkpoints into a "
    "fixed-page data file, segment rotation; variants " + ", ".join(VARIANTS),
    main=main,
    defaults=dict(DEFAULTS),
    choices={"variant": VARIANTS, "on_error": ON_ERROR},
    minimum={"n": 1, "group": 1, "page_bytes": 1, "npages": 1, "segment_bytes": 1},
)

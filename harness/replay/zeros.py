"""The log's all-zero writes (pure over a log index; host): ``mkfs -E lazy_itable_init=0`` zeroes a
new ext4's inode tables and journal -- 25 of mkfs's 25.6 MB on a 256 MiB disk -- and a walk that
starts from a zeroed image need not read those writes where nothing else was written first.  A
checker VM under TCG spent ~2.3 s before its first state reading them over 9p and writing them; the
host, where the log is local, finds them (``zero_writes``) and the job carries them
(vm/guestjob.StateSource.zeros) to replay/materialize's writer, which tracks what it wrote
(``Written``)."""

from __future__ import annotations

import bisect

from powercut.core.log.dmlog import LogIndex

__all__ = ["Written", "ZeroRuns", "zero_writes"]

ZeroRuns = tuple[tuple[int, int], ...]  # [lo, hi) runs of entry indices


def zero_writes(index: LogIndex, upto: int | None = None) -> ZeroRuns:
    """The writes among the first ``upto`` entries (default: up to the log's first mark, ``mkfs``'s
    writes) whose data is all zeros, as runs of entry indices: a walk from a zeroed image need not
    read them where nothing was written before (mkfs -E lazy_itable_init=0 zeroes the inode tables
    and the journal: 25 of mkfs's 25.6 MB on a 256 MiB ext4, which a TCG checker VM read over 9p
    and wrote for ~2.3 s before its first state)."""
    entries = index.entries
    if upto is None:
        upto = next((e.index for e in entries if e.is_mark), len(entries))
    out: list[tuple[int, int]] = []
    for e in entries[:upto]:
        if not (e.is_write and e.nr_sectors and e.changes_device):
            continue
        data = index.data(e)
        if data != bytes(len(data)):
            continue
        if out and out[-1][1] == e.index:
            out[-1] = (out[-1][0], e.index + 1)
        else:
            out.append((e.index, e.index + 1))
    return tuple(out)


class Written:
    """The byte ranges written so far, disjoint and sorted (a zeroed image's non-zero parts)."""

    def __init__(self) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []

    def overlaps(self, lo: int, hi: int) -> bool:
        k = bisect.bisect_right(self.lo, lo) - 1
        return (k >= 0 and self.hi[k] > lo) or (k + 1 < len(self.lo) and self.lo[k + 1] < hi)

    def add(self, lo: int, hi: int) -> None:
        a = bisect.bisect_left(self.hi, lo)  # the first range ending at or after lo
        b = bisect.bisect_right(self.lo, hi)  # past the last range starting at or before hi
        if a < b:
            lo, hi = min(lo, self.lo[a]), max(hi, self.hi[b - 1])
        self.lo[a:b], self.hi[a:b] = [lo], [hi]

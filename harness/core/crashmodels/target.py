"""The lying-disk models' targets as a value (pure; host and guest): ``LieTarget``, where the
program's files lie on the device (the recording's file map, guest/record.file_map), in the log's
sectors.  Given to a CrashSpace when it is made (campaign/run.py); the per-write lying-disk models
(core/crashmodels/lies.py) pick writes and sectors inside it first, or only (``only``: ``--lie-file``)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LieTarget:
    """Sorted, disjoint sector ranges [``starts[k]``, ``ends[k]``) of the program's files, in the
    log's sectors; ``only``: lie about those blocks alone (writes that touch none are no target, a
    corrupt or unreadable sector is theirs).  The empty target (``NO_TARGET``) prefers nothing."""

    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    only: bool = False

    @classmethod
    def of(
        cls,
        extents: Iterable[tuple[int, int]],
        sectorsize: int,
        sector_bytes: int = 512,
        *,
        only: bool = False,
    ) -> LieTarget:
        """The target of the file-map ``extents`` (first sector, count; in ``sector_bytes``) on a
        log of ``sectorsize``-byte sectors: each extent widened to whole log sectors, overlapping or
        touching ones merged."""
        ivs = sorted(
            (a * sector_bytes // sectorsize, -(-(a + n) * sector_bytes // sectorsize))
            for a, n in extents
            if n > 0
        )
        merged: list[list[int]] = []
        for lo, hi in ivs:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        return cls(tuple(lo for lo, _ in merged), tuple(hi for _, hi in merged), only)

    def touches(self, lo: int, hi: int) -> bool:
        """Sectors [lo, hi) touch the program's files."""
        k = bisect.bisect_right(self.starts, hi - 1) - 1
        return k >= 0 and self.ends[k] > lo


NO_TARGET = LieTarget()

"""The misdirected-write model (pure; host and guest): ``misdirected-write@C/wE:sT`` -- write E's
data landed at device sector T instead of its own (its own sectors keep the old data).  T is the
sector of the nearest earlier write of the same size (after the floor), and of the nearest later one
before the cut, whose sectors E does not overlap: a program's own block of the same size, where a
misplaced block looks valid.  A misdirected write never reaches a block the log never wrote, nor a
block of another size or alignment (core/crashmodels/lies.py)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.crashmodels.lies import NUM, PerWriteLie, floor_of, lie_state, reach
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.log.dmlog import Entry
from powercut.core.states.crashstate import CrashState, Lie
from powercut.errors import UsageError


@dataclass(frozen=True, slots=True)
class _Log:
    """What the destinations of every write need: the writes of each size after the floor (in log
    order) and how far the log's writes reach."""

    by_size: dict[int, list[int]]
    reach: int


@dataclass(frozen=True)
class MisdirectedWrite(PerWriteLie):
    """One write of a commit landed at the sector of another write of its size."""

    def prepare(self, sp: SpaceTables) -> _Log:
        by_size: dict[int, list[int]] = {}
        for e in sp.entries[floor_of(sp) :]:
            if e.is_write:
                by_size.setdefault(e.nr_sectors, []).append(e.index)
        return _Log(by_size, reach(sp))

    def aims_at_whole_write(self, sp: SpaceTables, e: Entry) -> bool:
        return sp.lie_target.touches(e.sector, e.sector + e.nr_sectors)

    def candidates(
        self,
        sp: SpaceTables,
        seed: int,
        w: int,
        cut: int,
        live: list[int],
        mine: list[int],
        cover: Any,
        context: Any,
    ) -> tuple[list[tuple[int, Any]], int]:
        """(w, T) for each destination T where the misplaced copy or the loss still shows at the cut."""
        e = sp.entries[w]
        out: list[tuple[int, Any]] = []
        for t in destinations(
            sp.entries, context.by_size.get(e.nr_sectors, []), w, cut, context.reach
        ):
            if live or cover.holes(t, t + e.nr_sectors):
                out.append((w, t))
        return out, 0

    def make(self, sp: SpaceTables, cut: int, w: int, x: Any, seed: int) -> CrashState:
        return lie_state(
            sp, self.name, cut, f"w{w}:s{x}", (w,), Lie("misdirect", w, x, (), sp.sectorsize)
        )

    def rebuild_write(
        self, sp: SpaceTables, whole: str, cut: int, w: int, m: re.Match[str]
    ) -> CrashState:
        e = sp.entries[w]
        x = int(m.group(2))
        if not (
            x + e.nr_sectors <= e.sector or e.sector + e.nr_sectors <= x
        ) or x + e.nr_sectors > reach(sp):
            raise UsageError(
                f"state id {whole!r}: sector {x} overlaps the write's own sectors or lies past the "
                f"sectors the log wrote"
            )
        return self.make(sp, cut, w, x, 0)


def destinations(es: Sequence[Entry], same: list[int], w: int, cut: int, reach: int) -> list[int]:
    """Where write w may be misdirected: the sector of the nearest earlier write of its size (after the
    floor) and of the nearest later one before the cut, each not overlapping w."""
    e = es[w]
    out = []
    k = bisect.bisect_left(same, w)
    for step, stop in ((-1, -1), (1, len(same))):
        for j in range(k + step, stop, step):
            o = es[same[j]]
            if step > 0 and o.index >= cut:
                break
            if (
                o.sector + o.nr_sectors <= e.sector or e.sector + e.nr_sectors <= o.sector
            ) and o.sector + e.nr_sectors <= reach:
                out.append(o.sector)
                break
    return sorted(set(out))


MISDIRECTED_WRITE = MisdirectedWrite(
    "misdirected-write",
    pattern=re.compile(rf"w({NUM}):s({NUM})"),
    form="wENTRY:sSECTOR",
    per_write=True,
)

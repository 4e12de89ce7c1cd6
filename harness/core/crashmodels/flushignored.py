"""The flush-ignored model (pure; host and guest): ``flush-ignored@C/SUBSET`` (SUBSET as
write-cache's: ``d``, ``k`` ranges or ``rSEED.N``) -- the disk acked the last barrier FLUSH before C
(and FUA writes) without emptying its cache: every data entry from the barrier before that one up to
C may be lost (write-cache subsets across that barrier), at write-cache's cut points; only states no
honest write-cache state equals are generated (the others lose nothing a flush promised).  It
enumerates like write-cache (``exhaustive_bound``, structured picks, ``samples`` seeded)
(core/crashmodels/lies.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from powercut.core.crashmodels.base import Bounds
from powercut.core.crashmodels.lies import NUM, RANGES, LieModel, floor_of, lie_state
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.coverage import SPACE_CAP, Tally
from powercut.core.states.crashstate import CrashState
from powercut.core.states.idparts import (
    format_id,
    format_ranges,
    parse_ranges,
    pick_bits,
    shake_bits,
    subset_picks,
)
from powercut.errors import UsageError


def ignored_pool(sp: SpaceTables, cut: int) -> tuple[int, ...]:
    """What a disk that ignored the last barrier before ``cut`` may lose there: every data entry from
    the barrier before it (FUA writes too); () when the cut has no barrier before it."""
    f = sp.last_flush[cut]
    if f < 0:
        return ()
    return tuple(i for i in range(max(sp.last_flush[f], 0), cut) if sp.is_data[i])


def canon(sp: SpaceTables, cut: int, dropped: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """The smallest equivalent (cut, dropped) (``SpaceTables.canon``), also past key marks that add
    no key (a repeated ack): same durable data, same keys."""
    c, d = sp.canon(cut, dropped)
    while c > 0 and sp.is_key[c - 1] and sp.key_version[c - 1] == sp.key_version[c]:
        c, d = sp.canon(c - 1, d)
    return c, d


def fi_sample(pool: Sequence[int], seed: int, cut: int, n: int) -> tuple[int, ...]:
    """``flush-ignored@cut/r{seed}.{n}``: the lost entries."""
    return pick_bits(pool, shake_bits(f"powercut/flush-ignored/{seed}/{cut}/{n}", len(pool)))


@dataclass(frozen=True)
class FlushIgnored(LieModel):
    """Subsets across the last barrier that no honest write-cache state equals."""

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        seed = bounds.seed
        bound = bounds.exhaustive_bound
        samples = bounds.samples
        floor = floor_of(sp)
        seen: dict[tuple[int, tuple[int, ...]], None] = {}
        version = -1
        for cut in sp.cut_points():
            pool = ignored_pool(sp, cut)
            if not pool or pool[-1] < floor:
                continue
            if sp.key_version[cut] != version:  # states of different key versions never coincide
                seen = {}
                version = sp.key_version[cut]
            honest = set(sp.droppable(cut))
            out: list[CrashState] = []

            def add(
                dropped: tuple[int, ...],
                sid: str | None = None,
                cut: int = cut,
                honest: set[int] = honest,
                pool: tuple[int, ...] = pool,
                out: list[CrashState] = out,
                seen: dict[tuple[int, tuple[int, ...]], None] = seen,
            ) -> int:
                if not set(dropped) - honest:
                    return 0
                key = canon(sp, cut, dropped)
                if key in seen or not set(key[1]) - set(
                    sp.droppable(key[0])
                ):  # the same as an honest state
                    return 0
                seen[key] = None
                spec = sid or format_id(self.name, cut, dropped, (), pool).partition("/")[2]
                out.append(lie_state(sp, self.name, cut, spec, dropped, None))
                return 1

            added = 0
            if len(pool) <= bound:
                lies = (1 << len(pool)) - (
                    1 << len(set(pool) & honest)
                )  # the subsets that drop a kept entry
                for mask in range(1 << len(pool)):
                    added += add(pick_bits(pool, mask))
                tally.window(lies, added, sampled=False, setup=version == 0)
            else:
                for dropped in subset_picks(pool):
                    added += add(dropped)
                for j in range(samples):
                    added += add(fi_sample(pool, seed, cut, j), f"r{seed}.{j}")
                space = (
                    (1 << len(pool)) - (1 << len(set(pool) & honest))
                    if len(pool) < 62
                    else SPACE_CAP
                )
                tally.window(space, added, sampled=True, setup=version == 0)
            yield from sorted(out, key=lambda s: s.id)

    def rebuild(self, sp: SpaceTables, whole: str, cut: int, m: re.Match[str]) -> CrashState:
        pool = ignored_pool(sp, cut)
        if not pool:
            raise UsageError(f"state id {whole!r}: no barrier FLUSH before cut {cut} to ignore")
        if m.group(3) is not None:
            seed = int(m.group(3))
            n = int(m.group(4))
            dropped = fi_sample(pool, seed, cut, n)
            spec = f"r{seed}.{n}"
        else:
            listed = parse_ranges(
                m.group(1) or m.group(2) or "", pool[-1] + 1, f"state id {whole!r}: entries"
            )
            bad = set(listed) - set(pool)
            if bad:
                raise UsageError(
                    f"state id {whole!r}: entries {format_ranges(sorted(bad))} cannot be lost at cut {cut}"
                )
            dropped = (
                listed if m.group(1) is not None else tuple(i for i in pool if i not in set(listed))
            )
            spec = format_id(self.name, cut, dropped, (), pool).partition("/")[2]
        c, d = canon(sp, cut, dropped)
        if not set(d) - set(sp.droppable(c)):
            raise UsageError(
                f"state id {whole!r}: loses only what an honest write cache may lose "
                f"(a write-cache state, not a lie)"
            )
        return lie_state(sp, self.name, cut, spec, dropped, None)


FLUSH_IGNORED = FlushIgnored(
    "flush-ignored",
    pattern=re.compile(rf"d({RANGES})|k((?:{RANGES})?)|r({NUM})\.({NUM})"),
    form="dRANGES|kRANGES|rSEED.N",
)

"""The write-cache model (pure; host and guest): a disk with its write cache on (``hdparm -W1``).
For cut c let f be the last barrier FLUSH before c: durable are every data entry before f, f's own
data only if f is also FUA, every FUA entry in (f, c); any subset of the other data entries of
[f, c) (``SpaceTables.droppable``) may be lost.  Cuts: the write-cache cut points
(``SpaceTables.cut_points``; why they cover every cut: core/states/models.py).  With k droppable entries:
all 2**k subsets if k <= ``exhaustive_bound``, else the structured picks (keep all, drop all, drop
each, keep each) and ``samples`` seeded ones (``write-cache@CUT/rSEED.N``; a set-up window, before
the first key mark: ``Bounds.setup_samples`` if set)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from powercut.core.crashmodels.base import Bounds, CrashModel
from powercut.core.crashmodels.batch import Batch, by_cut, pow2
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState
from powercut.core.states.idparts import pick_bits, subset_picks, wc_sample


@dataclass(frozen=True)
class WriteCache(CrashModel):
    """Subsets of each cut point's droppable entries."""

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        return by_cut(sp, self, sp.cut_points(), lambda b: fill_subsets(b, bounds, tally))


def fill_subsets(b: Batch, bounds: Bounds, tally: Tally) -> None:
    """One window: every subset of the cut's droppable entries, or picks and seeded samples (sampled)."""
    pool = b.droppable
    cut = b.cut
    setup = b.sp.key_version[cut] == 0
    added = 0
    if len(pool) <= bounds.exhaustive_bound:
        for mask in range(1 << len(pool)):
            added += b.add(pick_bits(pool, mask))
        tally.window(1 << len(pool), added, sampled=False, setup=setup)
        return
    for dropped in subset_picks(pool):
        added += b.add(dropped)
    got = 0
    j = 0
    samples = bounds.samples_of(setup)
    while got < samples and j < 4 * samples + 16:
        got += b.add(
            wc_sample(pool, bounds.seed, cut, j), (), f"write-cache@{cut}/r{bounds.seed}.{j}"
        )
        j += 1
    tally.window(pow2(len(pool)), added + got, sampled=True, setup=setup)


WRITE_CACHE = WriteCache("write-cache", id_part="subset")

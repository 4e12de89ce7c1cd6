"""The torn models (pure; host and guest): a multi-unit write persisted only partly.  ``torn``
tears at 512-byte log sectors (a 512n disk: it can tear inside a 4 KiB block, e.g. ext4's 1 KiB
superblock); ``torn-4k`` between device-aligned 4 KiB units (4Kn and 512e disks, most SSDs, which
write those atomically; what the matrix uses).

(1) Every write w of several units, cut right after it, all before it kept, w persisted at a proper
subset of its units: first half, second half, all but the last, only the first, ``torn_samples``
seeded (every proper subset if no more).  (2) At every write-cache cut point, each droppable write
of several units with its first half persisted and the other droppable entries all kept, or all
lost; blind spot (b)'s picks (core/states/models.py); ``torn_samples`` seeded picks of (write, units, lost
subset).  States with the same durable data (torn sectors included) and key marks before the cut
are one (the earlier cut wins).  Order: cut, id."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from powercut.core.crashmodels.base import Bounds, CrashModel, lost_refusal
from powercut.core.crashmodels.batch import Batch, by_cut, pow2
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.log.dmlog import Entry
from powercut.core.states.coverage import SPACE_CAP, Tally
from powercut.core.states.crashstate import CrashState, Torn, sector_units, unit_count, unit_sectors
from powercut.core.states.idparts import (
    Pick,
    StateId,
    not_under,
    resolve,
    seeded_index,
    tear_picks,
    torn_sample,
    tw_sample,
)
from powercut.errors import UsageError


@dataclass(frozen=True)
class TornModel(CrashModel):
    """A torn model; ``unit_bytes`` its atomic unit (0: a log sector)."""

    def per(self, sp: SpaceTables) -> int:
        """Sectors per atomic unit."""
        return max(1, (self.unit_bytes or 0) // sp.sectorsize)

    def tearable(self, sp: SpaceTables, e: Entry) -> bool:
        """A write of several units."""
        return e.is_write and unit_count(e, self.per(sp)) > 1

    def units(self, sp: SpaceTables, e: Entry) -> int:
        return unit_count(e, self.per(sp))

    def expand(self, sp: SpaceTables, e: Entry, units: Iterable[int]) -> tuple[int, ...]:
        """The sector offsets (in e) of the given units."""
        return unit_sectors(e, self.per(sp), tuple(units), sp.offsets(e.nr_sectors))

    def state(
        self,
        sp: SpaceTables,
        cut: int,
        dropped: tuple[int, ...] = (),
        torn: Torn = (),
        sid: str | None = None,
        droppable: Sequence[int] | None = None,
    ) -> CrashState:
        return sp.state(self.name, cut, dropped, torn, sid, droppable, self.per(sp))

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        alone = {i + 1 for i, e in enumerate(sp.entries) if self.tearable(sp, e)}
        combined = set(sp.cut_points())
        return by_cut(
            sp,
            self,
            sorted(alone | combined),
            lambda b: self._fill_alone(b, bounds.seed, bounds.torn_samples, tally),
            lambda b: self._fill_combined(b, bounds.seed, bounds.torn_samples, combined, tally),
        )

    def refusal(self, sp: SpaceTables, cut: int, drop: tuple[int, ...], tears: Torn) -> str | None:
        """One torn write: a write of several units before the cut, torn at a proper subset of whole
        units; from the cut's epoch when combined with lost entries or not the last entry."""
        if len(tears) != 1:
            return "a torn state tears exactly one write"
        ((t, sectors),) = tears
        e = sp.entries[t] if 0 <= t < cut else None
        if e is None or not self.tearable(sp, e):
            return f"entry {t} is not a write of several {'sectors' if self.per(sp) == 1 else 'units'} before cut {cut}"
        if (t != cut - 1 or drop) and t not in sp.droppable(
            cut
        ):  # combined with the write cache: from the epoch
            return (
                f"entry {t} cannot be torn with lost entries or before entry {cut - 1} at cut {cut}: "
                f"it is FUA or before the last flush"
            )
        if (
            not sectors
            or len(sectors) >= e.nr_sectors
            or sectors[0] < 0
            or sectors[-1] >= e.nr_sectors
        ):
            return f"torn sectors must be a proper non-empty subset of 0..{e.nr_sectors - 1}"
        if sector_units(e, self.per(sp), sectors) is None:
            return f"{self.name} tears between {self.unit_bytes}-byte units, not inside one"
        return lost_refusal(sp, cut, drop, t)

    def from_id(self, sp: SpaceTables, sid: StateId, state_id: str) -> CrashState:
        """The power-loss grammar with the tear in this model's units."""
        if not 1 <= sid.cut <= sp.n:
            raise UsageError(f"state id {state_id!r}: cut {sid.cut} out of range 1..{sp.n}")
        es = sp.entries
        lost, torn = resolve(
            sid,
            sp.droppable(sid.cut) if sid.subset else (),
            lambda i: self.units(sp, es[i]) if i < sid.cut and self.tearable(sp, es[i]) else 0,
        )
        torn = tuple((t, self.expand(sp, es[t], u)) for t, u in torn)
        state = self.build(sp, sid.cut, lost, torn)
        return dataclasses.replace(state, id=sid.text()) if sid.seeded else state

    # -- the windows -------------------------------------------------------------------------------
    def _fill_alone(self, b: Batch, seed: int, torn_samples: int, tally: Tally) -> None:
        """One window: the tears of the write before the cut; sampled unless every one was tried."""
        i = b.cut - 1
        sp = b.sp
        e = sp.entries[i]
        if not self.tearable(sp, e):
            return
        m = self.units(sp, e)
        picks = dict.fromkeys(tear_picks(m, torn_samples))
        added = 0
        for p in picks:
            added += b.add((), ((i, self.expand(sp, e, p)),))
        j = 0
        got = 0
        while len(picks) < (1 << m) - 2 and got < torn_samples and j < 4 * torn_samples + 16:
            p = torn_sample(m, seed, b.cut, j)
            if p not in picks:
                picks[p] = None
                added += b.add(
                    (), ((i, self.expand(sp, e, p)),), f"{self.name}@{b.cut}/r{seed}.{j}"
                )
                got += 1
            j += 1
        space = pow2(m) - 2
        tally.window(space, added, sampled=len(picks) < space, setup=sp.key_version[b.cut] == 0)

    def _fill_combined(
        self, b: Batch, seed: int, torn_samples: int, cuts: set[int], tally: Tally
    ) -> None:
        """One window: (tearable write, tear, lost others) of a cut; sampled unless every one was tried."""
        if b.cut not in cuts:
            return
        sp = b.sp
        cut = b.cut
        pool = b.droppable
        es = sp.entries
        tearable = [t for t in pool if self.tearable(sp, es[t])]
        if not tearable:
            return
        fua = [u for u in es[max(sp.last_flush[cut], 0) : cut] if u.is_fua and u.is_write]
        picks: list[
            tuple[tuple[int, ...], int, tuple[int, ...], str | None]
        ] = []  # (lost, torn write, tear, id)
        for t in tearable:
            half = self.expand(sp, es[t], range(self.units(sp, es[t]) // 2))
            picks += [((), t, half, None), (tuple(i for i in pool if i != t), t, half, None)]
            picks += [
                ((), t, x, None)
                for x in under_fua(sp, t, fua)
                if sector_units(es[t], self.per(sp), x) is not None
            ]
        for j in range(torn_samples):  # duplicates of earlier picks are not retried
            t = tearable[seeded_index(len(tearable), seed, cut, j)]
            r = Pick("r", "", seed, j)
            picks.append(
                (
                    tw_sample([i for i in pool if i != t], seed, cut, t, j),
                    t,
                    self.expand(sp, es[t], torn_sample(self.units(sp, es[t]), seed, t + 1, j)),
                    StateId(self.name, cut, r, r, t).text(),
                )
            )
        added = sum(b.add(lost, ((t, tear),), sid) for lost, t, tear, sid in picks)
        space = min(
            SPACE_CAP,
            sum((pow2(self.units(sp, es[t])) - 2) * pow2(len(pool) - 1) for t in tearable),
        )
        tally.window(
            space,
            added,
            sampled=len({p[:3] for p in picks}) < space,
            setup=sp.key_version[cut] == 0,
        )


def under_fua(sp: SpaceTables, t: int, fua: Sequence[Entry]) -> Iterator[tuple[int, ...]]:
    """Blind spot (b): for each FUA write U of the window (``fua``) logged before write t and
    overlapping it, the sectors of t that persist if U reached the disk after t (all but those
    where U's data would be on top)."""
    w = sp.entries[t]
    hits = [
        u
        for u in fua
        if u.index < t and u.sector < w.sector + w.nr_sectors and w.sector < u.sector + u.nr_sectors
    ]
    for u in hits:
        later = [(x.sector, x.nr_sectors) for x in sp.entries[u.index + 1 : t] if x.changes_device]
        keep = not_under(w.sector, w.nr_sectors, (u.sector, u.nr_sectors), later)
        if keep:
            yield keep


TORN = TornModel("torn", unit_bytes=0, id_part="tear")
TORN_4K = TornModel("torn-4k", unit_bytes=4096, id_part="tear")

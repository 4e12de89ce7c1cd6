"""What a crash model is (pure; host and guest): ``CrashModel``, the object each model family module
declares and core/crashmodels/registry.py lists once -- its name, whether it is a lying-disk model,
the atomic unit it tears between (torn models), whether its states are prefixes, how it enumerates
a log's states, how it rebuilds one from an id and which states it refuses to produce.
``Bounds``: the limits of one enumeration (seed, exhaustive bound, samples, torn samples)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState, Torn
from powercut.core.states.idparts import StateId, format_ranges, resolve
from powercut.errors import UsageError

IdPart = Literal["none", "subset", "tear", "lie", "own"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """The limits of one enumeration, checked by CrashSpace.iter_states: ``seed`` of every seeded
    pick, ``exhaustive_bound`` (every subset of a window up to that many droppable entries),
    ``samples`` seeded subsets or targets beyond it, ``torn_samples`` seeded tears per torn write,
    ``setup_samples`` a set-up window's seeded subsets beyond it (None: ``samples``)."""

    seed: int = 0
    exhaustive_bound: int = 10
    samples: int = 64
    torn_samples: int = 4
    setup_samples: int | None = None

    def samples_of(self, setup: bool) -> int:
        """The seeded samples of a window beyond the bound: a set-up window's own, if set."""
        return self.setup_samples if setup and self.setup_samples is not None else self.samples


@dataclass(frozen=True)
class CrashModel:
    """One crash model.  A family module subclasses it (the enumeration, and what differs from the
    write-cache rule of ``refusal``) and declares one instance per model.

    ``lie``: a lying-disk model (core/crashmodels/lies.py) rather than power loss on an honest disk.
    ``unit_bytes``: a torn model's atomic unit in bytes (0: a log sector); None for a model that
    tears no write.  ``prefix``: every state keeps everything before its cut (drops and tears
    nothing; shrink bisects its cuts).  ``id_part``: the ``/`` part of its ids (core/states/stateid.py):
    none, a write-cache subset, a tear (alone or combined with a subset), a lie's own text, or the
    model's own text (``own``: its ``from_id`` parses it).  ``hypothetical``: not a state a disk
    can produce (what-if states, core/crashmodels/whatif.py): registered so that its ids rebuild,
    never enumerated, selected or counted (not in any of the registry's model lists)."""

    name: str
    lie: bool = False
    unit_bytes: int | None = None
    prefix: bool = False
    id_part: IdPart = "subset"
    hypothetical: bool = False

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        """The model's states of ``sp``, ordered by cut then id, without duplicates; deterministic
        per seed.  ``tally`` gets every window enumerated (coverage.Tally.window)."""
        raise NotImplementedError(f"crash model {self.name} enumerates no states")

    def refusal(self, sp: SpaceTables, cut: int, drop: tuple[int, ...], tears: Torn) -> str | None:
        """Why the model cannot produce this state (``drop`` sorted, ``tears`` in sectors); None if
        it can.  The default is the write-cache rule: no torn write, lost entries droppable at the cut."""
        return tears_nothing(self.name, tears) or lost_refusal(sp, cut, drop)

    def build(
        self,
        sp: SpaceTables,
        cut: int,
        dropped: Sequence[int] = (),
        torn: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> CrashState:
        """Build and validate one state (CrashSpace.make_state); UsageError if the model cannot
        produce it from this log."""
        if not 1 <= cut <= sp.n:
            raise UsageError(f"cut {cut} out of range 1..{sp.n} for a log of {sp.n} entries")
        drop = tuple(sorted(set(dropped)))
        tears = tuple((int(i), tuple(sorted(set(s)))) for i, s in torn)
        why = self.refusal(sp, cut, drop, tears)
        if why:
            raise UsageError(why)
        return self.state(sp, cut, drop, tears)

    def state(
        self,
        sp: SpaceTables,
        cut: int,
        dropped: tuple[int, ...] = (),
        torn: Torn = (),
        sid: str | None = None,
        droppable: Sequence[int] | None = None,
    ) -> CrashState:
        """A state of this model from checked parts (SpaceTables.state)."""
        return sp.state(self.name, cut, dropped, torn, sid, droppable)

    def from_id(self, sp: SpaceTables, sid: StateId, state_id: str) -> CrashState:
        """Rebuild the state ``sid`` (parsed from ``state_id``) names; UsageError if it does not fit.
        The default reads the power-loss grammar (subset, tear) with ``resolve``."""
        if not 1 <= sid.cut <= sp.n:
            raise UsageError(f"state id {state_id!r}: cut {sid.cut} out of range 1..{sp.n}")
        lost, torn = resolve(sid, sp.droppable(sid.cut) if sid.subset else (), lambda i: 0)
        state = self.build(sp, sid.cut, lost, torn)
        return dataclasses.replace(state, id=sid.text()) if sid.seeded else state


def tears_nothing(model: str, tears: Torn) -> str | None:
    """The refusal of a model that tears no write, if ``tears`` holds one."""
    return f"model {model} tears no writes" if tears else None


def lost_refusal(
    sp: SpaceTables, cut: int, drop: tuple[int, ...], torn: int | None = None
) -> str | None:
    """The refusal for lost entries (``drop``) that cannot be lost at the cut: not droppable there,
    or the ``torn`` write itself."""
    bad = set(drop) - set(sp.droppable(cut))
    if torn is not None:
        bad |= set(drop) & {torn}
    if not bad:
        return None
    return (
        f"entries {format_ranges(sorted(bad))} cannot be lost at cut {cut} (FUA, before the last flush, "
        f"no data, past the cut, or the torn write)"
    )

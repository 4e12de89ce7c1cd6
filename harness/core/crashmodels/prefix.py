"""The prefix models (pure; host and guest): ``no-cache`` -- a disk with its write cache off
(``hdparm -W0``): every completed write is durable, a state is every prefix, cut = 1..n, nothing
dropped -- and ``flush``, the cheap preset: the prefixes that end right after a barrier FLUSH, a FUA
entry or a key mark (what fstests generic/482 does)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from powercut.core.crashmodels.base import Bounds, CrashModel, tears_nothing
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState, Torn


@dataclass(frozen=True)
class NoCache(CrashModel):
    """Every prefix of the log."""

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        return (self.state(sp, c) for c in range(1, sp.n + 1))

    def refusal(self, sp: SpaceTables, cut: int, drop: tuple[int, ...], tears: Torn) -> str | None:
        """A prefix model drops no entries and tears no writes."""
        if drop:
            return f"model {self.name} drops no entries"
        return tears_nothing(self.name, tears)


@dataclass(frozen=True)
class Flush(NoCache):
    """The prefixes that end right after a barrier FLUSH, a FUA entry or a key mark."""

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        return (self.state(sp, i + 1) for i in range(sp.n) if sp.is_flush_cut(i))

    def refusal(self, sp: SpaceTables, cut: int, drop: tuple[int, ...], tears: Torn) -> str | None:
        """A prefix model's refusal, and a cut that is not right after a FLUSH, FUA or key mark."""
        why = super().refusal(sp, cut, drop, tears)
        if why is None and not sp.is_flush_cut(cut - 1):
            why = (
                f"the flush model cuts only after FLUSH (not an ordering flush), FUA and ack/begin marks; "
                f"entry {cut - 1} is none"
            )
        return why


NO_CACHE = NoCache("no-cache", prefix=True, id_part="none")
FLUSH = Flush("flush", prefix=True, id_part="none")

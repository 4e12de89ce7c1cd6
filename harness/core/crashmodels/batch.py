"""One cut's states at a time, without duplicates (pure; host and guest): the enumeration frame of
the write-cache and torn models.  ``by_cut`` walks the cuts in increasing order, lets each model's
fills add the cut's states to a ``Batch`` and yields them sorted by id; a state equivalent to one
already generated (same canonical cut, lost entries and torn write: ``SpaceTables.canon``) is
skipped, by a memory of an epoch's keys, not the log's."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Iterable, Iterator

from powercut.core.crashmodels.base import CrashModel
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.coverage import SPACE_CAP
from powercut.core.states.crashstate import CrashState, Torn


class _Seen(dict[int, set[object]]):
    """Canonical cut -> equivalence keys of the states a model generated so far.  A canonical cut
    is never below the data entry before its cut's last flush (only entries from the flush on can
    be lost), so keys under that floor are forgotten as the cuts advance: memory for an epoch, not
    the log."""

    def __init__(self, sp: SpaceTables) -> None:
        super().__init__()
        self.sp = sp
        self.heap: list[int] = []  # the canonical cuts held
        self.floor = 0
        self.data_pos = [i for i, d in enumerate(sp.is_data) if d]  # the k-th data entry's index

    def advance(self, cut: int) -> None:
        """Forget the keys below the floor of ``cut`` (cuts come in increasing order)."""
        k = self.sp.ndata[max(self.sp.last_flush[cut], 0)]
        self.floor = max(self.floor, self.data_pos[k - 1] + 1 if k else 0)
        while self.heap and self.heap[0] < self.floor:
            del self[heapq.heappop(self.heap)]

    def add(self, cut: int, dropped: tuple[int, ...], torn: Torn) -> bool:
        """Record a state's key; False if an equivalent one was generated before."""
        c, lost = self.sp.canon(cut, dropped)
        if c not in self:
            self[c] = set()
            heapq.heappush(self.heap, c)
        bucket = self[c]
        n = len(bucket)
        bucket.add((lost, torn))
        return len(bucket) > n


class Batch:
    """States of one cut, skipping any equivalent to one already generated (the memory spans cuts)."""

    def __init__(self, sp: SpaceTables, seen: _Seen, model: CrashModel, cut: int) -> None:
        self.sp = sp
        self.seen = seen
        self.model = model
        self.cut = cut
        self.states: list[CrashState] = []

    @functools.cached_property
    def droppable(self) -> tuple[int, ...]:
        return self.sp.droppable(self.cut)

    def add(self, dropped: tuple[int, ...], torn: Torn = (), sid: str | None = None) -> bool:
        """Add the state unless an equivalent one was generated; True if added."""
        if not self.seen.add(self.cut, dropped, torn):
            return False
        self.states.append(
            self.model.state(
                self.sp, self.cut, dropped, torn, sid, self.droppable if dropped else ()
            )
        )
        return True


def by_cut(
    sp: SpaceTables, model: CrashModel, cuts: Iterable[int], *fills: Callable[[Batch], None]
) -> Iterator[CrashState]:
    """The states the ``fills`` add at each of ``cuts`` (increasing), each cut's sorted by id."""
    seen = _Seen(sp)
    for cut in cuts:
        seen.advance(cut)
        b = Batch(sp, seen, model, cut)
        for fill in fills:
            fill(b)
        yield from sorted(b.states, key=lambda s: s.id)


def pow2(k: int) -> int:
    """2**k, saturating at SPACE_CAP (a window's space; no huge ints for a huge window)."""
    return 1 << k if k < SPACE_CAP.bit_length() - 1 else SPACE_CAP

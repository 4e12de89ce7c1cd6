"""One disk's pools (pure; host): its distinct states of one instant under one model, the unit the
selection of the disks combines (core/states/selection.py).

A pool is *image key -> the ids of the states with that image*, after the disk's floor, in the
model's own order: the first id is the pool's state, the others its duplicates (core/states/imagekey.py
says when two states are one).  A model's states are streamed a key version at a time
(``CrashSpace.iter_states``): states of two versions never share an image, so nothing of a
version is kept once it is taken.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace

__all__ = ["Stream", "after_floor"]


def after_floor(state: CrashState, floor: int | None) -> bool:
    """The state cuts after the floor entry and keeps every entry before it whole."""
    return floor is None or (
        state.cut > floor
        and all(d > floor for d in state.dropped)
        and all(t > floor for t, _ in state.torn)
        and (state.lie is None or state.lie.entry > floor)
    )


def _windows(
    states: Iterator[CrashState], version: Sequence[int]
) -> Iterator[tuple[int, list[CrashState]]]:
    """A model's states (in cut order) grouped by the key version of their cut (non-decreasing)."""
    group: list[CrashState] = []
    at = -1
    for s in states:
        v = version[s.cut]
        if v != at and group:
            yield at, group
            group = []
        at = v
        group.append(s)
    if group:
        yield at, group


class Stream:
    """One disk's states under one model, taken an instant (key version) at a time as its *pool*:
    image key -> the ids of the states with that image after the floor, in the model's order (the
    first is the pool's state, the others its duplicates).  Counts what it took."""

    def __init__(
        self, sp: CrashSpace, model: str, floor: int | None, tally: Tally, **enumeration: Any
    ) -> None:
        """``enumeration``: the model's options (``CrashSpace.iter_states``: seed, exhaustive_bound,
        samples, torn_samples)."""
        self.sp, self.floor = sp, floor
        states = sp.iter_states(model, **enumeration, tally=tally)
        self._windows = _windows(states, sp.key_version)
        self._ahead = next(self._windows, None)
        self.generated = 0  # states after the floor
        self.below = 0  # states before it
        self.distinct = 0  # distinct states after it

    @property
    def next_version(self) -> int | None:
        return None if self._ahead is None else self._ahead[0]

    def take(self, v: int) -> dict[Hashable, list[str]]:
        """The pool at version ``v`` (empty if the model has no state there); versions are asked in
        increasing order, and a version passed over is not counted (a fallback stream's)."""
        while self._ahead is not None and self._ahead[0] < v:
            self._ahead = next(self._windows, None)
        if self._ahead is None or self._ahead[0] != v:
            return {}
        group = self._ahead[1]
        self._ahead = next(self._windows, None)
        pool: dict[Hashable, list[str]] = {}
        for s in group:
            if not after_floor(s, self.floor):
                self.below += 1
                continue
            self.generated += 1
            pool.setdefault(image_key(self.sp, s), []).append(s.id)
        self.distinct += len(pool)
        return pool

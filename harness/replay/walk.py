"""One node's crash-state images in a given order, walked forward (host and guest; issue 40): a
cluster check needs node i's image for each cluster state in product order, so one node's states
are not sorted by the pristine position they need.  ``NodeImages`` walks a pristine forward over
each *run* of states whose positions never decrease (replay/materialize.py, any snapshot provider:
dm-snapshot in the checker VM, reflink or a sparse copy on the host) and starts a new walk from
entry 0 only when the next state lies behind: per node one walk per wrap of the product, each state
a clone plus its few extra writes, instead of a replay from entry 0 whenever the node's state
changes.  One disk's states sorted by that position are one run: materialize's one walk."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from pathlib import Path

from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.replay.materialize import ReplayStats, materialize_some, plan
from powercut.replay.snapshot import Provider
from powercut.replay.zeros import ZeroRuns


def runs(bases: Sequence[int]) -> list[range]:
    """The maximal runs of positions whose bases never decrease (one forward walk each)."""
    out: list[range] = []
    start = 0
    for k in range(1, len(bases)):
        if bases[k] < bases[k - 1]:
            out.append(range(start, k))
            start = k
    if bases:
        out.append(range(start, len(bases)))
    return out


class NodeImages:
    """One node's image for each of ``states`` in turn (``next_image``: a clone by ``provider`` -- a
    dm-snapshot in the checker VM, a reflink or a sparse copy on the host --, valid until the next
    call), walked forward run by run (``runs``) from ``initial`` (None: zeros; ``known_zero``: the
    log's all-zero writes, materialize's).  ``close`` ends the walk and the provider."""

    def __init__(
        self,
        index: LogIndex,
        size: int,
        states: Sequence[CrashState],
        workspace: Path,
        provider: Provider,
        *,
        initial: Path | None = None,
        known_zero: ZeroRuns = (),
    ) -> None:
        self.index = index
        self.size = size
        self.states = list(states)
        self.initial = initial
        self.known_zero = known_zero
        self.runs = runs([plan(index, s).base for s in self.states])
        workspace.mkdir(parents=True, exist_ok=True)
        self.provider = provider
        self.walk: Generator[tuple[CrashState, Path | None], None, None] | None = None
        self.build = True  # whether the state being reached gets an image (``next_image``)
        self.k = 0  # the next state's position
        self.run = -1  # the run being walked
        self.walks = 0
        self.stats = ReplayStats()  # summed over the walks

    def next_image(self, build: bool = True) -> Path | None:
        """The next state's image, valid until the next call; with ``build`` False the walk
        passes the state by: no clone, None."""
        self.build = build
        if self.walk is None or self.k == self.runs[self.run].stop:
            if self.walk is not None:
                self.walk.close()  # releases the last clone and the pristine
            self.run += 1
            r = self.runs[self.run]
            self.walk = materialize_some(
                self.index,
                self.initial,
                self.size,
                self.states[r.start : r.stop],
                self.provider.workspace,
                self.provider,
                lambda _state: not self.build,
                stats=self.stats,
                known_zero=self.known_zero,
            )
            self.walks += 1
        state, img = next(self.walk)
        if state != self.states[self.k]:  # materialize sorts by base: a run is sorted already
            raise AssertionError(f"node walk out of order: {state.id} for {self.states[self.k].id}")
        self.k += 1
        return img

    def close(self) -> None:
        if self.walk is not None:
            self.walk.close()
        self.provider.close()

"""The read-set rule in a host check (core/judging/readset.py): which states a walk judges, which it
proves, and the confirmation that keeps the proofs honest.

A walk asks ``proof(state)`` before it builds a state's image: a proven state gets the judged
state's verdict (``Verdict.proof`` names it) and no image.  One proof in ``CONFIRM_EVERY`` (the
first of the run among them) is judged for real anyway: a different verdict than the state it was
said to equal disproves the rule (``ReadSetRule.disprove``): nothing is proven from then on, and
every state proven so far is judged for real after the walk (``proven`` holds them until then: a
proven verdict reaches the journal only from a walk that ended with the rule standing)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from powercut.core.judging.readset import Mismatch, ReadSet, ReadSetRule
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import NodesState
from powercut.linux import blockreads

log = logging.getLogger(__name__)

CONFIRM_EVERY = 16  # one proof in this many is judged for real too


class Proving:
    """One check's rule (one disk's log, the states it walks), shared by its walks (thread-safe)."""

    def __init__(self, index: LogIndex, states: Sequence[object]) -> None:
        self.rule = ReadSetRule(index.entries, index.sectorsize, [_disk(s) for s in states])
        self.lock = threading.Lock()
        self.judged: dict[str, Verdict] = {}  # the states a proof may name
        self.proven: list[Verdict] = []
        self.proofs = 0
        self.confirmed = 0

    @staticmethod
    def of(index: LogIndex, states: Sequence[object], disks: int) -> Proving | None:
        """The rule for this check, or None where it cannot hold: several disks (a cluster's
        instants), no block-read trace here (said once)."""
        if disks != 1 or blockreads.available():
            return None
        return Proving(index, states)

    @property
    def mismatch(self) -> Mismatch | None:
        return self.rule.mismatch

    def proof(self, state: object) -> tuple[str | None, bool]:
        """(the judged state ``state`` equals, or None; whether to judge it anyway, to confirm)."""
        with self.lock:
            found = self.rule.proof(_disk(state))
            if found is None:
                return None, False
            self.proofs += 1
            return found, (self.proofs - 1) % CONFIRM_EVERY == 0

    def prove(self, state: CrashState | NodesState, equal_to: str) -> None:
        """``state`` is not judged: it gets ``equal_to``'s verdict, reasons and reads."""
        with self.lock:
            j = self.judged[equal_to]
            self.proven.append(
                Verdict(
                    state.id,
                    state.model,
                    state.cut,
                    j.verdict,
                    j.reasons,
                    len(state.acks),
                    len(state.begun),
                    0.0,
                    read=j.read,
                    proof=equal_to,
                )
            )

    def judged_state(
        self, state: object, v: Verdict, reads: ReadSet | None, equal_to: str | None
    ) -> None:
        """A state judged for real with what its judge read; ``equal_to``: the state a proof said
        it equals (judged to confirm it)."""
        with self.lock:
            if equal_to is not None:
                self.confirmed += 1
                said = self.judged[equal_to].verdict
                if said != v.verdict:
                    m = Mismatch(v.state, equal_to, said, v.verdict)
                    if self.rule.mismatch is None:
                        log.warning("%s", m.line())
                    self.rule.disprove(m)
            if self.rule.add(_disk(state), reads, v.verdict):
                self.judged[v.state] = v


def _disk(state: object) -> object:
    """The one disk's state the rule speaks of: a CrashState, or a one-disk NodesState's (the
    checker VM's); a cluster's instant as it is (never eligible)."""
    if isinstance(state, NodesState) and len(state.nodes) == 1:
        return state.nodes[0]
    return state

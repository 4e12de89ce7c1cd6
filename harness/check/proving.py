"""The read-set rule in a host check (core/judging/readset.py): which states a walk judges, which it
proves, and the confirmation that keeps the proofs honest.

A walk asks ``proof(state)`` before it builds a state's image: a proven state gets the judged
state's verdict (``Verdict.proof`` names it) and no image.  One proof in ``CONFIRM_EVERY`` (the
first of the run among them) is judged for real anyway: a different verdict than the state it was
said to equal disproves the rule (``ReadSetRule.disprove``): nothing is proven from then on, and
every state proven so far is judged for real after the walk (``proven`` holds them until then: a
proven verdict reaches the journal only from a walk that ended with the rule standing).

The rule pays only where it proves more than tracing costs: the block-read trace costs ~1 ms a
judged state natively and far more in a TCG guest, where Python is 10-50x slower.  After
``WINDOW`` traced states, and after each further ``WINDOW``, it weighs the two so far
(``_weigh``; so far, not the last window: the walk mixes the models' states, and a window of flush
states, which are never proven, says nothing of the write-cache states after it): when what it
saved (its share of proven states times a judge's mean time) is less than what tracing cost, it
stops tracing (``tracing`` false: states are judged untraced, the states already indexed still
prove) and says so (``Report.stopped``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from powercut.core.judging.readset import Mismatch, ReadSet, ReadSetRule
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import NodesState
from powercut.linux import blockreads
from powercut.linux.blockreads import BlockReads

log = logging.getLogger(__name__)

CONFIRM_EVERY = 16  # one proof in this many is judged for real too
WINDOW = 48  # traced states between two weighings of what the rule costs and saves


@dataclass(frozen=True, slots=True)
class Report:
    """What the rule did in one check that the verdicts do not say: disproved (``mismatch``), or
    stopped tracing because it did not pay (``stopped``, in words)."""

    mismatch: Mismatch | None = None
    stopped: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "mismatch": asdict(self.mismatch) if self.mismatch else None,
            "stopped": self.stopped,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Report:
        m = d.get("mismatch")
        return Report(Mismatch(**m) if m else None, str(d.get("stopped", "")))

    def merged(self, other: Report | None) -> Report:
        """This check's report with another walk's (the first mismatch, the first stop)."""
        if other is None:
            return self
        return Report(self.mismatch or other.mismatch, self.stopped or other.stopped)


class Proving:
    """One check's rule (one disk's log, the states it walks), shared by its walks (thread-safe)."""

    def __init__(self, index: LogIndex, states: Sequence[object]) -> None:
        self.rule = ReadSetRule(index.entries, index.sectorsize, [_disk(s) for s in states])
        self.lock = threading.Lock()
        self.judged: dict[str, Verdict] = {}  # the states a proof may name
        self.proven: list[Verdict] = []
        self.proofs = 0
        self.confirmed = 0
        self.traced = 0  # states judged with their reads traced
        self.trace_s = 0.0  # what tracing them cost
        self.judge_s = 0.0  # what judging them cost
        self.stopped = ""

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

    @property
    def tracing(self) -> bool:
        """Whether the next judged state's reads are worth tracing."""
        return not self.stopped and not self.rule.off

    def report(self) -> Report:
        return Report(self.rule.mismatch, self.stopped)

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
        self,
        state: object,
        v: Verdict,
        reads: ReadSet | None,
        equal_to: str | None,
        trace_s: float = 0.0,
    ) -> None:
        """A state judged for real with what its judge read (``trace_s``: what tracing it cost);
        ``equal_to``: the state a proof said it equals (judged to confirm it)."""
        with self.lock:
            if reads is not None:
                self.traced += 1
                self.trace_s += trace_s
                self.judge_s += v.seconds
                if self.traced % WINDOW == 0:
                    self._weigh()
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

    def _weigh(self) -> None:
        """Stop tracing when tracing the judged states has cost more than the proofs saved."""
        seen = self.traced + self.proofs
        share = self.proofs / seen
        judge = self.judge_s / self.traced
        trace = self.trace_s / self.traced
        if share * judge >= (1 - share) * trace:
            return
        self.stopped = (
            f"the read-set rule stopped tracing after {seen} states: {100 * share:.0f} % proven, "
            f"tracing {1000 * trace:.1f} ms a judged state against {1000 * judge:.1f} ms a judge"
        )
        log.info("%s", self.stopped)


def judge_or_prove(
    proving: Proving | None,
    reads: BlockReads | None,
    state: CrashState | NodesState,
    judge: Callable[[BlockReads | None], tuple[Verdict, ReadSet | None]],
    pass_by: Callable[[], None],
) -> Verdict | None:
    """One state of a walk (host or checker VM): judged -- ``judge(reads)``, its reads traced while
    the rule traces -- and its verdict returned; or proven: ``pass_by`` moves the walk past it, None
    is returned and its verdict waits in ``proving.proven``.  Without a rule: judged."""
    if proving is None:
        return judge(None)[0]
    found, confirm = proving.proof(state)
    if found is not None and not confirm:
        pass_by()
        proving.prove(state, found)
        return None
    spent = reads.spent if reads is not None else 0.0
    v, read = judge(reads if proving.tracing else None)
    cost = reads.spent - spent if reads is not None else 0.0
    proving.judged_state(state, v, read, found, cost)
    return v


def _disk(state: object) -> object:
    """The one disk's state the rule speaks of: a CrashState, or a one-disk NodesState's (the
    checker VM's); a cluster's instant as it is (never eligible)."""
    if isinstance(state, NodesState) and len(state.nodes) == 1:
        return state.nodes[0]
    return state

"""``unordered-writes``: the commit in flight at the cut wrote more than once and made the writes
durable with one barrier: the disk may keep a later write without an earlier one, which a state
that kept some and lost others shows (a commit record persisted before the data it commits).  Its
counterfactual: every write up to that barrier, in log order -- the commit in flight's writes all
kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule, entry_after
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import BARRIERS, InFlight, files_of

ID = "unordered-writes"


@dataclass(frozen=True, slots=True)
class UnorderedWrites:
    """The commit in flight made ``writes`` (to the files ``subject``) durable with the one
    ``barrier``; ``ack``: the ack that would have closed it (None: none followed)."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op | None
    writes: tuple[Op, ...]
    barrier: Op

    @property
    def shown(self) -> tuple[Op, ...]:
        """The writes the evidence shows: the last four."""
        return self.writes[-4:]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.shown, self.barrier)


def check(window: InFlight, torn: tuple[int, ...] = ()) -> UnorderedWrites | None:
    """The first barrier of the commit in flight that made two or more successful writes durable at
    once (with no barrier between them); None when each barrier covered at most one.  (``torn``: the
    signature of every cut rule; a tear is not this rule's concern.)"""
    writes: list[Op] = []
    for o in window.calls:
        if o.kind == sc.WRITE and o.ok:
            writes.append(o)
        elif o.kind in BARRIERS and o.ok:
            if len(writes) >= 2:
                return UnorderedWrites(files_of(writes, window.root), window.ack, tuple(writes), o)
            writes.clear()
    return None


def sentence(f: UnorderedWrites) -> str:
    # the count is of the writes the evidence shows (at most four)
    key = (f.ack or f.barrier).text
    return (
        f"the commit in flight at the crash ({key}) made {len(f.shown)} writes ({f.subject}) durable "
        f"with one {f.barrier.kind} and nothing ordering them before it: the disk may keep a later write "
        "without an earlier one (a record that commits data without that data); this state kept only part "
        "of them"
    )


def plan(f: UnorderedWrites, inp: PlanInput) -> Plan | None:
    return Plan(
        ID,
        f.subject,
        None,
        max(entry_after(inp.trace, inp.aligned, f.barrier, inp.n), inp.cut),
        f.barrier,
    )


RULE = Rule(
    ID,
    "cut",
    UnorderedWrites,
    check,
    sentence,
    plan,
    advice="make the data durable before the record that commits it (a sync between them), or checksum "
    "the record over the data so recovery can tell a commit whose data was lost",
)

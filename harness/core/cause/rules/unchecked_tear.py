"""``unchecked-tear``: the state tore a write of the commit in flight at the cut, and recovery took
what it found as valid (no rule prevents a tear; a checksum over each record detects it).  Its
counterfactual: every write the state lost or tore before its cut, kept whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import InFlight, files_of

ID = "unchecked-tear"


@dataclass(frozen=True, slots=True)
class Tear:
    """The state tore the writes at the log entries ``entries``; the commit in flight wrote
    ``writes`` (to the files ``subject``, "its writes" when the trace shows none) and ``ack`` would
    have closed it (None: none followed)."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op | None
    writes: tuple[Op, ...]
    entries: tuple[int, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return self.writes[-4:]


def check(window: InFlight, torn: tuple[int, ...] = ()) -> Tear | None:
    """The tear of the state that tore the writes at the log entries ``torn`` (None: it tore none),
    with the successful writes of the commit in flight."""
    if not torn:
        return None
    writes = tuple(o for o in window.calls if o.kind == sc.WRITE and o.ok)
    return Tear(files_of(writes, window.root) or "its writes", window.ack, writes, torn)


def note(f: Tear) -> str:
    """The torn log entries."""
    return f" (log entr{'ies' if len(f.entries) > 1 else 'y'} #{', #'.join(map(str, f.entries))})"


def sentence(f: Tear) -> str:
    if f.ack is not None:
        key = f.ack.text
    elif f.writes:
        key = f.writes[-1].text
    else:
        key = "the end"
    return (
        f"the crash tore a write of the commit in flight ({key}; {f.subject}): part of it reached the "
        f"disk, part did not{note(f)}, and recovery took what it found as valid -- a write can tear at a "
        "sector or 4 KiB boundary on power loss, and only a checksum over each record detects it"
    )


def plan(f: Tear, inp: PlanInput) -> Plan | None:
    return Plan(ID, f.subject, None, inp.cut)


RULE = Rule(
    ID,
    "cut",
    Tear,
    check,
    sentence,
    plan,
    advice="checksum each record and have recovery stop at the first one that does not verify",
    note=note,
)

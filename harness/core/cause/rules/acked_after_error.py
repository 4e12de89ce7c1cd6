"""``acked-after-error``: a sync or write failed and the program acked afterwards -- the data the
failed call covers may never reach the disk (a failed fsync may drop the dirty pages it could not
write, and a retry that succeeds does not bring them back).  Its counterfactual: none (the failed
write's data is not in the log: nothing to make durable)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import AtAck, rel

ID = "acked-after-error"


@dataclass(frozen=True, slots=True)
class FailedCall:
    """``failed`` (a sync or write of ``subject``) failed; ``ack`` came after."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op
    failed: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.failed, self.ack)


def check(at: AtAck) -> list[FailedCall]:
    """Each failed sync or write that is part of this commit: it failed after the commit began, or
    its file was changed again in this commit."""
    p = at.pending
    return [
        FailedCall(rel(f.path, p.root), at.ack, f)
        for f in p.failed
        if f.seq > at.since or at.this_commit(p.dirty.get(f.path, ()))
    ]


def sentence(f: FailedCall) -> str:
    return (
        f"{f.ack.text} was given after {f.failed.kind} of {f.subject} failed ({f.failed.error}): the data "
        "it covers may never reach the disk, and the program acked it anyway"
    )


def plan(f: FailedCall, inp: PlanInput) -> Plan | None:
    return None


RULE = Rule(
    ID,
    "ack",
    FailedCall,
    check,
    sentence,
    plan,
    advice="treat a failed fsync as the loss of the commit: never ack after it; stop, or rewrite the "
    "data from the program's own copy and sync it again",
)

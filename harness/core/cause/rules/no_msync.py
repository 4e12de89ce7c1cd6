"""``no-msync``: the program held a shared, writable mapping of a file and acked with no msync
(MS_SYNC) or fsync of that file since it mapped it: its stores through the mapping are in the page
cache only (the trace cannot see the stores; it sees the mapping and that nothing synced it).  Its
counterfactual: the file's data, with the metadata, up to its next sync after the ack (the end of
the log when none came)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import AtAck, rel

ID = "no-msync"


@dataclass(frozen=True, slots=True)
class UnsyncedMapping:
    """``subject`` was mapped shared and writable (``mapping``, the first mapping since its last sync)
    and ``ack`` was given with no msync (MS_SYNC) or fsync of it in between."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op
    mapping: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.mapping, self.ack)


def check(at: AtAck) -> list[UnsyncedMapping]:
    """Each file mapped shared and writable with no msync (MS_SYNC) or fsync of it since it was
    mapped.  Not limited to this commit's calls: a store through the mapping is invisible, so any
    commit may have made one."""
    p = at.pending
    return [UnsyncedMapping(rel(path, p.root), at.ack, o) for path, o in p.mapped.items()]


def sentence(f: UnsyncedMapping) -> str:
    return (
        f"{f.ack.text} was given while {f.subject} was mapped shared and writable (mmap at trace line "
        f"{f.mapping.line}) with no msync (MS_SYNC) or fsync of it since: what the program stored through "
        "the mapping was in the page cache only (the trace sees the mapping, not the stores)"
    )


def plan(f: UnsyncedMapping, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.ack)


RULE = Rule(
    ID,
    "ack",
    UnsyncedMapping,
    check,
    sentence,
    plan,
    advice="msync(MS_SYNC) the mapped range (or fsync the file) after storing through the mapping and "
    "before acking",
)

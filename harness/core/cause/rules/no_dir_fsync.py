"""``no-dir-fsync``: a name was created, renamed or removed in a directory and acked with no fsync of
the directory.  Its counterfactual: the filesystem's metadata up to the directory's next fsync, no
file's data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import AtAck, rel

ID = "no-dir-fsync"


@dataclass(frozen=True, slots=True)
class UnsyncedNames:
    """Names in the directory ``subject`` were changed (``changes``) and ``ack`` was given with no
    fsync of the directory."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op
    changes: tuple[Op, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.changes[-3:], self.ack)


def check(at: AtAck) -> list[UnsyncedNames]:
    """Each directory in which this commit changed a name with no fsync of the directory since."""
    p = at.pending
    return [
        UnsyncedNames(rel(d, p.root), at.ack, tuple(ops))
        for d, ops in p.entries.items()
        if at.this_commit(ops)
    ]


def sentence(f: UnsyncedNames) -> str:
    return (
        f"{f.ack.text} was given after a name in {f.subject} was created, renamed or removed, with no "
        "fsync of the directory: the name can be lost though the file's data was synced"
    )


def plan(f: UnsyncedNames, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.ack, directory=True)


RULE = Rule(
    ID,
    "ack",
    UnsyncedNames,
    check,
    sentence,
    plan,
    advice="fsync the directory after creating, renaming or removing a name in it, before acking",
)

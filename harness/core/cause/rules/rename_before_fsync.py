"""``rename-before-fsync``: a file was renamed (or linked) over another name while its own data was
not yet fsynced -- the rename can reach the disk first, leaving the new name on empty or old data.
Its counterfactual: the file's data at its new name, with the metadata, up to its next sync."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import AtAck, rel

ID = "rename-before-fsync"


@dataclass(frozen=True, slots=True)
class RenameBeforeSync:
    """``rename`` (a rename or link) moved ``source`` over ``subject`` (its new name) while
    ``unsynced`` (the source's changes) were not synced, and ``ack`` came after."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op
    rename: Op
    source: str
    unsynced: tuple[Op, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.unsynced[-3:], self.rename, self.ack)


def check(at: AtAck) -> list[RenameBeforeSync]:
    """Each rename or link of this commit that moved unsynced data and whose new name's directory was
    not fsynced since."""
    p = at.pending
    return [
        RenameBeforeSync(rel(ren.path2, p.root), at.ack, ren, rel(ren.path, p.root), src)
        for ren, src in p.renames
        if ren.seq > at.since
    ]


def sentence(f: RenameBeforeSync) -> str:
    verb = "renamed" if f.rename.kind == sc.RENAME else "linked"
    return (
        f"{f.source} was {verb} over {f.subject} before its data was fsynced, and {f.ack.text} was given "
        f"with no fsync in between: the {f.rename.kind} can reach the disk before the data, leaving "
        f"{f.subject} empty or stale"
    )


def plan(f: RenameBeforeSync, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.ack)


RULE = Rule(
    ID,
    "ack",
    RenameBeforeSync,
    check,
    sentence,
    plan,
    advice="fsync the new file before renaming it over the old name, then fsync the directory",
)

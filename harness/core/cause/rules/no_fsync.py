"""``no-fsync``: the program acked after changing a file with no fsync/fdatasync of it in between
(writes through an O_SYNC/O_DSYNC descriptor are synced; O_DIRECT bypasses the page cache, not the
disk's write cache; sync_file_range is not a barrier).  Its counterfactual: the file's data, with
the metadata, up to its next sync after the ack (the end of the log when none came) -- what an
fsync before the ack would have made durable, at the latest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import AtAck, rel

ID = "no-fsync"


@dataclass(frozen=True, slots=True)
class Unsynced:
    """``subject`` was changed (``changes``: every change since its last sync, this commit's and
    earlier ones') and ``ack`` was given with no sync of it in between; ``direct``: it was written
    through O_DIRECT; ``range_synced``: sync_file_range was called on it."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op
    changes: tuple[Op, ...]
    direct: bool = False
    range_synced: bool = False

    @property
    def shown(self) -> tuple[Op, ...]:
        """The changes the evidence shows: the last four."""
        return self.changes[-4:]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.shown, self.ack)


def check(at: AtAck) -> list[Unsynced]:
    """Each file this commit changed that was not synced before the ack and had no sync running at
    it (that one is ack-before-sync-returned's)."""
    p = at.pending
    out: list[Unsynced] = []
    for path, ops in p.dirty.items():
        if at.this_commit(ops) and at.running.get(path) is None and at.running.get("") is None:
            out.append(
                Unsynced(
                    rel(path, p.root), at.ack, tuple(ops), path in p.direct, path in p.range_synced
                )
            )
    return out


def note(f: Unsynced) -> str:
    """Why an O_DIRECT write or a sync_file_range did not count."""
    notes = []
    if f.direct:
        notes.append("O_DIRECT bypasses the page cache, not the disk's write cache")
    if f.range_synced:
        notes.append("sync_file_range is not a durability barrier")
    return "; ".join(notes)


def sentence(f: Unsynced) -> str:
    """The file, how many calls changed it and how many bytes they wrote.  The counts are of the
    changes the evidence shows (the last four)."""
    nbytes = sum(o.nbytes for o in f.shown if o.kind == sc.WRITE)
    n = len(f.shown)
    what = f"{n} call{'s' if n != 1 else ''}" + (f", {nbytes} bytes" if nbytes else "")
    qualified = f" ({note(f)})" if note(f) else ""
    return (
        f"{f.ack.text} was given after changing {f.subject} ({what}) with no fsync or fdatasync of it in "
        f"between{qualified}"
    )


def plan(f: Unsynced, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.ack)


RULE = Rule(
    ID,
    "ack",
    Unsynced,
    check,
    sentence,
    plan,
    advice="fsync (or fdatasync) the file after writing it and before acking",
    note=note,
)

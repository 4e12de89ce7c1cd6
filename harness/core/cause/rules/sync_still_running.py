"""``ack-before-sync-returned``: the program acked while the fsync/fdatasync (or sync) that would
make the commit durable was still running -- it began before the ack and returned after it (one
thread acks as another's fsync is issued: a race a slow disk loses).  Its counterfactual: the
file's data, with the metadata, up to the sync that was still running."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import AtAck, rel

ID = "ack-before-sync-returned"


@dataclass(frozen=True, slots=True)
class SyncStillRunning:
    """``ack`` was given while ``sync`` (of ``subject``, or a sync/syncfs) was running; ``changes``:
    the file's unsynced changes it was to make durable."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op
    sync: Op
    changes: tuple[Op, ...]

    @property
    def duration(self) -> float:
        """How long the sync ran, in seconds, as the trace's timestamps say (0 or less: not known)."""
        return self.sync.time - self.sync.began

    @property
    def other_thread(self) -> bool:
        return self.sync.pid != self.ack.pid

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.changes[-3:], self.ack, self.sync)


def check(at: AtAck) -> list[SyncStillRunning]:
    """Each file this commit changed whose sync (or a sync/syncfs) was still running at the ack."""
    p = at.pending
    out: list[SyncStillRunning] = []
    for path, ops in p.dirty.items():
        sync = at.running.get(path) or at.running.get("")
        if at.this_commit(ops) and sync is not None:
            out.append(SyncStillRunning(rel(path, p.root), at.ack, sync, tuple(ops)))
    return out


def duration(f: SyncStillRunning) -> str:
    """How long the sync ran, in milliseconds -- or "a while" when the trace does not say: strace did
    not split the call (its start is unknown), or its timestamps give it no time or less.  No figure
    is made up."""
    if f.duration > 0:
        return f"{f.duration * 1000:.1f} ms"
    return "a while"


def sentence(f: SyncStillRunning) -> str:
    if f.sync.held > 0:
        other = " by another thread" if f.other_thread else ""
        before = f.ack.time - f.sync.began
        return (
            f"{f.ack.text} was sent while the {f.sync.kind} of {f.subject} that covers it, called{other} "
            f"{before * 1000:.1f} ms before the ack, was still held (--delay-sync holds it "
            f"{f.sync.held * 1000:g} ms before it runs) -- the reply did not wait for the "
            f"{f.sync.kind} to return; a slow sync of this one file loses this race"
        )
    other = " in another thread" if f.other_thread else ""
    return (
        f"{f.ack.text} was given while the {f.sync.kind} of {f.subject}{other} was still running: it began "
        f"before the ack and returned after it ({duration(f)} in all) -- an ack must wait for the "
        f"{f.sync.kind} to return; a slow disk loses this race"
    )


def plan(f: SyncStillRunning, inp: PlanInput) -> Plan | None:
    return inp.file_plan(ID, f.subject, f.sync, bound="the {what} still running at the ack")


RULE = Rule(
    ID,
    "ack",
    SyncStillRunning,
    check,
    sentence,
    plan,
    advice="reply only after the sync that covers the commit has returned (join the syncing thread, "
    "or wait on its result)",
)

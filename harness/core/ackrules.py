"""The rules an ack can break (POSIX's, as ALICE states them), strongest first -- ``ACK_RULES``;
each an ``AckRule``: its id and its check, a pure function over the trace's facts at one ack
(core/tracefacts.AtAck) that returns what it found as facts (``AckFinding``: which file, which
calls, which ack, how long a sync ran), never as words (core/causewords.py says them):

- ``acked-after-error``: a sync or write failed and the program acked afterwards;
- ``rename-before-fsync``: a file was renamed (or linked) over another name while its own data was
  not yet fsynced;
- ``ack-before-sync-returned``: the program acked while the sync that would make the commit durable
  was still running (it began before the ack and returned after it);
- ``no-fsync``: the program acked after changing a file with no fsync/fdatasync of it in between;
- ``no-dir-fsync``: a name was created, renamed or removed in a directory and acked with no fsync of
  the directory;
- ``no-msync``: the program held a shared, writable mapping of a file and acked with no msync
  (MS_SYNC) or fsync of that file since it mapped it: its stores through the mapping are in the page
  cache only (the trace cannot see the stores; it sees the mapping and that nothing synced it).

The rules about the commit in flight at the cut are core/cutrules.py's; the vocabulary of causes
(every rule's id, their rank, the findings that are no broken rule) is core/causerules.py's.
Pure: no I/O."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from powercut.core.syscalls import Op
from powercut.core.tracefacts import AtAck, rel

__all__ = ["ACK_RULES", "EARLY", "ERROR", "NO_DIR_FSYNC", "NO_FSYNC", "NO_MSYNC", "RENAME", "AckFinding", "AckRule",
           "FailedCall", "RenameBeforeSync", "SyncStillRunning", "Unsynced", "UnsyncedMapping", "UnsyncedNames",
           "acked_after_error", "broken", "no_dir_fsync", "no_fsync", "no_msync", "rename_before_fsync",
           "sync_still_running"]

ERROR = "acked-after-error"
RENAME = "rename-before-fsync"
EARLY = "ack-before-sync-returned"
NO_FSYNC = "no-fsync"
NO_DIR_FSYNC = "no-dir-fsync"
NO_MSYNC = "no-msync"


# -- what the rules find ----------------------------------------------------------------------------
# Each finding names its ``subject`` (a file or directory relative to the filesystem's root) and its
# ``evidence``: the calls that show it, in the order they are listed.

@dataclass(frozen=True, slots=True)
class FailedCall:
    """acked-after-error: ``failed`` (a sync or write of ``subject``) failed; ``ack`` came after."""

    rule: ClassVar[str] = ERROR
    subject: str
    ack: Op
    failed: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.failed, self.ack)


@dataclass(frozen=True, slots=True)
class RenameBeforeSync:
    """rename-before-fsync: ``rename`` (a rename or link) moved ``source`` over ``subject`` (its new
    name) while ``unsynced`` (the source's changes) were not synced, and ``ack`` came after."""

    rule: ClassVar[str] = RENAME
    subject: str
    ack: Op
    rename: Op
    source: str
    unsynced: tuple[Op, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.unsynced[-3:], self.rename, self.ack)


@dataclass(frozen=True, slots=True)
class SyncStillRunning:
    """ack-before-sync-returned: ``ack`` was given while ``sync`` (of ``subject``, or a sync/syncfs)
    was running; ``changes``: the file's unsynced changes it was to make durable."""

    rule: ClassVar[str] = EARLY
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


@dataclass(frozen=True, slots=True)
class Unsynced:
    """no-fsync: ``subject`` was changed (``changes``: every change since its last sync, this
    commit's and earlier ones') and ``ack`` was given with no sync of it in between; ``direct``: it
    was written through O_DIRECT; ``range_synced``: sync_file_range was called on it."""

    rule: ClassVar[str] = NO_FSYNC
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


@dataclass(frozen=True, slots=True)
class UnsyncedNames:
    """no-dir-fsync: names in the directory ``subject`` were changed (``changes``) and ``ack`` was
    given with no fsync of the directory."""

    rule: ClassVar[str] = NO_DIR_FSYNC
    subject: str
    ack: Op
    changes: tuple[Op, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.changes[-3:], self.ack)


@dataclass(frozen=True, slots=True)
class UnsyncedMapping:
    """no-msync: ``subject`` was mapped shared and writable (``mapping``, the first mapping since its
    last sync) and ``ack`` was given with no msync (MS_SYNC) or fsync of it in between."""

    rule: ClassVar[str] = NO_MSYNC
    subject: str
    ack: Op
    mapping: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.mapping, self.ack)


AckFinding = FailedCall | RenameBeforeSync | SyncStillRunning | Unsynced | UnsyncedNames | UnsyncedMapping


# -- the rules an ack can break ---------------------------------------------------------------------

def acked_after_error(at: AtAck) -> list[AckFinding]:
    """Each failed sync or write that is part of this commit: it failed after the commit began, or
    its file was changed again in this commit."""
    p = at.pending
    return [FailedCall(rel(f.path, p.root), at.ack, f) for f in p.failed
            if f.seq > at.since or at.this_commit(p.dirty.get(f.path, ()))]


def rename_before_fsync(at: AtAck) -> list[AckFinding]:
    """Each rename or link of this commit that moved unsynced data and whose new name's directory was
    not fsynced since."""
    p = at.pending
    return [RenameBeforeSync(rel(ren.path2, p.root), at.ack, ren, rel(ren.path, p.root), src)
            for ren, src in p.renames if ren.seq > at.since]


def sync_still_running(at: AtAck) -> list[AckFinding]:
    """Each file this commit changed whose sync (or a sync/syncfs) was still running at the ack."""
    p = at.pending
    out: list[AckFinding] = []
    for path, ops in p.dirty.items():
        sync = at.running.get(path) or at.running.get("")
        if at.this_commit(ops) and sync is not None:
            out.append(SyncStillRunning(rel(path, p.root), at.ack, sync, tuple(ops)))
    return out


def no_fsync(at: AtAck) -> list[AckFinding]:
    """Each file this commit changed that was not synced before the ack and had no sync running at
    it (that one is ``sync_still_running``'s)."""
    p = at.pending
    out: list[AckFinding] = []
    for path, ops in p.dirty.items():
        if at.this_commit(ops) and at.running.get(path) is None and at.running.get("") is None:
            out.append(Unsynced(rel(path, p.root), at.ack, tuple(ops), path in p.direct, path in p.range_synced))
    return out


def no_dir_fsync(at: AtAck) -> list[AckFinding]:
    """Each directory in which this commit changed a name with no fsync of the directory since."""
    p = at.pending
    return [UnsyncedNames(rel(d, p.root), at.ack, tuple(ops)) for d, ops in p.entries.items() if at.this_commit(ops)]


def no_msync(at: AtAck) -> list[AckFinding]:
    """Each file mapped shared and writable with no msync (MS_SYNC) or fsync of it since it was
    mapped.  Not limited to this commit's calls: a store through the mapping is invisible, so any
    commit may have made one."""
    p = at.pending
    return [UnsyncedMapping(rel(path, p.root), at.ack, o) for path, o in p.mapped.items()]


@dataclass(frozen=True, slots=True)
class AckRule:
    """A rule an ack can break: its id and its check (the findings at one ack, [] when kept)."""

    id: str
    check: Callable[[AtAck], list[AckFinding]]


ACK_RULES = (AckRule(ERROR, acked_after_error), AckRule(RENAME, rename_before_fsync),
             AckRule(EARLY, sync_still_running), AckRule(NO_FSYNC, no_fsync), AckRule(NO_DIR_FSYNC, no_dir_fsync),
             AckRule(NO_MSYNC, no_msync))


def broken(at: AtAck) -> list[AckFinding]:
    """Every rule broken at one ack, strongest rule first (each rule's findings in the order of its
    facts)."""
    return [f for rule in ACK_RULES for f in rule.check(at)]

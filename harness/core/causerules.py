"""The cause rules: each a small value (``AckRule``, ``CutRule``) with its id and its check, a pure
function over the trace's facts (core/tracefacts.py) that returns what it found as facts -- which
file, which calls, which ack, how long a sync ran -- never as words (core/causewords.py says them).

The rules an ack can break (POSIX's, as ALICE states them), strongest first -- ``ACK_RULES``:

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

The rules about the commit in flight at the cut -- ``CUT_RULES``, in that order:

- ``replaced-in-place``: it emptied a file in place (renamed it away, or truncated it) and wrote a
  new one under its name, and a sync of something else came before the new file's own: the new,
  still empty file can be durable before its contents;
- ``unordered-writes``: it made two or more writes durable with one barrier;
- ``unchecked-tear``: the state tore one of its writes.

And the findings that are no broken rule: ``disk-lied`` (a lying disk's state: what the disk did),
``unseen-writes`` (the rules the trace can check were kept, but the program also wrote where the
trace cannot see: stores through a shared mapping of its files, io_uring), ``beyond-rules`` (the
rules were kept and the trace saw every write, or no ack was given before the cut).  Pure: no I/O."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from powercut.core import syscalls as sc
from powercut.core.syscalls import Op
from powercut.core.tracefacts import BARRIERS, AtAck, InFlight, rel

__all__ = ["ACK_RULES", "BEYOND", "CUT_RULES", "EARLY", "ERROR", "LIED", "NO_DIR_FSYNC", "NO_FSYNC", "NO_MSYNC", "RANK",
           "RENAME", "REPLACED", "RULES", "TORN", "UNORDERED", "UNSEEN", "AckFinding", "AckRule",
           "CutFinding", "CutRule", "DiskLie", "FailedCall", "Finding", "NoAckBefore", "RenameBeforeSync",
           "ReplacedInPlace", "RulesKept", "RulesKeptUnseen", "SyncStillRunning", "Tear", "UnorderedWrites", "Unsynced",
           "UnsyncedMapping", "UnsyncedNames", "acked_after_error", "broken", "no_dir_fsync", "no_fsync", "no_msync",
           "rename_before_fsync", "replaced_in_place", "sync_still_running", "unchecked_tear", "unordered_writes"]

ERROR = "acked-after-error"
RENAME = "rename-before-fsync"
EARLY = "ack-before-sync-returned"
NO_FSYNC = "no-fsync"
NO_DIR_FSYNC = "no-dir-fsync"
NO_MSYNC = "no-msync"
UNORDERED = "unordered-writes"
REPLACED = "replaced-in-place"
TORN = "unchecked-tear"
LIED = "disk-lied"
UNSEEN = "unseen-writes"
BEYOND = "beyond-rules"
RANK = (ERROR, RENAME, EARLY, NO_FSYNC, NO_DIR_FSYNC, NO_MSYNC, REPLACED, UNORDERED)   # broken rules, strongest first
RULES = (*RANK, TORN, LIED, UNSEEN, BEYOND)


# -- what the rules find ----------------------------------------------------------------------------
# Each finding names its ``subject`` (a file or directory relative to the filesystem's root, or the
# files, comma-separated) and its ``evidence``: the calls that show it, in the order they are listed.

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


@dataclass(frozen=True, slots=True)
class ReplacedInPlace:
    """replaced-in-place: the commit in flight emptied ``subject`` (``away``: the rename that moved it
    away, or the truncation), wrote a new one under its name (``writes``), and ``barrier`` -- a sync
    of something else -- came before the new file's own; ``ack``: the ack that would have closed it."""

    rule: ClassVar[str] = REPLACED
    subject: str
    ack: Op | None
    away: Op
    writes: tuple[Op, ...]
    barrier: Op
    moved_to: str = ""     # where the rename moved the old file ("" for a truncation)
    synced: str = ""       # the file the barrier synced ("" for sync/syncfs)

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.away, *self.writes[-2:], self.barrier)


@dataclass(frozen=True, slots=True)
class UnorderedWrites:
    """unordered-writes: the commit in flight made ``writes`` (to the files ``subject``) durable with
    the one ``barrier``; ``ack``: the ack that would have closed it (None: none followed)."""

    rule: ClassVar[str] = UNORDERED
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


@dataclass(frozen=True, slots=True)
class Tear:
    """unchecked-tear: the state tore the writes at the log entries ``entries``; the commit in
    flight wrote ``writes`` (to the files ``subject``, "its writes" when the trace shows none) and
    ``ack`` would have closed it (None: none followed)."""

    rule: ClassVar[str] = TORN
    subject: str
    ack: Op | None
    writes: tuple[Op, ...]
    entries: tuple[int, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return self.writes[-4:]


@dataclass(frozen=True, slots=True)
class DiskLie:
    """disk-lied: what a lying disk did (``model``, core/lies.py) to the write at log entry ``entry``
    (its ``sector``; ``dest``: where a misdirected write went, -1: its own sector; ``bits``: how
    many it flipped; ``dropped``: the writes an ignored flush lost), and the ``verdict``."""

    rule: ClassVar[str] = LIED
    model: str
    entry: int
    sector: int
    dest: int = -1
    bits: int = 0
    dropped: tuple[int, ...] = ()
    verdict: str = ""


@dataclass(frozen=True, slots=True)
class RulesKept:
    """beyond-rules: every rule was kept before ``ack`` (the last ack looked at) and it was lost."""

    rule: ClassVar[str] = BEYOND
    ack: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.ack,)


@dataclass(frozen=True, slots=True)
class RulesKeptUnseen:
    """unseen-writes: every rule the trace can check was kept before ``ack``, and the program also
    wrote where the trace cannot see (``unseen``: what, each said once)."""

    rule: ClassVar[str] = UNSEEN
    ack: Op
    unseen: tuple[str, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.ack,)


@dataclass(frozen=True, slots=True)
class NoAckBefore:
    """beyond-rules: no ack was given before the cut, so no rule about an ack applies."""

    rule: ClassVar[str] = BEYOND

    @property
    def evidence(self) -> tuple[Op, ...]:
        return ()


AckFinding = FailedCall | RenameBeforeSync | SyncStillRunning | Unsynced | UnsyncedNames | UnsyncedMapping  # an ack's
CutFinding = ReplacedInPlace | UnorderedWrites | Tear   # a rule the commit in flight at the cut broke
Finding = AckFinding | CutFinding | DiskLie | RulesKept | RulesKeptUnseen | NoAckBefore


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


# -- the rules about the commit in flight at the cut ------------------------------------------------

def _files(writes: Sequence[Op], root: str) -> str:
    return ", ".join(dict.fromkeys(rel(w.path, root) for w in writes))


def replaced_in_place(window: InFlight, torn: tuple[int, ...] = ()) -> CutFinding | None:
    """The first file of the commit in flight that was emptied in place -- renamed away, opened with
    O_TRUNC or truncated to 0 -- and written anew under its name, with a sync of another file (or a
    sync/syncfs) before the new file's own fsync; None when every such file was synced first."""
    away: dict[str, Op] = {}
    writes: dict[str, list[Op]] = {}
    for o in window.calls:
        if not o.ok:
            continue
        if o.kind == sc.RENAME:
            away[o.path] = o
            writes.pop(o.path, None)
        elif (o.kind == sc.OPEN and "O_TRUNC" in o.flags or o.kind == sc.TRUNCATE and o.nbytes == 0) \
                and o.path not in away:   # a new file made after a rename away is that replacement's
            away[o.path] = o
            writes.pop(o.path, None)
        elif o.kind == sc.WRITE and o.path in away:
            writes.setdefault(o.path, []).append(o)
        elif o.kind in BARRIERS:
            if o.kind in (sc.FSYNC, sc.FDATASYNC) and o.path in away:
                away.pop(o.path)
                writes.pop(o.path, None)
                continue
            hit = next((p for p in away if writes.get(p)), None)
            if hit is not None:
                a = away[hit]
                return ReplacedInPlace(rel(hit, window.root), window.ack, a, tuple(writes[hit]), o,
                                       rel(a.path2, window.root) if a.kind == sc.RENAME else "",
                                       rel(o.path, window.root) if o.path else "")
    return None


def unordered_writes(window: InFlight, torn: tuple[int, ...] = ()) -> CutFinding | None:
    """The first barrier of the commit in flight that made two or more successful writes durable at
    once (with no barrier between them); None when each barrier covered at most one.  (``torn``: the
    signature of every cut rule; a tear is not this rule's concern.)"""
    writes: list[Op] = []
    for o in window.calls:
        if o.kind == sc.WRITE and o.ok:
            writes.append(o)
        elif o.kind in BARRIERS and o.ok:
            if len(writes) >= 2:
                return UnorderedWrites(_files(writes, window.root), window.ack, tuple(writes), o)
            writes.clear()
    return None


def unchecked_tear(window: InFlight, torn: tuple[int, ...] = ()) -> CutFinding | None:
    """The tear of the state that tore the writes at the log entries ``torn`` (None: it tore none),
    with the successful writes of the commit in flight."""
    if not torn:
        return None
    writes = tuple(o for o in window.calls if o.kind == sc.WRITE and o.ok)
    return Tear(_files(writes, window.root) or "its writes", window.ack, writes, torn)


@dataclass(frozen=True, slots=True)
class CutRule:
    """A rule about the commit in flight at the cut: its id and its check (over that commit's calls
    and the log entries the state tore; None when kept)."""

    id: str
    check: Callable[[InFlight, tuple[int, ...]], CutFinding | None]


CUT_RULES = (CutRule(REPLACED, replaced_in_place), CutRule(UNORDERED, unordered_writes), CutRule(TORN, unchecked_tear))

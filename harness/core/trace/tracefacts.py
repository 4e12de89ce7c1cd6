"""What a system-call trace (core/trace/syscalls.py) tells about durability, at an ack and at a cut: the
facts the cause rules (core/causerules.py) judge.

At an ack: which files were changed and not synced since (``Pending``, walked call by call), which
names were created, renamed or removed in which directory with no fsync of it, which renames moved
unsynced data, which syncs or writes failed, and which syncs were still running (began before the
ack, returned after it: ``running_syncs``).

At a cut: the calls of the commit in flight (``in_flight``): between the last mark before the cut
and the first mark at or after it, with the ack that would have closed the commit.

Paths are absolute here; ``rel`` gives a path as the program sees it under the filesystem's root.
Pure: no I/O."""

from __future__ import annotations

import bisect
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op, Trace

__all__ = [
    "BARRIERS",
    "AtAck",
    "InFlight",
    "Pending",
    "files_of",
    "in_flight",
    "rel",
    "running_syncs",
    "split_syncs",
    "written_by",
]

# the calls that make a file's earlier changes durable (sync and syncfs: every file's)
BARRIERS = (sc.FSYNC, sc.FDATASYNC, sc.SYNC, sc.SYNCFS)


def rel(path: str, root: str) -> str:
    """``path`` relative to the filesystem's ``root``, with a leading slash (``/wal``); a path
    outside the root (or any path when ``root`` is empty) as it is."""
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return "/" + path[len(root) :].lstrip("/")
    return path


def files_of(ops: Sequence[Op], root: str) -> str:
    """The files of ``ops`` relative to ``root``, each once, comma-separated."""
    return ", ".join(dict.fromkeys(rel(o.path, root) for o in ops))


@dataclass(slots=True)
class Pending:
    """What the program changed under ``root`` and has not made durable yet, kept up to date one
    call at a time (``step``).  Read by the rules at each ack, never changed by them."""

    root: str
    # file -> its changes since its last sync (writes, truncates, allocations, truncating opens)
    dirty: dict[str, list[Op]] = field(default_factory=dict)
    # files written through an O_DIRECT descriptor since their last sync
    direct: set[str] = field(default_factory=set)
    # directory -> the name changes in it since its own fsync
    entries: dict[str, list[Op]] = field(default_factory=dict)
    # (a rename or link, the unsynced changes of its source at that moment)
    renames: list[tuple[Op, tuple[Op, ...]]] = field(default_factory=list)
    # failed syncs and writes; never forgotten (a retried fsync that succeeds after an error does not
    # bring back the pages the error dropped)
    failed: list[Op] = field(default_factory=list)
    # path -> the flags of its last open
    opened: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # the names known to exist (so that an O_CREAT open of an existing file is no new name)
    exists: set[str] = field(default_factory=set)
    # files a sync_file_range was called on (it is no barrier: said when such a file is unsynced)
    range_synced: set[str] = field(default_factory=set)
    # file -> its first shared, writable mapping since its last sync (stores through it are invisible)
    mapped: dict[str, Op] = field(default_factory=dict)

    def mine(self, path: str) -> bool:
        """Whether ``path`` is on the filesystem under test."""
        return bool(path) and (path == self.root or path.startswith(self.root.rstrip("/") + "/"))

    def name_change(self, path: str, o: Op) -> None:
        """Record that ``o`` changed the name ``path`` in its directory."""
        self.entries.setdefault(posixpath.dirname(path), []).append(o)

    def step(self, o: Op) -> None:
        """Take one call into account."""
        k = o.kind
        # sync and syncfs make everything durable (a syncfs of another filesystem would not: rare, not
        # told apart)
        if k in (sc.SYNC, sc.SYNCFS) and o.ok:
            self.dirty.clear()
            self.entries.clear()
            self.renames.clear()
            self.direct.clear()
            self.mapped.clear()
            return
        if not self.mine(o.path):
            return
        if k == sc.OPEN:
            self._open(o)
        elif k in (sc.WRITE, sc.TRUNCATE, sc.ALLOCATE):
            self._change(o)
        elif k in (sc.FSYNC, sc.FDATASYNC, sc.MSYNC):
            self._sync(o)
        elif k == sc.RANGE_SYNC:
            self.range_synced.add(o.path)
        elif k == sc.MMAP_SHARED and o.ok:
            self.mapped.setdefault(o.path, o)
        elif k in (sc.RENAME, sc.LINK) and o.ok:
            self._rename(o)
        elif k in (sc.UNLINK, sc.RMDIR) and o.ok:
            self.name_change(o.path, o)
            self.dirty.pop(o.path, None)
            self.exists.discard(o.path)
        elif k == sc.MKDIR and o.ok:
            self.name_change(o.path, o)
            self.exists.add(o.path)

    def _open(self, o: Op) -> None:
        if not o.ok:
            return
        self.opened[o.path] = o.flags
        if "O_CREAT" in o.flags and o.path not in self.exists:
            self.name_change(o.path, o)
        if "O_TRUNC" in o.flags and o.path in self.exists:
            self.dirty.setdefault(o.path, []).append(o)
        self.exists.add(o.path)

    def _change(self, o: Op) -> None:
        """A write, truncate or allocation: unsynced, unless it failed (then it is a failure) or it
        is a write through an O_SYNC/O_DSYNC descriptor (synced as it returns)."""
        if not o.ok:
            self.failed.append(o)
            return
        flags = self.opened.get(o.path, ())
        if o.kind == sc.WRITE and any(f in sc.SYNC_FLAGS for f in flags):
            return
        if "O_DIRECT" in flags:
            self.direct.add(o.path)
        self.dirty.setdefault(o.path, []).append(o)

    def _sync(self, o: Op) -> None:
        """An fsync, fdatasync or msync: the file's changes are durable (msync only with MS_SYNC); an
        fsync of a directory makes its name changes durable too.  A failed one is a failure."""
        if not o.ok:
            self.failed.append(o)
            return
        if o.kind == sc.MSYNC and "MS_SYNC" not in o.flags:
            return
        self.dirty.pop(o.path, None)
        self.direct.discard(o.path)
        self.mapped.pop(o.path, None)
        if o.kind in (sc.FSYNC, sc.FDATASYNC):
            self.entries.pop(o.path, None)
            self.renames = [(r, d) for r, d in self.renames if posixpath.dirname(r.path2) != o.path]

    def _rename(self, o: Op) -> None:
        """A rename or link: a new name (and for a rename, a removed one); a rename moves the source's
        unsynced changes to the new name."""
        src = tuple(self.dirty.get(o.path, ()))
        if src:
            self.renames.append((o, src))
        self.name_change(o.path2, o)
        if o.kind == sc.RENAME:
            self.name_change(o.path, o)
            moved = self.dirty.pop(o.path, None)
            if moved:
                self.dirty[o.path2] = moved
            self.exists.discard(o.path)
            if o.path in self.opened:
                self.opened[o.path2] = self.opened.pop(o.path)
        self.exists.add(o.path2)


@dataclass(frozen=True, slots=True)
class AtAck:
    """The facts at one ack: what is pending then, where the ack's commit began (the trace position
    of its begin mark, else of the previous ack; its own changes come after), and the syncs that were
    still running at the ack, by path ("" for sync/syncfs)."""

    ack: Op
    since: int
    pending: Pending
    running: dict[str, Op] = field(default_factory=dict)

    def this_commit(self, ops: list[Op] | tuple[Op, ...]) -> bool:
        """Whether any of ``ops`` belongs to this ack's commit."""
        return any(o.seq > self.since for o in ops)


def split_syncs(trace: Trace) -> tuple[list[Op], list[int]]:
    """The successful syncs strace split (another call completed while they ran, so their start is
    known), in completion order, and their trace positions (for ``running_syncs``)."""
    splits = [o for o in trace.ops if o.kind in BARRIERS and o.ok and o.start >= 0]
    return splits, [o.seq for o in splits]


def running_syncs(splits: list[Op], seqs: list[int], ack: Op) -> dict[str, Op]:
    """Of ``splits`` (``split_syncs``) those that began before ``ack`` and returned after it, by
    path ("" for sync/syncfs).  Only those returning within a minute of the ack are looked at."""
    out: dict[str, Op] = {}
    for o in splits[bisect.bisect_right(seqs, ack.seq) :]:
        if o.time > ack.time + 60:
            break
        if o.began < ack.time:
            out.setdefault("" if o.kind in (sc.SYNC, sc.SYNCFS) else o.path, o)
    return out


@dataclass(frozen=True, slots=True)
class InFlight:
    """The commit in flight at a cut: its calls on the filesystem under test (and sync() calls), in
    trace order, and the ack mark that would have closed it (None: no ack followed); ``earlier``:
    the same calls before it, from the start of the trace (what was left unsynced when it began);
    ``read``: what recovery read in the state, when its judge was traced."""

    calls: tuple[Op, ...]
    ack: Op | None
    root: str
    earlier: tuple[Op, ...] = ()
    read: tuple[
        str, ...
    ] = ()  # the files recovery read in the state, relative to the root, in order (if traced)


def in_flight(
    trace: Trace, aligned: dict[int, int], cut: int, root: str, read: tuple[str, ...] = ()
) -> InFlight:
    """The calls between the last mark before log entry ``cut`` and the first mark at or after it
    (``aligned``: trace mark position -> its log entry), and the first ack mark from that next mark
    on."""
    marks = sorted((e, s) for s, e in aligned.items())
    lo = max((s for e, s in marks if e < cut), default=-1)
    hi = min((s for e, s in marks if e >= cut), default=len(trace.ops))
    prefix = root.rstrip("/") + "/"

    def mine(o: Op) -> bool:
        return o.path.startswith(prefix) or o.kind in (sc.SYNC,)

    calls = tuple(o for o in trace.ops[lo + 1 : hi] if mine(o))
    earlier = tuple(o for o in trace.ops[: lo + 1] if mine(o))
    ack = next((m for m in trace.ops[hi:] if m.kind == sc.MARK and m.text.startswith("ack:")), None)
    return InFlight(calls, ack, root, earlier, read)


def written_by(trace: Trace, aligned: dict[int, int], cut: int, root: str) -> dict[str, int]:
    """Each file's bytes as the program had written them by the end of the commit the cut fell in
    (the first mark at or after log entry ``cut``), by its path relative to ``root`` with no leading
    slash: a truncating open or a truncate sets it, a write adds its bytes (an overwrite is counted
    as if appended: an upper bound), a rename moves it, an unlink drops it."""
    hi = min((s for s, e in aligned.items() if e >= cut), default=len(trace.ops))
    prefix = root.rstrip("/") + "/"
    out: dict[str, int] = {}
    for o in trace.ops[:hi]:
        if not o.ok or not o.path.startswith(prefix):
            continue
        name = o.path[len(prefix) :]
        if o.kind == sc.OPEN and "O_TRUNC" in o.flags:
            out[name] = 0
        elif o.kind == sc.TRUNCATE:
            out[name] = o.nbytes
        elif o.kind == sc.WRITE:
            out[name] = out.get(name, 0) + o.nbytes
        elif o.kind == sc.RENAME and name in out and o.path2.startswith(prefix):
            out[o.path2[len(prefix) :]] = out.pop(name)
        elif o.kind == sc.UNLINK:
            out.pop(name, None)
    return out

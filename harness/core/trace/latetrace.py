"""Which of a log's late flushes the system-call trace clears (pure; host): blind spot (d) of
core/states/models.py, lifted where the trace proves that no write to the program's files was in flight.

``markorder.late_writes`` names the flushes and FUA writes F after which plain writes are logged
before the next ordered key mark: a write W that completed while F was in flight is logged after
F, so the state "W durable, F's window lost" is not generated, and the check's coverage says
*weakened*.  For a write to the program's files that state exists only if such a write was in
flight while F ran.  That needs the program to have something its writes could carry: data it
changed and no sync has covered (``tracefacts.Pending``: dirty data, O_DIRECT writes, name changes,
renames), or a call that changes a file.  ``quiet`` clears F when, from a moment before F was
issued until after F completed, the program had nothing pending and changed nothing:

* **a moment before F was issued**: the last mark logged before F is a mark M given by the marking
  code, its ordering window right before it (``powercut-order-begin`` B, ``powercut-order-end`` E,
  no other mark between B and M; no window of the log interleaves with another).  The marker suspends the log-writes
  device after E and before M, and the suspend waits for every bio in flight, so F (logged after
  M) was issued after E was logged, so after B's ioctl returned: every call that completed before B
  in the trace completed before F was issued;
* **nothing pending then**: ``Pending`` after the last call before B holds nothing (the whole
  trace up to B walked call by call);
* **nothing changed until F completed**: no call on the program's files that changes one (write,
  truncate, allocate, a truncating or creating open, rename, link, unlink, mkdir, rmdir, a shared
  writable mapping; failed ones too) completes after B and before the first mark of the trace logged
  after F (F completed before that mark was logged; with none, the trace's end: strace follows the
  program until it exits), nor was still running then (a call in flight when that mark's ioctl
  returned is one strace split: its start is known);
* **the trace saw everything**: no blind spot (a shared writable mapping, io_uring), the log's key
  marks are ordered, and B's and the later mark's ioctls are in the trace (``syscalls.align``).

Or, where the program changed files around F, F is a **sync call's own flush**: F is the k-th
flush entry logged between its mark M and the log's next mark N, and the trace shows, between M's
and N's ioctls, one thread whose successful fsync/fdatasync calls of files with unsynced data (the
*data syncs*) number exactly as many as those flushes.  A data sync makes written data durable, so
it sends a flush after its writes completed and before it returns; when every data sync's data was
changed after the previous one returned (for the first: after M, with nothing pending before B),
these flushes are distinct and in order, so with no more flushes logged they are all of them and
the k-th is the k-th data sync's own: issued while that call ran, after its writes completed.  No
write of the program's was then in flight if nothing else was unsynced when the call began (no
background writeback of another file) and no sync_file_range (writes started with no flush after
them) lies between M and N, nor is a change still running when N's ioctl returned; writes logged
after F were issued after the call returned.  A FUA write of F's own bio (the FLUSH|FUA entry, then
its data at the same sector) goes with F.  A sync call that sends no flush of its own (a
directory's fsync after the file's fsync committed the same journal transaction) is not a data
sync; a background flush makes the counts differ: nothing is cleared.
Assumed: the filesystem waits for a sync's writes before the flush that makes them durable (what a
sync is for).

Not told apart, so never cleared: any flush of a log whose order marks interleave (concurrent
markers, a marker that died), a flush logged inside an ordering window or after a mark sent
another way (``mkfs``: set-up before the program's first mark), and any flush while the program held unsynced changes, even
where the kernel would not have written them then (background writeback may).  Writes of the
filesystem's own (journal, checkpoint) are not the program's: the filesystem orders them.
Assumed: the trace holds every process that changes the filesystem under test (strace -f around
the workload; the recording job's own marks are in the log only)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from powercut.core.log.dmlog import FLUSH, FUA, MARK, ORDER_BEGIN, ORDER_END, Entry
from powercut.core.log.markorder import LateWrites
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op, Trace
from powercut.core.trace.tracefacts import Pending

__all__ = ["CHANGES", "CLEARED", "Cleared", "changes_file", "quiet", "why_kept"]

CHANGES = (
    sc.WRITE,
    sc.TRUNCATE,
    sc.ALLOCATE,
    sc.RENAME,
    sc.LINK,
    sc.UNLINK,
    sc.MKDIR,
    sc.RMDIR,
    sc.MMAP_SHARED,
    sc.IO_URING,
)


@dataclass(frozen=True, slots=True)
class Cleared:
    """The late flushes and FUA writes (entry indices) the trace clears, and those it could not."""

    cleared: frozenset[int] = frozenset()
    kept: tuple[int, ...] = ()


def changes_file(o: Op, pending: Pending) -> bool:
    """Whether ``o`` changes one of the program's files (on the filesystem under ``pending.root``);
    io_uring and shared mappings count wherever they are (the trace cannot see their writes)."""
    if o.kind in (sc.IO_URING, sc.MMAP_SHARED):
        return True
    if not (pending.mine(o.path) or pending.mine(o.path2)):
        return False
    if o.kind == sc.OPEN:
        return "O_TRUNC" in o.flags or ("O_CREAT" in o.flags and o.path not in pending.exists)
    return o.kind in CHANGES


def _clean(p: Pending) -> bool:
    return not (p.dirty or p.direct or p.entries or p.renames)


def _windows(entries: Sequence[Entry]) -> dict[int, int] | None:
    """Mark entry -> the entry of the begin mark of the ordering window right before it: every mark
    other than the order marks closes one window (begin, end, the mark: a marker's sequence) or none
    (a mark sent another way: ``mkfs``, a fault plan's).  None when the order marks interleave
    anywhere (concurrent markers, a marker that died): which window precedes which mark is not told."""
    out: dict[int, int] = {}
    begin = end = -1
    for e in entries:
        if not e.flags & MARK:
            continue
        if e.mark == ORDER_BEGIN:
            if begin != -1:
                return None
            begin = e.index
        elif e.mark == ORDER_END:
            if begin == -1 or end != -1:
                return None
            end = e.index
        else:
            if begin != -1 and end == -1:
                return None
            if end != -1:
                out[e.index] = begin
            begin = end = -1
    return out if begin == -1 else None


def quiet(entries: Sequence[Entry], late: LateWrites, trace: Trace | None, root: str) -> Cleared:
    """Of ``late``'s flushes and FUA writes, those the trace clears (the module's docstring);
    ``root``: where the filesystem under test was mounted (trace paths start there)."""
    why = why_kept(entries, late, trace, root)
    return Cleared(
        frozenset(f for f, w in why.items() if w == CLEARED),
        tuple(f for f in sorted(why) if why[f] != CLEARED),
    )


CLEARED = "cleared"
NO_TRACE = "no trace"
BLIND = "a blind spot in the trace"
UNORDERED = "the log's marks are not ordered"
DISAGREE = "the trace's marks and the log's disagree"
INTERLEAVED = "order marks interleave"
NO_WINDOW = "no ordering window before it (set-up after mkfs, or inside a window)"
UNSYNCED = "unsynced changes before it"
CHANGED = "a change between the marks around it"
RUNNING = "a change still running at the next mark"


def why_kept(
    entries: Sequence[Entry], late: LateWrites, trace: Trace | None, root: str
) -> dict[int, str]:
    """Each of ``late``'s flushes and FUA writes -> CLEARED, or why the trace cannot clear it."""
    flagged = tuple(sorted((*late.flushes, *late.fuas)))
    if trace is None:
        whole = NO_TRACE
    elif trace.blind:
        whole = BLIND
    elif late.unordered:
        whole = UNORDERED
    else:
        whole = ""
    if not flagged or whole or trace is None:
        return dict.fromkeys(flagged, whole)
    marks = [(e.index, str(e.mark)) for e in entries if e.flags & MARK]
    aligned = sc.align(trace, marks)
    by_entry = {entry: seq for seq, entry in aligned.items()}
    pairs = sorted(aligned.items())
    if [e for _, e in pairs] != sorted(e for _, e in pairs):
        return dict.fromkeys(flagged, DISAGREE)
    windows = _windows(entries)
    if windows is None:
        return dict.fromkeys(flagged, INTERLEAVED)
    walk = _walk(trace.ops, root)
    clean, changed = walk.clean, walk.changed
    mark_entries = [e for e, _ in marks]
    traced = sorted(
        by_entry
    )  # the log's marks that are in the trace (a job's own, e.g. the end mark, are not)
    out: dict[int, str] = {}
    for f in flagged:
        at = bisect.bisect_left(mark_entries, f) - 1
        b = windows.get(mark_entries[at]) if at >= 0 else None
        lo = by_entry.get(b) if b is not None else None
        nxt = bisect.bisect_right(traced, f)  # the first traced mark after F, else the trace's end
        hi = by_entry[traced[nxt]] if nxt < len(traced) else len(trace.ops)
        if lo is None:
            out[f] = NO_WINDOW
        elif not clean[lo]:
            out[f] = UNSYNCED
        elif changed[hi] - changed[lo + 1]:
            out[f] = CHANGED
        elif hi < len(trace.ops) and _running(trace.ops, hi, root):
            out[f] = RUNNING
        else:
            out[f] = CLEARED
        if (
            lo is not None
            and out[f] == CHANGED
            and not (hi < len(trace.ops) and _running(trace.ops, hi, root))
            and _sync_bound(f, entries, (mark_entries, at, lo), by_entry, trace.ops, walk)
        ):
            out[f] = (
                CLEARED  # a change still running at the next mark is not among the window's calls
            )
    return out


def _sync_bound(
    f: int,
    entries: Sequence[Entry],
    where: tuple[Sequence[int], int, int],
    by_entry: dict[int, int],
    ops: Sequence[Op],
    walk: Walk,
) -> bool:
    """Whether F (entry ``f``: a flush, or the FUA write of a flush's own bio) is the k-th flush
    logged between its mark M and the next mark N and, by the trace, the flush of the k-th call
    between them that synced file data -- in flight only while that call ran, after its writes
    completed, with nothing else of the program's to write (the module's docstring)."""
    marks, at, lo = where  # the log's mark entries, M's place among them, B's call in the trace
    m = marks[at]
    flush = f if entries[f].flags & FLUSH else f - 1
    if flush != f and not (
        flush > m
        and entries[flush].flags & FLUSH
        and entries[flush].flags & FUA
        and entries[flush].sector == entries[f].sector
    ):
        return False  # a FUA write of its own, not the data of a flush's bio
    n = marks[at + 1] if at + 1 < len(marks) else len(entries)
    mseq = by_entry.get(m)
    nseq = by_entry.get(n, len(ops) if not any(x in by_entry for x in marks[at + 1 :]) else None)
    if mseq is None or nseq is None or walk.changed[mseq + 1] - walk.changed[lo + 1]:
        return False
    flushes = [e.index for e in entries[m + 1 : n] if e.flags & FLUSH]
    window = range(mseq + 1, nseq)
    if any(ops[s].kind in (sc.RANGE_SYNC, sc.MSYNC) for s in window):
        return False  # writes started without a flush after them: one may be in flight
    pid = {
        ops[s].pid for s in window if ops[s].kind in SYNCS or walk.changed[s + 1] > walk.changed[s]
    }
    data = [
        s
        for s in window
        if ops[s].kind in (sc.FSYNC, sc.FDATASYNC)
        and ops[s].ok
        and ops[s].path in walk.dirty_before[s]
    ]
    if len(pid) > 1 or flush not in flushes or len(data) != len(flushes):
        return False  # another thread's calls, or flushes not each a data sync's own
    if any(ops[s].path in walk.dirty_after[p] for p, s in zip(data, data[1:])):
        return (
            False  # data changed before the previous sync returned: its flush may have covered it
        )
    k = data[flushes.index(flush)]
    return walk.dirty_before[k] <= {
        ops[k].path
    }  # nothing else of the program's to write while F ran


SYNCS = (sc.FSYNC, sc.FDATASYNC, sc.SYNCFS, sc.SYNC)


@dataclass(slots=True)
class Walk:
    """The trace walked once with ``Pending``: ``clean[s + 1]``: nothing pending after ops[s];
    ``changed[s + 1]``: change calls among ops[:s + 1]; for each sync call, the files with unsynced
    data (page cache or O_DIRECT) before and after it."""

    clean: list[bool] = field(default_factory=lambda: [True])
    changed: list[int] = field(default_factory=lambda: [0])
    dirty_before: dict[int, frozenset[str]] = field(default_factory=dict)
    dirty_after: dict[int, frozenset[str]] = field(default_factory=dict)


def _walk(ops: Sequence[Op], root: str) -> Walk:
    w = Walk()
    pending = Pending(root)
    for s, o in enumerate(ops):
        c = changes_file(o, pending)
        sync = o.kind in SYNCS
        if sync:
            w.dirty_before[s] = frozenset(pending.dirty) | frozenset(pending.direct)
        pending.step(o)
        if sync:
            w.dirty_after[s] = frozenset(pending.dirty) | frozenset(pending.direct)
        w.clean.append(_clean(pending))
        w.changed.append(w.changed[-1] + c)
    return w


def _running(ops: Sequence[Op], hi: int, root: str) -> bool:
    """Whether a call that changes a file was still running when the mark at ``hi`` returned (strace
    split it: it began before that mark's completion)."""
    t = ops[hi].time
    probe = Pending(root)
    for o in ops[hi + 1 :]:
        if o.time > t + 60:
            break
        if 0 <= o.start < t and changes_file(o, probe):
            return True
    return False

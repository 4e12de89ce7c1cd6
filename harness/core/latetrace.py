"""Which of a log's late flushes the system-call trace clears (pure; host): blind spot (d) of
core/models.py, lifted where the trace proves that no write to the program's files was in flight.

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
from dataclasses import dataclass

from powercut.core import syscalls as sc
from powercut.core.dmlog import MARK, ORDER_BEGIN, ORDER_END, Entry
from powercut.core.markorder import LateWrites
from powercut.core.syscalls import Op, Trace
from powercut.core.tracefacts import Pending

__all__ = ["CHANGES", "CLEARED", "Cleared", "changes_file", "quiet", "why_kept"]

CHANGES = (sc.WRITE, sc.TRUNCATE, sc.ALLOCATE, sc.RENAME, sc.LINK, sc.UNLINK, sc.MKDIR, sc.RMDIR, sc.MMAP_SHARED,
           sc.IO_URING)


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
    return Cleared(frozenset(f for f, w in why.items() if w == CLEARED),
                   tuple(f for f in sorted(why) if why[f] != CLEARED))


CLEARED = "cleared"
NO_TRACE, BLIND, UNORDERED, DISAGREE, INTERLEAVED = (
    "no trace", "a blind spot in the trace", "the log's marks are not ordered",
    "the trace's marks and the log's disagree", "order marks interleave")
NO_WINDOW = "no ordering window before it (set-up after mkfs, or inside a window)"
UNSYNCED = "unsynced changes before it"
CHANGED = "a change between the marks around it"
RUNNING = "a change still running at the next mark"


def why_kept(entries: Sequence[Entry], late: LateWrites, trace: Trace | None, root: str) -> dict[int, str]:
    """Each of ``late``'s flushes and FUA writes -> CLEARED, or why the trace cannot clear it."""
    flagged = tuple(sorted((*late.flushes, *late.fuas)))
    whole = NO_TRACE if trace is None else BLIND if trace.blind else UNORDERED if late.unordered else ""
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
    pending = Pending(root)
    clean = [True]          # clean[s + 1]: nothing pending after ops[s]
    changed = [0]           # changed[s + 1]: change calls among ops[:s + 1]
    for o in trace.ops:
        c = changes_file(o, pending)
        pending.step(o)
        clean.append(_clean(pending))
        changed.append(changed[-1] + c)
    mark_entries = [e for e, _ in marks]
    traced = sorted(by_entry)   # the log's marks that are in the trace (a job's own, e.g. the end mark, are not)
    out: dict[int, str] = {}
    for f in flagged:
        at = bisect.bisect_left(mark_entries, f) - 1
        b = windows.get(mark_entries[at]) if at >= 0 else None
        lo = by_entry.get(b) if b is not None else None
        nxt = bisect.bisect_right(traced, f)   # the first traced mark after F, else the trace's end
        hi = by_entry[traced[nxt]] if nxt < len(traced) else len(trace.ops)
        out[f] = (NO_WINDOW if lo is None else UNSYNCED if not clean[lo] else
                  CHANGED if changed[hi] - changed[lo + 1] else
                  RUNNING if hi < len(trace.ops) and _running(trace.ops, hi, root) else CLEARED)
    return out


def _running(ops: Sequence[Op], hi: int, root: str) -> bool:
    """Whether a call that changes a file was still running when the mark at ``hi`` returned (strace
    split it: it began before that mark's completion)."""
    t = ops[hi].time
    probe = Pending(root)
    for o in ops[hi + 1:]:
        if o.time > t + 60:
            break
        if 0 <= o.start < t and changes_file(o, probe):
            return True
    return False

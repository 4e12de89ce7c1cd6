"""Which files a race exploration delays, from the recording's syscall trace (pure; issue 50).

``run --explore-races`` records once with the trace, then once per file the program synced before
an ack, with only that file's syncs held (``--delay-sync FILE=TIME``, core/recording/syncdelay.py): a reply
that races one file's sync shows only when that sync is slow and the others are not.  This module
reads the trace: every file (or directory) under the recorded filesystem whose fsync, fdatasync,
sync_file_range, msync or syncfs completed before some ack, how many such calls, how long they
took (strace -T), and the commits' own duration -- what the exploration's delay is set against."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from powercut.core.recording.syncdelay import Hold
from powercut.core.trace.syscalls import (
    FDATASYNC,
    FSYNC,
    MARK,
    MSYNC,
    RANGE_SYNC,
    SYNCFS,
    Op,
    Trace,
)

SYNC_KINDS = (FSYNC, FDATASYNC, RANGE_SYNC, MSYNC, SYNCFS)


@dataclass(frozen=True, slots=True)
class SyncedFile:
    """A file the program synced before an ack: its path relative to the recorded filesystem."""

    path: str
    calls: int  # its syncs that completed before the last ack
    seconds: float  # their time inside the kernel, summed (0 when the trace has no -T)
    longest: float

    def to_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "calls": self.calls,
            "seconds": round(self.seconds, 6),
            "longest": round(self.longest, 6),
        }


def _relative(path: str, mount: str) -> str:
    root = mount.rstrip("/") + "/"
    if path == mount.rstrip("/"):
        return "."
    return path[len(root) :] if path.startswith(root) else ""


def _acks(ops: Sequence[Op]) -> list[Op]:
    return [o for o in ops if o.kind == MARK and o.text.startswith("ack:")]


def synced_files(trace: Trace, mount: str) -> list[SyncedFile]:
    """Every file under ``mount`` synced (successfully) inside the commits -- after the first key
    mark (begin or ack) and before the last ack -- most synced first (then by path): the candidates
    of an exploration.  A sync of the set-up alone (before the first key mark: creating tables,
    writing a control file) races no ack, so holding it would spend a recording on nothing."""
    acks = _acks(trace.ops)
    if not acks:
        return []
    last = acks[-1].time
    first = next(
        o.seq for o in trace.ops if o.kind == MARK and o.text.startswith(("begin:", "ack:"))
    )
    found: dict[str, list[float]] = {}
    for o in trace.ops:
        if o.kind not in SYNC_KINDS or not o.ok or o.time > last or o.seq < first:
            continue
        rel = _relative(o.path, mount)
        if rel:
            found.setdefault(rel, []).append(max(o.duration, 0.0))
    return sorted(
        (SyncedFile(p, len(d), sum(d), max(d)) for p, d in found.items()),
        key=lambda f: (-f.calls, f.path),
    )


def commit_seconds(trace: Trace) -> float:
    """The median time from ``begin:K`` to ``ack:K`` over the trace's commits (0 when none pairs up)."""
    begun = {
        o.text.removeprefix("begin:"): o.time
        for o in trace.ops
        if o.kind == MARK and o.text.startswith("begin:")
    }
    spans = [
        o.time - begun[k] for o in _acks(trace.ops) if (k := o.text.removeprefix("ack:")) in begun
    ]
    return statistics.median(spans) if spans else 0.0


def glob_for(path: str) -> str:
    """The --delay-sync glob naming exactly this file (fnmatch's specials escaped)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def _returned(o: Op) -> float:
    """When ``o`` returned, as far as the trace says: strace -ttt stamps a whole line with the call's
    entry, a split one (``<... resumed>``) with its return; -T is the time between."""
    if o.start >= 0 or o.duration < 0:
        return o.time
    return o.time + o.duration


def with_holds(trace: Trace, held: Iterable[Hold]) -> Trace:
    """``trace`` with each sync --delay-sync held (``held``: the supervisor's log,
    core/recording/syncdelay.holds) marked as held: its ``held`` the hold, its ``start`` when the program
    called it.  The supervisor holds a call after strace saw it enter, so the trace already places
    it where the program made it, the hold inside its duration; a recording made with the earlier
    LD_PRELOAD shim traced a held call only once the hold was over, and ``start`` moves it back to
    when the program called it.  A held call is matched to the first traced sync of the same
    thread, call and file that had not returned when it was called (a thread's calls are
    sequential, and strace stamps a return before the thread runs on); a hold the trace does not
    show (a log from before the shim said which thread and when) is left out."""
    queues: dict[tuple[int, str, str], list[int]] = {}
    for i, o in enumerate(trace.ops):
        if o.kind in SYNC_KINDS:
            queues.setdefault((o.pid, o.kind, o.path), []).append(i)
    ops = list(trace.ops)
    placed = 0
    for h in held:
        if h.ns <= 0 or h.called < 0:
            continue
        queue = queues.get((h.tid, h.call, h.path), [])
        while queue and _returned(ops[queue[0]]) < h.called:
            queue.pop(0)
        if queue:
            i = queue.pop(0)
            ops[i] = dataclasses.replace(ops[i], start=min(ops[i].began, h.called), held=h.ns / 1e9)
            placed += 1
    if not placed:
        return trace
    return dataclasses.replace(trace, ops=ops)

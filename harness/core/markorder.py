"""Ordered marks (pure; host and guest): how dm-log-writes orders marks against writes, how the
marking code makes the order exact, and the rule that recognises the harness's ordering flushes in
a log, which the crash models (core/models.CrashSpace) treat as ordering points, not barriers.

How dm-log-writes orders a log (drivers/md/dm-log-writes.c, Debian 6.1.192 line numbers; mainline is
the same code): log_writes_map (643) gives every write bio a pending block at submission;
normal_end_io (766) puts a completed plain write on ``unflushed_blocks`` (785), a completed FUA
write straight on ``logging_blocks`` (782); an empty PREFLUSH bio takes the whole
``unflushed_blocks`` list at *submission* (716-718; a PREFLUSH write with data likewise, 758) and at
its completion appends that list, then itself, to ``logging_blocks`` (777-779); a mark
(log_writes_message 848 -> log_mark 584) is appended to ``logging_blocks`` at once (605). So a plain
write that completed before a mark is logged *after* it, at the next flush: under no-cache and flush
the prefixes between the mark and that flush lack data a cache-less disk holds (a false lost-ack,
e.g. O_DIRECT overwrites without fsync).

**Ordered marks** close it: the marking code (marks.py, powercut-mark) inserts
``powercut-order-begin``, fsyncs the recording's ``<name>-order`` device (a linear map over the
log-writes target with no page cache of its own: blkdev_fsync writes back nothing,
blkdev_issue_flush sends one empty PREFLUSH bio), inserts ``powercut-order-end``, suspends and
resumes the log-writes device (dm waits for every bio in flight: a program flush already in flight,
e.g. jbd2's commit, took some completed writes at its submission and logs them at its completion),
then inserts its own mark. So every write that completed before the mark call is logged before the
mark. The harness's flush is an **ordering point, not a durability barrier**:
``CrashSpace.ordering`` holds it and the models treat it as carrying nothing (write-cache and torn
may still lose the writes before it; ``flush`` does not cut after it). Recognised per window
(between the begin and end marks, nested for concurrent markers): its empty non-FUA FLUSH entries
are ordering flushes when there are exactly as many as begin marks; otherwise a program flush
completed inside the window and all of them count as barriers (``ambiguous_windows``: a write-cache
loss there may be missed, never invented).

Not fixed: a write submitted but not completed when the mark is given may be logged after the mark
(the program had no right to count on it); FUA writes and marks that complete after a plain write
still precede it (blind spot (a)); a log recorded through a device without a write cache (no FLUSH
reaches the target: blk-core submit_bio_noacct, 746) or with marks sent another way (``dmsetup
message``) stays unordered and (c)'s false alarm remains possible there: ``mark_order(log)`` counts
the ordered key marks, the manifest and the report show it.
"""
from __future__ import annotations

from collections.abc import Sequence

from powercut.core.crashstate import is_key_mark
from powercut.core.dmlog import FLUSH, FUA, MARK, ORDER_BEGIN, ORDER_END, Entry, LogIndex

__all__ = ["mark_order", "ordering_flushes"]


def ordering_flushes(entries: Sequence[Entry]) -> tuple[frozenset[int], int, int]:
    """(the ordering flushes, how many ordering windows, how many of them ambiguous): see the module's
    docstring.  A window opens at a ``powercut-order-begin`` mark and closes when every begin so far has
    its ``powercut-order-end`` (concurrent markers nest); its empty non-FUA FLUSH entries are
    ordering flushes iff there are exactly as many as begin marks in it.  A window still open at
    the end of the log (a marker killed mid-way) is ambiguous."""
    ordering: set[int] = set()
    windows = ambiguous = depth = begins = 0
    flushes: list[int] = []
    for e in entries:
        if e.flags & MARK and e.mark == ORDER_BEGIN:
            depth += 1
            begins += 1
        elif e.flags & MARK and e.mark == ORDER_END and depth:
            depth -= 1
            if not depth:
                windows += 1
                if len(flushes) == begins:
                    ordering.update(flushes)
                else:
                    ambiguous += 1
                begins, flushes = 0, []
        elif depth and e.flags & FLUSH and not e.flags & FUA and not e.nr_sectors:
            flushes.append(e.index)
    if depth:
        windows += 1
        ambiguous += 1
    return frozenset(ordering), windows, ambiguous


def mark_order(entries: LogIndex | Sequence[Entry]) -> dict[str, int | bool]:
    """How a log's key marks are ordered (for the manifest and reports): a key mark is ordered when
    an ordering flush lies between it and the key mark before it; ``ordered``: all of them are."""
    entries = entries.entries if isinstance(entries, LogIndex) else entries
    ordering, _, ambiguous = ordering_flushes(entries)
    keys = ordered_keys = 0
    pending = False
    for i, e in enumerate(entries):
        if i in ordering:
            pending = True
        elif is_key_mark(e):
            keys += 1
            ordered_keys += pending
            pending = False
    return {"key_marks": keys, "ordered_key_marks": ordered_keys, "ordering_flushes": len(ordering),
            "ambiguous_windows": ambiguous, "ordered": keys > 0 and ordered_keys == keys}

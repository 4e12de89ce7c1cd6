"""Ordered marks (pure; host and guest): how dm-log-writes orders marks against writes, how the
marking code makes the order exact, and the rule that recognises the harness's ordering flushes in
a log, which the crash models (core/states/models.CrashSpace) treat as ordering points, not barriers.

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
completed inside the window and all of them count as barriers (an ambiguous window: a write-cache
loss there may be missed, never invented).

**Orphan begins**: a marker that dies between its begin and end marks leaves a begin that no end
matches.  Ends are matched to the latest unmatched begin (LIFO: concurrent markers nest); a begin
still unmatched at the end of the log is an orphan and opens no window (before, it kept one window
open to the end of the log and made every later ordering flush a barrier).  Its span closes at the
first key mark after it: every window overlapping the span counts as a barrier (its flushes may
include the orphan's), windows after it are judged as usual.  A flush of the orphan outside every
window is a barrier anyway.  Assumed: the begin LIFO leaves unmatched is the dead marker's (a marker
whose window spans another's key mark while a third dies inside it could be taken for the orphan).
``ambiguous_windows`` names each ambiguous window and orphan with the first key mark after it -- the
ack whose write-cache losses may be missed -- and ``AmbiguousWindow.note`` is the sentence the
check's coverage carries (core/states/coverage: weakened).

**Writes that complete while a flush is in flight** (issue 37, item 6; blind spot (a) is the same
gap): a write W that completes after a FLUSH F's submission is logged after F (at a later flush),
so "W durable, F's own window lost" (a crash before F completes) is in no model.  It is not
generated: the log is the same when W was *issued after F completed* (fsync, then the commit
record: the most common correct pattern), and for that program the state cannot happen -- it
would be a false failure.  The log cannot tell the two apart (nor a FUA write U that completed after
a plain write logged after it from one issued before it).  ``late_writes`` counts the flushes and
FUA writes with a data window of their own that have plain writes logged after them before the
bound (the first key mark after an ordering begin mark logged after them: that marker's flush
takes every write completed before it, its suspend logs them; without one, the end of the log),
and its ``note`` says the check is weakened there.

Not fixed: a write submitted but not completed when the mark is given may be logged after the mark
(the program had no right to count on it); FUA writes and marks that complete after a plain write
still precede it (blind spot (a)); a log recorded through a device without a write cache (no FLUSH
reaches the target: blk-core submit_bio_noacct, 746) or with marks sent another way (``dmsetup
message``) stays unordered and (c)'s false alarm remains possible there: ``mark_order(log)`` counts
the ordered key marks, the manifest and the report show it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from powercut.core.log.dmlog import (
    FLUSH,
    FUA,
    MARK,
    ORDER_BEGIN,
    ORDER_END,
    Entry,
    LogIndex,
    is_key_mark,
)

__all__ = [
    "AmbiguousWindow",
    "LateWrites",
    "UnorderedAck",
    "ambiguous_windows",
    "late_parts",
    "late_writes",
    "mark_order",
    "ordering_flushes",
    "possibly_false",
    "unordered_acks",
]

FLUSH_INSIDE = "program flush inside"
ORPHAN_BEGIN = "orphan begin"


@dataclass(frozen=True, slots=True)
class AmbiguousWindow:
    """An ordering window whose flushes count as barriers: entries ``first``..``last`` (a window:
    its begin and end marks; an orphan: its begin mark up to the entry before ``key``), ``why``
    (``FLUSH_INSIDE`` or ``ORPHAN_BEGIN``), ``key`` the first key mark after it (its entry index and
    ``key_mark`` text; None at the end of the log): the ack whose write-cache losses may be missed."""

    first: int
    last: int
    why: str
    key: int | None = None
    key_mark: str | None = None

    def note(self) -> str:
        """One sentence for coverage.Coverage.notes."""
        affects = (
            f"affects {self.key_mark}" if self.key_mark is not None else "no key mark after it"
        )
        if self.why == ORPHAN_BEGIN:
            return (
                f"orphan ordering begin mark at entry {self.first} (its marker died; closed at entry "
                f"{self.last + 1 if self.key is not None else self.last}): a flush of it counted as a barrier, "
                f"write-cache losses across it not generated; {affects}"
            )
        return (
            f"ordering window at entries {self.first}-{self.last} (a program flush completed inside it) "
            f"counted as a barrier: write-cache losses across it not generated; {affects}"
        )


def _orphans(entries: Sequence[Entry]) -> list[int]:
    """The begin marks no end mark matches (each end matched to the latest unmatched begin), sorted."""
    open_: list[int] = []
    for e in entries:
        if e.flags & MARK and e.mark == ORDER_BEGIN:
            open_.append(e.index)
        elif e.flags & MARK and e.mark == ORDER_END and open_:
            open_.pop()
    return open_


def _scan(entries: Sequence[Entry]) -> tuple[frozenset[int], int, tuple[AmbiguousWindow, ...]]:
    """(ordering flushes, windows, ambiguous windows and orphans in log order)."""
    orphans = _orphans(entries)
    keys = [e.index for e in entries if is_key_mark(e)] if orphans else []
    spans = []  # each orphan's [begin, first key mark after it) -- or to the end of the log
    for o in orphans:
        at = bisect.bisect_right(keys, o)
        spans.append([o, keys[at] if at < len(keys) else len(entries)])
    skip = set(orphans)
    ordering: set[int] = set()
    found: list[tuple[int, int, str]] = []
    windows = depth = begins = first = 0
    flushes: list[int] = []
    for e in entries:
        if e.flags & MARK and e.mark == ORDER_BEGIN and e.index not in skip:
            first = e.index if not depth else first
            depth += 1
            begins += 1
        elif e.flags & MARK and e.mark == ORDER_END and depth:
            depth -= 1
            if not depth:
                windows += 1
                hit = [sp for sp in spans if sp[0] <= e.index and first < sp[1]]
                for sp in (
                    hit
                ):  # overlaps an orphan's span: its flushes are barriers, the orphan's note says so
                    sp[1] = max(sp[1], e.index + 1)
                if not hit and len(flushes) == begins:
                    ordering.update(flushes)
                elif not hit:
                    found.append((first, e.index, FLUSH_INSIDE))
                begins, flushes = 0, []
        elif depth and e.flags & FLUSH and not e.flags & FUA and not e.nr_sectors:
            flushes.append(e.index)
    windows += len(orphans)  # no window is left open: every begin left unmatched is an orphan
    keys = keys or ([e.index for e in entries if is_key_mark(e)] if found else [])
    out = []
    for lo, hi, why in sorted(
        found + [(o, sp[1] - 1, ORPHAN_BEGIN) for o, sp in zip(orphans, spans)]
    ):
        at = bisect.bisect_right(keys, hi)
        k = entries[keys[at]] if at < len(keys) else None
        out.append(
            AmbiguousWindow(
                lo, hi, why, None if k is None else k.index, None if k is None else k.mark
            )
        )
    return frozenset(ordering), windows, tuple(out)


@dataclass(frozen=True, slots=True)
class LateWrites:
    """Where a crash with a flush (or FUA write) still in flight could keep a later-logged write
    while losing the flush's window (the FUA write): states no model generates (module docstring).
    ``flushes``/``fuas``: entry indices of such barrier FLUSH entries and FUA writes; ``unbounded``:
    how many of them have no ordering begin mark after them (their later writes are counted to the
    end of the log); ``keys``: the first key mark after each, deduplicated, in log order;
    ``unordered``: the log has key marks but no ordering marks at all (recorded before ordered marks,
    or marked with ``dmsetup message``), so nothing bounds where a flush completed."""

    flushes: tuple[int, ...] = ()
    fuas: tuple[int, ...] = ()
    unbounded: int = 0
    keys: tuple[str, ...] = ()
    unordered: bool = False
    cleared: int = 0  # flushes and FUA writes the system-call trace cleared (core/trace/latetrace.py): not counted above
    setup_only: bool = (
        False  # every one is bounded by the log's first key mark: the states it keeps from the
    )
    #                            models all lie before it (set-up windows: nothing begun or acknowledged)
    setup: tuple[int, ...] = field(
        default=(), compare=False
    )  # those of them so bounded (set-up alone)

    def __bool__(self) -> bool:
        return bool(self.flushes or self.fuas)

    def note(self) -> str:
        """One sentence for coverage.Coverage.notes ('' when there is nothing to say)."""
        if not self:
            return ""
        nf, nu = len(self.flushes), len(self.fuas)
        what = " and ".join(
            x
            for x in (
                f"{nf} flush{'es' * (nf != 1)}" if nf else "",
                f"{nu} FUA write{'s' * (nu != 1)}" if nu else "",
            )
            if x
        )
        keys = ", ".join(self.keys[:3]) + (
            f" and {len(self.keys) - 3} more" if len(self.keys) > 3 else ""
        )
        return (
            (
                "log without ordered marks: writes completing during a flush not bounded; "
                if self.unordered
                else ""
            )
            + f"writes logged after {what} before the next ordered key mark may have completed while "
            f"{'it was' if nf + nu == 1 else 'they were'} in flight: states keeping such a write and losing "
            f"the flush's window (the FUA write) not generated (the log cannot tell them from writes "
            f"issued after it completed)"
            + (f"; {self.cleared} more cleared by the system-call trace" if self.cleared else "")
            + (f"; affects {keys}" if keys else "")
        )


def late_writes(
    entries: LogIndex | Sequence[Entry],
    ordering: frozenset[int] | None = None,
    cleared: frozenset[int] = frozenset(),
    only: frozenset[int] | None = None,
) -> LateWrites:
    """The flushes and FUA writes after which a plain write is logged before the bound (module
    docstring): a barrier FLUSH entry whose window (plain data entries since the barrier before it)
    is not empty, or a FUA write.  ``ordering``: the log's ordering flushes (computed if None);
    ``cleared``: those of them the system-call trace cleared (core/trace/latetrace.quiet: no write of
    the program's in flight), left out and counted; ``only``: count only these (a part: ``late_parts``).  O(n)."""
    es = entries.entries if isinstance(entries, LogIndex) else entries
    if ordering is None:
        ordering = ordering_flushes(es)[0]
    n = len(es)
    plain = [0] * (n + 1)  # plain (non-FUA) data entries before i
    for i, e in enumerate(es):
        plain[i + 1] = plain[i] + bool(e.changes_device and not e.flags & FUA)
    key_at, begin_at = (
        [n] * (n + 1),
        [n] * (n + 1),
    )  # the first key mark / order begin mark at or after i
    for i in range(n - 1, -1, -1):
        e = es[i]
        key_at[i] = i if is_key_mark(e) else key_at[i + 1]
        begin_at[i] = i if e.flags & MARK and e.mark == ORDER_BEGIN else begin_at[i + 1]
    flushes: list[int] = []
    fuas: list[int] = []
    keys: dict[str, None] = {}
    unbounded = window = gone = 0
    setup: list[int] = []
    for i, e in enumerate(es):
        barrier = bool(e.flags & FLUSH) and i not in ordering
        fua = e.is_write and bool(e.flags & FUA)
        b = begin_at[i + 1]
        bound = key_at[b + 1] if b < n else n
        if only is not None and i not in only:
            pass
        elif (
            (fua or barrier and plain[i] > plain[window])
            and plain[bound] > plain[i + 1]
            and i in cleared
        ):
            gone += 1
        elif (fua or barrier and plain[i] > plain[window]) and plain[bound] > plain[i + 1]:
            (flushes if barrier else fuas).append(i)
            unbounded += b == n
            if bound == key_at[0] < n:
                setup.append(i)
            if key_at[i + 1] < n:
                keys.setdefault(str(es[key_at[i + 1]].mark), None)
        if barrier:
            window = i
    return LateWrites(
        tuple(flushes),
        tuple(fuas),
        unbounded,
        tuple(keys),
        begin_at[0] == n and key_at[0] < n,
        gone if flushes or fuas else 0,
        bool(flushes or fuas) and len(setup) == len(flushes) + len(fuas),
        tuple(setup),
    )


def late_parts(
    entries: LogIndex | Sequence[Entry],
    ordering: frozenset[int] | None = None,
    cleared: frozenset[int] = frozenset(),
) -> tuple[LateWrites, LateWrites]:
    """``late_writes`` in two parts: the flushes bounded by the log's first key mark (their states lie
    in the set-up windows alone: ``setup_only``), and the others (they may reach a commit window)."""
    whole = late_writes(entries, ordering, cleared)
    mine = frozenset(whole.setup)
    everything = frozenset(
        range(len(entries.entries if isinstance(entries, LogIndex) else entries))
    )
    return (
        late_writes(entries, ordering, cleared, mine) if mine else LateWrites(),
        late_writes(entries, ordering, cleared, everything - mine)
        if len(whole.setup) < len(whole.flushes) + len(whole.fuas)
        else LateWrites(),
    )


def ordering_flushes(entries: Sequence[Entry]) -> tuple[frozenset[int], int, int]:
    """(the ordering flushes, how many ordering windows, how many of them ambiguous): see the module's
    docstring.  A window opens at a ``powercut-order-begin`` mark and closes when every begin so far has
    its ``powercut-order-end`` (concurrent markers nest); its empty non-FUA FLUSH entries are
    ordering flushes iff there are exactly as many as begin marks in it.  A begin no end matches (a
    marker killed mid-way) is an orphan: ambiguous, and it opens no window."""
    ordering, windows, amb = _scan(entries)
    return ordering, windows, len(amb)


def ambiguous_windows(entries: LogIndex | Sequence[Entry]) -> tuple[AmbiguousWindow, ...]:
    """The ambiguous ordering windows and orphan begins of a log, in log order, each with the first
    key mark after it."""
    return _scan(entries.entries if isinstance(entries, LogIndex) else entries)[2]


def mark_order(entries: LogIndex | Sequence[Entry]) -> dict[str, int | bool]:
    """How a log's key marks are ordered (for the manifest and reports): a key mark is ordered when
    it is the marking code's (``_windowed``) -- an ambiguous window's mark too: its marker's own
    flush, issued after the mark was asked for, logged every write completed before it; only which
    of the window's flushes is the program's is not told; ``ordered``: all of them are."""
    entries = entries.entries if isinstance(entries, LogIndex) else entries
    ordering, _, ambiguous = ordering_flushes(entries)
    keys = ordered_keys = 0
    for _, windowed in _windowed(entries):
        keys += 1
        ordered_keys += windowed
    return {
        "key_marks": keys,
        "ordered_key_marks": ordered_keys,
        "ordering_flushes": len(ordering),
        "ambiguous_windows": ambiguous,
        "ordered": keys > 0 and ordered_keys == keys,
    }


@dataclass(frozen=True, slots=True)
class UnorderedAck:
    """An ack mark with no ordering window before it (sent with ``dmsetup message``, or recorded before
    ordered marks): writes that completed before it may be logged after it, up to ``until`` (the next
    barrier flush's entry, or the log's length), so a state cut in between (``ack < cut <= until``)
    may lack them: a failure there is possibly a false alarm (blind spot (c))."""

    ack: int
    until: int
    key: str

    def holds(self, cut: int) -> bool:
        return self.ack < cut <= self.until

    def sentence(self) -> str:
        return (
            f"possibly a false alarm: the log cannot order {self.key} (entry {self.ack}, sent without an "
            f"ordering window) against the writes logged after it before entry {self.until}"
        )


def _windowed(entries: Sequence[Entry]) -> list[tuple[Entry, bool]]:
    """Each key mark with whether the marking code gave it: the marker inserts its begin mark, flushes
    (after the mark was asked for: every write completed by then is logged), inserts its end mark,
    suspends and resumes, then inserts the key mark -- so each closed window (an end mark matching a
    begin) precedes one key mark of its own.  Concurrent markers nest; a key mark takes a window closed
    before it and not yet taken, if any (none: sent another way, e.g. ``dmsetup message``)."""
    out = []
    opened = closed = 0
    for e in entries:
        if e.flags & MARK and e.mark == ORDER_BEGIN:
            opened += 1
        elif e.flags & MARK and e.mark == ORDER_END and opened:
            opened -= 1
            closed += 1
        elif is_key_mark(e):
            out.append((e, closed > 0))
            closed = max(0, closed - 1)
    return out


def unordered_acks(entries: LogIndex | Sequence[Entry]) -> tuple[UnorderedAck, ...]:
    """The ack marks the marking code did not give (``_windowed``: ``mark_order``'s unordered ones),
    each with the first barrier flush after it."""
    es = entries.entries if isinstance(entries, LogIndex) else entries
    ordering = ordering_flushes(es)[0]
    out = [
        (e.index, str(e.mark))
        for e, windowed in _windowed(es)
        if not windowed and e.ack_key is not None
    ]
    n = len(es)
    barrier_after = [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        barrier_after[i] = i if es[i].flags & FLUSH and i not in ordering else barrier_after[i + 1]
    return tuple(UnorderedAck(a, barrier_after[a + 1], k) for a, k in out)


def possibly_false(doubts: Sequence[UnorderedAck], cut: int) -> UnorderedAck | None:
    """The unordered ack whose window a state cut at ``cut`` lies in, if any."""
    return next((d for d in doubts if d.holds(cut)), None)

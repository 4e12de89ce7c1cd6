"""Crash models: turn a scanned log into an ordered, deterministic list of crash states (pure; host and
guest).  Owns what a state means; id syntax and seeded picks: stateid.py; judging each disk image
once: selection.py.

A crash state is *(cut, kept)*: ``entries[:cut]`` are the candidates, ``dropped`` the data entries
among them that did not persist, ``torn`` the write that persisted only partly (entry -> sector
offsets that did).  Marks and empty flush/FUA entries carry no data and are never dropped; DISCARD
entries count as writes of zeros.  Only *key marks* (``ack:``/``begin:``) change what a checker is
told; other marks (``mkfs``, a workload's notes, the end mark) split no state.

* ``no-cache``: every prefix, cut = 1..n, nothing dropped.
* ``flush``: the prefixes that end right after a FLUSH, a FUA or a key mark (generic/482); FLUSH
  here and below means a barrier, not an ordering flush (blind spot (c)).
* ``write-cache``: for cut c let f be the last FLUSH entry before c.  Durable: every data entry
  before f, the data of f itself only if f is also FUA (a PREFLUSH write's payload goes to the
  volatile cache after the flush), every FUA entry in (f, c).  Droppable: the other data entries in
  [f, c) (all of entries[:c] when there is no flush yet); any subset of them may be lost.
  **Cut points**: c = n and every c whose entry c is a key mark, a FLUSH, or a FUA entry with data
  (just before each, and the end).  They cover every (durable set, acks, begun) of every cut 1..n:
  if entry c is a plain write or discard, a mark that is not a key mark, or carries nothing, cut
  c+1 has the same last flush, key marks and forced-durable entries and a superset of the
  droppable ones, so every state of cut c is one of cut c+1 (with entry c dropped too); by
  induction every cut is covered by the next cut point.  Cutting *after* a key mark instead would
  miss "commit k written, its ack not yet logged".  With k droppable entries: all 2**k subsets if
  k <= ``exhaustive_bound``, else keep all, drop all, drop each, keep each, ``samples`` seeded.
* ``torn``: (1) every write w of several sectors, cut right after it, all before it kept, w
  persisted at a proper subset of its sectors (units): first half, second half, all but the last, only
  the first, ``torn_samples`` seeded (every proper subset if no more).  (2) At every write-cache
  cut point, each droppable write of several sectors with its first half persisted and the other
  droppable entries all kept, or all lost; blind spot (b)'s picks; ``torn_samples`` seeded picks
  of (write, sectors, lost subset).  Within a model, states with the same durable data (torn
  sectors included) and key marks before the cut are one (the earlier cut wins).  Order: cut, id.
* ``torn-4k``: ``torn`` with device-aligned 4 KiB units for sectors: disks with 4 KiB physical sectors (4Kn, 512e,
  most SSDs) write those atomically; ``torn`` can also tear inside one (e.g. ext4's 1 KiB superblock), as a 512n disk.

**Coverage is relative to log order** (blind spots): the log has one order per flush window,
completion order for FUA writes and marks, flush time for plain writes.
(a) A plain write is logged at the next flush, after FUA writes and marks that completed later:
    "this plain write durable, that earlier-logged FUA write not" is never generated.
(b) A plain write W overlapping an earlier-logged FUA write U of its window is replayed on top of
    it, though U may have reached the disk last.  Covered by ``torn`` (2) only, with everything
    else kept: W persisted but for the sectors where U would be on top (U's, unless an entry
    between U and W rewrote them), the image of "U after W".  A W entirely under U is the
    write-cache state that loses W; not generated together with lost entries.
(c) Marks: dm-log-writes logs a plain write at the next flush but a mark at once, so a mark can
    precede writes that completed before it (a false lost-ack under no-cache and flush).  Ordered
    marks fix that; the harness's ordering flushes (``CrashSpace.ordering``) are ordering points,
    not durability barriers, and count as carrying nothing here.  The kernel's lines, the rule
    that recognises them and what stays unfixed: core/markorder.py.
(d) A write completing during a FLUSH is logged after it: "it durable, the flush's window lost" is
    not generated (the log is the same if it was issued after the flush completed: no such state);
    ``CrashSpace.notes`` names it (``late``) and the ambiguous windows: a check's coverage (weakened).

Use ``space = CrashSpace(index)`` once per log (thread-safe), then ``space.states(model)``, ``.state_from_id(id)``;
lying-disk models: core/lies.py.  ``enumerate_states``, ``make_state``, ``state_from_id`` take a CrashSpace or a log.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import MappingProxyType

# the wrapped import blocks below keep the module under the 450-line cap
# isort: off
from powercut.core.coverage import SPACE_CAP, Tally
from powercut.core.crashstate import (CrashState, DeviceChanges, KeyPrefix, Seen, Torn, describe, is_key_mark,
                                      sector_units, unit_count, unit_sectors)
from powercut.core import lies
from powercut.core.dmlog import FLUSH, FUA, Entry, LogIndex
from powercut.core.markorder import AmbiguousWindow, LateWrites, ambiguous_windows, late_writes, ordering_flushes
from powercut.core.stateid import (MODELS, TORN_MODELS, Pick, StateId, check_model, format_id, format_ranges,
                                   not_under, parse_id, parse_ranges, pick_bits, resolve, seeded_index, subset_picks,
                                   tear_picks, torn_sample, tw_sample, wc_sample)
from powercut.errors import UsageError
# isort: on


__all__ = ["MODELS", "MAX_EXHAUSTIVE_BOUND", "CrashSpace", "describe", "durable_entries", "enumerate_states",
           "format_ranges", "make_state", "parse_ranges", "space", "state_from_id"]
MAX_EXHAUSTIVE_BOUND = 20
UNIT_BYTES = MappingProxyType({"torn": 0, "torn-4k": 4096})  # a torn model's atomic unit (0: a log sector)
def durable_entries(entries: CrashSpace | LogIndex | Sequence[Entry],
                    state: CrashState) -> Iterator[tuple[Entry, tuple[int, ...] | None]]:
    """What to replay for a state: (entry, None) for fully persisted data entries, (entry, sector
    offsets) for torn ones, in log order."""
    seq = _seq(entries)
    for i, torn in state.kept(DeviceChanges(seq)):
        yield seq[i], torn


def _seq(x: CrashSpace | LogIndex | Sequence[Entry]) -> Sequence[Entry]:
    return x.entries if isinstance(x, (CrashSpace, LogIndex)) else x


class CrashSpace:
    """The crash states of one log: prefix tables built once, states and ids on demand.
    Thread-safe: the tables are immutable; the cache of (acks, begun) tuples is locked."""

    def __init__(self, entries: LogIndex | Sequence[Entry]) -> None:
        self.sectorsize = int(getattr(entries, "sectorsize", 512) or 512)
        self.entries: tuple[Entry, ...] = tuple(_seq(entries))
        n = self.n = len(self.entries)
        last_flush, epoch, ndata, version = ([-1] * (n + 1), *([0] * (n + 1) for _ in range(3)))
        self.is_key = tuple(is_key_mark(e) for e in self.entries)
        self.is_data = tuple(e.changes_device for e in self.entries)
        self.ordering, self.order_windows, self.ambiguous_windows = ordering_flushes(self.entries)
        self._events: list[tuple[bool, str]] = []  # (is an ack, key) of every key mark that adds a key
        acked, begun, lf = set[str](), set[str](), -1
        for i, e in enumerate(self.entries):
            if e.index != i:
                raise UsageError(f"entry at position {i} has index {e.index}: not a log's entry list")
            barrier = bool(e.flags & FLUSH) and i not in self.ordering
            lf = i if barrier else lf
            last_flush[i + 1], epoch[i + 1] = lf, epoch[i] + 1 if barrier else epoch[i]  # a run shares one int
            ndata[i + 1] = ndata[i] + 1 if e.changes_device else ndata[i]
            is_ack, key = e.ack_key is not None, e.ack_key if e.ack_key is not None else e.begin_key
            if key is not None and key not in acked and (is_ack or key not in begun):
                self._events.append((is_ack, key))
                (acked if is_ack else begun).add(key)
            version[i + 1] = len(self._events) if key is not None else version[i]
        self.last_flush, self.epoch, self.ndata = tuple(last_flush), tuple(epoch), tuple(ndata)
        self.key_version = tuple(version)  # a key mark adds a key or changes nothing: same version <=> same keys
        self._ack_keys = [k for is_ack, k in self._events if is_ack]  # in ack order: the acks before a cut are a prefix
        self._keys: dict[int, tuple[KeyPrefix, tuple[str, ...]]] = {}
        self._at, self._nacks, self._begun = 0, 0, dict[str, None]()  # after _at events: _nacks acks, these begun
        self._lock = threading.Lock()
        self._offs: tuple[int, ...] = ()

    @functools.cached_property
    def ambiguous(self) -> tuple[AmbiguousWindow, ...]:
        """The ambiguous ordering windows and orphan begins (markorder.ambiguous_windows)."""
        return ambiguous_windows(self.entries)

    @functools.cached_property
    def late(self) -> LateWrites:
        """Flushes/FUA writes with writes logged after them: blind spot (d) (markorder.late_writes)."""
        return late_writes(self.entries, self.ordering)

    @property
    def notes(self) -> tuple[str, ...]:
        """What weakens every model's space of this log, one sentence each (coverage.Coverage.notes)."""
        return tuple(w.note() for w in self.ambiguous) + ((self.late.note(),) if self.late else ())

    def keys(self, cut: int) -> tuple[Sequence[str], tuple[str, ...]]:
        """(acks, begun-not-acked) before the cut, each in the order of its first mark.  The acks are
        a KeyPrefix of the log's ack keys (a tuple in all but memory)."""
        v = self.key_version[cut]
        with self._lock:
            got = self._keys.get(v)
            if got is None:
                if v < self._at:
                    self._at, self._nacks, self._begun = 0, 0, {}
                for is_ack, k in self._events[self._at:v]:
                    if is_ack:
                        self._nacks += 1
                        self._begun.pop(k, None)
                    else:
                        self._begun[k] = None
                self._at = v
                got = self._keys[v] = (KeyPrefix(self._ack_keys, self._nacks), tuple(self._begun))
            return got

    def is_barrier(self, i: int) -> bool:
        """Entry i is a FLUSH that makes what precedes it durable (not an ordering flush)."""
        return bool(self.entries[i].flags & FLUSH) and i not in self.ordering

    def is_flush_cut(self, i: int) -> bool:
        """The flush model cuts right after entry i: a barrier FLUSH, a FUA entry or a key mark."""
        return self.is_barrier(i) or bool(self.entries[i].flags & FUA) or self.is_key[i]

    def droppable(self, cut: int) -> tuple[int, ...]:
        """Data entries before the cut that a write-back cache may still lose (sorted)."""
        es, data = self.entries, self.is_data
        return tuple(i for i in range(max(self.last_flush[cut], 0), cut) if data[i] and not es[i].flags & FUA)

    def cut_points(self) -> list[int]:
        """The write-cache cut points: just before each key mark, barrier FLUSH, FUA entry with data; the end."""
        es, n, key, data = self.entries, self.n, self.is_key, self.is_data
        return [c for c in range(1, n + 1)
                if c == n or key[c] or self.is_barrier(c) or data[c] and es[c].flags & FUA]

    def canon(self, cut: int, dropped: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """Smallest equivalent (cut, dropped): same durable data, same key marks before the cut.
        ``dropped`` is sorted; walk back over dropped entries and entries without data."""
        c, j, key, data = cut, len(dropped) - 1, self.is_key, self.is_data
        while c > 0 and not key[c - 1]:
            if data[c - 1]:
                if j < 0 or dropped[j] != c - 1:
                    break
                j -= 1
            c -= 1
        return c, dropped[:j + 1]

    def per(self, model: str) -> int:
        """Sectors per atomic unit of a torn model."""
        return max(1, UNIT_BYTES.get(model, 0) // self.sectorsize)

    def tearable(self, model: str, e: Entry) -> bool:
        return e.is_write and unit_count(e, self.per(model)) > 1

    def units(self, model: str, e: Entry) -> int:
        return unit_count(e, self.per(model))

    def expand(self, model: str, e: Entry, units: Iterable[int]) -> tuple[int, ...]:
        return unit_sectors(e, self.per(model), tuple(units), self._offsets(e.nr_sectors))

    def _offsets(self, n: int) -> tuple[int, ...]:
        """0, 1, ... (at least n) as shared ints: 8 bytes per sector offset of a torn state, not 36."""
        if n > len(self._offs):  # a race only builds an equal table twice
            self._offs = tuple(range(max(n, 2 * len(self._offs))))
        return self._offs

    def state(self, model: str, cut: int, dropped: tuple[int, ...] = (), torn: Torn = (), sid: str | None = None,
              droppable: Sequence[int] | None = None) -> CrashState:
        """A state from checked parts (torn parts in sectors); ``sid`` None: its canonical explicit id."""
        acks, begun = self.keys(cut)
        if sid is None:
            pool = (droppable if droppable is not None else self.droppable(cut)) if dropped else ()
            units = tuple((t, sector_units(self.entries[t], self.per(model), s) or ()) for t, s in torn)
            sid = format_id(model, cut, dropped, units, pool)
        return CrashState(model, cut, dropped, torn, acks, begun, sid, self.epoch[cut])

    def make_state(self, model: str, cut: int, dropped: Sequence[int] = (),
                   torn: Sequence[tuple[int, Sequence[int]]] = ()) -> CrashState:
        """Build and validate one state (e.g. a minimized one); UsageError if the model cannot
        produce it from this log."""
        check_model(model)
        if not 1 <= cut <= self.n:
            raise UsageError(f"cut {cut} out of range 1..{self.n} for a log of {self.n} entries")
        drop = tuple(sorted(set(dropped)))
        tears = tuple((int(i), tuple(sorted(set(s)))) for i, s in torn)
        why = self._refusal(model, cut, drop, tears)
        if why:
            raise UsageError(why)
        return self.state(model, cut, drop, tears)

    def _refusal(self, model: str, cut: int, drop: tuple[int, ...], tears: Torn) -> str | None:
        """Why ``model`` cannot produce this state; None if it can."""
        pool = self.droppable(cut)
        if drop and model in ("no-cache", "flush"):
            return f"model {model} drops no entries"
        torn_model = model in TORN_MODELS
        if torn_model != bool(tears) or len(tears) > 1:
            return "a torn state tears exactly one write" if torn_model else f"model {model} tears no writes"
        if model == "flush" and not self.is_flush_cut(cut - 1):
            return (f"the flush model cuts only after FLUSH (not an ordering flush), FUA and ack/begin marks; "
                    f"entry {cut - 1} is none")
        bad = set(drop) - set(pool)
        if torn_model:
            t, sectors = tears[0]
            e = self.entries[t] if 0 <= t < cut else None
            if e is None or not self.tearable(model, e):
                return f"entry {t} is not a write of several {'sectors' if self.per(model) == 1 else 'units'} before cut {cut}"
            if (t != cut - 1 or drop) and t not in pool:  # combined with the write cache: from the epoch
                return (f"entry {t} cannot be torn with lost entries or before entry {cut - 1} at cut {cut}: "
                        f"it is FUA or before the last flush")
            if not sectors or len(sectors) >= e.nr_sectors or sectors[0] < 0 or sectors[-1] >= e.nr_sectors:
                return f"torn sectors must be a proper non-empty subset of 0..{e.nr_sectors - 1}"
            if sector_units(e, self.per(model), sectors) is None:
                return f"{model} tears between {UNIT_BYTES[model]}-byte units, not inside one"
            bad |= set(drop) & {t}
        return (f"entries {format_ranges(sorted(bad))} cannot be lost at cut {cut} (FUA, before the last flush, "
                f"no data, past the cut, or the torn write)") if bad else None

    def state_from_id(self, state_id: str) -> CrashState:
        """Rebuild the state an id names; UsageError for a malformed id or one that does not fit."""
        if (sid := parse_id(state_id)).model in lies.LIE_MODELS:
            return lies.state_from_id(self, sid)
        if not 1 <= sid.cut <= self.n:
            raise UsageError(f"state id {state_id!r}: cut {sid.cut} out of range 1..{self.n}")
        es = self.entries
        model = sid.model
        lost, torn = resolve(sid, self.droppable(sid.cut) if sid.subset else (),
                             lambda i: self.units(model, es[i]) if i < sid.cut and self.tearable(model, es[i]) else 0)
        torn = tuple((t, self.expand(model, es[t], u)) for t, u in torn)
        state = self.make_state(model, sid.cut, lost, torn)
        return dataclasses.replace(state, id=sid.text()) if sid.seeded else state

    # -- enumeration ------------------------------------------------------------------------------
    def states(self, model: str, *, seed: int = 0, exhaustive_bound: int = 10, samples: int = 64,
               torn_samples: int = 4, tally: Tally | None = None) -> list[CrashState]:
        """All states of a model, ordered by cut then id, without duplicates; deterministic per seed."""
        return list(self.iter_states(model, seed=seed, exhaustive_bound=exhaustive_bound, samples=samples,
                                     torn_samples=torn_samples, tally=tally))

    def iter_states(self, model: str, *, seed: int = 0, exhaustive_bound: int = 10, samples: int = 64,
                    torn_samples: int = 4, tally: Tally | None = None) -> Iterator[CrashState]:
        """``states()`` one at a time, in order: memory for one cut's states and one epoch's
        equivalence keys, not the model's states (millions at 10^6 entries).  Arguments checked now.
        ``tally``: gets every window the model enumerates (coverage.Tally.window) as it goes."""
        check_model(model)
        limits = (("seed", seed, 2**63 - 1), ("exhaustive_bound", exhaustive_bound, MAX_EXHAUSTIVE_BOUND),
                  ("samples", samples, 10**6), ("torn_samples", torn_samples, 10**4))
        for name, value, hi in limits:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
                raise UsageError(f"{name} must be an integer in 0..{hi}, got {value!r}")
        if model in lies.LIE_MODELS:
            return lies.iter_states(self, model, seed, exhaustive_bound, samples, tally or Tally())
        if model == "no-cache":
            return (self.state(model, c) for c in range(1, self.n + 1))
        if model == "flush":
            return (self.state(model, i + 1) for i in range(self.n) if self.is_flush_cut(i))
        t = tally if tally is not None else Tally()
        if model == "write-cache":
            return _by_cut(self, model, self.cut_points(), lambda b: _write_cache(b, seed, exhaustive_bound, samples, t))
        alone = {i + 1 for i, e in enumerate(self.entries) if self.tearable(model, e)}
        combined = set(self.cut_points())
        return _by_cut(self, model, sorted(alone | combined), lambda b: _torn_alone(b, seed, torn_samples, t),
                       lambda b: _torn_combined(b, seed, torn_samples, combined, t))


class _Batch:
    """States of one cut, skipping any equivalent to one already generated (``seen`` spans cuts)."""

    def __init__(self, sp: CrashSpace, seen: Seen, model: str, cut: int) -> None:
        self.sp, self.seen, self.model, self.cut = sp, seen, model, cut
        self.states: list[CrashState] = []

    @functools.cached_property
    def droppable(self) -> tuple[int, ...]:
        return self.sp.droppable(self.cut)

    def add(self, dropped: tuple[int, ...], torn: Torn = (), sid: str | None = None) -> bool:
        if not self.seen.add(self.cut, dropped, torn):
            return False
        self.states.append(self.sp.state(self.model, self.cut, dropped, torn, sid, self.droppable if dropped else ()))
        return True


def _by_cut(sp: CrashSpace, model: str, cuts: Iterable[int],
            *fills: Callable[[_Batch], None]) -> Iterator[CrashState]:
    seen = Seen(sp)
    for cut in cuts:   # in increasing order
        seen.advance(cut)
        b = _Batch(sp, seen, model, cut)
        for fill in fills:
            fill(b)
        yield from sorted(b.states, key=lambda s: s.id)


def _pow2(k: int) -> int:
    """2**k, saturating at SPACE_CAP (a window's space; no huge ints for a huge window)."""
    return 1 << k if k < SPACE_CAP.bit_length() - 1 else SPACE_CAP


def _write_cache(b: _Batch, seed: int, bound: int, samples: int, tally: Tally) -> None:
    """One window: every subset of the cut's droppable entries, or picks and seeded samples (sampled)."""
    pool, cut = b.droppable, b.cut
    added = 0
    if len(pool) <= bound:
        for mask in range(1 << len(pool)):
            added += b.add(pick_bits(pool, mask))
        tally.window(1 << len(pool), added, sampled=False)
        return
    for dropped in subset_picks(pool):
        added += b.add(dropped)
    got = j = 0
    while got < samples and j < 4 * samples + 16:
        got += b.add(wc_sample(pool, seed, cut, j), (), f"write-cache@{cut}/r{seed}.{j}")
        j += 1
    tally.window(_pow2(len(pool)), added + got, sampled=True)


def _torn_alone(b: _Batch, seed: int, torn_samples: int, tally: Tally) -> None:
    """One window: the tears of the write before the cut; sampled unless every one was tried."""
    i, sp = b.cut - 1, b.sp
    e = sp.entries[i]
    if not sp.tearable(b.model, e):
        return
    m = sp.units(b.model, e)
    picks = dict.fromkeys(tear_picks(m, torn_samples))
    added = 0
    for p in picks:
        added += b.add((), ((i, sp.expand(b.model, e, p)),))
    j = got = 0
    while len(picks) < (1 << m) - 2 and got < torn_samples and j < 4 * torn_samples + 16:
        p = torn_sample(m, seed, b.cut, j)
        if p not in picks:
            picks[p] = None
            added += b.add((), ((i, sp.expand(b.model, e, p)),), f"{b.model}@{b.cut}/r{seed}.{j}")
            got += 1
        j += 1
    space = _pow2(m) - 2
    tally.window(space, added, sampled=len(picks) < space)


def _torn_combined(b: _Batch, seed: int, torn_samples: int, cuts: set[int], tally: Tally) -> None:
    """One window: (tearable write, tear, lost others) of a cut; sampled unless every one was tried."""
    if b.cut not in cuts:
        return
    sp, cut, pool = b.sp, b.cut, b.droppable
    model, es = b.model, sp.entries
    tearable = [t for t in pool if sp.tearable(model, es[t])]
    if not tearable:
        return
    fua = [u for u in es[max(sp.last_flush[cut], 0):cut] if u.is_fua and u.is_write]
    picks: list[tuple[tuple[int, ...], int, tuple[int, ...], str | None]] = []   # (lost, torn write, tear, id)
    for t in tearable:
        half = sp.expand(model, es[t], range(sp.units(model, es[t]) // 2))
        picks += [((), t, half, None), (tuple(i for i in pool if i != t), t, half, None)]
        picks += [((), t, x, None) for x in _under_fua(sp, t, fua) if sector_units(es[t], sp.per(model), x) is not None]
    for j in range(torn_samples):  # duplicates of earlier picks are not retried
        t = tearable[seeded_index(len(tearable), seed, cut, j)]
        r = Pick("r", "", seed, j)
        picks.append((tw_sample([i for i in pool if i != t], seed, cut, t, j), t,
                      sp.expand(model, es[t], torn_sample(sp.units(model, es[t]), seed, t + 1, j)),
                      StateId(model, cut, r, r, t).text()))
    added = sum(b.add(lost, ((t, tear),), sid) for lost, t, tear, sid in picks)
    space = min(SPACE_CAP, sum((_pow2(sp.units(model, es[t])) - 2) * _pow2(len(pool) - 1) for t in tearable))
    tally.window(space, added, sampled=len({p[:3] for p in picks}) < space)


def _under_fua(sp: CrashSpace, t: int, fua: Sequence[Entry]) -> Iterator[tuple[int, ...]]:
    """Blind spot (b): for each FUA write U of the window (``fua``) logged before write t and
    overlapping it, the sectors of t that persist if U reached the disk after t (all but those
    where U's data would be on top)."""
    w = sp.entries[t]
    hits = [u for u in fua if u.index < t and u.sector < w.sector + w.nr_sectors and w.sector < u.sector + u.nr_sectors]
    for u in hits:
        later = [(x.sector, x.nr_sectors) for x in sp.entries[u.index + 1:t] if x.changes_device]
        keep = not_under(w.sector, w.nr_sectors, (u.sector, u.nr_sectors), later)
        if keep:
            yield keep


# -- the functional API (each call on the CrashSpace given, or on a fresh one for a log) --------------
def space(index: CrashSpace | LogIndex | Sequence[Entry]) -> CrashSpace:
    """The CrashSpace of a log (the same object if given one)."""
    return index if isinstance(index, CrashSpace) else CrashSpace(index)


def enumerate_states(index: CrashSpace | LogIndex | Sequence[Entry], model: str, *, seed: int = 0,
                     exhaustive_bound: int = 10, samples: int = 64, torn_samples: int = 4,
                     tally: Tally | None = None) -> list[CrashState]:
    """All states of a model, ordered by cut then id, without duplicates; deterministic per seed."""
    return space(index).states(model, seed=seed, exhaustive_bound=exhaustive_bound, samples=samples,
                               torn_samples=torn_samples, tally=tally)


def make_state(index: CrashSpace | LogIndex | Sequence[Entry], model: str, cut: int, dropped: Sequence[int] = (),
               torn: Sequence[tuple[int, Sequence[int]]] = ()) -> CrashState:
    """Build and validate one state; UsageError if the model cannot produce it from this log."""
    return space(index).make_state(model, cut, dropped, torn)


def state_from_id(index: CrashSpace | LogIndex | Sequence[Entry], state_id: str) -> CrashState:
    """Rebuild the state an id names; UsageError for a malformed id or one that does not fit."""
    return space(index).state_from_id(state_id)

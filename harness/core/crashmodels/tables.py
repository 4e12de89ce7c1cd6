"""The prefix tables of one log that every crash model reads (pure; host and guest):
``SpaceTables`` -- per cut, the last barrier FLUSH, the epoch, the data entries so far and the key
version; the acks and begun keys before a cut; the droppable entries, the write-cache cut points,
the canonical (cut, dropped) of a state; and the state built from checked parts.  Built once per
log; core/states/models.CrashSpace adds the models (enumeration, ids, refusals) on top.  Thread-safe: the
tables are immutable; the cache of (acks, begun) tuples is locked."""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence

from powercut.core.crashmodels.target import NO_TARGET, LieTarget
from powercut.core.log.dmlog import FLUSH, FUA, Entry, LogIndex, is_key_mark
from powercut.core.log.markorder import (
    AmbiguousWindow,
    LateWrites,
    ambiguous_windows,
    late_parts,
    late_writes,
    ordering_flushes,
)
from powercut.core.states.crashstate import CrashState, KeyPrefix, Torn, sector_units
from powercut.core.states.idparts import format_id
from powercut.errors import UsageError


def entries_of(x: SpaceTables | LogIndex | Sequence[Entry]) -> Sequence[Entry]:
    """The entries of a space, a log index or an entry list."""
    return x.entries if isinstance(x, (SpaceTables, LogIndex)) else x


class SpaceTables:
    """The tables of one log.  ``lie_target``: the program's blocks the lying-disk models aim at
    (target.LieTarget; none by default); ``cleared``: the late flushes (markorder.late_writes) the
    system-call trace cleared (core/trace/latetrace.quiet), left out of the notes."""

    def __init__(
        self,
        entries: LogIndex | Sequence[Entry],
        *,
        lie_target: LieTarget = NO_TARGET,
        cleared: frozenset[int] = frozenset(),
    ) -> None:
        self.cleared = (
            cleared  # late flushes the system-call trace cleared (core/trace/latetrace.py)
        )
        self.sectorsize = int(getattr(entries, "sectorsize", 512) or 512)
        self.entries: tuple[Entry, ...] = tuple(entries_of(entries))
        self.lie_target = lie_target
        n = self.n = len(self.entries)
        last_flush = [-1] * (n + 1)
        epoch = [0] * (n + 1)  # a run of equal values shares one int object
        ndata = [0] * (n + 1)
        version = [0] * (n + 1)
        self.is_key = tuple(is_key_mark(e) for e in self.entries)
        self.is_data = tuple(e.changes_device for e in self.entries)
        self.ordering, self.order_windows, self.ambiguous_windows = ordering_flushes(self.entries)
        self._events: list[
            tuple[bool, str]
        ] = []  # (is an ack, key) of every key mark that adds a key
        acked = set[str]()
        begun = set[str]()
        lf = -1
        for i, e in enumerate(self.entries):
            if e.index != i:
                raise UsageError(
                    f"entry at position {i} has index {e.index}: not a log's entry list"
                )
            barrier = bool(e.flags & FLUSH) and i not in self.ordering
            if barrier:
                lf = i
            last_flush[i + 1] = lf
            epoch[i + 1] = epoch[i] + 1 if barrier else epoch[i]
            ndata[i + 1] = ndata[i] + 1 if e.changes_device else ndata[i]
            is_ack = e.ack_key is not None
            key = e.ack_key if is_ack else e.begin_key
            if key is not None and key not in acked and (is_ack or key not in begun):
                self._events.append((is_ack, key))
                (acked if is_ack else begun).add(key)
            version[i + 1] = len(self._events) if key is not None else version[i]
        self.last_flush = tuple(last_flush)
        self.epoch = tuple(epoch)
        self.ndata = tuple(ndata)
        self.key_version = tuple(
            version
        )  # a key mark adds a key or changes nothing: same version <=> same keys
        self._ack_keys = [
            k for is_ack, k in self._events if is_ack
        ]  # in ack order: the acks before a cut are a prefix
        self._keys: dict[int, tuple[KeyPrefix, tuple[str, ...]]] = {}
        # the running position of ``keys``: after _at events, _nacks acks and these keys begun
        self._at = 0
        self._nacks = 0
        self._begun = dict[str, None]()
        self._lock = threading.Lock()
        self._offs: tuple[int, ...] = ()

    @functools.cached_property
    def ambiguous(self) -> tuple[AmbiguousWindow, ...]:
        """The ambiguous ordering windows and orphan begins (markorder.ambiguous_windows)."""
        return ambiguous_windows(self.entries)

    @functools.cached_property
    def late(self) -> LateWrites:
        """Flushes/FUA writes with writes logged after them: blind spot (d) (markorder.late_writes)."""
        return late_writes(self.entries, self.ordering, self.cleared)

    @functools.cached_property
    def late_parts(self) -> tuple[LateWrites, LateWrites]:
        """``late`` in two: the flushes whose kept-out states lie in the set-up windows alone, the others."""
        return late_parts(self.entries, self.ordering, self.cleared)

    @property
    def notes(self) -> tuple[str, ...]:
        """What weakens every model's space of this log, one sentence each (coverage.Coverage.notes):
        each ambiguous window, the late flushes of the set-up windows, those of the commit windows."""
        return tuple(w.note() for w in self.ambiguous) + tuple(
            p.note() for p in self.late_parts if p
        )

    @property
    def setup_notes(self) -> tuple[str, ...]:
        """Those of ``notes`` that weaken only the set-up windows (cuts before the first key mark): the
        note of the late flushes bounded by the first key mark."""
        setup = self.late_parts[0]
        return (setup.note(),) if setup else ()

    def keys(self, cut: int) -> tuple[Sequence[str], tuple[str, ...]]:
        """(acks, begun-not-acked) before the cut, each in the order of its first mark.  The acks are
        a KeyPrefix of the log's ack keys (a tuple in all but memory)."""
        v = self.key_version[cut]
        with self._lock:
            got = self._keys.get(v)
            if got is None:
                if v < self._at:
                    self._at = 0
                    self._nacks = 0
                    self._begun = {}
                for is_ack, k in self._events[self._at : v]:
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
        es = self.entries
        data = self.is_data
        return tuple(
            i for i in range(max(self.last_flush[cut], 0), cut) if data[i] and not es[i].flags & FUA
        )

    def cut_points(self) -> list[int]:
        """The write-cache cut points: just before each key mark, barrier FLUSH, FUA entry with data; the end."""
        es = self.entries
        key = self.is_key
        data = self.is_data
        return [
            c
            for c in range(1, self.n + 1)
            if c == self.n or key[c] or self.is_barrier(c) or data[c] and es[c].flags & FUA
        ]

    def canon(self, cut: int, dropped: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """Smallest equivalent (cut, dropped): same durable data, same key marks before the cut.
        ``dropped`` is sorted; walk back over dropped entries and entries without data."""
        c = cut
        j = len(dropped) - 1
        key = self.is_key
        data = self.is_data
        while c > 0 and not key[c - 1]:
            if data[c - 1]:
                if j < 0 or dropped[j] != c - 1:
                    break
                j -= 1
            c -= 1
        return c, dropped[: j + 1]

    def offsets(self, n: int) -> tuple[int, ...]:
        """0, 1, ... (at least n) as shared ints: 8 bytes per sector offset of a torn state, not 36."""
        if n > len(self._offs):  # a race only builds an equal table twice
            self._offs = tuple(range(max(n, 2 * len(self._offs))))
        return self._offs

    def state(
        self,
        model: str,
        cut: int,
        dropped: tuple[int, ...] = (),
        torn: Torn = (),
        sid: str | None = None,
        droppable: Sequence[int] | None = None,
        per: int = 1,
    ) -> CrashState:
        """A state from checked parts (torn parts in sectors; ``per``: sectors per atomic unit of the
        torn model); ``sid`` None: its canonical explicit id."""
        acks, begun = self.keys(cut)
        if sid is None:
            pool: Sequence[int]
            if not dropped:
                pool = ()
            elif droppable is not None:
                pool = droppable
            else:
                pool = self.droppable(cut)
            units = tuple((t, sector_units(self.entries[t], per, s) or ()) for t, s in torn)
            sid = format_id(model, cut, dropped, units, pool)
        return CrashState(model, cut, dropped, torn, acks, begun, sid, self.epoch[cut])

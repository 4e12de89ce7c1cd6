"""Crash models: turn a scanned log into an ordered, deterministic list of crash states (pure).

A crash state is *(cut, kept)*: ``entries[:cut]`` are the candidates, ``dropped`` the data entries
among them that did not persist, ``torn`` the writes that persisted only partly (entry -> sector
offsets that did persist).  Marks, empty flushes and empty FUA entries carry no data and are never
dropped.  DISCARD entries count as writes of zeros.

Models:

* ``no-cache``: every prefix, cut = 1..n, nothing dropped.
* ``flush``: the no-cache prefixes that end right after a FLUSH, FUA or MARK entry (generic/482).
* ``write-cache``: for cut c let f be the last FLUSH entry before c.  Durable: every data entry
  before f, the data of f itself only if f is also FUA (a PREFLUSH write's payload goes to the
  volatile cache after the flush), every FUA entry in (f, c).  Droppable: the other data entries in
  [f, c) (all of entries[:c] when there is no flush yet); any subset of them may be lost.
  **Cut points** are c = n and every c whose entry c is a mark, a FLUSH, or a FUA entry with data
  (i.e. "just before" each of them, and the end of the log).  Why that covers every distinct
  (durable set, acks, begun) of every cut 1..n: if entry c is a plain write/discard (or carries
  nothing), then cut c+1 has the same last flush, the same marks, the same durable base and a
  superset of droppable entries, so every state of cut c is also a state of cut c+1; by induction
  every cut is covered by the next cut point at or after it.  Cutting *after* a mark instead (as
  generic/482 does) would miss the states "commit k written but its ack not yet logged".  The
  state sets of two consecutive cut points can still meet in one place: keep-all just before a
  FLUSH that makes no data durable equals drop-all just after it; such duplicates (same durable
  data, same marks before the cut) are removed, the earlier cut wins.  With k droppable entries at
  a cut: all 2**k subsets if k <= ``exhaustive_bound``, else structured picks (keep all, drop all,
  drop each one, keep each one) plus ``samples`` seeded random subsets.
* ``torn``: for every write with nr_sectors > 1, cut right after it with everything before it
  kept and that write persisted only at a proper non-empty subset of its sectors: structured
  picks (first half, second half, all but the last sector, only the first) plus ``torn_samples``
  seeded random subsets (all proper subsets if there are no more than that).

State ids (stable; together with the log they rebuild the state, see ``state_from_id``)::

    id      = model "@" cut [ "/" spec ]
    spec    = "d" ranges          write-cache: these entries dropped, the other droppable ones kept
            | "k" [ ranges ]      write-cache: only these droppable entries kept ("k" alone: none)
            | "s" ranges          torn: the sector offsets of entry cut-1 that persisted
            | "r" seed "." n      write-cache/torn: the n-th seeded random pick (SHAKE-256 based)
    ranges  = range *( "," range ) ; range = uint [ "-" uint ]   strictly increasing, inclusive
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .errors import UsageError
from .log import FLUSH, FUA, MARK, Entry, LogIndex

log = logging.getLogger(__name__)

MODELS = ("no-cache", "flush", "write-cache", "torn")
MAX_EXHAUSTIVE_BOUND = 20
_NUM = r"[0-9]{1,19}"
_RANGES = rf"{_NUM}(?:-{_NUM})?(?:,{_NUM}(?:-{_NUM})?)*"
_ID = re.compile(rf"({'|'.join(MODELS)})@({_NUM})(?:/(?:([dks])((?:{_RANGES})?)|r({_NUM})\.({_NUM})))?")


@dataclass(frozen=True, slots=True)
class CrashState:
    model: str
    cut: int
    dropped: tuple[int, ...]
    torn: tuple[tuple[int, tuple[int, ...]], ...]
    acks: tuple[str, ...]
    begun: tuple[str, ...]
    id: str
    epoch: int  # number of FLUSH entries before the cut


def state_to_json(state: CrashState) -> dict[str, object]:
    return {"id": state.id, "model": state.model, "cut": state.cut, "epoch": state.epoch,
            "dropped": list(state.dropped), "torn": [[i, list(s)] for i, s in state.torn],
            "acks": list(state.acks), "begun": list(state.begun)}


def durable_entries(entries: LogIndex | Sequence[Entry],
                    state: CrashState) -> Iterator[tuple[Entry, tuple[int, ...] | None]]:
    """What to replay for a state: (entry, None) for fully persisted data entries, (entry, sector
    offsets) for torn ones, in log order."""
    seq = entries.entries if isinstance(entries, LogIndex) else entries
    dropped = set(state.dropped)
    torn = dict(state.torn)
    for e in seq[:state.cut]:
        if e.changes_device and e.index not in dropped:
            yield e, torn.get(e.index)


# -- ranges ----------------------------------------------------------------------------------------
def format_ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def parse_ranges(text: str, limit: int, what: str) -> tuple[int, ...]:
    """Expand ``ranges`` (already syntax-checked); every value must be < limit, strictly increasing."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo_s, _, hi_s = part.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
        if hi < lo or (out and lo <= out[-1]):
            raise UsageError(f"{what} {text!r}: ranges must be strictly increasing")
        if hi >= limit:
            raise UsageError(f"{what} {text!r}: {hi} is out of range (must be < {limit})")
        out.extend(range(lo, hi + 1))
    return tuple(out)


def _bits(key: str, k: int) -> int:
    return int.from_bytes(hashlib.shake_256(key.encode()).digest((k + 7) // 8), "little") & ((1 << k) - 1)


def _pick(items: Sequence[int], bits: int) -> tuple[int, ...]:
    s = format(bits, f"0{len(items)}b")[::-1] if items else ""
    return tuple(x for x, b in zip(items, s) if b == "1")


def _wc_sample(droppable: Sequence[int], seed: int, cut: int, n: int) -> tuple[int, ...]:
    return _pick(droppable, _bits(f"powercut/write-cache/{seed}/{cut}/{n}", len(droppable)))


def _torn_sample(m: int, seed: int, cut: int, n: int) -> tuple[int, ...]:
    full = (1 << m) - 1
    for attempt in range(64):
        bits = _bits(f"powercut/torn/{seed}/{cut}/{n}/{attempt}", m)
        if 0 < bits < full:
            return _pick(range(m), bits)
    return (0,)


# -- the log as seen by the models -----------------------------------------------------------------
class _Ctx:
    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = entries
        n = self.n = len(entries)
        self.last_flush = last_flush = [-1] * (n + 1)
        self.epoch = epoch = [0] * (n + 1)
        self.nmarks = nmarks = [0] * (n + 1)
        self.marks: list[Entry] = []
        lf = -1
        for i, e in enumerate(entries):
            if e.index != i:
                raise UsageError(f"entry at position {i} has index {e.index}: not a log's entry list")
            if e.flags & FLUSH:
                lf = i
            if e.flags & MARK:
                self.marks.append(e)
            last_flush[i + 1] = lf
            epoch[i + 1] = epoch[i] + (e.flags & FLUSH > 0)
            nmarks[i + 1] = len(self.marks)
        self._keys: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {0: ((), ())}
        self._km = 0
        self._acked: dict[str, None] = {}
        self._begun: dict[str, None] = {}
        self._lock = threading.Lock()  # keys() extends shared state incrementally

    def keys(self, cut: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(acks, begun-not-acked) before the cut."""
        m = self.nmarks[cut]
        with self._lock:
            found = self._keys.get(m)
            return found if found is not None else self._extend(m)

    def _extend(self, m: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if m < self._km:
            self._km, self._acked, self._begun = 0, {}, {}
        for e in self.marks[self._km:m]:
            if e.ack_key is not None:
                self._acked[e.ack_key] = None
            elif e.begin_key is not None:
                self._begun[e.begin_key] = None
        self._km = m
        self._keys[m] = (tuple(self._acked), tuple(k for k in self._begun if k not in self._acked))
        return self._keys[m]

    def droppable(self, cut: int) -> list[int]:
        start = max(self.last_flush[cut], 0)
        return [i for i in range(start, cut) if _droppable(self.entries[i])]

    def state(self, model: str, cut: int, dropped: tuple[int, ...] = (),
              torn: tuple[tuple[int, tuple[int, ...]], ...] = (), id: str | None = None,
              droppable: Sequence[int] | None = None) -> CrashState:
        acks, begun = self.keys(cut)
        sid = id or _explicit_id(model, cut, dropped, torn, droppable if droppable is not None
                                 else self.droppable(cut) if dropped else ())
        return CrashState(model, cut, dropped, torn, acks, begun, sid, self.epoch[cut])

    def canon(self, cut: int, dropped: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
        """Smallest equivalent (cut, dropped): same durable data, same marks before the cut.
        ``dropped`` is sorted; walk back over dropped entries and entries without data."""
        c, j = cut, len(dropped) - 1
        while c > 0:
            e = self.entries[c - 1]
            if e.flags & MARK:
                break
            if e.changes_device:
                if j < 0 or dropped[j] != c - 1:
                    break
                j -= 1
            c -= 1
        return c, dropped[:j + 1]


def _droppable(e: Entry) -> bool:
    return e.changes_device and not e.flags & FUA


def _explicit_id(model: str, cut: int, dropped: tuple[int, ...], torn: tuple[tuple[int, tuple[int, ...]], ...],
                 droppable: Sequence[int]) -> str:
    base = f"{model}@{cut}"
    if torn:
        return f"{base}/s{format_ranges(torn[0][1])}"
    if not dropped:
        return base
    if 2 * len(dropped) <= len(droppable):
        return f"{base}/d{format_ranges(dropped)}"
    gone = set(dropped)
    kept = [i for i in droppable if i not in gone]
    return f"{base}/k{format_ranges(kept)}"


_CACHE: list[tuple[Sequence[Entry], _Ctx]] = []


def _ctx(index: LogIndex | Sequence[Entry]) -> _Ctx:
    entries = index.entries if isinstance(index, LogIndex) else index
    if not isinstance(entries, tuple):  # a list may change under us: no caching
        return _Ctx(entries)
    if _CACHE and _CACHE[0][0] is entries:
        return _CACHE[0][1]
    ctx = _Ctx(entries)
    _CACHE[:] = [(entries, ctx)]
    return ctx


def _check_model(model: str) -> None:
    if model not in MODELS:
        raise UsageError(f"unknown crash model {model!r}; valid models: {', '.join(MODELS)}")


# -- single states -----------------------------------------------------------------------------------
def make_state(index: LogIndex | Sequence[Entry], model: str, cut: int, dropped: Sequence[int] = (),
               torn: Sequence[tuple[int, Sequence[int]]] = ()) -> CrashState:
    """Build and validate one state (e.g. a minimized one); raises UsageError if the model cannot
    produce it from this log."""
    _check_model(model)
    ctx = _ctx(index)
    if not 1 <= cut <= ctx.n:
        raise UsageError(f"cut {cut} out of range 1..{ctx.n} for a log of {ctx.n} entries")
    drop = tuple(sorted(set(dropped)))
    tears = tuple((int(i), tuple(sorted(set(s)))) for i, s in torn)
    if model != "write-cache" and drop:
        raise UsageError(f"model {model} drops no entries")
    if model != "torn" and tears:
        raise UsageError(f"model {model} tears no writes")
    if model == "flush" and not ctx.entries[cut - 1].flags & (FLUSH | FUA | MARK):
        raise UsageError(f"flush model cuts only after FLUSH, FUA and MARK entries; entry {cut - 1} is none")
    if model == "write-cache" and not set(drop) <= set(ctx.droppable(cut)):
        bad = sorted(set(drop) - set(ctx.droppable(cut)))
        raise UsageError(f"entries {format_ranges(bad)} cannot be lost at cut {cut} (FUA, before the "
                         f"last flush, no data, or past the cut)")
    if model == "torn":
        e = ctx.entries[cut - 1]
        if len(tears) != 1 or tears[0][0] != cut - 1:
            raise UsageError(f"a torn state tears exactly entry {cut - 1} (the one before the cut)")
        if not e.is_write or e.nr_sectors < 2:
            raise UsageError(f"entry {cut - 1} is not a multi-sector write")
        sectors = tears[0][1]
        if not sectors or len(sectors) >= e.nr_sectors or sectors[0] < 0 or sectors[-1] >= e.nr_sectors:
            raise UsageError(f"torn sectors must be a proper non-empty subset of 0..{e.nr_sectors - 1}")
    return ctx.state(model, cut, drop, tears)


def state_from_id(index: LogIndex | Sequence[Entry], state_id: str) -> CrashState:
    """Rebuild the state an id names; raises UsageError for a malformed id or one that does not fit."""
    m = _ID.fullmatch(state_id.strip()) if isinstance(state_id, str) else None
    if m is None:
        raise UsageError(f"malformed state id {state_id!r}; expected MODEL@CUT[/dRANGES|/kRANGES|/sRANGES|"
                         f"/rSEED.N] with MODEL one of {', '.join(MODELS)}")
    model, cut_s, kind, ranges, seed_s, n_s = m.groups()
    cut = int(cut_s)
    ctx = _ctx(index)
    if not 1 <= cut <= ctx.n:
        raise UsageError(f"state id {state_id!r}: cut {cut} out of range 1..{ctx.n}")
    if kind is None and seed_s is None:
        return make_state(index, model, cut)
    if model == "write-cache" and kind in ("d", "k"):
        droppable = ctx.droppable(cut)
        listed = parse_ranges(ranges, ctx.n, f"state id {state_id!r}:")
        bad = set(listed) - set(droppable)
        if bad:
            raise UsageError(f"state id {state_id!r}: entries {format_ranges(sorted(bad))} are not droppable "
                             f"at cut {cut}")
        return make_state(index, model, cut, listed if kind == "d" else [i for i in droppable if i not in listed])
    if model == "torn" and kind == "s":
        e = ctx.entries[cut - 1]
        sectors = parse_ranges(ranges, max(e.nr_sectors, 1), f"state id {state_id!r}:") if e.is_write else ()
        return make_state(index, model, cut, (), [(cut - 1, sectors)])
    if seed_s is not None and model in ("write-cache", "torn"):
        seed, n = int(seed_s), int(n_s)
        if model == "write-cache":
            return ctx.state(model, cut, _wc_sample(ctx.droppable(cut), seed, cut, n), (), state_id)
        e = ctx.entries[cut - 1]
        make_state(index, model, cut, (), [(cut - 1, (0,))])  # validates the entry
        return ctx.state(model, cut, (), ((cut - 1, _torn_sample(e.nr_sectors, seed, cut, n)),), state_id)
    raise UsageError(f"state id {state_id!r}: model {model} takes no '/{kind or 'r'}' part")


# -- enumeration -----------------------------------------------------------------------------------
def enumerate_states(index: LogIndex | Sequence[Entry], model: str, *, seed: int = 0, exhaustive_bound: int = 10,
                     samples: int = 64, torn_samples: int = 4) -> list[CrashState]:
    """All states of a model, ordered by cut then id, without duplicates; deterministic per seed."""
    _check_model(model)
    for name, value, hi in (("seed", seed, 2**63 - 1), ("exhaustive_bound", exhaustive_bound, MAX_EXHAUSTIVE_BOUND),
                            ("samples", samples, 10**6), ("torn_samples", torn_samples, 10**4)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
            raise UsageError(f"{name} must be an integer in 0..{hi}, got {value!r}")
    ctx = _ctx(index)
    entries, n = ctx.entries, ctx.n
    out: list[CrashState] = []
    if model == "no-cache":
        out = [ctx.state(model, c) for c in range(1, n + 1)]
    elif model == "flush":
        out = [ctx.state(model, i + 1) for i, e in enumerate(entries) if e.flags & (FLUSH | FUA | MARK)]
    elif model == "write-cache":
        out = _write_cache(ctx, seed, exhaustive_bound, samples)
    else:
        for i, e in enumerate(entries):
            if e.is_write and e.nr_sectors > 1:
                out.extend(sorted(_torn(ctx, i, e.nr_sectors, seed, torn_samples), key=lambda s: s.id))
    log.debug("model %s: %d states over %d entries", model, len(out), n)
    return out


def _wc_cuts(ctx: _Ctx) -> list[int]:
    entries = ctx.entries
    return [c for c in range(1, ctx.n + 1)
            if c == ctx.n or entries[c].flags & (FLUSH | MARK) or (entries[c].is_fua and entries[c].changes_device)]


def _write_cache(ctx: _Ctx, seed: int, bound: int, samples: int) -> list[CrashState]:
    seen: set[tuple[int, tuple[int, ...]]] = set()
    out: list[CrashState] = []
    for cut in _wc_cuts(ctx):
        droppable = tuple(ctx.droppable(cut))
        k = len(droppable)
        batch: list[CrashState] = []
        if k <= bound:
            for mask in range(1 << k):
                _add(ctx, seen, batch, cut, droppable, _pick(droppable, mask))
        else:
            structured = [(), droppable, *((d,) for d in droppable),
                          *(droppable[:i] + droppable[i + 1:] for i in range(k))]
            for dropped in structured:
                _add(ctx, seen, batch, cut, droppable, dropped)
            got = j = 0
            while got < samples and j < 4 * samples + 16:
                got += _add(ctx, seen, batch, cut, droppable, _wc_sample(droppable, seed, cut, j),
                            f"write-cache@{cut}/r{seed}.{j}")
                j += 1
        out.extend(sorted(batch, key=lambda s: s.id))
    return out


def _add(ctx: _Ctx, seen: set[tuple[int, tuple[int, ...]]], batch: list[CrashState], cut: int,
         droppable: tuple[int, ...], dropped: tuple[int, ...], sid: str | None = None) -> bool:
    """Append the state unless an equivalent one (same durable data, same marks) exists."""
    key = ctx.canon(cut, dropped)
    if key in seen:
        return False
    seen.add(key)
    batch.append(ctx.state("write-cache", cut, dropped, (), sid, droppable))
    return True


def _torn(ctx: _Ctx, i: int, m: int, seed: int, torn_samples: int) -> list[CrashState]:
    cut = i + 1
    h = m // 2
    picks = dict.fromkeys([tuple(range(h)), tuple(range(h, m)), tuple(range(m - 1)), (0,)])
    if (1 << m) - 2 <= len(picks) + torn_samples:  # small write: every proper subset
        picks = dict.fromkeys(_pick(range(m), b) for b in range(1, (1 << m) - 1))
    states = [ctx.state("torn", cut, (), ((i, p),)) for p in picks]
    j = got = 0
    while len(picks) < (1 << m) - 2 and got < torn_samples and j < 4 * torn_samples + 16:
        p = _torn_sample(m, seed, cut, j)
        if p not in picks:
            picks[p] = None
            states.append(ctx.state("torn", cut, (), ((i, p),), f"torn@{cut}/r{seed}.{j}"))
            got += 1
        j += 1
    return states


def describe(states: Sequence[CrashState]) -> dict[str, object]:
    """Total count and per-epoch breakdown (epoch = number of FLUSH entries before the cut)."""
    per: dict[int, list[CrashState]] = {}
    for s in states:
        per.setdefault(s.epoch, []).append(s)
    epochs = [{"epoch": e, "states": len(group), "cuts": len({s.cut for s in group}),
               "first_cut": min(s.cut for s in group), "last_cut": max(s.cut for s in group),
               "max_dropped": max(len(s.dropped) for s in group), "sampled": sum("/r" in s.id for s in group)}
              for e, group in sorted(per.items())]
    return {"total": len(states), "models": dict(Counter(s.model for s in states)),
            "cuts": len({s.cut for s in states}), "sampled": sum("/r" in s.id for s in states), "epochs": epochs}

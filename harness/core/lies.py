"""Lying-disk crash models (pure; host and guest): states of a disk that breaks its word, derived
from the same log as the power-loss models (core/models.py), judged by the same checkers.  The
question they ask of a program is not "is every acked commit kept" (no single-disk program can
promise that when the disk lies) but "does it notice, or does it serve wrong data as if it were
right?" (verdicts ``detected`` and ``silent-corruption``: core/verdict.py).

Apart from its one lie, the disk is honest and its cache off: everything completed before the cut
persisted (the no-cache model).  Four models lie about one *write* w (a data-carrying entry after
the floor mark ``mkfs``, if the log has one; discards are not writes); their cut is the moment the
lie can first break a promise -- just after the first ack mark that follows w (the commit w belongs
to was acked, then the power failed), or the end of the log for writes after the last ack:

* ``lost-write@C/wE`` -- the disk acked write E (plain, flushed or FUA) and never stored it.
* ``misdirected-write@C/wE:sT`` -- E's data landed at device sector T instead of its own (its own
  sectors keep the old data).  T is the sector of the nearest earlier write of the same size (after
  the floor), and of the nearest later one before the cut, whose sectors E does not overlap: a
  program's own block of the same size, where a misplaced block looks valid.  A misdirected write
  never reaches a block the log never wrote, nor a block of another size or alignment.
* ``corrupt-sector@C/wE:sO:bB,..`` -- sector O of E (one E still holds at C; seeded) has the bits
  B (offsets in the sector, ``CORRUPT_BITS`` seeded ones) flipped: rot at rest, after E completed.
* ``unreadable-sector@C/wE:sO`` -- sector O of E (seeded among those E still holds at C) fails
  every read with EIO at recovery: the image is the honest one, the check puts a device-mapper
  ``error`` segment over the sector (linux/badsector.py, check/judge.py).  Writes there fail too.

A write none of whose sectors survive to the cut (later writes overwrote them all) is no target: its
loss or rot would change nothing.  ``flush-ignored@C/SUBSET`` (SUBSET as write-cache's: ``d``,
``k`` ranges or ``rSEED.N``): the disk acked the last barrier FLUSH before C (and FUA writes)
without emptying its cache: every data entry from the barrier before that one up to C may be lost
(write-cache subsets across that barrier), at write-cache's cut points; only states no honest
write-cache state equals are generated (the others lose nothing a flush promised).

**Windows and coverage.**  A write-based model's window is a commit (the writes up to an ack; the
tail after the last ack): every target when there are at most ``samples`` of them, else the first
half by priority -- the commit's own data writes (no REQ_META) newest first, then its metadata
writes -- and the rest a seeded pick (ranked by a SHAKE-256 hash of seed, model and entry).  A
corrupt-sector window is always sampled (the bits are seeded); unreadable-sector counts each
surviving sector as a target.  flush-ignored enumerates like write-cache (``exhaustive_bound``,
structured picks, ``samples`` seeded).  Ids are explicit but for flush-ignored's ``r``; an id
rebuilds its state (``state_from_id``), the same object the enumeration made.

**The program's blocks first.**  A recording maps where the program's files lie on the device at
the end (guest/record.file_map: FIEMAP over a read-only mount of the final filesystem); with that
map (``target_program``) a window's priority half takes the writes that touch the program's files
first, and a corrupt or unreadable sector is picked among the ones inside them when there are any.
Without a map (an older recording, btrfs) the order is the log's alone (REQ_META tells a
filesystem's metadata from file data).  The map changes which states are picked, never what an id
means.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from powercut.core.coverage import SPACE_CAP, Tally
from powercut.core.crashstate import CrashState, Lie
from powercut.core.dmlog import Entry
from powercut.core.stateid import (
    LIE_MODELS,
    StateId,
    format_id,
    format_ranges,
    parse_ranges,
    pick_bits,
    shake_bits,
    subset_picks,
)
from powercut.errors import UsageError

__all__ = ["CORRUPT_BITS", "FLOOR_MARK", "LIE_MODELS", "flip_of", "in_program", "iter_states", "state_from_id",
           "target_program", "unreadable_of", "windows", "with_lie"]

FLOOR_MARK = "mkfs"   # selection's default floor: no lie about mkfs's own writes
CORRUPT_BITS = 3
KINDS = {"misdirected-write": "misdirect", "corrupt-sector": "corrupt", "unreadable-sector": "unreadable"}
_NUM = r"[0-9]{1,19}"
_RANGES = rf"{_NUM}(?:-{_NUM})?(?:,{_NUM}(?:-{_NUM})?)*"
_SPEC = {"lost-write": re.compile(rf"w({_NUM})"),
         "misdirected-write": re.compile(rf"w({_NUM}):s({_NUM})"),
         "corrupt-sector": re.compile(rf"w({_NUM}):s({_NUM}):b({_RANGES})"),
         "unreadable-sector": re.compile(rf"w({_NUM}):s({_NUM})"),
         "flush-ignored": re.compile(rf"d({_RANGES})|k((?:{_RANGES})?)|r({_NUM})\.({_NUM})")}
_FORM = {"lost-write": "wENTRY", "misdirected-write": "wENTRY:sSECTOR", "corrupt-sector": "wENTRY:sOFFSET:bBITS",
         "unreadable-sector": "wENTRY:sOFFSET", "flush-ignored": "dRANGES|kRANGES|rSEED.N"}

Space = Any   # a models.CrashSpace (not imported: models.py imports this module)


# -- which sectors a write still holds at a cut ------------------------------------------------------------
class _Cover:
    """A union of sector ranges [lo, hi), kept sorted and disjoint."""

    def __init__(self) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []

    def holes(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of [lo, hi) not covered."""
        out, at = [], lo
        i = max(bisect.bisect_right(self.lo, lo) - 1, 0)
        while at < hi and i < len(self.lo):
            if self.hi[i] > at and self.lo[i] < hi:
                if self.lo[i] > at:
                    out.append((at, self.lo[i]))
                at = max(at, self.hi[i])
            elif self.lo[i] >= hi:
                break
            i += 1
        if at < hi:
            out.append((at, hi))
        return out

    def add(self, lo: int, hi: int) -> None:
        i = bisect.bisect_left(self.hi, lo)          # the first range that ends at or after lo
        j = bisect.bisect_right(self.lo, hi)          # past the last range that starts at or before hi
        if i < j:
            lo, hi = min(lo, self.lo[i]), max(hi, self.hi[j - 1])
        self.lo[i:j], self.hi[i:j] = [lo], [hi]


def floor_of(sp: Space) -> int:
    """The first entry a lie may concern: the one after the floor mark (0 without one)."""
    return next((e.index + 1 for e in sp.entries if e.mark == FLOOR_MARK), 0)


def windows(sp: Space) -> list[tuple[int, tuple[int, ...]]]:
    """The commits: (cut, the writes of the commit in log order), cuts increasing; a commit's writes
    are those after the floor and the previous ack mark, up to its ack (cut: just after it)."""
    out: list[tuple[int, tuple[int, ...]]] = []
    writes: list[int] = []
    for e in sp.entries[floor_of(sp):]:
        if e.is_write:
            writes.append(e.index)
        elif e.ack_key is not None and writes:
            out.append((e.index + 1, tuple(writes)))
            writes = []
    if writes:
        out.append((sp.n, tuple(writes)))
    return out


def _sweep(sp: Space, cut: int, writes: Sequence[int]) -> Iterator[tuple[int, _Cover]]:
    """(w, the cover of what entries (w, cut) wrote) for each w of ``writes``, newest first."""
    cover, es = _Cover(), sp.entries
    at = cut
    for w in reversed(writes):
        for e in es[w + 1:at]:
            if e.changes_device:
                cover.add(e.sector, e.sector + e.nr_sectors)
        at = w + 1
        yield w, cover


def _live(e: Entry, cover: _Cover) -> list[int]:
    """The offsets (in e) of the sectors e still holds (not overwritten in the cover)."""
    return [s - e.sector for lo, hi in cover.holes(e.sector, e.sector + e.nr_sectors) for s in range(lo, hi)]


# -- seeded choices ----------------------------------------------------------------------------------------
def pick_offset(model: str, seed: int, entry: int, live: Sequence[int]) -> int:
    """The seeded sector (offset in the write) of a corrupt- or unreadable-sector target."""
    return live[shake_bits(f"powercut/{model}/{seed}/{entry}", 64) % len(live)]


def pick_bits_in(seed: int, entry: int, sectorsize: int, k: int = CORRUPT_BITS) -> tuple[int, ...]:
    """k distinct seeded bit offsets in a sector."""
    got: set[int] = set()
    j = 0
    while len(got) < min(k, 8 * sectorsize):
        got.add(shake_bits(f"powercut/corrupt-bits/{seed}/{entry}/{j}", 64) % (8 * sectorsize))
        j += 1
    return tuple(sorted(got))


def target_program(sp: Space, extents: Iterable[tuple[int, int]], sector_bytes: int = 512, *,
                   only: bool = False) -> None:
    """Make the models pick the program's own blocks first: ``extents`` (first sector, count; of
    ``sector_bytes``) are where its files lie (the file map).  ``only``: lie about those blocks alone
    (``--lie-file``): writes that touch none are no target, a corrupt/unreadable sector is theirs."""
    ss = sp.sectorsize
    ivs = sorted((a * sector_bytes // ss, -(-(a + n) * sector_bytes // ss)) for a, n in extents if n > 0)
    merged: list[list[int]] = []
    for lo, hi in ivs:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    sp.program_sectors = ([lo for lo, _ in merged], [hi for _, hi in merged])
    sp.program_only = only


def in_program(sp: Space, lo: int, hi: int) -> bool:   # sectors [lo, hi) touch the program's files
    starts, ends = getattr(sp, "program_sectors", None) or ((), ())
    k = bisect.bisect_right(starts, hi - 1) - 1
    return k >= 0 and ends[k] > lo


def _choose(cands: Sequence[tuple[int, Any]], sp: Space, model: str, seed: int, samples: int
            ) -> list[tuple[int, Any]]:
    """At most ``samples`` of a window's candidates (entry, detail): all if they fit, else the first
    half by priority (writes to the program's files first, when the recording mapped them; then
    data writes newest first, then metadata newest first), the rest seeded."""
    if len(cands) <= samples:
        return list(cands)
    es = sp.entries
    ranked = sorted(cands, key=lambda c: (not in_program(sp, es[c[0]].sector, es[c[0]].sector + es[c[0]].nr_sectors),
                                          es[c[0]].is_metadata, -c[0]))
    head = (samples + 1) // 2
    rest = sorted(ranked[head:], key=lambda c: shake_bits(f"powercut/{model}/{seed}/{c[0]}/{c[1]}", 64))
    return ranked[:head] + rest[:samples - head]


# -- enumeration ---------------------------------------------------------------------------------------------
def iter_states(sp: Space, model: str, seed: int, exhaustive_bound: int, samples: int,
                tally: Tally) -> Iterator[CrashState]:
    """A lying-disk model's states, ordered by cut then id, without duplicates; deterministic per seed."""
    if model == "flush-ignored":
        return _flush_ignored(sp, seed, exhaustive_bound, samples, tally)
    return _per_write(sp, model, seed, samples, tally)


def _per_write(sp: Space, model: str, seed: int, samples: int, tally: Tally) -> Iterator[CrashState]:
    es, reach = sp.entries, _reach(sp)
    by_size: dict[int, list[int]] = {}
    for e in es[floor_of(sp):]:
        if e.is_write:
            by_size.setdefault(e.nr_sectors, []).append(e.index)
    for cut, writes in windows(sp):
        cands: list[tuple[int, Any]] = []
        space = 0
        for w, cover in _sweep(sp, cut, writes):
            e = es[w]
            live = _live(e, cover)
            mine = [o for o in live if in_program(sp, e.sector + o, e.sector + o + 1)]
            if getattr(sp, "program_only", False) and not (mine or (model == "misdirected-write" and
                                                                   in_program(sp, e.sector, e.sector + e.nr_sectors))):
                continue
            if model == "misdirected-write":
                for t in _destinations(es, by_size.get(e.nr_sectors, []), w, cut, reach):
                    if live or cover.holes(t, t + e.nr_sectors):
                        cands.append((w, t))
                continue
            if not live:
                continue
            space += len(mine) if getattr(sp, "program_only", False) else len(live)
            cands.append((w, pick_offset(model, seed, w, mine or live) if model != "lost-write" else None))
        chosen = _choose(cands, sp, model, seed, samples)
        if model in ("lost-write", "misdirected-write"):
            space = len(cands)
        if cands:
            tally.window(min(space, SPACE_CAP), len(chosen),
                         sampled=model == "corrupt-sector" or len(chosen) < space)
        states = [_make(sp, model, cut, w, x, seed) for w, x in chosen]
        yield from sorted(states, key=lambda s: s.id)


def _reach(sp: Space) -> int:
    """Past the last sector any write of the log touched: how far a misdirected write may land."""
    return max((e.sector + e.nr_sectors for e in sp.entries if e.is_write), default=0)


def _destinations(es: Sequence[Entry], same: list[int], w: int, cut: int, reach: int) -> list[int]:
    """Where write w may be misdirected: the sector of the nearest earlier write of its size (after the
    floor) and of the nearest later one before the cut, each not overlapping w."""
    e, out = es[w], []
    k = bisect.bisect_left(same, w)
    for step, stop in ((-1, -1), (1, len(same))):
        for j in range(k + step, stop, step):
            o = es[same[j]]
            if step > 0 and o.index >= cut:
                break
            if (o.sector + o.nr_sectors <= e.sector or e.sector + e.nr_sectors <= o.sector) \
                    and o.sector + e.nr_sectors <= reach:
                out.append(o.sector)
                break
    return sorted(set(out))


def _make(sp: Space, model: str, cut: int, w: int, x: Any, seed: int) -> CrashState:
    e = sp.entries[w]
    if model == "lost-write":
        return _state(sp, model, cut, f"w{w}", (w,), None)
    if model == "misdirected-write":
        return _state(sp, model, cut, f"w{w}:s{x}", (w,), Lie("misdirect", w, x, (), sp.sectorsize))
    if model == "corrupt-sector":
        bits = pick_bits_in(seed, w, sp.sectorsize)
        lie = Lie("corrupt", w, e.sector + x, bits, sp.sectorsize)
        return _state(sp, model, cut, f"w{w}:s{x}:b{format_ranges(bits)}", (), lie)
    return _state(sp, model, cut, f"w{w}:s{x}", (), Lie("unreadable", w, e.sector + x, (), sp.sectorsize))


def _state(sp: Space, model: str, cut: int, spec: str, dropped: tuple[int, ...], lie: Lie | None) -> CrashState:
    acks, begun = sp.keys(cut)
    return CrashState(model, cut, dropped, (), acks, begun, f"{model}@{cut}/{spec}", sp.epoch[cut], lie)


# -- flush-ignored -------------------------------------------------------------------------------------------
def ignored_pool(sp: Space, cut: int) -> tuple[int, ...]:
    """What a disk that ignored the last barrier before ``cut`` may lose there: every data entry from
    the barrier before it (FUA writes too); () when the cut has no barrier before it."""
    f = sp.last_flush[cut]
    if f < 0:
        return ()
    return tuple(i for i in range(max(sp.last_flush[f], 0), cut) if sp.is_data[i])


def _canon(sp: Space, cut: int, dropped: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """The smallest equivalent (cut, dropped) (``CrashSpace.canon``), also past key marks that add
    no key (a repeated ack): same durable data, same keys."""
    c, d = sp.canon(cut, dropped)
    while c > 0 and sp.is_key[c - 1] and sp.key_version[c - 1] == sp.key_version[c]:
        c, d = sp.canon(c - 1, d)
    return c, d


def fi_sample(pool: Sequence[int], seed: int, cut: int, n: int) -> tuple[int, ...]:
    """``flush-ignored@cut/r{seed}.{n}``: the lost entries."""
    return pick_bits(pool, shake_bits(f"powercut/flush-ignored/{seed}/{cut}/{n}", len(pool)))


def _flush_ignored(sp: Space, seed: int, bound: int, samples: int, tally: Tally) -> Iterator[CrashState]:
    floor = floor_of(sp)
    seen: dict[tuple[int, tuple[int, ...]], None] = {}
    version = -1
    for cut in sp.cut_points():
        pool = ignored_pool(sp, cut)
        if not pool or pool[-1] < floor:
            continue
        if sp.key_version[cut] != version:   # states of different key versions never coincide
            seen, version = {}, sp.key_version[cut]
        honest = set(sp.droppable(cut))
        out: list[CrashState] = []

        def add(dropped: tuple[int, ...], sid: str | None = None, cut: int = cut, honest: set[int] = honest,
                pool: tuple[int, ...] = pool, out: list[CrashState] = out,
                seen: dict[tuple[int, tuple[int, ...]], None] = seen) -> int:
            if not set(dropped) - honest:
                return 0
            key = _canon(sp, cut, dropped)
            if key in seen or not set(key[1]) - set(sp.droppable(key[0])):   # the same as an honest state
                return 0
            seen[key] = None
            spec = sid or format_id("flush-ignored", cut, dropped, (), pool).partition("/")[2]
            out.append(_state(sp, "flush-ignored", cut, spec, dropped, None))
            return 1

        added = 0
        if len(pool) <= bound:
            lies = (1 << len(pool)) - (1 << len(set(pool) & honest))   # the subsets that drop a kept entry
            for mask in range(1 << len(pool)):
                added += add(pick_bits(pool, mask))
            tally.window(lies, added, sampled=False)
        else:
            for dropped in subset_picks(pool):
                added += add(dropped)
            for j in range(samples):
                added += add(fi_sample(pool, seed, cut, j), f"r{seed}.{j}")
            space = (1 << len(pool)) - (1 << len(set(pool) & honest)) if len(pool) < 62 else SPACE_CAP
            tally.window(space, added, sampled=True)
        yield from sorted(out, key=lambda s: s.id)


# -- ids -----------------------------------------------------------------------------------------------------
def state_from_id(sp: Space, sid: StateId) -> CrashState:
    """Rebuild the state a lying-disk id names; UsageError for one that does not fit the log."""
    whole, model, cut, es = sid.text(), sid.model, sid.cut, sp.entries
    m = _SPEC[model].fullmatch(sid.lie or "")
    if m is None:
        raise UsageError(f"state id {whole!r}: expected {model}@CUT/{_FORM[model]}")
    if not 1 <= cut <= sp.n:
        raise UsageError(f"state id {whole!r}: cut {cut} out of range 1..{sp.n}")
    if model == "flush-ignored":
        return _fi_from_id(sp, whole, cut, m)
    w = int(m.group(1))
    if not (w < cut and es[w].is_write):
        raise UsageError(f"state id {whole!r}: entry {w} is not a write before the cut")
    e = es[w]
    if model == "lost-write":
        return _state(sp, model, cut, f"w{w}", (w,), None)
    x = int(m.group(2))
    if model == "misdirected-write":
        if not (x + e.nr_sectors <= e.sector or e.sector + e.nr_sectors <= x) or x + e.nr_sectors > _reach(sp):
            raise UsageError(f"state id {whole!r}: sector {x} overlaps the write's own sectors or lies past the "
                             f"sectors the log wrote")
        return _state(sp, model, cut, f"w{w}:s{x}", (w,), Lie("misdirect", w, x, (), sp.sectorsize))
    if x >= e.nr_sectors:
        raise UsageError(f"state id {whole!r}: offset {x} is past the write's {e.nr_sectors} sectors")
    if model == "unreadable-sector":
        return _state(sp, model, cut, f"w{w}:s{x}", (), Lie("unreadable", w, e.sector + x, (), sp.sectorsize))
    bits = parse_ranges(m.group(3), 8 * sp.sectorsize, f"state id {whole!r}: bits")
    return _state(sp, model, cut, f"w{w}:s{x}:b{format_ranges(bits)}", (), Lie("corrupt", w, e.sector + x, bits, sp.sectorsize))


def _fi_from_id(sp: Space, whole: str, cut: int, m: re.Match[str]) -> CrashState:
    pool = ignored_pool(sp, cut)
    if not pool:
        raise UsageError(f"state id {whole!r}: no barrier FLUSH before cut {cut} to ignore")
    if m.group(3) is not None:
        seed, n = int(m.group(3)), int(m.group(4))
        dropped, spec = fi_sample(pool, seed, cut, n), f"r{seed}.{n}"
    else:
        listed = parse_ranges(m.group(1) or m.group(2) or "", pool[-1] + 1, f"state id {whole!r}: entries")
        bad = set(listed) - set(pool)
        if bad:
            raise UsageError(f"state id {whole!r}: entries {format_ranges(sorted(bad))} cannot be lost at cut {cut}")
        dropped = listed if m.group(1) is not None else tuple(i for i in pool if i not in set(listed))
        spec = format_id("flush-ignored", cut, dropped, (), pool).partition("/")[2]
    c, d = _canon(sp, cut, dropped)
    if not set(d) - set(sp.droppable(c)):
        raise UsageError(f"state id {whole!r}: loses only what an honest write cache may lose "
                         f"(a write-cache state, not a lie)")
    return _state(sp, "flush-ignored", cut, spec, dropped, None)


# -- what replay applies -------------------------------------------------------------------------------------
def with_lie(state: CrashState, entries: Sequence[Entry],
             items: Iterable[tuple[Entry, tuple[int, ...] | None]]) -> Iterator[tuple[Entry, tuple[int, ...] | None]]:
    """The writes to replay for ``state`` (``items``: its durable entries in log order) with a
    misdirected write's copy at its new place, in log order (later writes there land on top)."""
    lie = state.lie
    if lie is None or lie.kind != "misdirect":
        yield from items
        return
    w = entries[lie.entry]
    moved = Entry(w.index, w.flags, lie.sector, w.nr_sectors, w.data_offset, w.mark)
    pending = True
    for e, sectors in items:
        if pending and e.index > lie.entry:
            yield moved, None
            pending = False
        yield e, sectors
    if pending:
        yield moved, None


def flip_of(state: CrashState) -> tuple[int, tuple[int, ...]] | None:
    """A corrupt-sector state's (byte offset of the sector, bit offsets to flip) on the image; else None."""
    lie = state.lie
    return (lie.sector * lie.sectorsize, lie.bits) if lie is not None and lie.kind == "corrupt" else None


def unreadable_of(state: CrashState) -> tuple[tuple[int, int], ...]:
    """An unreadable-sector state's 512-byte sector ranges (start, count) that fail with EIO; else ()."""
    lie = state.lie
    if lie is None or lie.kind != "unreadable":
        return ()
    per = max(1, lie.sectorsize // 512)
    return ((lie.sector * per, per),)


"""Lying-disk crash models (pure; host and guest): states of a disk that breaks its word, derived
from the same log as the power-loss models (core/states/models.py), judged by the same checkers.  The
question they ask of a program is not "is every acked commit kept" (no single-disk program can
promise that when the disk lies) but "does it notice, or does it serve wrong data as if it were
right?" (verdicts ``detected`` and ``silent-corruption``: core/judging/verdict.py).

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
map (a ``LieTarget`` given to the CrashSpace: core/crashmodels/target.py) a window's priority half
takes the writes that touch the program's files first, and a corrupt or unreadable sector is picked
among the ones inside them when there are any.  Without a map (an older recording, btrfs) the order
is the log's alone (REQ_META tells a filesystem's metadata from file data).  The map changes which
states are picked, never what an id means.

This module holds what the lying-disk models share: the commit windows, the sectors a write still
holds, the seeded choices, ``LieModel`` (the id prelude) and ``PerWriteLie`` (the per-write
enumeration); each model is its own module under core/crashmodels/ (lostwrite, misdirected,
corruptsector, unreadable, flushignored).  And what replay applies: ``with_lie``, ``flip_of``,
``unreadable_of``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.crashmodels.base import Bounds, CrashModel, IdPart
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.log.dmlog import Entry
from powercut.core.states.coverage import SPACE_CAP, Tally
from powercut.core.states.crashstate import CrashState, Lie
from powercut.core.states.idparts import StateId, shake_bits
from powercut.errors import UsageError

__all__ = [
    "CORRUPT_BITS",
    "FLOOR_MARK",
    "LieModel",
    "PerWriteLie",
    "flip_of",
    "lie_state",
    "unreadable_of",
    "windows",
    "with_lie",
]

FLOOR_MARK = "mkfs"  # selection's default floor: no lie about mkfs's own writes
CORRUPT_BITS = 3
KINDS = {
    "misdirected-write": "misdirect",
    "corrupt-sector": "corrupt",
    "unreadable-sector": "unreadable",
}
NUM = r"[0-9]{1,19}"
RANGES = rf"{NUM}(?:-{NUM})?(?:,{NUM}(?:-{NUM})?)*"


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
        i = bisect.bisect_left(self.hi, lo)  # the first range that ends at or after lo
        j = bisect.bisect_right(self.lo, hi)  # past the last range that starts at or before hi
        if i < j:
            lo, hi = min(lo, self.lo[i]), max(hi, self.hi[j - 1])
        self.lo[i:j], self.hi[i:j] = [lo], [hi]


def floor_of(sp: SpaceTables) -> int:
    """The first entry a lie may concern: the one after the floor mark (0 without one)."""
    return next((e.index + 1 for e in sp.entries if e.mark == FLOOR_MARK), 0)


def windows(sp: SpaceTables) -> list[tuple[int, tuple[int, ...]]]:
    """The commits: (cut, the writes of the commit in log order), cuts increasing; a commit's writes
    are those after the floor and the previous ack mark, up to its ack (cut: just after it)."""
    out: list[tuple[int, tuple[int, ...]]] = []
    writes: list[int] = []
    for e in sp.entries[floor_of(sp) :]:
        if e.is_write:
            writes.append(e.index)
        elif e.ack_key is not None and writes:
            out.append((e.index + 1, tuple(writes)))
            writes = []
    if writes:
        out.append((sp.n, tuple(writes)))
    return out


def _sweep(sp: SpaceTables, cut: int, writes: Sequence[int]) -> Iterator[tuple[int, _Cover]]:
    """(w, the cover of what entries (w, cut) wrote) for each w of ``writes``, newest first."""
    cover = _Cover()
    es = sp.entries
    at = cut
    for w in reversed(writes):
        for e in es[w + 1 : at]:
            if e.changes_device:
                cover.add(e.sector, e.sector + e.nr_sectors)
        at = w + 1
        yield w, cover


def _live(e: Entry, cover: _Cover) -> list[int]:
    """The offsets (in e) of the sectors e still holds (not overwritten in the cover)."""
    return [
        s - e.sector
        for lo, hi in cover.holes(e.sector, e.sector + e.nr_sectors)
        for s in range(lo, hi)
    ]


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


def _choose(
    cands: Sequence[tuple[int, Any]], sp: SpaceTables, model: str, seed: int, samples: int
) -> list[tuple[int, Any]]:
    """At most ``samples`` of a window's candidates (entry, detail): all if they fit, else the first
    half by priority (writes to the program's files first, when the recording mapped them; then
    data writes newest first, then metadata newest first), the rest seeded."""
    if len(cands) <= samples:
        return list(cands)
    es = sp.entries
    touches = sp.lie_target.touches
    ranked = sorted(
        cands,
        key=lambda c: (
            not touches(es[c[0]].sector, es[c[0]].sector + es[c[0]].nr_sectors),
            es[c[0]].is_metadata,
            -c[0],
        ),
    )
    head = (samples + 1) // 2
    rest = sorted(
        ranked[head:], key=lambda c: shake_bits(f"powercut/{model}/{seed}/{c[0]}/{c[1]}", 64)
    )
    return ranked[:head] + rest[: samples - head]


# -- the models ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LieModel(CrashModel):
    """A lying-disk model: its ids are ``MODEL@CUT/`` and its own text, ``pattern`` (a regular
    expression; ``form`` says it in words)."""

    lie: bool = True
    id_part: IdPart = "lie"
    pattern: re.Pattern[str] = re.compile("")
    form: str = ""

    def from_id(self, sp: SpaceTables, sid: StateId, state_id: str) -> CrashState:
        """Rebuild the state a lying-disk id names; UsageError for one that does not fit the log."""
        whole = sid.text()
        cut = sid.cut
        m = self.pattern.fullmatch(sid.lie or "")
        if m is None:
            raise UsageError(f"state id {whole!r}: expected {self.name}@CUT/{self.form}")
        if not 1 <= cut <= sp.n:
            raise UsageError(f"state id {whole!r}: cut {cut} out of range 1..{sp.n}")
        return self.rebuild(sp, whole, cut, m)

    def rebuild(self, sp: SpaceTables, whole: str, cut: int, m: re.Match[str]) -> CrashState:
        """The state of a well-formed id (``m``: its text matched by ``pattern``) with a cut in range."""
        raise NotImplementedError(f"{self.name} rebuilds no state")


@dataclass(frozen=True)
class PerWriteLie(LieModel):
    """A model that lies about one write of a commit (a window: ``windows``); its states are at the
    commit's cut.  ``per_write``: its window's space counts writes (else the surviving sectors);
    ``always_sampled``: its windows are sampled even when every target is taken (seeded bits)."""

    per_write: bool = False
    always_sampled: bool = False

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        es = sp.entries
        target = sp.lie_target
        context = self.prepare(sp)
        for cut, writes in windows(sp):
            cands: list[tuple[int, Any]] = []
            space = 0
            for w, cover in _sweep(sp, cut, writes):
                e = es[w]
                live = _live(e, cover)
                mine = [o for o in live if target.touches(e.sector + o, e.sector + o + 1)]
                if target.only and not (mine or self.aims_at_whole_write(sp, e)):
                    continue
                got, n = self.candidates(sp, bounds.seed, w, cut, live, mine, cover, context)
                cands += got
                space += n
            chosen = _choose(cands, sp, self.name, bounds.seed, bounds.samples)
            if self.per_write:
                space = len(cands)
            if cands:
                tally.window(
                    min(space, SPACE_CAP),
                    len(chosen),
                    sampled=self.always_sampled or len(chosen) < space,
                    setup=sp.key_version[cut] == 0,
                )
            states = [self.make(sp, cut, w, x, bounds.seed) for w, x in chosen]
            yield from sorted(states, key=lambda s: s.id)

    def prepare(self, sp: SpaceTables) -> Any:
        """What ``candidates`` needs of the whole log, computed once per enumeration."""
        return None

    def aims_at_whole_write(self, sp: SpaceTables, e: Entry) -> bool:
        """With ``LieTarget.only``: a write none of whose surviving sectors is the program's is still
        a target (a misdirected write whose own sectors are the program's)."""
        return False

    def candidates(
        self,
        sp: SpaceTables,
        seed: int,
        w: int,
        cut: int,
        live: list[int],
        mine: list[int],
        cover: _Cover,
        context: Any,
    ) -> tuple[list[tuple[int, Any]], int]:
        """Write w's candidates (w, detail) and what they add to the window's space; the default:
        one candidate per write that still holds a sector, its detail a seeded surviving sector
        (``mine`` first), the space its surviving sectors (the program's only, with ``only``)."""
        if not live:
            return [], 0
        n = len(mine) if sp.lie_target.only else len(live)
        return [(w, pick_offset(self.name, seed, w, mine or live))], n

    def make(self, sp: SpaceTables, cut: int, w: int, x: Any, seed: int) -> CrashState:
        """The state of candidate (w, x) at ``cut``."""
        raise NotImplementedError(f"{self.name} makes no state")

    def rebuild(self, sp: SpaceTables, whole: str, cut: int, m: re.Match[str]) -> CrashState:
        w = int(m.group(1))
        if not (w < cut and sp.entries[w].is_write):
            raise UsageError(f"state id {whole!r}: entry {w} is not a write before the cut")
        return self.rebuild_write(sp, whole, cut, w, m)

    def rebuild_write(
        self, sp: SpaceTables, whole: str, cut: int, w: int, m: re.Match[str]
    ) -> CrashState:
        """The state of an id whose write ``w`` (``m.group(1)``) is a write before the cut."""
        raise NotImplementedError(f"{self.name} rebuilds no state")


def offset_in(whole: str, e: Entry, x: int) -> int:
    """``x``, a sector offset in write e; UsageError past its sectors."""
    if x >= e.nr_sectors:
        raise UsageError(
            f"state id {whole!r}: offset {x} is past the write's {e.nr_sectors} sectors"
        )
    return x


def reach(sp: SpaceTables) -> int:
    """Past the last sector any write of the log touched: how far a misdirected write may land."""
    return max((e.sector + e.nr_sectors for e in sp.entries if e.is_write), default=0)


def lie_state(
    sp: SpaceTables, model: str, cut: int, spec: str, dropped: tuple[int, ...], lie: Lie | None
) -> CrashState:
    """A lying-disk state: id ``model@cut/spec``, ``dropped`` lost, ``lie`` told."""
    acks, begun = sp.keys(cut)
    return CrashState(
        model, cut, dropped, (), acks, begun, f"{model}@{cut}/{spec}", sp.epoch[cut], lie
    )


# -- what replay applies -------------------------------------------------------------------------------------
def with_lie(
    state: CrashState,
    entries: Sequence[Entry],
    items: Iterable[tuple[Entry, tuple[int, ...] | None]],
) -> Iterator[tuple[Entry, tuple[int, ...] | None]]:
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
    return (
        (lie.sector * lie.sectorsize, lie.bits)
        if lie is not None and lie.kind == "corrupt"
        else None
    )


def unreadable_of(state: CrashState) -> tuple[tuple[int, int], ...]:
    """An unreadable-sector state's 512-byte sector ranges (start, count) that fail with EIO; else ()."""
    lie = state.lie
    if lie is None or lie.kind != "unreadable":
        return ()
    per = max(1, lie.sectorsize // 512)
    return ((lie.sector * per, per),)

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
* ``torn-4k``: ``torn`` with device-aligned 4 KiB units for sectors: disks with 4 KiB physical
  sectors (4Kn, 512e, most SSDs) write those atomically; ``torn`` can also tear inside one (e.g.
  ext4's 1 KiB superblock), as a 512n disk.

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
    that recognises them and what stays unfixed: core/log/markorder.py.
(d) A write completing during a FLUSH is logged after it: "it durable, the flush's window lost" is
    not generated (the log is the same if it was issued after the flush completed: no such state);
    ``CrashSpace.notes`` names it (``late``) and the ambiguous windows: a check's coverage (weakened).

Use ``space = CrashSpace(index)`` once per log (thread-safe), then ``space.states(model)``,
``.state_from_id(id)``; lying-disk models: core/crashmodels/lies.py.  ``enumerate_states``, ``make_state``,
``state_from_id`` take a CrashSpace or a log.

Each model is an object of the crash-model registry (core/crashmodels/registry.py), its code in
its family's module (core/crashmodels/); ``CrashSpace`` is the log's tables
(crashmodels.tables.SpaceTables) with the registry's models on top.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from powercut.core.crashmodels.base import Bounds
from powercut.core.crashmodels.registry import REGISTRY, registered
from powercut.core.crashmodels.tables import SpaceTables, entries_of
from powercut.core.crashmodels.target import NO_TARGET, LieTarget
from powercut.core.log.dmlog import Entry, LogIndex
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState, DeviceChanges, describe
from powercut.core.states.stateid import MODELS, check_model, format_ranges, parse_id, parse_ranges
from powercut.errors import UsageError

__all__ = [
    "MODELS",
    "MAX_EXHAUSTIVE_BOUND",
    "UNIT_BYTES",
    "CrashSpace",
    "LieTarget",
    "describe",
    "durable_entries",
    "enumerate_states",
    "format_ranges",
    "make_state",
    "parse_ranges",
    "space",
    "state_from_id",
]

MAX_EXHAUSTIVE_BOUND = 20
UNIT_BYTES = REGISTRY.unit_bytes  # a torn model's atomic unit (0: a log sector)


def durable_entries(
    entries: CrashSpace | LogIndex | Sequence[Entry], state: CrashState
) -> Iterator[tuple[Entry, tuple[int, ...] | None]]:
    """What to replay for a state: (entry, None) for fully persisted data entries, (entry, sector
    offsets) for torn ones, in log order."""
    seq = entries_of(entries)
    for i, torn in state.kept(DeviceChanges(seq)):
        yield seq[i], torn


class CrashSpace(SpaceTables):
    """The crash states of one log: prefix tables built once (SpaceTables), states and ids on
    demand, each model's from the registry.  ``lie_target``: the program's blocks the lying-disk
    models aim at (none by default); ``cleared``: the late flushes the trace cleared
    (core/trace/latetrace.py).  Thread-safe: the tables are immutable; the cache of (acks,
    begun) tuples is locked."""

    def __init__(
        self,
        entries: LogIndex | Sequence[Entry],
        *,
        lie_target: LieTarget = NO_TARGET,
        cleared: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__(entries, lie_target=lie_target, cleared=cleared)

    def make_state(
        self,
        model: str,
        cut: int,
        dropped: Sequence[int] = (),
        torn: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> CrashState:
        """Build and validate one state (e.g. a minimized one); UsageError if the model cannot
        produce it from this log."""
        check_model(model)
        return registered(model).build(self, cut, dropped, torn)

    def state_from_id(self, state_id: str) -> CrashState:
        """Rebuild the state an id names; UsageError for a malformed id or one that does not fit."""
        sid = parse_id(state_id)
        return registered(sid.model).from_id(self, sid, state_id)

    # -- enumeration ------------------------------------------------------------------------------
    def states(
        self,
        model: str,
        *,
        seed: int = 0,
        exhaustive_bound: int = 10,
        samples: int = 64,
        torn_samples: int = 4,
        tally: Tally | None = None,
    ) -> list[CrashState]:
        """All states of a model, ordered by cut then id, without duplicates; deterministic per seed."""
        return list(
            self.iter_states(
                model,
                seed=seed,
                exhaustive_bound=exhaustive_bound,
                samples=samples,
                torn_samples=torn_samples,
                tally=tally,
            )
        )

    def iter_states(
        self,
        model: str,
        *,
        seed: int = 0,
        exhaustive_bound: int = 10,
        samples: int = 64,
        torn_samples: int = 4,
        tally: Tally | None = None,
        setup_samples: int | None = None,
    ) -> Iterator[CrashState]:
        """``states()`` one at a time, in order: memory for one cut's states and one epoch's
        equivalence keys, not the model's states (millions at 10^6 entries).  Arguments checked now.
        ``tally``: gets every window the model enumerates (coverage.Tally.window) as it goes.
        ``setup_samples``: the seeded samples of a set-up window (before the first key mark) beyond
        the bound (None: ``samples``)."""
        check_model(model)
        limits = (
            ("seed", seed, 2**63 - 1),
            ("exhaustive_bound", exhaustive_bound, MAX_EXHAUSTIVE_BOUND),
            ("samples", samples, 10**6),
            ("torn_samples", torn_samples, 10**4),
            ("setup_samples", samples if setup_samples is None else setup_samples, 10**6),
        )
        for name, value, hi in limits:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
                raise UsageError(f"{name} must be an integer in 0..{hi}, got {value!r}")
        bounds = Bounds(seed, exhaustive_bound, samples, torn_samples, setup_samples)
        return registered(model).iter_states(self, bounds, tally if tally is not None else Tally())


# -- the functional API (each call on the CrashSpace given, or on a fresh one for a log) --------------
def space(index: CrashSpace | LogIndex | Sequence[Entry]) -> CrashSpace:
    """The CrashSpace of a log (the same object if given one)."""
    return index if isinstance(index, CrashSpace) else CrashSpace(index)


def enumerate_states(
    index: CrashSpace | LogIndex | Sequence[Entry],
    model: str,
    *,
    seed: int = 0,
    exhaustive_bound: int = 10,
    samples: int = 64,
    torn_samples: int = 4,
    tally: Tally | None = None,
) -> list[CrashState]:
    """All states of a model, ordered by cut then id, without duplicates; deterministic per seed."""
    return space(index).states(
        model,
        seed=seed,
        exhaustive_bound=exhaustive_bound,
        samples=samples,
        torn_samples=torn_samples,
        tally=tally,
    )


def make_state(
    index: CrashSpace | LogIndex | Sequence[Entry],
    model: str,
    cut: int,
    dropped: Sequence[int] = (),
    torn: Sequence[tuple[int, Sequence[int]]] = (),
) -> CrashState:
    """Build and validate one state; UsageError if the model cannot produce it from this log."""
    return space(index).make_state(model, cut, dropped, torn)


def state_from_id(index: CrashSpace | LogIndex | Sequence[Entry], state_id: str) -> CrashState:
    """Rebuild the state an id names; UsageError for a malformed id or one that does not fit."""
    return space(index).state_from_id(state_id)

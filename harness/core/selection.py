"""Choose the crash states a campaign judges (pure; host): the states after a floor mark, each
distinct disk image once, and under a cap a fair share of every model.

* **Floor**: only states whose cut lies after the floor mark (``mkfs``) and whose durable set keeps
  every entry before it whole (before mkfs finished there is no filesystem to recover).
* **Each disk image judged once**: two states are one *distinct* state when they replay the same
  data -- the same fully durable data entries and the same torn writes with the same sectors --
  and tell the checker the same acked and begun keys.  Replay applies the durable entries in log
  order, so such states give byte-identical images (``replay.reference_image`` and
  ``replay.materialize`` alike) and identical checker input.  The first in model order (models
  in the order given, then each model's own order) is the *representative* that gets judged; the
  others are its *aliases* and share its verdict.
* **The key** (``image_key``) costs O(epoch), not O(cut): with ``base`` the first dropped or torn
  entry (else the cut), every data entry before ``base`` is durable and the one at ``base`` is
  not, so the durable set is "the first ``ndata[base]`` data entries of the log" plus the kept
  data entries in [base, cut) (with torn sectors) -- told by where the kept ones end and which
  were lost before that, a few small objects per state that depend on the durable set alone
  and give it back.  The keys part is the space's ``key_version`` (the number of key marks
  that added a key): equal versions <=> equal (acks, begun).
* **max_states** spreads over the models: every model's *own* distinct states (those it
  represents) get a fair share (water-filling: as equal as possible, a model that needs fewer
  leaves the rest to the others, ties to the earlier model), and within a model the share is
  evenly spaced over its ordered list, first and last included, so early and late cuts are
  both judged.  Deterministic; never more than max_states.
* **Memory** (a 10^6-entry log has millions of states): the models' states are streamed
  (``CrashSpace.iter_states``) a key version at a time, all models in model order (states of
  different key versions never share an image, so the keys are forgotten after each version), and
  the representatives are kept as ids (``StateList``, ~25 bytes a state), each rebuilt from its id
  when asked for.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from array import array
from collections.abc import Collection, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from powercut.core.coverage import Coverage, Tally, build
from powercut.core.crashstate import CrashState
from powercut.core.dmlog import Entry, LogIndex
from powercut.core.models import CrashSpace, space
from powercut.core.stateid import LIE_MODELS, MODELS
from powercut.errors import UsageError

log = logging.getLogger(__name__)

__all__ = ["DEMO_SELECTION", "RUN_SELECTION", "SEED_AUTO", "ModelCounts", "Selection", "SelectionSpec", "StateList",
           "fair_shares", "image_key", "select", "spread", "state_key"]


SEED_AUTO = -1   # --seed auto: a new seed per run, chosen when the run starts (SelectionSpec.resolved)


@dataclass(frozen=True, slots=True)
class SelectionSpec:
    """How a check chooses its crash states, one value with its defaults written once here: the
    models, the seed of every sampled state, the write-cache bound (all subsets up to ``bound``
    droppable writes), the seeded ``samples`` beyond it, the seeded tears per torn write, and the cap
    (``max_states``, 0: every distinct state).  Embedded by campaign.run.CampaignSpec, campaign.crashtest.CrashTest and
    campaign.matrix.MatrixRun; the CLI's options and the pytest marker override its fields (``with_``).  ``seed`` SEED_AUTO
    (``--seed auto``) is resolved to a fresh seed when a run starts."""

    models: tuple[str, ...] = ("flush", "write-cache", "torn-4k")   # torn-4k: x1.10 states (docs/measurements.md)
    seed: int = 0
    bound: int = 10
    samples: int = 64
    torn_samples: int = 4
    max_states: int = 0
    lie_file: str = ""   # the lying-disk models lie only about this file of the program's (its blocks from
    #                      the recording's file map: core/lies.target_program); "": anywhere, its blocks first

    def __post_init__(self) -> None:
        if not self.models:
            raise UsageError("select at least one crash model")
        unknown = [m for m in self.models if m not in MODELS]
        if unknown:
            raise UsageError(f"unknown crash model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
        for name in ("bound", "samples", "torn_samples", "max_states"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError(f"--{name.replace('_', '-')} must be a whole number >= 0, not {value!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < SEED_AUTO:
            raise UsageError(f"--seed must be a whole number >= 0 or 'auto', not {self.seed!r}")
        if self.lie_file and (self.lie_file.startswith("/") or ".." in self.lie_file.split("/")):
            raise UsageError(f"--lie-file {self.lie_file}: a path relative to the filesystem under test, inside it")
        if self.lie_file and not set(self.models) & set(LIE_MODELS):
            raise UsageError(f"--lie-file {self.lie_file} restricts the lying-disk models, and none is chosen "
                             f"(--model {','.join(m for m in LIE_MODELS if m != 'flush-ignored')})")

    def with_(self, **changes: Any) -> SelectionSpec:
        """This value with the given fields replaced; a None value keeps the field (an option not given)."""
        given: dict[str, Any] = {k: (tuple(v) if k == "models" else v) for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self

    def resolved(self) -> SelectionSpec:
        """``seed`` auto replaced by a fresh seed (from the OS), else this value."""
        if self.seed != SEED_AUTO:
            return self
        return dataclasses.replace(self, seed=int.from_bytes(os.urandom(4), "big"))

    def to_json(self) -> dict[str, Any]:
        return {"models": list(self.models), "seed": self.seed, "bound": self.bound, "samples": self.samples,
                "torn_samples": self.torn_samples, "max_states": self.max_states,
                **({"lie_file": self.lie_file} if self.lie_file else {})}


# the presets: `check` and the library take SelectionSpec(); `run` (the quick default campaign) and
# `demo` (the main job: six rows in checker VMs) judge fewer sampled states per window
RUN_SELECTION = SelectionSpec(bound=4, samples=8, torn_samples=1)
DEMO_SELECTION = SelectionSpec(bound=6, samples=12)   # every distinct state: a capped demo missed a finding
@dataclass(frozen=True, slots=True)
class ModelCounts:
    """One model's numbers.  ``generated``: its states after the floor (``below_floor`` more were
    before it); ``distinct``: the distinct images they map to; ``owned``: those it represents (not
    already an earlier model's); ``judged``: owned ones selected under max_states."""

    generated: int
    distinct: int
    owned: int
    judged: int
    below_floor: int = 0
    earlier: int = 0   # distinct states it would own that a ledger says passed in an earlier run (not owned)

    @property
    def left_out(self) -> int:
        return self.owned - self.judged

    def to_json(self) -> dict[str, int]:
        return {"generated": self.generated, "distinct": self.distinct, "owned": self.owned,
                "judged": self.judged, "left_out": self.left_out, "below_floor": self.below_floor,
                **({"earlier": self.earlier} if self.earlier else {})}


@dataclass(frozen=True, slots=True)
class Selection:
    """``states``: the representatives to judge (model order, then each model's order).
    ``aliases``: representative id -> the ids of the other states with its image (every
    representative that has some, judged or left out).  ``floor``: the floor mark's entry (None:
    no floor)."""

    states: Sequence[CrashState]   # a StateList from select(); a tuple once sharded
    aliases: dict[str, tuple[str, ...]]
    counts: dict[str, ModelCounts]
    floor: int | None
    coverage: Coverage = Coverage(())   # what the chosen states cover (judged = chosen; core/coverage)

    @property
    def left_out(self) -> dict[str, int]:
        """Per model: how many of its distinct states max_states dropped."""
        return {m: c.left_out for m, c in self.counts.items()}

    def to_json(self) -> dict[str, object]:
        return {"judged": len(self.states), "floor": self.floor, "aliases": sum(map(len, self.aliases.values())),
                "models": {m: c.to_json() for m, c in self.counts.items()}}


def image_key(sp: CrashSpace, state: CrashState) -> Hashable:
    """Equal for two states of ``sp`` iff they replay the same durable data (torn sectors included)
    and carry the same acks and begun keys (and tell the same lie: core/lies.py).
    O(cut - first dropped/torn entry); a few small objects.

    With ``hi`` just past the last data entry the state keeps (``base`` if none), the durable set
    is the first ``ndata[base]`` data entries, then those of [base, hi) but the lost ones (all
    dropped entries below ``hi``), the torn ones with their sectors: (ndata[base], ndata[hi], lost,
    torn) names it and is named by it."""
    base, cut, dropped, data = state.base, state.cut, state.dropped, sp.is_data
    hi, j = cut, len(dropped) - 1
    while hi > base and (not data[hi - 1] or (j >= 0 and dropped[j] == hi - 1)):
        if data[hi - 1]:
            j -= 1
        hi -= 1
    lost = dropped if j == len(dropped) - 1 else dropped[:j + 1]
    key = sp.ndata[base], sp.ndata[hi], lost, state.torn, sp.key_version[cut]
    return key if state.lie is None else (*key, state.lie)   # a lying disk's misplaced, flipped or bad sector


def fair_shares(sizes: Sequence[int], n: int) -> list[int]:
    """Split n slots over groups of these sizes as round-robin would (one slot per group in turn,
    a full group skipped): max-min fair, the odd slots to the earlier groups; n <= 0: no limit."""
    if n <= 0 or n >= sum(sizes):
        return list(sizes)
    lo, hi = 0, max(sizes)
    while lo < hi:  # the highest level L with sum(min(size, L)) <= n
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sum(min(s, mid) for s in sizes) <= n else (lo, mid - 1)
    got = [min(s, lo) for s in sizes]
    left = n - sum(got)
    for i, size in enumerate(sizes):  # fewer left than groups above the level
        if left and size > lo:
            got[i] += 1
            left -= 1
    return got


def spread(count: int, q: int) -> list[int]:
    """q indices of range(count), evenly spaced, first and last included (q == 1: the middle)."""
    if q >= count:
        return list(range(count))
    if q <= 0:
        return []
    if q == 1:
        return [(count - 1) // 2]
    return [(2 * i * (count - 1) + q - 1) // (2 * (q - 1)) for i in range(q)]


def _after_floor(state: CrashState, floor: int | None) -> bool:
    return floor is None or (state.cut > floor and all(d > floor for d in state.dropped)
                             and all(t > floor for t, _ in state.torn) and (state.lie is None or state.lie.entry > floor))


class StateList(Sequence[CrashState]):
    """Crash states kept as their ids -- one shared buffer of the ids' ASCII after ``MODEL@``, a
    model byte and a 4-byte end offset per state: ~20-25 bytes a state instead of ~300 bytes of
    objects -- each rebuilt from its id when asked for (``CrashSpace.state_from_id``: an id names
    one state, equal to the enumerated one).  A log of 10^6 entries has millions of distinct
    states: this is how a selection of them fits in memory."""

    __slots__ = ("_sp", "_buf", "_ends", "_mi", "_models", "_model_at")
    WIDE = 1 << 32   # ids' bytes from which the end offsets take 8 bytes, not 4

    def __init__(self, sp: CrashSpace, ids: Iterable[str] = ()) -> None:
        self._sp, self._buf, self._ends, self._mi = sp, bytearray(), array("I"), array("B")
        self._models: list[str] = []
        self._model_at: dict[str, int] = {}
        for sid in ids:
            self.append_id(sid)

    def append_id(self, sid: str) -> None:
        model, at, rest = sid.partition("@")
        if not at:
            raise ValueError(f"not a state id: {sid!r}")
        m = self._model_at.get(model)
        if m is None:
            m = self._model_at[model] = len(self._models)
            self._models.append(model)
        self._buf += rest.encode("ascii")
        self._mi.append(m)
        self._push_end(len(self._buf))

    def _push_end(self, end: int) -> None:
        if end >= self.WIDE and self._ends.typecode == "I":
            self._ends = array("Q", self._ends)
        self._ends.append(end)

    def extend(self, other: "StateList") -> None:
        """Append every id of ``other`` (of the same log), buffer to buffer."""
        remap = array("B")
        for m in other._models:
            if m not in self._model_at:
                self._model_at[m] = len(self._models)
                self._models.append(m)
            remap.append(self._model_at[m])
        base = len(self._buf)
        self._buf += other._buf
        if base + len(other._buf) >= self.WIDE and self._ends.typecode == "I":
            self._ends = array("Q", self._ends)
        self._ends.extend(e + base for e in other._ends)
        self._mi.extend(remap[m] for m in other._mi)

    def id_at(self, i: int) -> str:
        i = range(len(self._ends))[i]
        rest = self._buf[self._ends[i - 1] if i else 0:self._ends[i]].decode("ascii")
        return f"{self._models[self._mi[i]]}@{rest}"

    def ids(self) -> Iterator[str]:
        return map(self.id_at, range(len(self._ends)))

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> CrashState: ...
    @overload
    def __getitem__(self, i: slice) -> list[CrashState]: ...
    def __getitem__(self, i: int | slice) -> CrashState | list[CrashState]:
        if isinstance(i, slice):
            return [self._sp.state_from_id(self.id_at(k)) for k in range(len(self._ends))[i]]
        return self._sp.state_from_id(self.id_at(i))

    def __iter__(self) -> Iterator[CrashState]:
        return map(self._sp.state_from_id, self.ids())

    def __eq__(self, other: object) -> bool:
        """Equal to a StateList of the same log with the same ids, or to a tuple/list of the same states."""
        if isinstance(other, StateList):
            if self._sp.entries != other._sp.entries or len(self) != len(other):
                return False
            if self._models == other._models:
                return self._mi == other._mi and self._buf == other._buf and list(self._ends) == list(other._ends)
            return all(a == b for a, b in zip(self.ids(), other.ids()))
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StateList({len(self)} states)"


def _windows(states: Iterator[CrashState], version: Sequence[int]) -> Iterator[tuple[int, list[CrashState]]]:
    """A model's states (in cut order) grouped by the key version of their cut (non-decreasing)."""
    group: list[CrashState] = []
    at = -1
    for s in states:
        v = version[s.cut]
        if v != at and group:
            yield at, group
            group = []
        at = v
        group.append(s)
    if group:
        yield at, group


def state_key(sp: CrashSpace, state: CrashState) -> str:
    """A short stable name of a state's image and keys (a hash of ``image_key``): what a ledger of
    states judged in earlier runs of the same log holds (campaign/ledger.py)."""
    return hashlib.blake2b(repr(image_key(sp, state)).encode(), digest_size=8).hexdigest()


def select(index_or_entries: CrashSpace | LogIndex | Sequence[Entry], how: SelectionSpec | Sequence[str], *,
           floor_mark: str | None = "mkfs", earlier: Collection[str] = frozenset(), **fields: Any) -> Selection:
    """The states to judge: after the floor mark (if the log has it), one per distinct image, at
    most ``max_states`` (0: all) spread fairly over the models.  Deterministic per seed.  ``how``
    is a SelectionSpec, or the models with any of its other fields as keywords (the rest its
    defaults).  A seed of SEED_AUTO must be resolved first.

    Streaming: the image key holds the key version, so two states of different versions are never
    one image; the models' states are taken a key version at a time (all models, in model order)
    and the keys forgotten after it.  The representatives are kept as ids (``StateList``).

    ``earlier``: state keys (``state_key``) judged to pass in earlier runs of this log: such a
    distinct state is not judged again (counted as ``earlier``), so a cap and the run's time go to
    states never judged before."""
    spec = how if isinstance(how, SelectionSpec) else SelectionSpec(models=tuple(how)).with_(**fields)
    if spec.seed == SEED_AUTO:
        raise UsageError("select: resolve --seed auto first (SelectionSpec.resolved)")
    models, seed, bound, samples = spec.models, spec.seed, spec.bound, spec.samples
    torn_samples, max_states = spec.torn_samples, spec.max_states
    sp = space(index_or_entries)
    floor = next((e.index for e in sp.entries if e.mark == floor_mark), None) if floor_mark else None
    order = list(dict.fromkeys(models))
    tallies = {m: Tally() for m in order}
    streams = [_windows(sp.iter_states(m, seed=seed, exhaustive_bound=bound, samples=samples,
                                       torn_samples=torn_samples, tally=tallies[m]), sp.key_version) for m in order]
    ahead: list[tuple[int, list[CrashState]] | None] = [next(w, None) for w in streams]
    owned = {m: StateList(sp) for m in order}
    aliases: dict[str, list[str]] = {}
    gen, distinct, below = dict.fromkeys(order, 0), dict.fromkeys(order, 0), dict.fromkeys(order, 0)
    before = dict.fromkeys(order, 0)
    while any(a is not None for a in ahead):
        v = min(a[0] for a in ahead if a is not None)
        reps: dict[Hashable, str] = {}   # this key version's images -> their representative's id
        for k, model in enumerate(order):
            got = ahead[k]
            if got is None or got[0] != v:
                continue
            seen: set[Hashable] = set()
            for s in got[1]:
                if not _after_floor(s, floor):
                    below[model] += 1
                    continue
                gen[model] += 1
                key = image_key(sp, s)
                seen.add(key)
                rep = reps.get(key)
                if rep is None:
                    reps[key] = s.id
                    if earlier and state_key(sp, s) in earlier:
                        before[model] += 1
                    else:
                        owned[model].append_id(s.id)
                else:
                    aliases.setdefault(rep, []).append(s.id)
            distinct[model] += len(seen)
            ahead[k] = next(streams[k], None)
    shares = fair_shares([len(owned[m]) for m in order], max_states)
    chosen = StateList(sp)
    counts: dict[str, ModelCounts] = {}
    for model, q in zip(order, shares):
        mine = owned.pop(model)
        if q == len(mine):
            chosen.extend(mine)
        else:
            for i in spread(len(mine), q):
                chosen.append_id(mine.id_at(i))
        counts[model] = ModelCounts(gen[model], distinct[model], len(mine), q, below[model], before[model])
        del mine
    log.debug("selected %d of %d distinct states (floor %s): %s", len(chosen),
              sum(c.owned for c in counts.values()), floor, {m: c.to_json() for m, c in counts.items()})
    cov = build(counts, tallies, notes={m: log_notes(sp, m) for m in order}, seed=seed)
    return Selection(chosen, {k: tuple(v) for k, v in aliases.items()}, counts, floor, cov)


def log_notes(sp: CrashSpace, model: str) -> list[str]:
    """What the log itself keeps a model from generating (coverage notes, CrashSpace.notes): each
    ambiguous ordering window or orphan begin mark, named with the ack it affects, and the writes
    that may have completed while a flush or FUA write was in flight.  None for ``flush``: its
    states (everything before a flush point durable) lose no completed write, so neither gap reaches it."""
    return [] if model == "flush" else list(sp.notes)

"""Choose the crash states a check judges (pure; host): the states of its disks (one, or each
node's of a cluster: core/states/nodes.py) after a floor mark, each distinct image once, and under a cap
a fair share of every model.  One algorithm for N >= 1 disks; one disk is N = 1.

* **Floor**: only states whose cut lies after the floor mark (``mkfs``) on every disk and whose
  durable set keeps every entry before it whole (before mkfs finished there is no filesystem to
  recover).
* **Each image judged once**: two states of the disks are one *distinct* state when every disk
  replays the same data and the same keys are told (core/states/imagekey.py).  The first in model order
  (models in the order given, then each model's own order) is the *representative* that gets
  judged; the others are its *aliases* and share its verdict.
* **Per instant** (a key version: core/states/nodes.py), per model, each disk contributes its *pool*: its
  distinct states of the instant under that model (the first of each image), in its model's order.
  The states of the disks are the combinations of the pools, in product order (one disk: its pool).
  With several disks, a disk whose pool is empty contributes its ``flush`` pool (its disk as a
  model without that failure sees it), provided some disk has a state of the model there; if the
  product exceeds ``node_bound``, the structured picks and seeded samples of ``_combos`` are
  taken instead, and the coverage says *sampled* (one window per instant).  Under a lying-disk
  model one disk lies at a time: each disk's pool with every other disk's flush pool.  One disk's pool is
  already its model's own selection: nothing to combine, no window of its own.
* **Aliases** of a representative: the other states with its image: the same images reached by a
  later model, and a disk's other states with the image of its pool's state (its *duplicates*).
  With several disks the combinations of duplicates are a product: each is listed with one disk's
  duplicate in place (the others are counted in ``generated``, not listed).
* **max_states** spreads over the models: every model's *own* distinct states (those it
  represents) get a fair share (water-filling: as equal as possible, a model that needs fewer
  leaves the rest to the others, ties to the earlier model), and within a model the share is
  evenly spaced over its ordered list, first and last included, so early and late cuts are
  both judged.  Deterministic; never more than max_states.
* **Memory** (a 10^6-entry log has millions of states): the models' states are streamed
  (``CrashSpace.iter_states``) a key version at a time, all models in model order (states of
  different key versions never share an image, so the keys are forgotten after each version), and
  the representatives are kept as ids (core/states/statelist.StateList, ~25 bytes a state), each rebuilt
  from its id when asked for.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from powercut.core.log.dmlog import Entry, LogIndex
from powercut.core.states.coverage import SPACE_CAP, Coverage, Tally, build
from powercut.core.states.crashstate import CrashState
from powercut.core.states.imagekey import key_name
from powercut.core.states.models import CrashSpace, space
from powercut.core.states.nodes import (
    DEFAULT_NODE_BOUND,
    FALLBACK_MODEL,
    LATE_MARKS,
    Nodes,
    NodesState,
    format_nodes_id,
)
from powercut.core.states.pools import Stream
from powercut.core.states.stateid import LIE_MODELS, MODELS, shake_bits
from powercut.core.states.statelist import StateList
from powercut.errors import UsageError

log = logging.getLogger(__name__)

__all__ = [
    "DEMO_SELECTION",
    "RUN_SELECTION",
    "SEED_AUTO",
    "NodesSelection",
    "ModelCounts",
    "Selection",
    "SelectionSpec",
    "fair_shares",
    "log_notes",
    "select",
    "select_nodes",
    "spread",
]


SEED_AUTO = (
    -1
)  # --seed auto: a new seed per run, chosen when the run starts (SelectionSpec.resolved)


@dataclass(frozen=True, slots=True)
class SelectionSpec:
    """How a check chooses its crash states, one value with its defaults written once here: the
    models, the seed of every sampled state, the write-cache bound (all subsets up to ``bound``
    droppable writes), the seeded ``samples`` beyond it, the seeded tears per torn write, and the cap
    (``max_states``, 0: every distinct state).  Embedded by campaign.run.CampaignSpec, campaign.crashtest.CrashTest and
    campaign.matrix.MatrixRun; the CLI's options and the pytest marker override its fields (``with_``).  ``seed`` SEED_AUTO
    (``--seed auto``) is resolved to a fresh seed when a run starts."""

    models: tuple[str, ...] = (
        "flush",
        "write-cache",
        "torn-4k",
    )  # torn-4k: x1.10 states (docs/measurements.md)
    seed: int = 0
    bound: int = 10
    samples: int = 64
    torn_samples: int = 4
    max_states: int = 0
    setup_samples: int | None = (
        None  # write-cache samples of a set-up window (before the first key mark:
    )
    #                                    nothing acknowledged yet) beyond the bound; None: ``samples``
    lie_file: str = (
        ""  # the lying-disk models lie only about this file of the program's (its blocks from
    )
    #                      the recording's file map: campaign/run.lie_target_of); "": anywhere, its blocks first

    def __post_init__(self) -> None:
        if not self.models:
            raise UsageError("select at least one crash model")
        unknown = [m for m in self.models if m not in MODELS]
        if unknown:
            raise UsageError(
                f"unknown crash model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}"
            )
        for name in ("bound", "samples", "torn_samples", "max_states", "setup_samples"):
            value = getattr(self, name)
            if value is None and name == "setup_samples":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError(
                    f"--{name.replace('_', '-')} must be a whole number >= 0, not {value!r}"
                )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < SEED_AUTO:
            raise UsageError(f"--seed must be a whole number >= 0 or 'auto', not {self.seed!r}")
        if self.lie_file and (self.lie_file.startswith("/") or ".." in self.lie_file.split("/")):
            raise UsageError(
                f"--lie-file {self.lie_file}: a path relative to the filesystem under test, inside it"
            )
        if self.lie_file and not set(self.models) & set(LIE_MODELS):
            raise UsageError(
                f"--lie-file {self.lie_file} restricts the lying-disk models, and none is chosen "
                f"(--model {','.join(m for m in LIE_MODELS if m != 'flush-ignored')})"
            )

    def with_(self, **changes: Any) -> SelectionSpec:
        """This value with the given fields replaced; a None value keeps the field (an option not given)."""
        given: dict[str, Any] = {
            k: (tuple(v) if k == "models" else v) for k, v in changes.items() if v is not None
        }
        return dataclasses.replace(self, **given) if given else self

    def resolved(self) -> SelectionSpec:
        """``seed`` auto replaced by a fresh seed (from the OS), else this value."""
        if self.seed != SEED_AUTO:
            return self
        return dataclasses.replace(self, seed=int.from_bytes(os.urandom(4), "big"))

    def to_json(self) -> dict[str, Any]:
        return {
            "models": list(self.models),
            "seed": self.seed,
            "bound": self.bound,
            "samples": self.samples,
            "torn_samples": self.torn_samples,
            "max_states": self.max_states,
            **({"setup_samples": self.setup_samples} if self.setup_samples is not None else {}),
            **({"lie_file": self.lie_file} if self.lie_file else {}),
        }


# the presets: `check` and the library take SelectionSpec(); `run` (the quick default campaign) and
# `demo` (the main job: six rows in checker VMs) judge fewer sampled states per window
RUN_SELECTION = SelectionSpec(bound=4, samples=8, torn_samples=1)
# the demo: every distinct state (a capped demo missed a finding); commit windows of up to 7 droppable
# writes exhaustive (the durable rows' largest), set-up windows beyond the bound only their picks
DEMO_SELECTION = SelectionSpec(bound=7, samples=12, setup_samples=0)


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
    earlier: int = (
        0  # distinct states it would own that a ledger says passed in an earlier run (not owned)
    )
    setup_owned: int = (
        0  # of ``owned``, those before the program's first key mark (instant 0: set-up)
    )
    setup_judged: int = 0  # of ``judged``, those

    @property
    def left_out(self) -> int:
        return self.owned - self.judged

    def to_json(self) -> dict[str, int]:
        return {
            "generated": self.generated,
            "distinct": self.distinct,
            "owned": self.owned,
            "judged": self.judged,
            "left_out": self.left_out,
            "below_floor": self.below_floor,
            **({"earlier": self.earlier} if self.earlier else {}),
            **(
                {"setup_owned": self.setup_owned, "setup_judged": self.setup_judged}
                if self.setup_owned
                else {}
            ),
        }


@dataclass(frozen=True, slots=True)
class Selection:
    """One disk's choice (``select``).  ``states``: the representatives to judge (model order, then
    each model's order).  ``aliases``: representative id -> the ids of the other states with its
    image (every representative that has some, judged or left out).  ``floor``: the floor mark's
    entry (None: no floor)."""

    states: Sequence[CrashState]  # a StateList from select(); a tuple once sharded
    aliases: dict[str, tuple[str, ...]]
    counts: dict[str, ModelCounts]
    floor: int | None
    coverage: Coverage = Coverage(
        ()
    )  # what the chosen states cover (judged = chosen; core/states/coverage)

    @property
    def left_out(self) -> dict[str, int]:
        """Per model: how many of its distinct states max_states dropped."""
        return {m: c.left_out for m, c in self.counts.items()}

    @property
    def floors(self) -> tuple[int | None, ...]:
        """Each disk's floor entry, as NodesSelection's: the one disk's ``floor``."""
        return (self.floor,)

    def to_json(self) -> dict[str, object]:
        return {
            "judged": len(self.states),
            "floor": self.floor,
            "aliases": sum(map(len, self.aliases.values())),
            "models": {m: c.to_json() for m, c in self.counts.items()},
        }


@dataclass(frozen=True, slots=True)
class NodesSelection:
    """The states of the disks to judge (``select_nodes``; model order, then instant, then product
    order), their aliases (representative id -> ids of the other states with the same images on
    every disk), per-model counts, the coverage, each disk's floor entry, and per disk and model its
    distinct states (``node_states``); ``products``: model -> the sum over instants of the
    product of the disks' pools (one disk: its distinct states)."""

    states: Sequence[NodesState]  # a StateList from select_nodes(); a tuple once sharded
    aliases: dict[str, tuple[str, ...]]
    counts: dict[str, ModelCounts]
    coverage: Coverage
    node_states: tuple[dict[str, int], ...] = ()
    instants: int = 0
    products: dict[str, int] = field(default_factory=dict)
    floors: tuple[int | None, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "judged": len(self.states),
            "instants": self.instants,
            "node_states": list(self.node_states),
            "products": dict(self.products),
            "models": {m: c.to_json() for m, c in self.counts.items()},
            "coverage": self.coverage.to_json(),
        }


def fair_shares(sizes: Sequence[int], n: int) -> list[int]:
    """Split n slots over groups of these sizes as round-robin would (one slot per group in turn,
    a full group skipped): max-min fair, the odd slots to the earlier groups; n <= 0: no limit."""
    if n <= 0 or n >= sum(sizes):
        return list(sizes)
    lo, hi = 0, max(sizes)
    while lo < hi:  # the highest level L with sum(min(size, L)) <= n
        mid = (lo + hi + 1) // 2
        if sum(min(s, mid) for s in sizes) <= n:
            lo = mid
        else:
            hi = mid - 1
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


def _combos(
    sizes: Sequence[int], bound: int, seed: int, model: str, v: int, samples: int
) -> tuple[list[tuple[int, ...]], bool]:
    """Index tuples into the disks' pools: all of them when there is one disk (its pool is its
    model's own choice) or the product is within ``bound``, else the structured picks (every disk at
    its first state, every disk at its last, each state of each disk with every other disk at its
    first, and at its last) and ``samples`` seeded combinations (SHAKE-256 of
    ``powercut/cluster/{seed}/{model}/{v}/{j}/{node}``); True: sampled."""
    total = math.prod(sizes)
    if len(sizes) == 1 or total <= bound:
        return list(itertools.product(*(range(s) for s in sizes))), False
    first, last = tuple(0 for _ in sizes), tuple(s - 1 for s in sizes)
    picks: dict[tuple[int, ...], None] = dict.fromkeys([first, last])
    for n, size in enumerate(sizes):
        for i in range(size):
            picks[first[:n] + (i,) + first[n + 1 :]] = None
            picks[last[:n] + (i,) + last[n + 1 :]] = None
    for j in range(samples):
        picks[
            tuple(
                shake_bits(f"powercut/cluster/{seed}/{model}/{v}/{j}/{n}", 64) % s
                for n, s in enumerate(sizes)
            )
        ] = None
    return list(picks), True


def _floor_of(sp: CrashSpace, floor_mark: str | None) -> int | None:
    return next((e.index for e in sp.entries if e.mark == floor_mark), None) if floor_mark else None


def select_nodes(
    disks: Nodes,
    how: SelectionSpec,
    *,
    floor_mark: str | None = "mkfs",
    earlier: Collection[str] = frozenset(),
    node_bound: int = DEFAULT_NODE_BOUND,
) -> NodesSelection:
    """The states of the disks to judge: per model, per instant, the combinations of the disks'
    pools (after each disk's floor mark), each distinct image once, at most ``how.max_states`` (0:
    all) spread fairly over the models.  Deterministic per seed; a seed of SEED_AUTO must be
    resolved first.

    ``earlier``: the names (core/states/imagekey.key_name) of states judged to pass in earlier runs of
    these logs: such a distinct state is not judged again (counted as ``earlier``), so a cap and
    the run's time go to states never judged before."""
    if how.seed == SEED_AUTO:
        raise UsageError("select: resolve --seed auto first (SelectionSpec.resolved)")
    if not isinstance(node_bound, int) or isinstance(node_bound, bool) or node_bound < 1:
        raise UsageError(f"--node-bound must be a whole number >= 1, not {node_bound!r}")
    several = len(disks) > 1
    order = list(dict.fromkeys(how.models))
    floors = tuple(_floor_of(sp, floor_mark) for sp in disks.nodes)
    node_tallies = [{m: Tally() for m in order} for _ in disks.nodes]
    kw = {
        "seed": how.seed,
        "exhaustive_bound": how.bound,
        "samples": how.samples,
        "torn_samples": how.torn_samples,
        "setup_samples": how.setup_samples,
    }
    streams = {
        m: [
            Stream(sp, m, floor, node_tallies[n][m], **kw)
            for n, (sp, floor) in enumerate(zip(disks.nodes, floors))
        ]
        for m in order
    }
    fallback = None  # several disks: a disk with no state of a model in an instant contributes its flush states
    if several and FALLBACK_MODEL not in streams:
        fallback = [
            Stream(sp, FALLBACK_MODEL, floor, Tally(), **kw)
            for sp, floor in zip(disks.nodes, floors)
        ]
    owned: dict[str, StateList[NodesState]] = {m: StateList(disks) for m in order}
    aliases: dict[str, list[str]] = {}
    gen = dict.fromkeys(order, 0)
    distinct = dict.fromkeys(order, 0)
    before = dict.fromkeys(order, 0)
    setup_owned = dict.fromkeys(
        order, 0
    )  # owned states of instant 0 (set-up: before the first key mark)
    products = dict.fromkeys(order, 0)
    combined = {
        m: Tally() for m in order
    }  # several disks: one window per instant, its combinations
    while True:
        ahead = [st.next_version for m in order for st in streams[m]]
        if all(a is None for a in ahead):
            break
        v = min(a for a in ahead if a is not None)
        taken = {m: [st.take(v) for st in streams[m]] for m in order}
        back = (
            [st.take(v) for st in fallback] if fallback is not None else taken.get(FALLBACK_MODEL)
        )
        reps: dict[
            tuple[Hashable, ...], str
        ] = {}  # this instant's images -> their representative's id
        for m in order:
            pools = taken[m]
            if not any(pools):
                continue
            seen: set[tuple[Hashable, ...]] = set()
            for tag, variant in _variants(m, pools, back if several else None):
                if not all(variant):
                    continue
                images = [list(p) for p in variant]
                sizes = [len(k) for k in images]
                combos, sampled = _combos(sizes, node_bound, how.seed, m + tag, v, how.samples)
                products[m] = min(SPACE_CAP, products[m] + math.prod(sizes))
                for c in combos:
                    keys = tuple(images[n][i] for n, i in enumerate(c))
                    groups = [variant[n][k] for n, k in enumerate(keys)]
                    ids = [g[0] for g in groups]
                    gen[m] += math.prod(len(g) for g in groups)
                    seen.add(keys)
                    sid = format_nodes_id(m, ids)
                    rep = reps.get(keys)
                    if rep is None:
                        reps[keys] = rep = sid
                        if earlier and key_name(keys) in earlier:
                            before[m] += 1
                        else:
                            owned[m].append_id(sid)
                    else:
                        aliases.setdefault(rep, []).append(sid)
                    for n, g in enumerate(groups):  # each disk's duplicates, one disk at a time
                        for dup in g[1:]:
                            aliases.setdefault(rep, []).append(
                                format_nodes_id(m, [*ids[:n], dup, *ids[n + 1 :]])
                            )
                if several:
                    combined[m].window(
                        min(SPACE_CAP, math.prod(sizes)), len(combos), sampled=sampled, setup=v == 0
                    )
            distinct[m] += len(seen)
            if v == 0:
                setup_owned[m] = len(owned[m])
    shares = fair_shares([len(owned[m]) for m in order], how.max_states)
    chosen: StateList[NodesState] = StateList(disks)
    counts: dict[str, ModelCounts] = {}
    for m, q in zip(order, shares):
        mine = owned.pop(m)
        if q == len(mine):
            chosen.extend(mine)
            setup_judged = setup_owned[m]
        else:
            picked = spread(len(mine), q)
            for i in picked:
                chosen.append_id(mine.id_at(i))
            setup_judged = sum(i < setup_owned[m] for i in picked)
        counts[m] = ModelCounts(
            gen[m],
            distinct[m],
            len(mine),
            q,
            sum(st.below for st in streams[m]),
            before[m],
            setup_owned[m],
            setup_judged,
        )
        del mine
    tallies = {m: _sum_tallies([combined[m], *(t[m] for t in node_tallies)]) for m in order}
    notes = {m: _notes(disks, m) for m in order}
    setup_only = _setup_notes(disks)
    log.debug(
        "selected %d of %d distinct states (floors %s): %s",
        len(chosen),
        sum(c.owned for c in counts.values()),
        floors,
        {m: c.to_json() for m, c in counts.items()},
    )
    cov = build(counts, tallies, notes=notes, seed=how.seed, setup_only=setup_only)
    node_states = tuple({m: streams[m][n].distinct for m in order} for n in range(len(disks)))
    return NodesSelection(
        chosen,
        {k: tuple(x) for k, x in aliases.items()},
        counts,
        cov,
        node_states,
        disks.instants,
        products,
        floors,
    )


Pools = list[dict[Hashable, list[str]]]


def _variants(model: str, pools: Pools, back: Pools | None) -> list[tuple[str, Pools]]:
    """The pools an instant's states of ``model`` combine, each with its tag (for the seeded picks):
    one disk's own; with several (``back``: their flush pools), every disk's own pool or, where it
    is empty, its flush pool -- and for a lying-disk model one lying disk per state: each disk with
    a state of the model lies (its pool), every other one is honest (its flush pool)."""
    if back is None:
        return [("", pools)]
    if model in LIE_MODELS:
        return [
            (f"/lie{n}", [pools[k] if k == n else back[k] for k in range(len(pools))])
            for n in range(len(pools))
            if pools[n]
        ]
    return [("", [mine or theirs for mine, theirs in zip(pools, back)])]


def _sum_tallies(parts: Sequence[Tally]) -> Tally:
    out = Tally()
    for t in parts:
        out.add(t)
    return out


def _setup_notes(disks: Nodes) -> list[str]:
    """The notes (as ``_notes`` words them) that weaken only the set-up windows (CrashSpace.setup_notes)."""
    if len(disks) == 1:
        return list(disks.nodes[0].setup_notes)
    return [f"node {n} -- {x}" for n, sp in enumerate(disks.nodes) for x in sp.setup_notes]


def _notes(disks: Nodes, model: str) -> list[str]:
    """What the logs keep a model from generating (log_notes), each naming its node when there are
    several, and then what marking several logs in turn hides (LATE_MARKS)."""
    if len(disks) == 1:
        return log_notes(disks.nodes[0], model)
    return [
        f"node {n} -- {x}" for n, sp in enumerate(disks.nodes) for x in log_notes(sp, model)
    ] + [LATE_MARKS]


def select(
    index_or_entries: CrashSpace | LogIndex | Sequence[Entry],
    how: SelectionSpec | Sequence[str],
    *,
    floor_mark: str | None = "mkfs",
    earlier: Collection[str] = frozenset(),
    **fields: Any,
) -> Selection:
    """One disk's states to judge (``select_nodes`` of one disk): after the floor mark (if the log has
    it), one per distinct image, at most ``max_states`` (0: all) spread fairly over the models.
    ``how`` is a SelectionSpec, or the models with any of its other fields as keywords (the rest
    its defaults).  ``earlier``: state keys (core/states/imagekey.state_key) that passed in earlier runs."""
    spec = (
        how if isinstance(how, SelectionSpec) else SelectionSpec(models=tuple(how)).with_(**fields)
    )
    sp = space(index_or_entries)
    got = select_nodes(Nodes([sp]), spec, floor_mark=floor_mark, earlier=earlier)
    chosen = got.states
    assert isinstance(chosen, StateList)
    return Selection(chosen.over(sp), got.aliases, got.counts, got.floors[0], got.coverage)


def log_notes(sp: CrashSpace, model: str) -> list[str]:
    """What the log itself keeps a model from generating (coverage notes, CrashSpace.notes): each
    ambiguous ordering window or orphan begin mark, named with the ack it affects, and the writes
    that may have completed while a flush or FUA write was in flight.  None for ``flush``: its
    states (everything before a flush point durable) lose no completed write, so neither gap reaches it."""
    return [] if model == "flush" else list(sp.notes)

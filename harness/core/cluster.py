"""One power cut across a whole cluster: consistent cuts of N node logs (pure; host).

A cluster recording has one dm-log-writes log per node; every ``ack:``/``begin:`` mark is written
to every node's log under one lock (marks.py, ``$POWERCUT_CLUSTER``), so every log holds the same
sequence of key marks.  This module turns N such logs into cluster crash states.

**The instant.**  A node's *key version* at cut c (``CrashSpace.key_version[c]``) is the number of
key marks before c that added a key (a repeated ``ack:k`` adds none).  Because every log has the
same key-adding marks in the same order, version v names the same span of real time on every node:
after the v-th key-adding global mark was logged everywhere and before the (v+1)-th was logged
anywhere it could matter.  A **cluster instant** is a version v; a **cluster crash state** at
instant v is one crash state per node, each a state its own disk's model generates, whose cut has
key version v on that node: every node's cut lies after the same global mark and before the same
next one, so every node tells the checker the same acks and begun keys.  Within an instant the
logs carry no cross-node order (no global mark between them), so every combination of the nodes'
states of that instant is taken: a superset of the real-time-consistent cuts (it may hold a
combination no real crash produces, e.g. node B's write durable though node A's write that caused
it was not -- possible under write-cache anyway, but not under no-cache); it never misses one.

**Per node.**  Each node's states are the per-disk models' own (core/models.CrashSpace: flush,
write-cache -- any subset of the node's unflushed writes --, torn-4k, ...), after the floor mark,
one per distinct image (core/selection.image_key).  For the cluster model m, a node contributes its
distinct m-states of the instant; a node with none there (torn-4k: no tearable write in the
instant) contributes its ``flush`` states of the instant (its disk as a model without that failure
sees it).  A node with no state at all in an instant (before the floor) leaves that instant out.

**Bounded.**  The states of instant v under model m are the product of the nodes' pools.  If the
product holds at most ``cluster_bound`` combinations, all are taken (exhaustive); else the
structured picks (every node at its first state, every node at its last, each state of each node
with every other node at its first, and at its last) and ``samples`` seeded combinations
(SHAKE-256 of ``powercut/cluster/{seed}/{model}/{v}/{j}/{node}``), and the coverage says
*sampled* (core/coverage: one window per instant, plus each node's own sampled windows).  Each
distinct cluster image (the nodes' image keys together) is judged once, the first in model order.

**The id** lists every node's state id: ``MODEL~ID0+ID1+...`` (``write-cache~flush@9+write-cache@12/d3+flush@10``),
``MODEL`` the cluster model that generated it.  Each node id rebuilds that node's state exactly
(core/stateid, seeded parts included), so the cluster id alone rebuilds the cluster state;
``ClusterSpace.state_from_id`` refuses an id whose node cuts lie in two instants.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

from powercut.core.coverage import SPACE_CAP, Coverage, Tally, build
from powercut.core.crashstate import CrashState
from powercut.core.dmlog import Entry, LogIndex
from powercut.core.models import CrashSpace, space
from powercut.core.selection import ModelCounts, SelectionSpec, fair_shares, image_key, log_notes, spread
from powercut.core.stateid import check_model, shake_bits
from powercut.errors import UsageError

__all__ = ["ClusterSelection", "ClusterSpace", "ClusterState", "FALLBACK_MODEL", "ID_SEP", "NODE_SEP",
           "format_cluster_id", "key_events", "parse_cluster_id"]

ID_SEP = "~"      # MODEL~ids
NODE_SEP = "+"    # between the nodes' ids (no per-disk id contains it)
FALLBACK_MODEL = "flush"   # what a node with no state of the cluster model in an instant contributes
DEFAULT_CLUSTER_BOUND = 4096
MAX_NODES = 8      # nodes of one cluster recording (one recording VM's disks)
LATE_MARKS = ("marks reach the nodes' logs in turn, node 0 first: a node's write or flush completed between an "
              "ack and that node's mark counts as before the ack, so a window shorter than the marking path is "
              "not seen (docs/clusters.md, Known limits); affects every ack")


def key_events(sp: CrashSpace) -> tuple[tuple[bool, str, int], ...]:
    """The key-adding marks of one log, in order: (is an ack, key, entry index)."""
    out = []
    for i, e in enumerate(sp.entries):
        if sp.key_version[i + 1] > sp.key_version[i]:
            ack = e.ack_key
            out.append((ack is not None, ack if ack is not None else str(e.begin_key), i))
    return tuple(out)


def format_cluster_id(model: str, node_ids: Sequence[str]) -> str:
    return model + ID_SEP + NODE_SEP.join(node_ids)


def parse_cluster_id(text: object, nodes: int) -> tuple[str, tuple[str, ...]]:
    """(cluster model, node ids) of a cluster id, checked for shape only; UsageError if malformed."""
    if not isinstance(text, str) or ID_SEP not in text:
        raise UsageError(f"cluster state id {text!r}: want MODEL{ID_SEP}ID0{NODE_SEP}ID1{NODE_SEP}... "
                         f"(one per-disk state id per node)")
    model, _, rest = text.partition(ID_SEP)
    check_model(model)
    ids = tuple(rest.split(NODE_SEP))
    if len(ids) != nodes or not all(ids):
        raise UsageError(f"cluster state id {text!r} names {len(ids)} node state(s); this cluster has {nodes} nodes")
    return model, ids


@dataclass(frozen=True, slots=True)
class ClusterState:
    """One state per node at one instant (key version): what every node's disk held."""

    model: str
    instant: int
    nodes: tuple[CrashState, ...]
    id: str

    @property
    def acks(self) -> Sequence[str]:
        return self.nodes[0].acks

    @property
    def begun(self) -> tuple[str, ...]:
        return self.nodes[0].begun

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "model": self.model, "instant": self.instant,
                "nodes": [s.id for s in self.nodes], "acks": list(self.acks), "begun": list(self.begun)}


class ClusterSpace:
    """The crash spaces of N node logs that share their key marks.  UsageError (one line) if the
    logs do not have the same key-adding marks in the same order: they were not recorded as one
    cluster, and no cut of them is consistent."""

    def __init__(self, nodes: Sequence[CrashSpace | LogIndex | Sequence[Entry]]) -> None:
        if len(nodes) < 1:
            raise UsageError("a cluster has at least one node")
        self.nodes: tuple[CrashSpace, ...] = tuple(space(n) for n in nodes)
        events = [key_events(sp) for sp in self.nodes]
        first = [(a, k) for a, k, _ in events[0]]
        for n, ev in enumerate(events[1:], 1):
            mine = [(a, k) for a, k, _ in ev]
            if mine != first:
                at = next((j for j, (x, y) in enumerate(zip(first, mine)) if x != y), min(len(first), len(mine)))
                raise UsageError(f"node {n}'s log does not share node 0's key marks: key mark #{at + 1} is "
                                 f"{_name(mine, at)} on node {n}, {_name(first, at)} on node 0 "
                                 "(not one cluster recording)")
        self.instants = len(first) + 1   # versions 0..len(first)
        self.events = first

    def __len__(self) -> int:
        return len(self.nodes)

    def window(self, node: int, instant: int) -> range:
        """The cuts of a node (1..n) whose key version is ``instant``."""
        kv = self.nodes[node].key_version
        lo = _bisect(kv, instant, 1)
        hi = _bisect(kv, instant + 1, 1)
        return range(lo, hi)

    def instant_of(self, node: int, cut: int) -> int:
        return self.nodes[node].key_version[cut]

    def make(self, model: str, states: Sequence[CrashState]) -> ClusterState:
        """A cluster state from one state per node; UsageError if they lie in different instants."""
        check_model(model)
        if len(states) != len(self.nodes):
            raise UsageError(f"a cluster state has one state per node ({len(self.nodes)}), not {len(states)}")
        at = [self.instant_of(n, s.cut) for n, s in enumerate(states)]
        if len(set(at)) != 1:
            where = ", ".join(f"node {n} at instant {v}" for n, v in enumerate(at))
            raise UsageError(f"not a consistent cut: {where} (every node's cut must lie between the same two "
                             "key marks)")
        return ClusterState(model, at[0], tuple(states), format_cluster_id(model, [s.id for s in states]))

    def state_from_id(self, text: str) -> ClusterState:
        """Rebuild the cluster state an id names; UsageError for a malformed id, a node id that does
        not fit its log, or node cuts in two instants."""
        model, ids = parse_cluster_id(text, len(self.nodes))
        states = []
        for n, (sp, sid) in enumerate(zip(self.nodes, ids)):
            try:
                states.append(sp.state_from_id(sid))
            except UsageError as e:
                raise UsageError(f"cluster state id {text!r}: node {n}: {e.one_line()}") from None
        bad = [s.model for s in states if s.model not in (model, FALLBACK_MODEL)]
        if bad:
            raise UsageError(f"cluster state id {text!r}: a {model} cluster state holds {model} or "
                             f"{FALLBACK_MODEL} node states, not {bad[0]}")
        got = self.make(model, states)
        return ClusterState(got.model, got.instant, got.nodes, text)

    def key(self, state: ClusterState) -> Hashable:
        """Equal for two cluster states iff every node replays the same data and the keys are the same."""
        return tuple(image_key(sp, s) for sp, s in zip(self.nodes, state.nodes))


# -- enumeration ------------------------------------------------------------------------------------------
@dataclass(slots=True)
class _NodePools:
    """One node's distinct states per instant for one model, streamed a version at a time."""

    sp: CrashSpace
    floor: int | None
    stream: Iterator[CrashState]
    tally: Tally
    ahead: CrashState | None = None
    done: bool = False
    generated: int = 0
    distinct: int = 0

    def take(self, v: int) -> list[tuple[CrashState, Hashable]]:
        """This node's distinct states (first of each image) at version v (versions asked in order)."""
        out: dict[Hashable, CrashState] = {}
        kv = self.sp.key_version
        while not self.done:
            s = self.ahead if self.ahead is not None else next(self.stream, None)
            self.ahead = None
            if s is None:
                self.done = True
                break
            if kv[s.cut] > v:
                self.ahead = s
                break
            if kv[s.cut] < v or not _after_floor(s, self.floor):
                continue
            self.generated += 1
            out.setdefault(image_key(self.sp, s), s)
        self.distinct += len(out)
        return [(s, k) for k, s in out.items()]


@dataclass(frozen=True, slots=True)
class ClusterSelection:
    """The cluster states to judge (model order, then instant, then product order), their aliases
    (representative id -> ids of the other states with the same images on every node), per-model
    counts, the coverage, and per node and model the distinct per-disk states (``node_states``)."""

    states: tuple[ClusterState, ...]
    aliases: dict[str, tuple[str, ...]]
    counts: dict[str, ModelCounts]
    coverage: Coverage
    node_states: tuple[dict[str, int], ...] = ()
    instants: int = 0
    products: dict[str, int] = field(default_factory=dict)   # model -> sum over instants of the product

    def to_json(self) -> dict[str, object]:
        return {"judged": len(self.states), "instants": self.instants, "node_states": list(self.node_states),
                "products": dict(self.products), "models": {m: c.to_json() for m, c in self.counts.items()},
                "coverage": self.coverage.to_json()}


def _name(events: Sequence[tuple[bool, str]], at: int) -> str:
    return f"{'ack' if events[at][0] else 'begin'}:{events[at][1]}" if at < len(events) else "its end"


def _after_floor(s: CrashState, floor: int | None) -> bool:
    return floor is None or (s.cut > floor and all(d > floor for d in s.dropped) and all(t > floor for t, _ in s.torn))


def _bisect(kv: Sequence[int], v: int, lo: int) -> int:
    """First index >= lo with kv[index] >= v (kv is non-decreasing)."""
    hi = len(kv)
    while lo < hi:
        mid = (lo + hi) // 2
        if kv[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _combos(sizes: Sequence[int], bound: int, seed: int, model: str, v: int,
            samples: int) -> tuple[list[tuple[int, ...]], bool]:
    """Index tuples into the nodes' pools: all of them when the product is within ``bound``, else the
    structured picks and seeded samples (True: sampled)."""
    total = math.prod(sizes)
    if total <= bound:
        return list(itertools.product(*(range(s) for s in sizes))), False
    first, last = tuple(0 for _ in sizes), tuple(s - 1 for s in sizes)
    picks: dict[tuple[int, ...], None] = dict.fromkeys([first, last])
    for n, size in enumerate(sizes):
        for i in range(size):
            picks[first[:n] + (i,) + first[n + 1:]] = None
            picks[last[:n] + (i,) + last[n + 1:]] = None
    for j in range(samples):
        picks[tuple(shake_bits(f"powercut/cluster/{seed}/{model}/{v}/{j}/{n}", 64) % s
                    for n, s in enumerate(sizes))] = None
    return list(picks), True


def select_cluster(cs: ClusterSpace, how: SelectionSpec, *, floor_mark: str | None = "mkfs",
                   cluster_bound: int = DEFAULT_CLUSTER_BOUND) -> ClusterSelection:
    """The cluster states to judge: per model, per instant, combinations of the nodes' distinct
    states (after each node's floor mark), each distinct cluster image once, at most
    ``how.max_states`` (0: all) spread fairly over the models.  Deterministic per seed."""
    if how.seed < 0:
        raise UsageError("select_cluster: resolve --seed auto first (SelectionSpec.resolved)")
    if not isinstance(cluster_bound, int) or isinstance(cluster_bound, bool) or cluster_bound < 1:
        raise UsageError(f"--cluster-bound must be a whole number >= 1, not {cluster_bound!r}")
    order = list(dict.fromkeys(how.models))
    floors = [next((e.index for e in sp.entries if e.mark == floor_mark), None) if floor_mark else None
              for sp in cs.nodes]
    kw = {"seed": how.seed, "exhaustive_bound": how.bound, "samples": how.samples, "torn_samples": how.torn_samples}

    def pools(model: str) -> list[_NodePools]:
        out = []
        for sp, floor in zip(cs.nodes, floors):
            t = Tally()
            out.append(_NodePools(sp, floor, sp.iter_states(model, **kw, tally=t), t))
        return out

    streams = {m: pools(m) for m in order}
    fallback = streams[FALLBACK_MODEL] if FALLBACK_MODEL in streams else pools(FALLBACK_MODEL)
    tallies = {m: Tally() for m in order}
    owned: dict[str, list[ClusterState]] = {m: [] for m in order}
    aliases: dict[str, list[str]] = {}
    gen, distinct = dict.fromkeys(order, 0), dict.fromkeys(order, 0)
    products = dict.fromkeys(order, 0)
    for v in range(cs.instants):
        fb = [p.take(v) for p in fallback] if FALLBACK_MODEL not in streams else None
        taken = {m: [p.take(v) for p in streams[m]] for m in order}
        if fb is None:
            fb = taken[FALLBACK_MODEL]
        reps: dict[Hashable, str] = {}
        for m in order:
            node_pools = [mine or back for mine, back in zip(taken[m], fb)]
            if not all(node_pools):
                continue
            sizes = [len(p) for p in node_pools]
            combos, sampled = _combos(sizes, cluster_bound, how.seed, m, v, how.samples)
            products[m] = min(SPACE_CAP, products[m] + math.prod(sizes))
            seen: set[Hashable] = set()
            for c in combos:
                picked = [node_pools[n][i] for n, i in enumerate(c)]
                key = tuple(k for _, k in picked)
                gen[m] += 1
                seen.add(key)
                sid = format_cluster_id(m, [s.id for s, _ in picked])
                rep = reps.get(key)
                if rep is None:
                    reps[key] = sid
                    owned[m].append(ClusterState(m, v, tuple(s for s, _ in picked), sid))
                else:
                    aliases.setdefault(rep, []).append(sid)
            distinct[m] += len(seen)
            tallies[m].window(min(SPACE_CAP, math.prod(sizes)), len(combos), sampled=sampled)
    for m in order:   # each node's own sampled windows make the cluster's sampled too
        for p in streams[m]:
            t = p.tally
            tallies[m].windows += t.windows
            tallies[m].sampled_windows += t.sampled_windows
            tallies[m].generated += t.generated
            tallies[m].space = min(SPACE_CAP, tallies[m].space + t.space)
    shares = fair_shares([len(owned[m]) for m in order], how.max_states)
    chosen: list[ClusterState] = []
    counts: dict[str, ModelCounts] = {}
    for m, q in zip(order, shares):
        mine = owned[m]
        chosen += mine if q == len(mine) else [mine[i] for i in spread(len(mine), q)]
        counts[m] = ModelCounts(gen[m], distinct[m], len(mine), q)
    notes = {m: [f"node {n} -- {x}" for n, sp in enumerate(cs.nodes) for x in log_notes(sp, m)] + [LATE_MARKS]
             for m in order}
    cov = build(counts, tallies, notes=notes, seed=how.seed)
    node_states = tuple({m: streams[m][n].distinct for m in order} for n in range(len(cs.nodes)))
    return ClusterSelection(tuple(chosen), {k: tuple(x) for k, x in aliases.items()}, counts, cov, node_states,
                            cs.instants, products)

"""The disks of one instant (pure; host and guest): what a check judges is one crash state per disk,
all at the same instant; one disk is the case N = 1, a cluster of several nodes N > 1.

A recording has one dm-log-writes log per disk; with several (a cluster: ``record --nodes N``)
every ``ack:``/``begin:`` mark is written to every log under one lock (marks.py,
``$POWERCUT_NODES``), so every log holds the same sequence of key marks.  This module turns N
such logs into states of N disks; core/states/selection.py chooses which ones a check judges.

**The instant.**  A disk's *key version* at cut c (``CrashSpace.key_version[c]``) is the number of
key marks before c that added a key (a repeated ``ack:k`` adds none).  Because every log has the
same key-adding marks in the same order, version v names the same span of real time on every disk:
after the v-th key-adding global mark was logged everywhere and before the (v+1)-th was logged
anywhere it could matter.  An **instant** is a version v; a **state of the disks** at instant v is
one crash state per disk, each a state its own disk's model generates, whose cut has key version v
on that disk: every disk's cut lies after the same global mark and before the same next one, so
every disk tells the checker the same acks and begun keys.  Within an instant the logs carry no
cross-disk order (no global mark between them), so every combination of the disks' states of that
instant is taken: a superset of the real-time-consistent cuts (it may hold a combination no real
crash produces, e.g. disk B's write durable though disk A's write that caused it was not --
possible under write-cache anyway, but not under no-cache); it never misses one.  With one disk the
combinations are that disk's states.

**The id** of a state of one disk is that disk's state id (core/states/stateid: ``write-cache@12/d3``),
as it always was.  With several it lists every disk's state id after the model that generated it:
``MODEL~ID0+ID1+...`` (``write-cache~flush@9+write-cache@12/d3+flush@10``): a disk with no state of
that model in the instant contributes a ``flush`` state (FALLBACK_MODEL), so the disks' own ids do
not name the model.  Each disk's id rebuilds that disk's state exactly (seeded parts included), so
the id alone rebuilds the state of the disks; ``Nodes.state_from_id`` refuses an id whose cuts lie
in two instants.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from powercut.core.log.dmlog import Entry, LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace, space
from powercut.core.states.stateid import check_model
from powercut.core.states.stateid import parse_id as parse_disk_id
from powercut.errors import UsageError

__all__ = [
    "DEFAULT_NODE_BOUND",
    "Nodes",
    "NodesState",
    "FALLBACK_MODEL",
    "ID_SEP",
    "LATE_MARKS",
    "MAX_NODES",
    "NODE_SEP",
    "format_nodes_id",
    "key_events",
    "parse_nodes_id",
]

ID_SEP = "~"  # MODEL~ids (several disks)
NODE_SEP = "+"  # between the disks' ids (no per-disk id contains it)
FALLBACK_MODEL = (
    "flush"  # what a disk with no state of the model in an instant contributes (several disks)
)
DEFAULT_NODE_BOUND = (
    4096  # combinations of the disks' states taken in full per instant (--node-bound)
)
MAX_NODES = 8  # disks of one recording (one recording VM's data disks)
LATE_MARKS = (
    "marks reach the nodes' logs in turn, node 0 first: a node's write or flush completed between an "
    "ack and that node's mark counts as before the ack, so a window shorter than the marking path is "
    "not seen (docs/clusters.md, Known limits); affects every ack"
)


def key_events(sp: CrashSpace) -> tuple[tuple[bool, str, int], ...]:
    """The key-adding marks of one log, in order: (is an ack, key, entry index)."""
    out = []
    for i, e in enumerate(sp.entries):
        if sp.key_version[i + 1] > sp.key_version[i]:
            ack = e.ack_key
            out.append((ack is not None, ack if ack is not None else str(e.begin_key), i))
    return tuple(out)


def format_nodes_id(model: str, node_ids: Sequence[str]) -> str:
    """The id of a state of the disks: one disk's own id (it names its model), or ``MODEL~ID0+ID1+...``."""
    if len(node_ids) == 1:
        return node_ids[0]
    return model + ID_SEP + NODE_SEP.join(node_ids)


def parse_nodes_id(text: object, nodes: int) -> tuple[str, tuple[str, ...]]:
    """(model, disk ids) of the id of a state of ``nodes`` disks, checked for shape only (one disk's
    id: core/states/stateid.parse_id); UsageError if malformed."""
    if nodes == 1:
        return parse_disk_id(text).model, (str(text),)
    if not isinstance(text, str) or ID_SEP not in text:
        raise UsageError(
            f"cluster state id {text!r}: want MODEL{ID_SEP}ID0{NODE_SEP}ID1{NODE_SEP}... "
            f"(one per-disk state id per node)"
        )
    model, _, rest = text.partition(ID_SEP)
    check_model(model)
    ids = tuple(rest.split(NODE_SEP))
    if len(ids) != nodes or not all(ids):
        raise UsageError(
            f"cluster state id {text!r} names {len(ids)} node state(s); this cluster has {nodes} nodes"
        )
    return model, ids


@dataclass(frozen=True, slots=True)
class NodesState:
    """One state per disk at one instant (key version): what every disk held (``nodes``: one disk's
    state, or each node's of a cluster, in node order)."""

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

    @property
    def cut(self) -> int:
        """Where a verdict of this state says it was cut: one disk's own cut (its log's entry), N
        disks' instant (a key version, which every node shares)."""
        return self.nodes[0].cut if len(self.nodes) == 1 else self.instant

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "model": self.model,
            "instant": self.instant,
            "nodes": [s.id for s in self.nodes],
            "acks": list(self.acks),
            "begun": list(self.begun),
        }


class Nodes:
    """The crash spaces of N >= 1 disks' logs that share their key marks (one disk, or the nodes of
    a cluster).  UsageError (one line) if the logs do not have the same key-adding marks in the same
    order: they were not recorded as one cluster, and no cut of them is consistent."""

    def __init__(self, nodes: Sequence[CrashSpace | LogIndex | Sequence[Entry]]) -> None:
        if len(nodes) < 1:
            raise UsageError("a cluster has at least one node")
        self.nodes: tuple[CrashSpace, ...] = tuple(space(n) for n in nodes)
        events = [key_events(sp) for sp in self.nodes]
        first = [(a, k) for a, k, _ in events[0]]
        for n, ev in enumerate(events[1:], 1):
            mine = [(a, k) for a, k, _ in ev]
            if mine != first:
                at = next(
                    (j for j, (x, y) in enumerate(zip(first, mine)) if x != y),
                    min(len(first), len(mine)),
                )
                raise UsageError(
                    f"node {n}'s log does not share node 0's key marks: key mark #{at + 1} is "
                    f"{_name(mine, at)} on node {n}, {_name(first, at)} on node 0 "
                    "(not one cluster recording)"
                )
        self.instants = len(first) + 1  # versions 0..len(first)
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

    def make(self, model: str, states: Sequence[CrashState]) -> NodesState:
        """A state of the disks from one state per disk; UsageError if they lie in different instants
        (or, for one disk, if its state is not of ``model``)."""
        check_model(model)
        if len(self.nodes) == 1 and len(states) == 1 and states[0].model != model:
            raise UsageError(
                f"state {states[0].id} is a {states[0].model} state, not a {model} one"
            )
        if len(states) != len(self.nodes):
            raise UsageError(
                f"a cluster state has one state per node ({len(self.nodes)}), not {len(states)}"
            )
        at = [self.instant_of(n, s.cut) for n, s in enumerate(states)]
        if len(set(at)) != 1:
            where = ", ".join(f"node {n} at instant {v}" for n, v in enumerate(at))
            raise UsageError(
                f"not a consistent cut: {where} (every node's cut must lie between the same two "
                "key marks)"
            )
        return NodesState(
            model, at[0], tuple(states), format_nodes_id(model, [s.id for s in states])
        )

    def state_from_id(self, text: str) -> NodesState:
        """Rebuild the state of the disks an id names; UsageError for a malformed id, a disk's id that
        does not fit its log, or cuts in two instants.  One disk: its own id and errors
        (CrashSpace.state_from_id)."""
        if len(self.nodes) == 1:
            s = self.nodes[0].state_from_id(text)
            return NodesState(s.model, self.instant_of(0, s.cut), (s,), text)
        model, ids = parse_nodes_id(text, len(self.nodes))
        states = []
        for n, (sp, sid) in enumerate(zip(self.nodes, ids)):
            try:
                states.append(sp.state_from_id(sid))
            except UsageError as e:
                raise UsageError(f"cluster state id {text!r}: node {n}: {e.one_line()}") from None
        bad = [s.model for s in states if s.model not in (model, FALLBACK_MODEL)]
        if bad:
            raise UsageError(
                f"cluster state id {text!r}: a {model} cluster state holds {model} or "
                f"{FALLBACK_MODEL} node states, not {bad[0]}"
            )
        got = self.make(model, states)
        return NodesState(got.model, got.instant, got.nodes, text)

    def key(self, state: NodesState) -> tuple[Hashable, ...]:
        """Equal for two states of the disks iff every disk replays the same data and the keys are the same."""
        return tuple(image_key(sp, s) for sp, s in zip(self.nodes, state.nodes))


def _name(events: Sequence[tuple[bool, str]], at: int) -> str:
    return (
        f"{'ack' if events[at][0] else 'begin'}:{events[at][1]}" if at < len(events) else "its end"
    )


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

"""Minimize a failing state of N >= 1 disks (pure; host and guest), one disk's state at a time, and
the pure parts of a failure of several disks: which nodes its reasons name, its cause line, and how
much of each node's log a repro bundle needs.

**Per disk, the others fixed.**  Starting from a failing state of the disks, each disk's state is
minimized in turn by core/judging/shrink.minimize (its lost writes restored, its tear removed or its lost
sectors restored, its cut walked back) while the state of the disks -- that disk's candidate with
every other disk's current state -- still fails the same way (the same verdict and the same class
of first reason, ``shrink.signature``).  Rounds over the disks repeat until one changes nothing
or the budget (judge calls, shared by all disks) runs out.

With several disks a candidate must stay a state of the disks that ``Nodes.state_from_id``
rebuilds: its cut in the same instant (key version) as the others' (else the checker would be told
other acks), its model the state's or ``flush`` (the fallback a node contributes).
``InstantSpace`` is the node's CrashSpace with ``make_state`` refusing anything else, so
core/judging/shrink skips such a candidate as a state the model cannot produce (unjudged, no budget
spent).  One disk has no other disk to agree with (``node_bounds``): its candidates are every
state its own space builds above its floor, in one round -- core/judging/shrink's result is already a
fixpoint of its moves -- which is exactly one disk's minimization (core/judging/shrink.minimize).  The
minimized state has an id (one disk's own, or ``MODEL~ID0+ID1+...``) that ``state_from_id`` rebuilds."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.judging.shrink import Judged, Outcome, minimize, reason_class, signature
from powercut.core.states.crashstate import CrashState, Torn
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import FALLBACK_MODEL, Nodes, NodesState
from powercut.errors import UsageError

__all__ = [
    "NodesShrunk",
    "InstantSpace",
    "NodeShrunk",
    "bundle_cuts",
    "cause_line",
    "culprit_phrase",
    "minimize_nodes",
    "node_bounds",
    "node_floor",
    "nodes_named",
    "nodes_note",
]

MAX_ROUNDS = 4
_NODE = re.compile(r"\bnode (\d+)\b")


class InstantSpace(CrashSpace):
    """A node's CrashSpace whose ``make_state`` builds only states a state of several disks at
    ``instant`` under model ``model`` may hold: a cut of that instant, the model or ``flush``."""

    def __init__(self, sp: CrashSpace, window: range, model: str) -> None:  # shares sp's tables
        self.__dict__.update(vars(sp))
        # its own key cache, not sp's
        self._keys = {}
        self._at = 0
        self._nacks = 0
        self._begun = {}
        self._lock = threading.Lock()
        self.window, self.nodes_model = window, model

    def make_state(
        self,
        model: str,
        cut: int,
        dropped: Sequence[int] = (),
        torn: Sequence[tuple[int, Sequence[int]]] = (),
    ) -> CrashState:
        if cut not in self.window:
            raise UsageError(
                f"cut {cut} is outside the instant's cuts {self.window.start}..{self.window.stop - 1}"
            )
        if model not in (self.nodes_model, FALLBACK_MODEL):
            raise UsageError(f"a {self.nodes_model} cluster state holds no {model} node state")
        return super().make_state(model, cut, dropped, torn)


@dataclass(frozen=True, slots=True)
class NodeShrunk:
    """One disk's part of a minimization (over all rounds); ``one_at_a_time``: core/judging/shrink's lower
    bound for a one-change-at-a-time shrinker, summed over the rounds."""

    node: int
    original: CrashState
    minimized: CrashState
    calls: int
    exhausted: bool
    one_at_a_time: int = 0

    def to_json(self) -> dict[str, Any]:
        o, m = self.original, self.minimized
        return {
            "node": self.node,
            "original": o.id,
            "minimized": m.id,
            "calls": self.calls,
            "exhausted": self.exhausted,
            "cut": [o.cut, m.cut],
            "lost": [len(o.dropped), len(m.dropped)],
            "torn": [_torn_sectors(o.torn), _torn_sectors(m.torn)],
        }


@dataclass(frozen=True, slots=True)
class NodesShrunk:
    """A minimization of N >= 1 disks' state: ``minimized`` fails like ``original`` (``signature``;
    ``reasons``: its own judgement); ``calls`` judge calls in all (the budget shared by the disks)."""

    original: NodesState
    minimized: NodesState
    signature: tuple[str, str]
    reasons: tuple[str, ...]
    nodes: tuple[NodeShrunk, ...]
    calls: int
    exhausted: bool
    rounds: int

    @property
    def one_at_a_time(self) -> int:
        return sum(n.one_at_a_time for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        return {
            "original": self.original.id,
            "minimized": self.minimized.id,
            "verdict": self.signature[0],
            "reason_class": self.signature[1],
            "reasons": list(self.reasons),
            "calls": self.calls,
            "exhausted": self.exhausted,
            "rounds": self.rounds,
            "nodes": [n.to_json() for n in self.nodes],
        }


def _torn_sectors(torn: Torn) -> int:
    return sum(len(kept) for _, kept in torn)


def node_floor(sp: CrashSpace, window: range, state: CrashState, floor: int | None) -> int | None:
    """The floor entry for minimizing a node's state within its instant: candidates cut after it
    and lose nothing at or before it -- the entry before the instant's first cut, or before the
    state's first lost or torn write if that is earlier; never below the log's own ``floor``."""
    mine = min(window.start - 1, state.base - 1)
    mine = mine if floor is None else max(floor, mine)
    return mine if mine >= 0 else None


def node_bounds(
    cs: Nodes, n: int, state: NodesState, current: CrashState, floor: int | None
) -> tuple[CrashSpace, int | None]:
    """The space disk ``n``'s candidates come from and the floor entry they keep, while the other
    disks hold their states: the cuts of the state's instant under its model or ``flush``
    (InstantSpace), above ``node_floor``.  One disk alone has no other to agree with: its own
    space, above its floor mark when that lies before the state's cut (core/judging/shrink.minimize's
    ``floor``, as one disk's minimization always had it)."""
    if len(cs) == 1:
        return cs.nodes[0], floor if floor is not None and floor < current.cut else None
    window = cs.window(n, state.instant)
    return InstantSpace(cs.nodes[n], window, state.model), node_floor(
        cs.nodes[n], window, current, floor
    )


def minimize_nodes(
    cs: Nodes,
    state: NodesState,
    judge: Callable[[NodesState], Judged],
    *,
    budget: int,
    expected: Judged,
    floors: Sequence[int | None] = (),
    classify: Callable[[str], str] = reason_class,
) -> NodesShrunk:
    """Minimize each disk's state of the failing ``state`` in turn, the others fixed, while the
    state of the disks fails like ``expected`` (its known judgement); at most ``budget`` calls of
    ``judge`` over all disks and rounds (one round for one disk: ``node_bounds``).  ``floors``: per
    disk, the floor mark's entry (or None)."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise UsageError(f"the shrink budget must be a non-negative integer, got {budget!r}")
    target = signature(expected, classify)
    if target[0] == "pass":
        raise UsageError(f"state {state.id} passes: nothing to minimize")
    floors = list(floors) or [None] * len(cs)
    current = list(state.nodes)
    last: Judged = Outcome(expected.verdict, tuple(expected.reasons))
    calls, naive = [0] * len(cs), [0] * len(cs)
    exhausted = [False] * len(cs)
    used = 0
    rounds = 0
    cut_short = False
    while rounds < (MAX_ROUNDS if len(cs) > 1 else 1):
        rounds += 1
        changed = False
        for n in range(len(cs)):
            if used >= budget:
                cut_short = True
                break
            sp, floor = node_bounds(cs, n, state, current[n], floors[n])
            seen: dict[str, Judged] = {}

            def judge_node(cand: CrashState, n: int = n, seen: dict[str, Judged] = seen) -> Judged:
                nodes = [*current[:n], cand, *current[n + 1 :]]
                got = judge(
                    cs.make(state.model if len(cs) > 1 else cand.model, nodes)
                )  # one disk: its own model
                seen[cand.id] = got
                return got

            shrunk = minimize(
                sp,
                current[n],
                judge_node,
                budget=budget - used,
                expected=last,
                classify=classify,
                floor=floor,
            )
            used += shrunk.calls
            calls[n] += shrunk.calls
            naive[n] += shrunk.one_at_a_time
            exhausted[n] = exhausted[n] or shrunk.exhausted
            if shrunk.minimized.id != current[n].id:
                current[n] = shrunk.minimized
                last = Outcome(shrunk.signature[0], shrunk.reasons)
                changed = True
        if not changed or cut_short:
            break
    minimized = cs.make(current[0].model if len(cs) == 1 else state.model, current)
    per_node = tuple(
        NodeShrunk(n, state.nodes[n], current[n], calls[n], exhausted[n], naive[n])
        for n in range(len(cs))
    )
    return NodesShrunk(
        state,
        minimized,
        target,
        tuple(last.reasons),
        per_node,
        used,
        any(exhausted) or cut_short,
        rounds,
    )


def nodes_named(reasons: Iterable[str]) -> tuple[int, ...]:
    """The nodes a state's reasons name ("node 2: mount failed: ..."), in order, each once."""
    return tuple(sorted({int(m.group(1)) for r in reasons for m in _NODE.finditer(r)}))


def nodes_note(named: dict[int, int], states: int) -> str:
    """What a failure group's reasons say about its nodes: ``named`` node -> states naming it."""
    if not named:
        return "the reasons name no single node: a finding of the cluster as a whole"
    parts = [f"node {n} ({k} of {states} states)" for n, k in sorted(named.items())]
    return "the reasons name " + ", ".join(parts)


_SHORT = {"lost": "lost", "torn": "torn", "not": "late", "durable,": "present"}


def culprit_phrase(c: dict[str, Any]) -> str:
    """A blamed write (debug/blame.Culprit JSON) in a cause line: ``late data block of /replog.log``."""
    how = str(c.get("how", ""))
    return f"{_SHORT.get(how.split(' ')[0], how)} {c.get('what', '')}" + (
        f" of {c['path']}" if c.get("path") else ""
    )


def cause_line(
    verdict: str, reason_cls: str, culprits: Sequence[Sequence[dict[str, Any]]], per_node: int = 3
) -> str:
    """A cluster failure's block-level cause, naming each node: ``lost-ack: <reason class> <- node 0:
    late data block of /replog.log | node 1: ...``; ``culprits``: per node, its blamed writes as
    JSON (debug/blame.Culprit.to_json); per node the program's files first, at most ``per_node``
    kinds of object (and how many more)."""
    parts = []
    for n, cs in enumerate(culprits):
        named = {(not c.get("path"), culprit_phrase(c)) for c in cs}
        objs = [text for _, text in sorted(named)]  # the program's files first
        more = f" (+{len(objs) - per_node} more)" if len(objs) > per_node else ""
        parts.append(
            f"node {n}: " + ("; ".join(objs[:per_node]) + more or "no write (the cut alone)")
        )
    return f"{verdict}: {reason_cls} <- " + " | ".join(parts)


def bundle_cuts(cs: Nodes, instant: int) -> list[int]:
    """Per node, how many log entries rebuild every cluster state of ``instant``: up to and
    including the key mark that ends the instant (so every cut log keeps the same key marks and
    still makes one cluster), or the whole log for the last instant."""
    out = []
    for sp in cs.nodes:
        kv = sp.key_version
        end = next((c for c in range(1, sp.n + 1) if kv[c] > instant), None)
        out.append(sp.n if end is None else end)
    return out

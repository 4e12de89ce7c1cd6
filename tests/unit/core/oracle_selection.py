"""The two selection algorithms as they were before one algorithm for N disks replaced them (commit
e2209ec: ``core.selection.select`` for one disk, ``core.cluster.select_cluster`` for a cluster),
kept as the oracle of tests/unit/core/test_one_selection.py.  Their logic is verbatim; they return
plain values (ids, aliases, counts and coverage as JSON) instead of the selection types."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Collection, Hashable, Iterator, Sequence
from typing import Any

from powercut.core.states.coverage import SPACE_CAP, Tally, build
from powercut.core.states.crashstate import CrashState
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.selection import (
    ModelCounts,
    SelectionSpec,
    fair_shares,
    log_notes,
    spread,
)
from powercut.core.states.stateid import shake_bits

LATE_MARKS = (
    "marks reach the nodes' logs in turn, node 0 first: a node's write or flush completed between an "
    "ack and that node's mark counts as before the ack, so a window shorter than the marking path is "
    "not seen (docs/clusters.md, Known limits); affects every ack"
)
Result = dict[str, Any]


def _after_floor(state: CrashState, floor: int | None) -> bool:
    return floor is None or (
        state.cut > floor
        and all(d > floor for d in state.dropped)
        and all(t > floor for t, _ in state.torn)
        and (state.lie is None or state.lie.entry > floor)
    )


def _windows(
    states: Iterator[CrashState], version: Sequence[int]
) -> Iterator[tuple[int, list[CrashState]]]:
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


def _state_key(sp: CrashSpace, state: CrashState) -> str:
    return hashlib.blake2b(repr(image_key(sp, state)).encode(), digest_size=8).hexdigest()


def old_select(
    sp: CrashSpace,
    spec: SelectionSpec,
    *,
    floor_mark: str | None = "mkfs",
    earlier: Collection[str] = frozenset(),
) -> Result:
    models, seed, bound, samples = spec.models, spec.seed, spec.bound, spec.samples
    torn_samples, max_states = spec.torn_samples, spec.max_states
    floor = (
        next((e.index for e in sp.entries if e.mark == floor_mark), None) if floor_mark else None
    )
    order = list(dict.fromkeys(models))
    tallies = {m: Tally() for m in order}
    streams = [
        _windows(
            sp.iter_states(
                m,
                seed=seed,
                exhaustive_bound=bound,
                samples=samples,
                torn_samples=torn_samples,
                tally=tallies[m],
            ),
            sp.key_version,
        )
        for m in order
    ]
    ahead: list[tuple[int, list[CrashState]] | None] = [next(w, None) for w in streams]
    owned: dict[str, list[str]] = {m: [] for m in order}
    aliases: dict[str, list[str]] = {}
    gen, distinct, below = dict.fromkeys(order, 0), dict.fromkeys(order, 0), dict.fromkeys(order, 0)
    before = dict.fromkeys(order, 0)
    while any(a is not None for a in ahead):
        v = min(a[0] for a in ahead if a is not None)
        reps: dict[Hashable, str] = {}
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
                    if earlier and _state_key(sp, s) in earlier:
                        before[model] += 1
                    else:
                        owned[model].append(s.id)
                else:
                    aliases.setdefault(rep, []).append(s.id)
            distinct[model] += len(seen)
            ahead[k] = next(streams[k], None)
    shares = fair_shares([len(owned[m]) for m in order], max_states)
    chosen: list[str] = []
    counts: dict[str, ModelCounts] = {}
    for model, q in zip(order, shares):
        mine = owned[model]
        chosen += mine if q == len(mine) else [mine[i] for i in spread(len(mine), q)]
        counts[model] = ModelCounts(
            gen[model], distinct[model], len(mine), q, below[model], before[model]
        )
    cov = build(counts, tallies, notes={m: log_notes(sp, m) for m in order}, seed=seed)
    return {
        "ids": chosen,
        "aliases": {k: tuple(v) for k, v in aliases.items()},
        "counts": {m: c.to_json() for m, c in counts.items()},
        "coverage": cov.to_json(),
        "floor": floor,
    }


def _old_take(
    sp: CrashSpace, floor: int | None, pending: list[Any], v: int
) -> list[tuple[CrashState, Hashable]]:
    """_NodePools.take: pending = [stream, ahead, done, distinct]."""
    out: dict[Hashable, CrashState] = {}
    kv = sp.key_version
    while not pending[2]:
        s = pending[1] if pending[1] is not None else next(pending[0], None)
        pending[1] = None
        if s is None:
            pending[2] = True
            break
        if kv[s.cut] > v:
            pending[1] = s
            break
        if kv[s.cut] < v or not (
            floor is None
            or (
                s.cut > floor
                and all(d > floor for d in s.dropped)
                and all(t > floor for t, _ in s.torn)
            )
        ):
            continue
        out.setdefault(image_key(sp, s), s)
    pending[3] += len(out)
    return [(s, k) for k, s in out.items()]


def _old_combos(
    sizes: Sequence[int], bound: int, seed: int, model: str, v: int, samples: int
) -> tuple[list[tuple[int, ...]], bool]:
    total = math.prod(sizes)
    if total <= bound:
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


def old_select_cluster(
    nodes: Sequence[CrashSpace],
    instants: int,
    how: SelectionSpec,
    *,
    floor_mark: str | None = "mkfs",
    node_bound: int = 4096,
) -> Result:
    order = list(dict.fromkeys(how.models))
    floors = [
        next((e.index for e in sp.entries if e.mark == floor_mark), None) if floor_mark else None
        for sp in nodes
    ]
    kw = {
        "seed": how.seed,
        "exhaustive_bound": how.bound,
        "samples": how.samples,
        "torn_samples": how.torn_samples,
    }

    def pools(model: str) -> list[tuple[CrashSpace, int | None, list[Any], Tally]]:
        out = []
        for sp, floor in zip(nodes, floors):
            t = Tally()
            out.append((sp, floor, [sp.iter_states(model, **kw, tally=t), None, False, 0], t))
        return out

    streams = {m: pools(m) for m in order}
    fallback = streams["flush"] if "flush" in streams else pools("flush")
    tallies = {m: Tally() for m in order}
    owned: dict[str, list[str]] = {m: [] for m in order}
    aliases: dict[str, list[str]] = {}
    gen, distinct = dict.fromkeys(order, 0), dict.fromkeys(order, 0)
    for v in range(instants):
        fb = (
            [_old_take(sp, f, p, v) for sp, f, p, _ in fallback] if "flush" not in streams else None
        )
        taken = {m: [_old_take(sp, f, p, v) for sp, f, p, _ in streams[m]] for m in order}
        if fb is None:
            fb = taken["flush"]
        reps: dict[Hashable, str] = {}
        for m in order:
            node_pools = [mine or back for mine, back in zip(taken[m], fb)]
            if not all(node_pools):
                continue
            sizes = [len(p) for p in node_pools]
            combos, sampled = _old_combos(sizes, node_bound, how.seed, m, v, how.samples)
            seen: set[Hashable] = set()
            for c in combos:
                picked = [node_pools[n][i] for n, i in enumerate(c)]
                key = tuple(k for _, k in picked)
                gen[m] += 1
                seen.add(key)
                sid = m + "~" + "+".join(s.id for s, _ in picked)
                rep = reps.get(key)
                if rep is None:
                    reps[key] = sid
                    owned[m].append(sid)
                else:
                    aliases.setdefault(rep, []).append(sid)
            distinct[m] += len(seen)
            tallies[m].window(min(SPACE_CAP, math.prod(sizes)), len(combos), sampled=sampled)
    for m in order:
        for _, _, _, t in streams[m]:
            tallies[m].windows += t.windows
            tallies[m].sampled_windows += t.sampled_windows
            tallies[m].generated += t.generated
            tallies[m].space = min(SPACE_CAP, tallies[m].space + t.space)
    shares = fair_shares([len(owned[m]) for m in order], how.max_states)
    chosen: list[str] = []
    counts: dict[str, ModelCounts] = {}
    for m, q in zip(order, shares):
        mine = owned[m]
        chosen += mine if q == len(mine) else [mine[i] for i in spread(len(mine), q)]
        counts[m] = ModelCounts(gen[m], distinct[m], len(mine), q)
    notes = {
        m: [f"node {n} -- {x}" for n, sp in enumerate(nodes) for x in log_notes(sp, m)]
        + [LATE_MARKS]
        for m in order
    }
    cov = build(counts, tallies, notes=notes, seed=how.seed)
    return {
        "ids": chosen,
        "aliases": {k: tuple(x) for k, x in aliases.items()},
        "counts": {m: c.to_json() for m, c in counts.items()},
        "coverage": cov.to_json(),
    }

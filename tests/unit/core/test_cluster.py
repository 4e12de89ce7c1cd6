"""Cluster crash states on synthetic 3-node logs: every state is one instant on every node (counted
the slow way: the key marks before each node's cut), exhaustively the consistent cuts (every
combination of the nodes' own distinct states of an instant, nothing else), ids round-trip, a
mixed-instant id is refused, sampling is bounded, seeded and reported, logs of different runs refused."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Hashable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.log.dmlog import FLUSH, FUA, LogIndex
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace, enumerate_states
from powercut.core.states.nodes import (
    FALLBACK_MODEL,
    Nodes,
    format_nodes_id,
    key_events,
    parse_nodes_id,
)
from powercut.core.states.selection import SelectionSpec, select_nodes
from powercut.errors import UsageError
from tests.unit.logops import build_log

MODELS = ("flush", "write-cache", "torn")
SPEC = SelectionSpec(models=MODELS, bound=4, samples=3, torn_samples=2)
GLOBAL = ["mkfs", "begin:1", "ack:1", "begin:2", "ack:2", "ack:1"]  # the last adds no key

OP = st.one_of(
    st.tuples(
        st.just("w"),
        st.integers(0, 12),
        st.integers(1, 3),
        st.sampled_from([0, 0, FUA, FLUSH]),
        st.integers(0, 3),
    ),
    st.tuples(st.just("f")),
    st.tuples(st.just("m"), st.just("note")),
)
NODE = st.lists(st.lists(OP, max_size=3), min_size=len(GLOBAL) + 1, max_size=len(GLOBAL) + 1)
CLUSTER = st.lists(NODE, min_size=3, max_size=3)


def node_ops(segments: list[list[tuple]]) -> list[tuple]:  # type: ignore[type-arg]
    """A node's log: its own ops between the global marks every node shares."""
    ops: list[tuple] = []  # type: ignore[type-arg]
    for k, seg in enumerate(segments):
        ops += seg
        if k < len(GLOBAL):
            ops.append(("m", GLOBAL[k]))
    return ops


def build(d: Path, cluster: list[list[list[tuple]]]) -> list[LogIndex]:  # type: ignore[type-arg]
    return [build_log(d / f"n{n}.bin", node_ops(segs)) for n, segs in enumerate(cluster)]


def keys_before(sp: CrashSpace, cut: int) -> tuple[str, ...]:
    """The slow way: the key-mark texts that added a key among entries[:cut]."""
    seen: list[str] = []
    for e in sp.entries[:cut]:
        if (e.ack_key is not None or e.begin_key is not None) and e.mark not in seen:
            if not (e.begin_key is not None and f"ack:{e.begin_key}" in seen):
                seen.append(str(e.mark))
    return tuple(seen)


def expected(cs: Nodes, model: str) -> set[tuple[int, tuple[Hashable, ...]]]:
    """Every consistent cut, from the nodes' full state lists: per instant, the product of each
    node's distinct images (its flush ones where the model has none there), after the floor."""
    per_node: list[dict[str, dict[int, set[Hashable]]]] = []
    for sp in cs.nodes:
        floor = next(e.index for e in sp.entries if e.mark == "mkfs")
        got: dict[str, dict[int, set[Hashable]]] = {}
        for m in {model, FALLBACK_MODEL}:
            for s in enumerate_states(sp, m, seed=0, exhaustive_bound=4, samples=3, torn_samples=2):
                if (
                    s.cut > floor
                    and all(x > floor for x in s.dropped)
                    and all(t > floor for t, _ in s.torn)
                ):
                    got.setdefault(m, {}).setdefault(sp.key_version[s.cut], set()).add(
                        image_key(sp, s)
                    )
        per_node.append(got)
    out = set()
    for v in range(cs.instants):
        pools = [
            g.get(model, {}).get(v) or g.get(FALLBACK_MODEL, {}).get(v) or set() for g in per_node
        ]
        out |= {(v, combo) for combo in itertools.product(*pools)}
    return out


@settings(max_examples=150, deadline=None)
@given(cluster=CLUSTER)
def test_cluster_states_are_exactly_the_consistent_cuts(cluster: list) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d:
        logs = build(Path(d), cluster)
        try:
            cs = Nodes(logs)
            sel = select_nodes(cs, SPEC, node_bound=10**6)
            assert "capped" not in sel.coverage.words
            reps = {s.id for s in sel.states}
            by_model: dict[str, set[tuple[int, tuple[Hashable, ...]]]] = {m: set() for m in MODELS}
            for s in sel.states:
                # one instant on every node, counted the slow way
                assert len({keys_before(sp, ns.cut) for sp, ns in zip(cs.nodes, s.nodes)}) == 1
                assert (
                    len({cs.instant_of(n, ns.cut) for n, ns in enumerate(s.nodes)})
                    == 1
                    == len({(tuple(ns.acks), ns.begun) for ns in s.nodes})
                )
                assert tuple(s.acks) == tuple(
                    k[4:] for k in keys_before(cs.nodes[0], s.nodes[0].cut) if k.startswith("ack:")
                )
                # ids round-trip
                assert cs.state_from_id(s.id) == s
                by_model[s.model].add((s.instant, cs.key(s)))
            for rep, others in sel.aliases.items():
                assert rep in reps
                for o in others:
                    a, b = cs.state_from_id(rep), cs.state_from_id(o)
                    assert cs.key(a) == cs.key(b) and a.instant == b.instant
            # exhaustive: each model's own states plus the ones an earlier model represents
            union: set[tuple[int, tuple[Hashable, ...]]] = set()
            for m in MODELS:
                want = expected(cs, m)
                assert by_model[m] == want - union
                union |= want
        finally:
            for x in logs:
                x.close()


def simple(d: Path, writes: int = 3) -> list[LogIndex]:
    """Three nodes, each with ``writes`` unflushed plain writes before and after begin:1, then flushed."""
    segs = []
    for n in range(3):
        w = [("w", 2 * k, 1, 0, n + k) for k in range(writes)]
        segs.append([[("w", 20, 1, 0, 0), ("f",)], w, w, [("f",)], [], [], []])
    return build(d, segs)


def test_mixed_instant_id_is_refused(tmp_path: Path) -> None:
    cs = Nodes(simple(tmp_path))
    early = [cs.nodes[n].state_from_id(f"no-cache@{cs.window(n, 0)[-1]}") for n in range(3)]
    late = cs.nodes[2].state_from_id(f"no-cache@{cs.window(2, 1)[0]}")
    assert cs.make("no-cache", early).instant == 0
    with pytest.raises(
        UsageError,
        match="not a consistent cut: node 0 at instant 0, node 1 at instant 0, node 2 at instant 1",
    ):
        cs.state_from_id(format_nodes_id("no-cache", [s.id for s in early[:2]] + [late.id]))
    with pytest.raises(UsageError, match="not a consistent cut"):
        cs.make("no-cache", [*early[:2], late])


@pytest.mark.parametrize(
    "bad, why",
    [
        ("write-cache@3", "want MODEL~ID0"),
        ("nope~a+b+c", "unknown crash model"),
        ("flush~flush@3+flush@3", "names 2 node state"),
        ("flush~flush@3++flush@3", "names 3 node state"),
    ],
)
def test_malformed_ids(tmp_path: Path, bad: str, why: str) -> None:
    cs = Nodes(simple(tmp_path))
    with pytest.raises(UsageError, match=why):
        if "node state" in why and "++" not in bad:
            parse_nodes_id(bad, 3)
        cs.state_from_id(bad)


def test_node_id_that_does_not_fit_names_the_node(tmp_path: Path) -> None:
    cs = Nodes(simple(tmp_path))
    with pytest.raises(UsageError, match="node 1: state id 'no-cache@999': cut 999 out of range"):
        cs.state_from_id("no-cache~no-cache@3+no-cache@999+no-cache@3")
    with pytest.raises(UsageError, match="holds torn or flush node states, not write-cache"):
        cs.state_from_id(
            f"torn~flush@{cs.window(0, 1)[0]}+write-cache@{cs.window(1, 1)[-1]}"
            f"+flush@{cs.window(2, 1)[0]}"
        )


def test_logs_of_different_runs_are_refused(tmp_path: Path) -> None:
    a = build_log(tmp_path / "a.bin", [("m", "mkfs"), ("m", "begin:1"), ("m", "ack:1")])
    b = build_log(tmp_path / "b.bin", [("m", "mkfs"), ("m", "begin:1"), ("m", "ack:2")])
    c = build_log(tmp_path / "c.bin", [("m", "mkfs"), ("m", "begin:1")])
    with pytest.raises(
        UsageError,
        match="node 1's log does not share node 0's key marks: key mark #2 is ack:2 on "
        "node 1, ack:1 on node 0",
    ):
        Nodes([a, b])
    with pytest.raises(UsageError, match="key mark #2 is its end on node 1"):
        Nodes([a, c])
    assert [x[:2] for x in key_events(CrashSpace(a))] == [(False, "1"), (True, "1")]


def test_sampling_is_bounded_seeded_and_reported(tmp_path: Path) -> None:
    cs = Nodes(simple(tmp_path, writes=2))
    spec = SelectionSpec(models=("write-cache",), bound=10, samples=5)
    full = select_nodes(cs, spec, node_bound=10**6)
    small = select_nodes(cs, spec, node_bound=50)
    again = select_nodes(cs, spec, node_bound=50)
    other = select_nodes(cs, spec.with_(seed=7), node_bound=50)
    assert [s.id for s in small.states] == [s.id for s in again.states]
    assert {s.id for s in small.states} != {s.id for s in other.states}
    assert "sampled" not in full.coverage.words and "capped" not in full.coverage.words
    assert "sampled" in small.coverage.words and "write-cache windows" in small.coverage.phrase()
    assert len(small.states) < len(full.states)
    full_keys = {cs.key(s) for s in full.states}
    assert {cs.key(s) for s in small.states} <= full_keys
    # per node: the window before the flush has 4 unflushed writes: 2^4 subsets, the instant's product 16^3
    assert full.node_states[0]["write-cache"] >= 16
    assert full.products["write-cache"] >= 16**3 > 50


def test_max_states_caps_and_reports(tmp_path: Path) -> None:
    cs = Nodes(simple(tmp_path, writes=1))
    sel = select_nodes(cs, SelectionSpec(models=("flush", "write-cache"), max_states=5))
    assert len(sel.states) == 5
    assert "capped" in sel.coverage.words
    assert sel.counts["flush"].judged + sel.counts["write-cache"].judged == 5


def test_torn_falls_back_to_flush_on_nodes_without_a_tearable_write(tmp_path: Path) -> None:
    logs = [
        build_log(
            tmp_path / f"{n}.bin",
            [
                ("m", "mkfs"),
                ("m", "begin:1"),
                ("w", 0, 3 if n == 0 else 1, 0, n),
                ("f",),
                ("m", "ack:1"),
            ],
        )
        for n in range(3)
    ]
    cs = Nodes(logs)
    sel = select_nodes(cs, SelectionSpec(models=("torn",), torn_samples=2))
    assert sel.states
    for s in sel.states:
        assert s.nodes[0].model == "torn" if s.instant == 1 else True
        assert all(ns.model in ("torn", "flush") for ns in s.nodes)
        assert all(ns.model == "flush" for ns in s.nodes[1:])


def test_single_node_cluster_matches_the_disk(tmp_path: Path) -> None:
    """One node: the cluster states are the disk's own distinct states (same images)."""
    from powercut.core.states.selection import select

    idx = build_log(
        tmp_path / "l.bin",
        [
            ("m", "mkfs"),
            ("w", 0, 2, 0, 1),
            ("m", "begin:1"),
            ("w", 4, 1, 0, 2),
            ("f",),
            ("m", "ack:1"),
            ("w", 6, 1, 0, 3),
        ],
    )
    cs = Nodes([idx])
    sel = select_nodes(cs, SPEC)
    one = select(idx, SPEC)
    assert sorted(s.nodes[0].id for s in sel.states) == sorted(s.id for s in one.states)


def test_every_cluster_verdict_says_its_marks_reach_the_nodes_in_turn(tmp_path: Path) -> None:
    """However whole the enumeration, a cluster's coverage is weakened by the marks' late arrival on
    the later nodes (a durability action inside that delay counts as before the ack)."""
    cs = Nodes(simple(tmp_path, writes=1))
    for model in ("flush", "write-cache"):
        cov = select_nodes(cs, SelectionSpec(models=(model,)), node_bound=10**6).coverage
        assert "weakened" in cov.words and not cov.exhaustive
        assert "marks reach the nodes' logs in turn" in cov.phrase()

"""The minimization of N >= 1 disks' states (core/judging/nodesshrink.py).  On synthetic 3-node logs, node by
node: a failure that needs one lost write of one node is minimized to exactly that (the other nodes
lose nothing, every cut walked back within the instant), the id rebuilds, the budget is shared and
honoured, candidates never leave the instant.  At N = 1, a Hypothesis property over random logs,
every honest model, random failures, budgets and floors: the result is core/judging/shrink.minimize's, field
for field (one disk's minimization as it always was).  And the pure helpers (nodes named, cause
line, bundle cuts)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.judging.nodesshrink import (
    InstantSpace,
    NodesShrunk,
    bundle_cuts,
    cause_line,
    minimize_nodes,
    node_floor,
    nodes_named,
    nodes_note,
)
from powercut.core.judging.shrink import Outcome, minimize
from powercut.core.states.nodes import Nodes, NodesState
from powercut.core.states.stateid import HONEST_MODELS
from powercut.errors import UsageError
from tests.unit.core.test_shrink import OP, PASS, concrete, mixed
from tests.unit.logops import build_log

# entries: 0 mkfs, 1 w, 2 flush, 3 begin:1, 4 w5, 5 w6, 6 w7, 7 ack:1, 8 w8, 9 note, 10 w9, 11 flush, 12 begin:2
OPS = [
    ("m", "mkfs"),
    ("w", 1, 1, 0, 1),
    ("f",),
    ("m", "begin:1"),
    ("w", 5, 1, 0, 2),
    ("w", 6, 1, 0, 3),
    ("w", 7, 2, 0, 4),
    ("m", "ack:1"),
    ("w", 8, 1, 0, 5),
    ("m", "note"),
    ("w", 9, 1, 0, 6),
    ("f",),
    ("m", "begin:2"),
]
W6 = 5  # node 1's write whose loss is the bug
INSTANT = 2  # after ack:1, before begin:2: cuts 8..12
LOST = Outcome("lost-ack", ("acked record 1 is intact on 1 of 3 nodes",))


@pytest.fixture()
def cs(tmp_path: Path) -> Nodes:
    return Nodes([build_log(tmp_path / f"n{i}.bin", OPS) for i in range(3)])


def fake_judge(calls: list[str]) -> Callable[[NodesState], Outcome]:
    """Fails iff ack 1 is given and node 1 lost its write at entry W6."""

    def judge(st: NodesState) -> Outcome:
        calls.append(st.id)
        assert {s.cut for s in st.nodes} <= set(range(8, 13)), st.id  # never outside the instant
        if "1" in st.acks and W6 in st.nodes[1].dropped:
            return Outcome(
                "lost-ack", (f"acked record 1 is intact on {len(calls) % 2} of 3 nodes",)
            )
        return Outcome("pass")

    return judge


def start(cs: Nodes) -> NodesState:
    return cs.make(
        "write-cache",
        [cs.nodes[n].make_state("write-cache", 11, (4, 5, 6, 8, 10)) for n in range(3)],
    )


def test_the_failure_comes_down_to_node_1s_one_lost_write(cs: Nodes) -> None:
    calls: list[str] = []
    got = minimize_nodes(
        cs, start(cs), fake_judge(calls), budget=200, expected=LOST, floors=[0, 0, 0]
    )
    m = got.minimized
    assert [s.dropped for s in m.nodes] == [(), (W6,), ()]
    assert m.nodes[1].cut == W6 + 3 and all(
        s.cut >= 8 for s in m.nodes
    )  # the instant's first write-cache cut
    assert all(
        a.cut <= b.cut and len(a.dropped) <= len(b.dropped)
        for a, b in zip(m.nodes, start(cs).nodes)
    )
    assert cs.state_from_id(m.id) == m
    assert got.signature == ("lost-ack", "acked record # is intact on # of # nodes")
    assert got.calls == len(calls) and not got.exhausted
    assert [n.to_json()["lost"] for n in got.nodes] == [[5, 0], [5, 1], [5, 0]]


def test_the_budget_is_shared_by_the_nodes_and_honoured(cs: Nodes) -> None:
    calls: list[str] = []
    got = minimize_nodes(cs, start(cs), fake_judge(calls), budget=3, expected=LOST)
    assert len(calls) == got.calls <= 3 and got.exhausted
    assert fake_judge([])(got.minimized).verdict == "lost-ack"  # the smallest failing state so far


def test_a_passing_expectation_is_refused(cs: Nodes) -> None:
    with pytest.raises(UsageError, match="passes"):
        minimize_nodes(cs, start(cs), fake_judge([]), budget=5, expected=Outcome("pass"))


def test_instant_space_refuses_other_instants_and_models(cs: Nodes) -> None:
    sp = InstantSpace(cs.nodes[0], cs.window(0, INSTANT), "torn-4k")
    assert sp.make_state("flush", 12).cut == 12
    with pytest.raises(UsageError, match="outside the instant"):
        sp.make_state("flush", 3)
    with pytest.raises(UsageError, match="no write-cache node state"):
        sp.make_state("write-cache", 11, (8,))
    assert cs.nodes[0].make_state("flush", 3).cut == 3  # the node's own space is untouched


def test_node_floor_keeps_the_lost_writes_and_the_log_floor() -> None:
    class S:
        base = 4

    assert node_floor(None, range(8, 13), S(), 0) == 3  # type: ignore[arg-type]
    assert node_floor(None, range(8, 13), S(), 5) == 5  # type: ignore[arg-type]
    S.base = 12
    assert node_floor(None, range(8, 13), S(), None) == 7  # type: ignore[arg-type]


def test_nodes_named_and_the_note() -> None:
    assert nodes_named(["node 2: mount failed: x", "node 0: fsck: y", "node 2: kernel: z"]) == (
        0,
        2,
    )
    assert nodes_named(["acked record 0 is intact on 0 of 3 nodes"]) == ()
    assert "no single node" in nodes_note({}, 5)
    assert (
        nodes_note({2: 3, 0: 1}, 4)
        == "the reasons name node 0 (1 of 4 states), node 2 (3 of 4 states)"
    )


def test_cause_line_names_every_node() -> None:
    late = {"how": "not yet durable at the cut", "what": "data block", "path": "/replog.log"}
    lost = {"how": "lost", "what": "journal", "path": ""}
    line = cause_line("lost-ack", "acked record #", [[late], [], [lost, late]])
    assert line == (
        "lost-ack: acked record # <- node 0: late data block of /replog.log | node 1: no write (the cut "
        "alone) | node 2: late data block of /replog.log; lost journal"
    )
    many = [{"how": "lost", "what": w} for w in ("a", "b", "c", "d")] + [late]
    assert (
        cause_line("x", "y", [many])
        == "x: y <- node 0: late data block of /replog.log; lost a; lost b (+2 more)"
    )


def test_bundle_cuts_end_at_the_key_mark_after_the_instant(cs: Nodes) -> None:
    assert bundle_cuts(cs, INSTANT) == [13, 13, 13]  # begin:2 is the last entry
    assert bundle_cuts(cs, 1) == [8, 8, 8]  # up to and including ack:1


@settings(max_examples=600, deadline=None)
@given(
    ops=st.lists(OP, min_size=1, max_size=12),
    model=st.sampled_from(HONEST_MODELS),
    mode=st.sampled_from(["all", "any", "odd"]),
    need=st.sampled_from([None, "x", "x", "y"]),
    sector=st.integers(0, 3),
    budget=st.integers(1, 40),
    data=st.data(),
)
def test_one_disk_is_core_shrinks_minimization(
    ops: list[tuple],
    model: str,
    mode: str,  # type: ignore[type-arg]
    need: str | None,
    sector: int,
    budget: int,
    data: st.DataObject,
) -> None:
    ops.insert(data.draw(st.integers(0, len(ops))), ("m", "ack:x"))
    with tempfile.TemporaryDirectory() as d:
        index = build_log(Path(d) / "log", concrete(ops))
    cs = Nodes([index])
    sp = cs.nodes[0]
    relevant = data.draw(
        st.sets(
            st.sampled_from([i for i in range(sp.n) if sp.is_data[i]] or [0]),
            min_size=1,
            max_size=3,
        )
    )
    judge = mixed(sp, relevant, mode, need, sector)
    failing = [
        s
        for s in sp.states(model, exhaustive_bound=4, samples=4, torn_samples=2)
        if judge(s) != PASS
    ]
    if not failing:
        return
    orig = data.draw(st.sampled_from(failing))
    floor = data.draw(st.one_of(st.none(), st.integers(0, sp.n)))
    first, asked = judge(orig), []

    def judge_nodes(s: NodesState) -> Outcome:
        asked.append(s.id)
        assert len(s.nodes) == 1 and s.id == s.nodes[0].id and s.model == s.nodes[0].model
        return judge(s.nodes[0])

    def got_() -> NodesShrunk:
        return minimize_nodes(
            cs,
            cs.state_from_id(orig.id),
            judge_nodes,
            budget=budget,
            expected=first,
            floors=[floor],
        )

    try:
        want = minimize(
            sp,
            orig,
            judge,
            budget=budget,
            expected=first,
            floor=floor if floor is not None and floor < orig.cut else None,
        )
    except UsageError as e:  # a state losing a write at or before the floor: refused alike
        with pytest.raises(UsageError, match=re.escape(str(e))):
            got_()
        return
    got = got_()
    assert got.minimized.id == want.minimized.id and got.minimized.nodes == (want.minimized,)
    assert (got.signature, got.reasons, got.calls, got.exhausted, got.one_at_a_time) == (
        want.signature,
        want.reasons,
        want.calls,
        want.exhausted,
        want.one_at_a_time,
    )
    assert (
        got.rounds == 1
        and len(asked) == got.calls
        and cs.state_from_id(got.minimized.id) == got.minimized
    )

"""One diagnosis for N >= 1 disks (debug/diagnose.py, debug/diagnosis.py) against the two it replaced,
kept verbatim in oracle_diagnose.py.  The images, the judge, blame's tools and the recovery mount
are the same fakes in both (a state's verdict a function of its disks' states, an image named by
its state, a culprit per write that matters, noting the image it was read from).

* N = 1: over random logs, every honest model, random failures, budgets and floors, the new
  diagnosis's JSON is the one-disk diagnosis's, key for key and in order (``seconds`` aside: a
  clock), its cause sentence included; a Diagnosis read back writes the same JSON; the bundle keeps
  the log up to where the one-disk writer cut it.
* N = 3: over random failing states of a 3-node log, it is the cluster diagnosis's as host mode
  made it (node by node, blame per node up to the commit after its culprits)."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.check.context import CheckContext
from powercut.core.judging.shrink import Outcome
from powercut.core.judging.verdict import Verdict
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import Nodes, NodesState
from powercut.core.states.stateid import HONEST_MODELS, parse_id
from powercut.debug import diagnose, triage
from powercut.debug.blame import Culprit, writes_that_matter
from powercut.debug.diagnosis import Diagnosis
from powercut.errors import UsageError
from powercut.linux import filesystems
from tests.unit.core.test_nodesshrink import OPS as NODE_OPS
from tests.unit.core.test_shrink import OP, PASS, concrete, mixed
from tests.unit.debug import oracle_diagnose as old
from tests.unit.logops import build_log

CTX = CheckContext(filesystems.get("ext4"))
Judge = Callable[[Sequence[CrashState]], Outcome]


def fake_blame(sp: Any, state: CrashState, fstype: str, device: str, **_: Any) -> list[Culprit]:
    """A culprit per write that matters, what it is a function of its entry, read from ``device``."""
    return [
        Culprit(
            i,
            sp.entries[i].sector,
            sp.entries[i].nr_sectors,
            how,
            ("data block", "journal")[i % 2],
            f"/f{i % 3}" if i % 2 == 0 else "",
            f"entry {i}",
            device,
        )
        for i, how in writes_that_matter(sp, state)
    ]


@contextlib.contextmanager
def fakes(judge: Judge) -> Iterator[list[str]]:
    """Both diagnoses' images, judge, blame and mounts replaced alike; yields the states judged."""
    judged: list[str] = []

    def verdict(states: Sequence[CrashState], sid: str, model: str, at: int) -> Verdict:
        judged.append(sid)
        out = judge(states)
        return Verdict(
            sid, model, at, out.verdict, tuple(out.reasons), len(states[0].acks), 0, 0.01
        )

    def judge_nodes(
        ctx: Any,
        devs: Sequence[str],
        states: Sequence[CrashState],
        mnts: Sequence[str],
        *,
        sid: str,
        model: str,
        at: int,
        t0: float | None = None,
    ) -> Verdict:
        assert list(devs) == [f"img:{s.id}" for s in states] and len(set(mnts)) == len(states)
        return verdict(states, sid, model, at)

    @contextlib.contextmanager
    def image(ws: Any, node: int, state: CrashState) -> Iterator[str]:
        yield f"img:{state.id}"

    with pytest.MonkeyPatch.context() as mp:
        # the one-disk diagnosis blamed the image at the cut; one disk's blame now reaches the commit
        # after its culprits (diagnose.SETTLE_FS, tests/unit/debug/test_diagnose.py): the rest is the same
        mp.setattr(diagnose, "SETTLE_FS", frozenset())
        mp.setattr(old, "_with_image", lambda ws, state, use: use(f"img:{state.id}"))
        mp.setattr(old, "judge", lambda ctx, dev, s, mnt: verdict([s], s.id, s.model, s.cut))
        mp.setattr(diagnose, "_image", image)
        mp.setattr(diagnose, "judge_nodes", judge_nodes)
        for m in (old, diagnose):
            mp.setattr(m, "blame", fake_blame)
            mp.setattr(m, "mount", lambda *a, **k: None)
            mp.setattr(m, "umount", lambda *a, **k: "unmounted")
        mp.setattr(old, "cleanup_stale", lambda work: None)
        yield judged


def timeless(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != "seconds"}


@settings(max_examples=400, deadline=None)
@given(
    ops=st.lists(OP, min_size=1, max_size=12),
    model=st.sampled_from(HONEST_MODELS),
    mode=st.sampled_from(["all", "any", "odd"]),
    need=st.sampled_from([None, "x", "x", "y"]),
    sector=st.integers(0, 3),
    budget=st.integers(1, 40),
    data=st.data(),
)
def test_one_disk_is_the_one_disk_diagnosis(
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
        disks = Nodes([index])
        sp = disks.nodes[0]
        relevant = data.draw(
            st.sets(
                st.sampled_from([i for i in range(sp.n) if sp.is_data[i]] or [0]),
                min_size=1,
                max_size=3,
            )
        )
        one = mixed(sp, relevant, mode, need, sector)
        failing = [
            s
            for s in sp.states(model, exhaustive_bound=4, samples=4, torn_samples=2)
            if one(s) != PASS
        ]
        if not failing:
            return
        orig = data.draw(st.sampled_from(failing))
        floor = data.draw(st.one_of(st.none(), st.integers(0, sp.n)))
        out = one(orig)
        first = Verdict(
            orig.id, orig.model, orig.cut, out.verdict, tuple(out.reasons), len(orig.acks), 0, 0.01
        )
        with fakes(lambda states: one(states[0])) as judged:
            try:
                want = old.diagnose(
                    CTX,
                    old.Workspace(index, 1 << 20, None, Path(d) / "old", "auto", floor, sp),
                    orig,
                    first,
                    budget=budget,
                )
            except UsageError as e:  # a state losing a write at or before the floor: refused alike
                with pytest.raises(UsageError, match=re.escape(str(e))):
                    diagnose.diagnose(
                        CTX,
                        diagnose.Workspace(
                            disks, (index,), 1 << 20, Path(d) / "new", floors=(floor,)
                        ),
                        disks.state_from_id(orig.id),
                        first,
                        budget=budget,
                    )
                return
            asked_old, judged[:] = list(judged), []
            got = diagnose.diagnose(
                CTX,
                diagnose.Workspace(disks, (index,), 1 << 20, Path(d) / "new", floors=(floor,)),
                disks.state_from_id(orig.id),
                first,
                budget=budget,
            )
    assert judged == asked_old  # the same candidates, in the same order
    was = Diagnosis.from_json(want.to_json()).to_json()  # the oracle's layout, in the one form
    assert list(got.to_json()) == list(was)
    assert timeless(got.to_json()) == timeless(was) and got.cause == want.cause
    assert Diagnosis.from_json(got.to_json()).to_json() == got.to_json()
    need_old = max(
        [parse_id(want.minimized).cut] + [c.entry + 1 for c in want.culprits]
    )  # triage._need
    assert triage.bundle_cuts(disks, first, got) == [max(first.cut, need_old) + 1]
    assert triage.bundle_cuts(disks, first, None) == [first.cut + 1]


def node_judge(relevant: Sequence[set[int]], need: str | None) -> Judge:
    """lost-ack when ``need`` is acked and some node lost every one of its relevant writes (the
    reason names it); a node whose relevant set is empty never fails."""

    def judge(states: Sequence[CrashState]) -> Outcome:
        gone = [n for n, (s, r) in enumerate(zip(states, relevant)) if r and r <= set(s.dropped)]
        if gone and (need is None or need in states[0].acks):
            return Outcome(
                "lost-ack",
                tuple(f"node {n}: acked record(s) {sorted(relevant[n])} missing" for n in gone),
            )
        return PASS

    return judge


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> tuple[Nodes, list[Any], Path]:
    d = tmp_path_factory.mktemp("three")
    indexes = [build_log(d / f"n{i}.bin", NODE_OPS) for i in range(3)]
    return Nodes(indexes), indexes, d


@settings(max_examples=100, deadline=None)
@given(
    drops=st.lists(st.sets(st.sampled_from([4, 5, 6, 8, 10])), min_size=3, max_size=3),
    relevant=st.lists(
        st.sets(st.sampled_from([4, 5, 6, 8, 10]), max_size=2), min_size=3, max_size=3
    ),
    need=st.sampled_from([None, "1"]),
    budget=st.integers(1, 60),
)
def test_three_disks_are_the_cluster_diagnosis(
    three: tuple[Nodes, list[Any], Path],
    drops: list[set[int]],
    relevant: list[set[int]],
    need: str | None,
    budget: int,
) -> None:
    cs, indexes, d = three
    state = cs.make(
        "write-cache",
        [cs.nodes[n].make_state("write-cache", 11, sorted(x)) for n, x in enumerate(drops)],
    )
    judge = node_judge(relevant, need)
    out = judge(state.nodes)
    if out == PASS:
        return
    first = Verdict(
        state.id,
        state.model,
        state.instant,
        out.verdict,
        tuple(out.reasons),
        len(state.acks),
        0,
        0.01,
    )
    floors = [0, 0, 0]  # every node's mkfs mark

    def judge_states(states: Sequence[NodesState], sink: Any, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        for s in states:
            sink(old_verdict(s))

    work = Path(tempfile.mkdtemp(dir=d))
    try:
        with fakes(judge) as judged:

            def old_verdict(
                s: NodesState,
            ) -> Verdict:  # what Place.judge gave the cluster's minimization
                return diagnose.judge_nodes(
                    CTX,
                    [f"img:{x.id}" for x in s.nodes],
                    s.nodes,
                    ["a", "b", "c"],
                    sid=s.id,
                    model=s.model,
                    at=s.instant,
                )

            want = old.diagnose_cluster_state(
                cs,
                state,
                first,
                judge_states,
                old.host_blame(CTX, cs, indexes, 1 << 20, floors),
                work / "old",
                budget=budget,
                floors=floors,
            )
            asked_old, judged[:] = list(judged), []
            got = diagnose.diagnose(
                CTX,
                diagnose.Workspace(cs, tuple(indexes), 1 << 20, work / "new", floors=tuple(floors)),
                state,
                first,
                budget=budget,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert judged == asked_old
    was = Diagnosis.from_json(want.to_json()).to_json()  # the oracle's layout, in the one form
    assert list(got.to_json()) == list(was)
    cluster_said = timeless(got.to_json())  # the oracle wrote no one_at_a_time for several disks
    cluster_said.pop("one_at_a_time")
    assert cluster_said == {k: v for k, v in timeless(was).items() if k != "one_at_a_time"}
    assert Diagnosis.from_json(got.to_json()).to_json() == got.to_json()
    g = SimpleNamespace(states=[first])
    assert triage.group_extras(g, got, 3)["node_shrink"] == [  # type: ignore[arg-type]
        {k: n[k] for k in ("node", "original", "minimized", "calls", "cut", "lost", "torn")}
        for n in want.nodes
    ]

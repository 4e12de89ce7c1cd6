"""One selection algorithm for N >= 1 disks (core/states/selection.select_nodes), proven against the two it
replaced (tests/unit/core/oracle_selection.py, their logic verbatim):

* **one disk** (N = 1), over random logs, every crash model (the lying-disk ones too), random seeds,
  bounds, caps, floors and ledgers: exactly the same ids in the same order, the same aliases, counts,
  coverage and floor as the one-disk algorithm;
* **a cluster** (N = 3), over random cluster logs whose model list starts with ``flush``: exactly the
  same states to judge in the same order and the same coverage as the cluster algorithm; its aliases
  are a superset (each node's duplicates are now listed, one node at a time), ``generated`` counts
  every generated combination the chosen ones stand for (never fewer than before);
* what changed on purpose: a combination in which no node has a state of the model is not a state of
  that model.  The cluster algorithm labelled it with the model though its nodes all held ``flush``
  states: an alias of a flush state, or, where the instant's flush combinations were sampled, a
  flush combination judged under another model's name (and then a later model's state with its
  image counted as that one's alias).  Where that happened, the comparison is of the images judged
  (uncapped): the same set, none of them under a false name, but for the flush combinations that
  only a false name brought in (an instant whose flush combinations were sampled: one sample fewer)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.states.imagekey import state_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import Nodes
from powercut.core.states.pools import after_floor
from powercut.core.states.selection import SelectionSpec, select, select_nodes
from powercut.core.states.stateid import HONEST_MODELS, LIE_MODELS, MODELS
from tests.unit.core.oracle_selection import old_select, old_select_cluster
from tests.unit.core.test_cluster import CLUSTER
from tests.unit.core.test_cluster import build as build_cluster
from tests.unit.core.test_selection import OPS, build

SPEC = st.builds(
    SelectionSpec,
    models=st.lists(st.sampled_from(MODELS), min_size=1, max_size=4, unique=True).map(tuple),
    seed=st.integers(0, 5),
    bound=st.integers(0, 5),
    samples=st.integers(0, 4),
    torn_samples=st.integers(0, 3),
    max_states=st.sampled_from([0, 0, 1, 3, 7]),
)


def whole(cov: dict) -> dict:  # type: ignore[type-arg]
    """A coverage's JSON without its set-up/commit parts (the old algorithms did not tell them apart;
    test_coverage_parts.py proves the parts)."""
    out = {k: v for k, v in cov.items() if k not in ("setup", "commits")}
    out["models"] = {
        m: {k: v for k, v in d.items() if k not in ("setup", "commits")}
        for m, d in cov.get("models", {}).items()
    }
    return out


def today(sel: object) -> dict[str, object]:
    from powercut.core.states.selection import Selection

    assert isinstance(sel, Selection)
    return {
        "ids": [s.id for s in sel.states],
        "aliases": sel.aliases,
        "counts": {
            m: {k: v for k, v in c.to_json().items() if not k.startswith("setup_")}
            for m, c in sel.counts.items()
        },
        "coverage": whole(sel.coverage.to_json()),
        "floor": sel.floor,
    }


@settings(max_examples=250, deadline=None)
@given(ops=OPS, spec=SPEC, floor=st.sampled_from(["mkfs", None]), ledger=st.integers(0, 3))
def test_one_disk_is_exactly_the_one_disk_algorithm(
    ops: list,
    spec: SelectionSpec,
    floor: str | None,  # type: ignore[type-arg]
    ledger: int,
) -> None:
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        earlier: frozenset[str] = frozenset()
        if ledger:  # an earlier run's passes: every ledger-th state of a full selection
            full = select(sp, spec.with_(max_states=0), floor_mark=floor)
            earlier = frozenset(state_key(sp, s) for s in list(full.states)[::ledger])
        new = select(sp, spec, floor_mark=floor, earlier=earlier)
        old = old_select(sp, spec, floor_mark=floor, earlier=earlier)
        assert today(new) == {**old, "coverage": whole(old["coverage"])}  # type: ignore[arg-type]
        disks = select_nodes(Nodes([sp]), spec, floor_mark=floor, earlier=earlier, node_bound=1)
        assert [s.id for s in disks.states] == old["ids"], (
            "one disk's pool is its model's choice: no bound"
        )
        assert all(s.nodes == (t,) for s, t in zip(disks.states, new.states))


def _all_flush(cid: str) -> bool:
    """A cluster id of a model other than flush whose nodes all hold flush states."""
    model, _, rest = cid.partition("~")
    return model != "flush" and all(n.startswith("flush@") for n in rest.split("+"))


def _labelled_flush(aliases: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ids in aliases.values():
        for a in ids:
            if _all_flush(a):
                out.setdefault(a.partition("~")[0], []).append(a)
    return out


def nodes_spec(rest: tuple[str, ...]) -> SelectionSpec:
    return SelectionSpec(models=("flush", *rest), bound=4, samples=3, torn_samples=2)


@settings(max_examples=60, deadline=None)
@given(
    cluster=CLUSTER,
    rest=st.lists(st.sampled_from(HONEST_MODELS[2:] + ("no-cache",)), max_size=2, unique=True),
    bound=st.sampled_from([4096, 6]),
    cap=st.sampled_from([0, 5]),
)
def test_a_cluster_judges_exactly_what_the_cluster_algorithm_judged(
    cluster: list,
    rest: list,  # type: ignore[type-arg]
    bound: int,
    cap: int,
) -> None:
    spec = nodes_spec(tuple(rest)).with_(max_states=cap)
    with tempfile.TemporaryDirectory() as d:
        logs = build_cluster(Path(d), cluster)
        try:
            disks = Nodes(logs)
            new = select_nodes(disks, spec, node_bound=bound)
            old = old_select_cluster(disks.nodes, disks.instants, spec, node_bound=bound)
            flushed = {m for m, ids in _labelled_flush(old["aliases"]).items() if ids}
            flushed |= {i.partition("~")[0] for i in old["ids"] if _all_flush(i)}
            if not flushed:  # exactly the same choice and coverage
                assert [s.id for s in new.states] == old["ids"]
                assert whole(new.coverage.to_json()) == whole(old["coverage"])
                for m, c in new.counts.items():
                    o = old["counts"][m]
                    assert (c.distinct, c.owned, c.judged) == (
                        o["distinct"],
                        o["owned"],
                        o["judged"],
                    )
                    assert c.generated >= o["generated"]
            elif (
                not cap
            ):  # the same images judged, each under a model that generated it, but those only
                #             the false name reached (a sampled instant's flush combinations not sampled)
                was = {disks.key(disks.state_from_id(i)): i for i in old["ids"]}
                now = {disks.key(s) for s in new.states}
                assert now <= set(was)
                assert all(_all_flush(i) for k, i in was.items() if k not in now)
                assert not any(_all_flush(s.id) for s in new.states)
            for rep, was in old["aliases"].items():
                if not _all_flush(rep) and not flushed:
                    assert set(was) <= set(new.aliases.get(rep, ())), rep
            for (
                alias_ids
            ) in new.aliases.values():  # every alias rebuilds, at its representative's instant
                for a in alias_ids:
                    disks.state_from_id(a)
        finally:
            for log in logs:
                log.close()


def test_no_node_of_the_model_is_no_state_of_it(tmp_path: Path) -> None:
    """torn alone on three nodes whose writes are single sectors: nothing tears anywhere, so no
    torn state (before: every instant's flush combinations, labelled torn)."""
    from powercut.core.log.dmlog import FLUSH
    from tests.unit.core.test_cluster import GLOBAL

    one_sector = [[("w", 1, 1, FLUSH, 0)] for _ in range(len(GLOBAL) + 1)]
    logs = build_cluster(tmp_path, [one_sector] * 3)
    try:
        disks = Nodes(logs)
        spec = SelectionSpec(models=("torn",))
        assert len(select_nodes(disks, spec).states) == 0
        assert old_select_cluster(disks.nodes, disks.instants, spec)["ids"], (
            "the oracle labelled flush states torn"
        )
    finally:
        for log in logs:
            log.close()


@settings(max_examples=30, deadline=None)
@given(cluster=CLUSTER, model=st.sampled_from(LIE_MODELS))
def test_a_lying_disk_model_on_a_cluster_has_one_lying_node_per_state(
    cluster: list, model: str
) -> None:  # type: ignore[type-arg]
    """One lying disk per state: one node's state of the lying model, every other node's a flush
    state of the same instant; every node that has lies after its floor lies in some state (judged,
    or an alias of one with its image)."""
    spec = SelectionSpec(models=("flush", model), bound=4, samples=3, torn_samples=2)
    with tempfile.TemporaryDirectory() as d:
        logs = build_cluster(Path(d), cluster)
        try:
            disks = Nodes(logs)
            sel = select_nodes(disks, spec)
            liars: set[int] = set()
            every = [s.id for s in sel.states] + [a for ids in sel.aliases.values() for a in ids]
            for sid in every:  # judged, or an alias (a lie whose image an honest state has too)
                s = disks.state_from_id(sid)
                if s.model != model:
                    continue
                lying = [n for n, st in enumerate(s.nodes) if st.model == model]
                assert len(lying) == 1, s.id
                assert all(st.model == "flush" for n, st in enumerate(s.nodes) if n != lying[0]), (
                    s.id
                )
                liars.update(lying)
            for n, sp in enumerate(disks.nodes):
                floor = next((e.index for e in sp.entries if e.mark == "mkfs"), None)
                lies = [
                    st
                    for st in sp.iter_states(
                        model, seed=0, exhaustive_bound=4, samples=3, torn_samples=2
                    )
                    if after_floor(st, floor)
                ]
                flush_at = {
                    disks.instant_of(m, st.cut)
                    for m, other in enumerate(disks.nodes)
                    if m != n
                    for st in other.states("flush")
                }
                if any(disks.instant_of(n, st.cut) in flush_at for st in lies) and len(disks) > 1:
                    assert n in liars, f"node {n} has lies but never lies"
        finally:
            for log in logs:
                log.close()

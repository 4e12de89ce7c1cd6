"""A cluster check's summary and its shards: ``--shard i/n`` splits the cluster states of a selection
into disjoint, deterministic, near-equal shares that together are the whole; the shards' summaries
merge into the unsharded summary (verdict counts, coverage, failures, the verdict word); a missing
shard is never a pass; shards of different checks, or overlapping ones, are refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from powercut.core import clustersummary
from powercut.core.disks import Disks, DisksState
from powercut.core.selection import DisksSelection, SelectionSpec, select_disks
from powercut.core.shard import Shard
from powercut.core.verdict import Verdict
from powercut.errors import UsageError
from tests.unit.logops import build_log

SPEC = SelectionSpec(models=("flush", "write-cache"), bound=4, samples=3, max_states=23)
HEAD = {"recording": "rec", "nodes": 3, "workload": "replog", "check_in": "vm"}


def selection(d: Path) -> DisksSelection:
    logs = []
    for n in range(3):
        w = [("w", 2 * k, 1, 0, n + k) for k in range(2)]
        ops = [("m", "mkfs"), ("w", 20, 1, 0, 0), ("f",), ("m", "begin:1"), *w, ("m", "ack:1"), *w, ("f",),
               ("m", "begin:2"), ("w", 30, 1, 0, n), ("m", "ack:2")]
        logs.append(build_log(d / f"n{n}.bin", ops))
    return select_disks(Disks(logs), SPEC)


def verdict(s: DisksState) -> Verdict:
    """A made-up verdict: the states whose first node cut is odd lose an ack."""
    bad = s.nodes[0].cut % 2 == 1
    return Verdict(s.id, s.model, s.instant, "lost-ack" if bad else "pass", ("lost",) if bad else (), len(s.acks),
                   len(s.begun), 0.1)


def summary(sel: DisksSelection, states: tuple[DisksState, ...], shard: str = "",
            status: str = "complete") -> dict:  # type: ignore[type-arg]
    vs = [verdict(s) for s in states]
    return clustersummary.summarize(vs, head=HEAD, selection=sel.to_json(), coverage=sel.coverage,
                                    planned=len(states), select_s=0.1, judge_s=len(vs) * 0.1, judged_now=len(vs),
                                    status=status, shard=shard)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_of_cluster_states_are_disjoint_deterministic_and_whole(tmp_path: Path, n: int) -> None:
    sel = selection(tmp_path)
    again = selection(tmp_path)
    assert len(sel.states) == 23
    shards = [Shard(i, n).take(sel.states) for i in range(1, n + 1)]
    ids = [s.id for part in shards for s in part]
    assert sorted(ids) == sorted(s.id for s in sel.states) and len(set(ids)) == len(ids)
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert [[s.id for s in p] for p in shards] == [[s.id for s in Shard(i, n).take(again.states)]
                                                   for i in range(1, n + 1)]


def test_merged_shards_summarize_as_the_unsharded_check(tmp_path: Path) -> None:
    sel = selection(tmp_path)
    whole = summary(sel, sel.states)
    parts = [(f"{i}/3", summary(sel, Shard(i, 3).take(sel.states), f"{i}/3"),
              [verdict(s) for s in Shard(i, 3).take(sel.states)]) for i in range(1, 4)]
    merged, verdicts = clustersummary.merge(parts, 3)
    assert whole["verdict"] == "fail" and whole["verdicts"]["lost-ack"] > 0 and whole["verdicts"]["pass"] > 0
    for key in ("verdict", "verdicts", "judged", "planned", "coverage", "phrase", "failures", "selection",
                "recording", "nodes", "check_in", "judged_now", "status", "missing_shards"):
        assert merged[key] == whole[key], key
    assert sorted(v.state for v in verdicts) == sorted(s.id for s in sel.states)
    assert merged["judge_s"] == pytest.approx(whole["judge_s"])
    assert merged["shards"] == ["1/3", "2/3", "3/3"]
    # a shard's own coverage counts only its states
    assert parts[0][1]["coverage"]["models"]["flush"]["judged"] < whole["coverage"]["models"]["flush"]["judged"]


def test_a_missing_shard_or_an_interrupted_check_is_never_a_pass(tmp_path: Path) -> None:
    sel = selection(tmp_path)
    passing = tuple(s for s in sel.states if verdict(s).verdict == "pass")
    one = Shard(1, 2).take(passing)
    merged, _ = clustersummary.merge([("1/2", summary(sel, one, "1/2"), [verdict(s) for s in one])], 2)
    assert merged["verdict"] == "incomplete" and merged["missing_shards"] == ["2/2"]
    assert merged["status"] == "partial"
    assert summary(sel, passing, status="interrupted")["verdict"] == "incomplete"
    assert summary(sel, passing)["verdict"] == "pass"


def test_shards_of_different_checks_are_refused(tmp_path: Path) -> None:
    sel = selection(tmp_path)
    a, b = Shard(1, 2).take(sel.states), Shard(2, 2).take(sel.states)
    sa, sb = summary(sel, a, "1/2"), summary(sel, b, "2/2")
    va, vb = [verdict(s) for s in a], [verdict(s) for s in b]
    with pytest.raises(UsageError, match="shard 1/2 given twice"):
        clustersummary.merge([("1/2", sa, va), ("1/2", sa, va)], 2)
    with pytest.raises(UsageError, match="judged in shard 1/2 and in shard 2/2"):
        clustersummary.merge([("1/2", sa, va), ("2/2", sb, vb + va[:1])], 2)
    with pytest.raises(UsageError, match="differ in their nodes"):
        clustersummary.merge([("1/2", sa, va), ("2/2", {**sb, "nodes": 4}, vb)], 2)

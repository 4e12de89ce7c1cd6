"""A cluster check's failures after judging (campaign/phases.CampaignRun over N = 3 disks, the
phases of every campaign), with a fake place judging synthetic 3-node logs:
grouped, the first state minimized node by node, confirmed by group (a state that passes the
second time is flaky and says both verdicts), the second verdicts appended to the journal, a
cluster bundle written per group whose cut logs rebuild the state (and refuse a tampered node log),
and repro of the bundle through the same callback."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from powercut.campaign.journal import Journal
from powercut.campaign.phases import CampaignRun
from powercut.campaign.run import CampaignSpec
from powercut.check.place import Place
from powercut.checker import CheckerSpec
from powercut.core.judging.verdict import Verdict
from powercut.core.states.nodes import Nodes, NodesState
from powercut.debug import bundle, diagnose, repro, triage
from powercut.errors import UsageError
from powercut.linux import interrupt
from tests.unit.core.test_nodesshrink import OPS, W6
from tests.unit.logops import build_log


class FakeJudge:
    """Fails iff ack 1 is given and node 1 lost entry W6; ``flaky`` states pass from the second time on."""

    def __init__(self, flaky: Sequence[str] = (), alternate: Sequence[str] = ()) -> None:
        self.flaky, self.alternate, self.seen = set(flaky), set(alternate), list[str]()

    def verdict(self, st: NodesState) -> Verdict:
        again = st.id in self.seen
        odd = self.seen.count(st.id) % 2 == 1  # alternate states pass every second judgment
        self.seen.append(st.id)
        bad = (
            "1" in st.acks
            and W6 in st.nodes[1].dropped
            and not (again and st.id in self.flaky)
            and not (odd and st.id in self.alternate)
        )
        return Verdict(
            st.id,
            st.model,
            st.instant,
            "lost-ack" if bad else "pass",
            ("acked record 1 is intact on 1 of 3 nodes",) if bad else (),
            len(st.acks),
            0,
            0.01,
        )

    def __call__(self, states: Sequence[NodesState], sink: Any, work: Path) -> None:
        for st in states:
            sink(self.verdict(st))


@pytest.fixture()
def setup(tmp_path: Path) -> tuple[Nodes, list[NodesState], Any, Any]:
    paths = [tmp_path / f"log-n{i}.bin" for i in range(3)]
    logs = [build_log(p, OPS) for p in paths]
    cs = Nodes(logs)

    def wc(*drops: tuple[int, ...]) -> NodesState:
        return cs.make(
            "write-cache",
            [cs.nodes[n].make_state("write-cache", 11, d) for n, d in enumerate(drops)],
        )

    states = [
        wc((4, 5, 6, 8, 10), (4, 5, 6, 8, 10), (4, 5, 6, 8, 10)),
        wc((), (5,), ()),
        wc((), (), ()),
        wc((8,), (5, 8), (10,)),
    ]
    rec = SimpleNamespace(
        dir=tmp_path,
        node_logs=tuple(paths),
        data_size=1 << 20,
        fstype="ext4",
        mount_opts="",
        workload={"name": "replog"},
        initial_image=None,
        start={},
        log_path=paths[0],
        indexes=logs,
        trace_path=None,
    )
    ctx = SimpleNamespace(checker=CheckerSpec(name="replog"), params={"n": 2})
    return cs, states, rec, ctx


class FakePlace:
    """Where the states are judged: the fake judge, in this process (the host: the diagnosis runs
    here too, its images and blame the fake's, ``in_process``)."""

    on_host = True

    def __init__(self, judge: FakeJudge) -> None:
        self.fake = judge

    def judge(
        self,
        ctx: Any,
        src: Any,
        index: Any,
        states: Sequence[NodesState],
        sink: Any,
        work: Path,
        *,
        jobs: int = 1,
        prove: bool = False,
    ) -> None:
        assert src.disks == 3 and len(index) == 3
        self.fake(states, sink, work)

    def with_warm_vms(self) -> FakePlace:
        return self

    def close_warm(self, force: bool = False) -> None:
        pass

    def fresh(self) -> FakePlace:
        return self

    def alone(self, jobs: int) -> int:
        return jobs

    def workers(self) -> int:
        return 1


@contextlib.contextmanager
def in_process(verdict: Callable[[NodesState], Verdict]) -> Iterator[None]:
    """The diagnosis (debug/diagnose.py, on the host) with fake images: each candidate judged by
    ``verdict``, no write blamed, nothing left mounted to clean."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diagnose, "judge_state", lambda ctx, ws, st: verdict(st))
        mp.setattr(diagnose, "blame_state", lambda ctx, ws, node, st, settle=False: [])
        mp.setattr(triage, "cleanup_stale", lambda work: None)
        yield


def run(setup: Any, tmp_path: Path, judge: FakeJudge, **how: Any) -> dict[str, Any]:
    """The states judged by ``judge``, then triaged as every campaign's are; what the summary says."""
    cs, states, rec, ctx = setup
    out = tmp_path / "check"
    out.mkdir()
    spec = CampaignSpec(place=FakePlace(judge), **how)  # type: ignore[arg-type]
    journal = Journal(out / "journal.jsonl", resume=False)
    interrupt.reset()
    r = CampaignRun(
        spec,
        rec,
        ctx,
        out,
        rec.indexes,
        cs,
        SimpleNamespace(states=states, aliases={}, floors=(0, 0, 0)),
        journal,
        None,
    )
    r.judge(states, r.sink, out / "work", 1)
    with in_process(judge.verdict):
        groups = [g.to_json() for g in r.triage()]
    journal.close()
    now = list(journal.done.values())
    return {
        "groups": groups,
        "verdicts": dict(Counter(v.verdict for v in now)),
        "verdict": "fail" if any(v.failed and v.verdict != "flaky" for v in now) else "pass",
        "failures": [v.to_json() for v in now if v.failed and v.verdict != "flaky"],
        "flaky": [v.to_json() for v in now if v.verdict == "flaky"],
        "confirmation": {"rejudged": r.confirmed, "flaky": sum(v.verdict == "flaky" for v in now)},
    }


def test_a_group_is_minimized_confirmed_and_bundled(setup: Any, tmp_path: Path) -> None:
    post = run(setup, tmp_path, FakeJudge())
    (g,) = post["groups"]
    assert (g["verdict"], g["count"], g["first"]) == (
        "lost-ack",
        3,
        setup[1][1].id,
    )  # the shortest id first
    assert g["confirmed_alone"] == 3 and g["minimized_confirmed"] and post["verdict"] == "fail"
    assert "no single node" in g["nodes_note"] and g["nodes"] == 3
    cs = setup[0]
    m = cs.state_from_id(g["minimized"])
    assert [s.dropped for s in m.nodes] == [(), (W6,), ()]
    assert [
        sh["lost"][1] <= sh["lost"][0] and sh["cut"][1] <= sh["cut"][0] for sh in g["node_shrink"]
    ] == [True] * 3
    assert post["confirmation"]["flaky"] == 0 and post["verdicts"] == {"lost-ack": 3, "pass": 1}
    lines = (tmp_path / "check" / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 4 + 3 and all(json.loads(x)["confirmed"] for x in lines[4:])
    assert (
        json.loads((tmp_path / "check" / "diagnoses.json").read_text())["groups"][0]["first"]
        == g["first"]
    )
    b = bundle.load(g["bundle"])
    assert b.nodes == 3 and b.state == g["minimized"] and b.doc["verdict"] == "lost-ack"
    assert [x["entries"] for x in b.doc["logs"]] == [13, 13, 13]
    assert len(b.doc["blame"]) == 3 and b.doc["instant"] == 2


def test_repro_of_the_bundle_rebuilds_the_state_and_refuses_a_tampered_log(
    setup: Any, tmp_path: Path
) -> None:
    g = run(setup, tmp_path, FakeJudge())["groups"][0]
    target = repro.resolve(g["bundle"])
    assert target.state == g["minimized"] and len(target.logs) == 3
    v = repro.run(target, Place("host"), judge=FakeJudge())
    assert v.verdict == "lost-ack" and "still fails" in repro.describe(target, v)[-1]
    log1 = Path(g["bundle"]) / "log1.bin"
    data = bytearray(log1.read_bytes())
    data[-700] ^= 1
    log1.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="node 1's log log1.bin was altered"):
        repro.resolve(g["bundle"])
    log1.unlink()
    with pytest.raises(UsageError, match="node 1's log log1.bin is missing"):
        bundle.load(g["bundle"])


def test_a_state_that_passes_the_second_time_is_flaky(setup: Any, tmp_path: Path) -> None:
    flaky_id = setup[1][3].id
    post = run(setup, tmp_path, FakeJudge(flaky=[flaky_id]))
    (f,) = post["flaky"]
    assert f["state"] == flaky_id and f["first"][0] == "lost-ack"
    assert f["reasons"][0].startswith(
        "failed 1 of 5 judgments of the same images (lost-ack), passed the others"
    )
    assert any("first: " in r for r in f["reasons"][1:])
    assert (
        post["verdicts"] == {"lost-ack": 2, "pass": 1, "flaky": 1}
        and post["groups"][0]["count"] == 2
    )


def test_a_state_that_fails_again_when_judged_more_is_a_finding_that_says_how_often(
    setup: Any, tmp_path: Path
) -> None:
    """A recovery that is not deterministic (an election decides): the second judgment passes, the
    third and fifth fail -- a confirmed finding, 3 failing judgments of 5, not flaky."""
    some = setup[1][3].id
    post = run(setup, tmp_path, FakeJudge(alternate=[some]))
    assert not post["flaky"] and post["verdicts"] == {"lost-ack": 3, "pass": 1}
    (v,) = [f for f in post["failures"] if f["state"] == some]
    assert v["confirmed"] and v["reasons"][0].startswith(
        "failed 3 of 5 judgments of the same images (lost-ack"
    )


def test_without_confirmation_or_shrink_nothing_is_judged_again(setup: Any, tmp_path: Path) -> None:
    judge = FakeJudge()
    post = run(setup, tmp_path, judge, confirm=False, shrink=0)
    assert len(judge.seen) == 4 and post["confirmation"]["rejudged"] == 0
    assert not post["groups"][0]["minimized"] and post["groups"][0]["bundle"]

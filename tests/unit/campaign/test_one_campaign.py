"""One campaign for one disk and for N (campaign/run.run_campaign): the same call checks a one-disk
recording and a 3-node cluster recording, judging through the place it is given (a fake one here,
judging synthetic logs in this process).  At N = 3 the summary is the one Summary (``nodes`` 3 in
summary.json, JUnit, report.html), the failures are grouped, minimized node by node, confirmed and
bundled, the ledger skips what passed before, shards merge into the unsharded result; at N = 1
summary.json carries no ``nodes`` key, as before."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from powercut.campaign.merge import merge
from powercut.campaign.run import CampaignSpec, lie_target_of, run_campaign
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import END_MARK
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import NodesState
from powercut.core.states.selection import SelectionSpec
from powercut.core.states.shard import Shard
from powercut.debug import diagnose, triage
from powercut.errors import UsageError
from powercut.record.recording import load as load_recording
from tests.unit.core.test_nodesshrink import OPS, W6
from tests.unit.logops import build_log

LOG_OPS = [*OPS, ("m", END_MARK)]


def _bad(st: CrashState | NodesState) -> bool:
    """The fake program's bug: ack 1 given while the write W6 of the last disk was lost."""
    last = st.nodes[-1] if isinstance(st, NodesState) else st
    return "1" in st.acks and W6 in last.dropped


class FakePlace:
    """Judges in this process: a state fails iff ``_bad``; counts what it was given."""

    check_in = "host"
    on_host = True
    uris: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.judged: list[str] = []

    def require(self) -> None:
        pass

    def workers(self) -> int:
        return 1

    def alone(self, jobs: int) -> int:
        return 1

    def with_warm_vms(self) -> FakePlace:
        return self

    def close_warm(self, force: bool = False) -> None:
        pass

    def fresh(self) -> FakePlace:
        return self

    def judge(
        self,
        ctx: Any,
        src: Any,
        index: Any,
        states: Sequence[Any],
        sink: Any,
        work: Path,
        *,
        jobs: int = 1,
        prove: bool = False,
    ) -> None:
        assert src.disks == (1 if not isinstance(index, list) else len(index))
        for st in states:
            self.judged.append(st.id)
            cut = st.instant if isinstance(st, NodesState) and len(st.nodes) > 1 else st.cut
            sink(verdict(st, cut))


def verdict(st: CrashState | NodesState, at: int) -> Verdict:
    bad = _bad(st)
    return Verdict(
        st.id,
        st.model,
        at,
        "lost-ack" if bad else "pass",
        ("node 2: acked record 1 lost",) if bad else (),
        len(st.acks),
        len(st.begun),
        0.01,
    )


@pytest.fixture()
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The diagnosis runs here (debug/diagnose.py, as on the host) over fake images: each candidate
    judged by ``_bad``, no write blamed."""
    monkeypatch.setattr(
        diagnose,
        "judge_state",
        lambda ctx, ws, st: verdict(st, st.nodes[0].cut if len(st.nodes) == 1 else st.instant),
    )
    monkeypatch.setattr(diagnose, "blame_state", lambda ctx, ws, node, st, settle=False: [])
    monkeypatch.setattr(triage, "cleanup_stale", lambda work: None)


def recording(d: Path, nodes: int) -> Path:
    """A recording of ``nodes`` disks (1: the one-disk layout) holding the synthetic log on each."""
    d.mkdir()
    names = ["log.bin"] if nodes == 1 else [f"log-n{i}.bin" for i in range(nodes)]
    for name in names:
        build_log(d / name, LOG_OPS).close()
    finals = ["data-final.img"] if nodes == 1 else [f"data-n{i}-final.img" for i in range(nodes)]
    manifest: dict[str, Any] = {
        "recording": {"format": 2, "status": "ok"},
        "fs": {"fstype": "ext4"},
        "workload": {"cmd": "true"},
        "data": {"initial": "zeros", "size_bytes": 1 << 20},
        "log": {"device_bytes": 0},
        "result": {"ok": True},
        "node": [{"log": n, "final": f} for n, f in zip(names, finals)],
    }
    (d / "manifest.toml").write_text(tomli_w.dumps(manifest))
    return d


def spec(place: FakePlace, **kw: Any) -> CampaignSpec:
    return CampaignSpec(
        selection=SelectionSpec(models=("flush", "write-cache"), bound=4, samples=0),
        place=place,
        **kw,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("nodes", [1, 3])
def test_one_call_checks_one_disk_and_a_cluster(
    tmp_path: Path, nodes: int, in_process: None
) -> None:
    place = FakePlace()
    summary, paths = run_campaign(
        recording(tmp_path / "rec", nodes), spec(place, shrink=1), tmp_path / "out"
    )
    doc = json.loads(paths["summary"].read_text())
    assert summary.nodes == nodes and doc["nodes"] == nodes  # one form: every summary says it
    assert len(doc["disks"].get("node_states", [])) == (nodes if nodes > 1 else 0)
    assert summary.total == len(
        set(place.judged)
        & {
            v["state"]
            for v in map(json.loads, (tmp_path / "out" / "journal.jsonl").read_text().splitlines())
        }
    )
    assert (
        summary.verdict == "lost-ack"
        and summary.failures
        and all(f.confirmed or f.by_group for f in summary.failures)
    )
    (g,) = summary.groups
    assert (
        g["bundle"]
        and Path(g["bundle"], "bundle.json").is_file()
        and g["minimized"]
        and g["minimized_confirmed"]
    )
    m = json.loads(Path(g["bundle"], "bundle.json").read_text())["diagnosis"]
    assert m["minimized"] == g["minimized"]
    if nodes > 1:  # the cluster's words: the node named, the minimization per node
        assert g["nodes"] == 3 and "node 2" in g["nodes_note"] and len(g["node_shrink"]) == 3
        assert (
            g["minimized"].startswith("write-cache~")
            and (tmp_path / "out" / "report.html").is_file()
        )
    else:  # one disk's: its own id, the group's words without nodes, the one diagnosis layout
        assert g["minimized"].startswith("write-cache@") and "nodes" not in g
        assert len(m["nodes"]) == 1 and "culprits" in m["nodes"][0]
        assert (
            m["minimized"] == f"write-cache@8/d{W6}"
        )  # the write W6 lost, the cut right after ack:1 (entry 7)
    assert (
        paths["junit"].is_file()
        and json.loads((tmp_path / "out" / "diagnoses.json").read_text())["groups"]
    )


def test_a_cluster_ledger_skips_what_passed_before(tmp_path: Path) -> None:
    rec = recording(tmp_path / "rec", 3)
    first = FakePlace()
    s1, _ = run_campaign(
        rec, spec(first, ledger=str(tmp_path / "ledger.json"), shrink=0), tmp_path / "o1"
    )
    second = FakePlace()
    s2, _ = run_campaign(
        rec, spec(second, ledger=str(tmp_path / "ledger.json"), shrink=0), tmp_path / "o2"
    )
    passed = s1.total - len(s1.failures)
    assert passed > 0 and s2.total == s1.total - passed and s2.verdict == "lost-ack"


def test_cluster_shards_merge_into_the_unsharded_check(tmp_path: Path) -> None:
    rec = recording(tmp_path / "rec", 3)
    whole, _ = run_campaign(rec, spec(FakePlace(), shrink=0), tmp_path / "whole")
    outs = []
    for i in (1, 2):
        run_campaign(rec, spec(FakePlace(), shrink=0, shard=Shard(i, 2)), tmp_path / f"s{i}")
        outs.append(tmp_path / f"s{i}")
    merged, _ = merge(outs, tmp_path / "merged")
    assert (merged.nodes, merged.total, merged.verdict) == (3, whole.total, whole.verdict)
    assert merged.disks == whole.disks and whole.disks["instants"] > 1
    assert merged.by_model == whole.by_model
    assert merged.coverage is not None and whole.coverage is not None
    assert merged.coverage.to_json() == whole.coverage.to_json()


def test_a_lie_file_on_a_cluster_without_file_maps_is_one_line_naming_the_node(
    tmp_path: Path,
) -> None:
    rec = recording(tmp_path / "rec", 3)
    bad = CampaignSpec(
        selection=SelectionSpec(models=("lost-write",), lie_file="db"), place=FakePlace()
    )  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"--lie-file db: .* has no file map \(node 0\)"):
        run_campaign(rec, bad, tmp_path / "out")


def test_each_node_aims_its_lies_at_its_own_file_map(tmp_path: Path) -> None:
    """A cluster recording maps each node's files (job/files-n<i>.json): node i's lies aim at its own
    map's blocks, and --lie-file names a file on every node (a node without it: one line naming it)."""
    rec_dir = recording(tmp_path / "rec", 3)
    doc = tomllib.loads((rec_dir / "manifest.toml").read_text())
    (rec_dir / "job").mkdir()
    for i, node in enumerate(doc["node"]):
        files = {"db": [[8 * (i + 1), 8]]} if i < 2 else {"other": [[64, 8]]}
        (rec_dir / "job" / f"files-n{i}.json").write_text(
            json.dumps({"sector_bytes": 512, "files": files})
        )
        node["file_map"] = f"job/files-n{i}.json"
    (rec_dir / "manifest.toml").write_text(tomli_w.dumps(doc))
    rec = load_recording(rec_dir)
    assert [p.name if p else None for p in rec.file_maps] == [
        "files-n0.json",
        "files-n1.json",
        "files-n2.json",
    ]
    t0, t1 = (lie_target_of(rec, 512, "db", i) for i in (0, 1))
    assert t0.only and t0.touches(8, 9) and not t0.touches(16, 17)
    assert t1.touches(16, 17) and not t1.touches(8, 9)
    with pytest.raises(
        UsageError, match=r"--lie-file db: not a file of the program .* \(node 2\) .*other"
    ):
        lie_target_of(rec, 512, "db", 2)
    assert lie_target_of(rec, 512, "", 2).touches(
        64, 65
    )  # no --lie-file: the program's blocks first

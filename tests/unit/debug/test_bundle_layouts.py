"""One bundle layout for N >= 1 disks (debug/bundle.py, format 2): the writer writes log0.bin,
log1.bin, ... and bundle.json's ``nodes``, ``logs``, ``instant``, ``minimized_reasons``, ``cause`` and
``blame`` for every N; the old bundles of both format-1 layouts (tests/unit/debug/bundles/, written by
the writers before the one format) load through the one adapter (``_upgrade``) as what today's
writer writes for the same inputs (apart from ``created``, ``format`` and the file names), with
their logs byte for byte, and replay through the one repro (debug/repro.py) to what they said;
write -> load round-trips at N = 1 and N = 2; ``--keep-image`` writes PATH for one disk and
PATH.n<i> per node; a missing, altered or misplaced log, a damaged pin (in either format) or a
format it does not read is one clear error."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from powercut.check.place import Place
from powercut.core.judging.nodesshrink import bundle_cuts
from powercut.core.judging.verdict import Verdict
from powercut.core.states.nodes import Nodes, NodesState
from powercut.debug import bundle, repro
from powercut.debug.diagnosis import Diagnosis
from powercut.errors import UsageError
from powercut.replay.materialize import replay_state
from tests.unit.core.test_nodesshrink import OPS as CLUSTER_OPS
from tests.unit.debug import bundleinputs as inputs
from tests.unit.logops import build_log

OLD_FILES = {
    "one-disk": ("bundle.json", "log.bin", "syscalls.txt.gz"),
    "cluster": ("bundle.json", "log0.bin", "log1.bin", "log2.bin"),
}
NEW_FILES = {
    "one-disk": ("bundle.json", "log0.bin", "syscalls.txt.gz"),
    "cluster": ("bundle.json", "log0.bin", "log1.bin", "log2.bin"),
}


class OneDiagnosis(inputs.OneDiagnosis):
    """The one-disk fixture's diagnosis with what the writer reads of every diagnosis: its
    minimized reasons and cause (the fixture's had none) and its culprits."""

    minimized_reasons: tuple[str, ...] = ()
    cause = ""

    def culprits(self, node: int) -> list[dict[str, Any]]:
        assert node == 0
        return list(self.to_json()["culprits"])


def _inputs(name: str, tmp: Path) -> dict[str, Any]:
    """The fixture's inputs as today's writer takes them (one disk: one log and one cut)."""
    if name == "cluster":
        return inputs.cluster(tmp)
    kw = inputs.one_disk(tmp)
    kw.update(logs=[kw.pop("log_path")], cuts=[kw.pop("cut")], diagnosis=OneDiagnosis())
    return kw


def _frozen_clock(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """bundle.json's ``created`` as the fixture's (the one key the clock writes)."""
    created = json.loads((inputs.FIXTURES / name / "bundle.json").read_text())["created"]
    monkeypatch.setattr(bundle.time, "strftime", lambda fmt, t=None: created)


def _content(doc: dict[str, Any]) -> dict[str, Any]:
    """A bundle.json without what differs between the formats for the same inputs: ``created``,
    ``format`` and the log files' names."""
    out = {k: v for k, v in doc.items() if k not in ("created", "format")}
    out["logs"] = [{k: v for k, v in pin.items() if k != "file"} for pin in doc["logs"]]
    if isinstance(doc.get("diagnosis"), dict):  # either of its layouts, read as the code reads it
        d = Diagnosis.from_json(doc["diagnosis"]).to_json()
        out["diagnosis"] = {k: v for k, v in d.items() if k != "one_at_a_time"}
    return out


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(inputs.FIXTURES / name, tmp_path / name))


@pytest.mark.parametrize("name", ["one-disk", "cluster"])
def test_the_writer_writes_what_the_adapter_makes_of_the_old_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    _frozen_clock(monkeypatch, name)
    new = bundle.write(tmp_path / "new", **_inputs(name, tmp_path / "in"))
    old = inputs.FIXTURES / name
    assert sorted(p.name for p in new.iterdir()) == sorted(NEW_FILES[name])
    assert sorted(p.name for p in old.iterdir()) == sorted(OLD_FILES[name])
    doc = json.loads((new / "bundle.json").read_text())
    old_doc = json.loads((old / "bundle.json").read_text())
    assert (doc["format"], old_doc["format"]) == (2, 1) and "kind" not in doc and "log" not in doc
    up = bundle._upgrade(old_doc, "where")
    assert _content(up) == _content(doc)
    assert old_doc == json.loads((old / "bundle.json").read_text())  # converted in a new dict
    assert bundle.load(old).doc == up and bundle.load(new).doc == doc
    for new_file, old_file in zip(NEW_FILES[name][1:], OLD_FILES[name][1:]):  # the logs, the trace
        assert (new / new_file).read_bytes() == (old / old_file).read_bytes(), new_file


def test_the_adapter_takes_an_old_one_disk_bundles_findings_from_its_diagnosis(
    tmp_path: Path,
) -> None:
    """What the one-disk writer before the one format wrote of a real diagnosis (no nodes, logs,
    instant, minimized_reasons, cause, blame) becomes what today's writer writes of it."""

    kw = _inputs("one-disk", tmp_path / "in")
    kw["diagnosis"] = inputs.blamed_diagnosis("write-cache@4/d2")
    new = bundle.write(tmp_path / "new", **kw)
    doc = json.loads((new / "bundle.json").read_text())
    old = {k: v for k, v in doc.items() if k not in ("nodes", "logs", "instant", "kind")}
    for k in ("minimized_reasons", "cause", "blame"):
        del old[k]
    old.update(format=1, log={**doc["logs"][0], "file": "log.bin"})
    up = bundle._upgrade(old, "where")
    assert _content(up) == _content(doc) and up["cause"] == "lost-ack: lost <- data of /f"
    assert up["blame"] == [["entry 2: data of /f"]] and up["instant"] == 4


def test_the_old_bundles_load_in_the_one_form(tmp_path: Path) -> None:
    one, three = bundle.load(_copy("one-disk", tmp_path)), bundle.load(_copy("cluster", tmp_path))
    assert (one.nodes, [p.name for p in one.logs], one.log_path.name) == (1, ["log.bin"], "log.bin")
    assert (one.state, one.cause, one.checker.name, one.pins[0]["entries"]) == (
        "write-cache@4/d2",
        "",
        "append-fsync",
        6,
    )
    assert (
        one.pins
        == one.doc["logs"]
        == [
            {
                "file": "log.bin",
                "sha256": "537d921b26d07c36a58607095b153f3bf62fcd817dd75f480193da26f1dc0254",
                "entries": 6,
            }
        ]
    )
    assert "log" not in one.doc and "kind" not in three.doc
    assert (one.doc["instant"], one.doc["minimized_reasons"], one.doc["blame"]) == (
        4,
        [],
        [["entry 2: data of /f"]],
    )
    assert (three.nodes, [p.name for p in three.logs]) == (3, ["log0.bin", "log1.bin", "log2.bin"])
    assert three.state == inputs.CLUSTER_STATE and three.cause == "lost-ack: lost <- node 1: w6"
    assert [p["entries"] for p in three.pins] == [13, 13, 13] and three.checker.name == "replog"
    assert three.doc["instant"] == 2 and len(three.doc["blame"]) == 3


class Judge:
    """A judge callback (debug/repro.JudgeStates) that says what the bundle said, and keeps the states."""

    def __init__(self) -> None:
        self.seen: list[NodesState] = []

    def __call__(self, states: Sequence[NodesState], sink: Any, work: Path) -> None:
        for st in states:
            self.seen.append(st)
            sink(
                Verdict(
                    st.id, st.model, st.instant, "lost-ack", ("acked record 1 missing",), 1, 0, 0.01
                )
            )


@pytest.mark.parametrize("name", ["one-disk", "cluster"])
def test_the_old_bundles_replay_through_the_one_repro(tmp_path: Path, name: str) -> None:
    b = _copy(name, tmp_path)
    t = repro.resolve(str(b))
    judge = Judge()
    v = repro.run(t, Place("host"), keep_image=str(tmp_path / "state.img"), judge=judge)
    (st,) = judge.seen
    assert st.id == t.state and len(st.nodes) == t.nodes == {"one-disk": 1, "cluster": 3}[name]
    lines = repro.describe(t, v)
    if name == "one-disk":  # what the one-disk repro printed
        assert lines == [
            "cause (lost-ack): record 1 was acked, then lost",
            "  | e1",
            f"write-cache@4/d2 (bundle {b}): lost-ack",
            "  acked record 1 missing",
            "  still fails: the same verdict as in the bundle",
        ]
        assert repro.image_paths(str(tmp_path / "state.img"), 1) == [str(tmp_path / "state.img")]
    else:  # what the cluster repro printed
        assert lines == [
            "cause: lost-ack: lost <- node 1: w6",
            f"{inputs.CLUSTER_STATE} (bundle {b}, 3 nodes): lost-ack",
            "  acked record 1 missing",
            "  still fails: the same verdict as in the bundle",
        ]
    kept = repro.image_paths(str(tmp_path / "state.img"), t.nodes)
    for log, node, path in zip(t.logs, st.nodes, kept):  # each disk's image as the crash left it
        want = replay_state(log, node.id, tmp_path / "want.img", size=t.src.size)
        assert Path(path).read_bytes() == want.read_bytes()
    assert sorted(p.name for p in tmp_path.glob("state.img*")) == sorted(Path(p).name for p in kept)


def test_a_one_disk_id_for_a_cluster_bundle_is_one_error(tmp_path: Path) -> None:
    t = repro.resolve(str(_copy("cluster", tmp_path)), "write-cache@11")
    with pytest.raises(UsageError):
        repro.run(t, Place("host"), judge=Judge())


def _bad(b: Path, how: str) -> None:
    doc = json.loads((b / "bundle.json").read_text())
    if how == "missing":
        (b / "log1.bin").unlink()
    elif how == "altered":
        data = bytearray((b / "log1.bin").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (b / "log1.bin").write_bytes(bytes(data))
    elif how == "outside":
        shutil.copyfile(b / "log1.bin", b.parent / "log1.bin")
        doc["logs"][1]["file"] = "../log1.bin"
    elif how == "short":
        doc["logs"] = doc["logs"][:2]
    (b / "bundle.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("missing", "node 1's log log1.bin is missing"),
        ("altered", "node 1's log log1.bin was altered"),
        ("outside", "node 1's log ../log1.bin is missing"),
        ("short", "nodes is 3 with 2 logs, not one log (file and sha256) per node"),
    ],
)
def test_a_bad_cluster_bundle_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, says: str
) -> None:
    from powercut.cli import main

    b = _copy("cluster", tmp_path)
    _bad(b, how)
    with pytest.raises(UsageError, match=re.escape(says)):
        bundle.load(b)
    assert main(["repro", str(b), "--check-in", "host"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "Traceback" not in err[0]


def test_one_disks_bad_bundle_says_what_it_said(tmp_path: Path) -> None:
    b = _copy("one-disk", tmp_path)
    with open(b / "log.bin", "r+b") as f:
        f.seek(600)
        f.write(b"\xff")
    with pytest.raises(UsageError, match=r"log.bin was altered \(sha256 "):
        bundle.load(b)
    (b / "log.bin").unlink()
    with pytest.raises(
        UsageError, match=r"log.bin is missing \(the bundle cannot rebuild its state without it\)"
    ):
        bundle.load(b)


def _two_nodes(tmp: Path, diagnosis: bool) -> dict[str, Any]:
    """A 2-node bundle's inputs, its logs built in ``tmp`` (no diagnosis: blame per node empty)."""
    logs = [tmp / "rec" / f"log-n{i}.bin" for i in range(2)]
    logs[0].parent.mkdir(parents=True, exist_ok=True)
    indexes = [build_log(p, CLUSTER_OPS) for p in logs]
    cs = Nodes(indexes)
    st = cs.state_from_id("write-cache~write-cache@11/d5+write-cache@11")
    cuts = bundle_cuts(cs, st.instant)
    for x in indexes:
        x.close()
    v = Verdict(st.id, st.model, st.instant, "lost-ack", ("acked record 1 missing",), 1, 0, 0.2)
    kw = inputs.cluster(tmp / "three")
    d = dataclasses.replace(kw["diagnosis"], nodes=kw["diagnosis"].nodes[:2], cause="c")
    return {**kw, "logs": logs, "cuts": cuts, "verdict": v, "diagnosis": d if diagnosis else None}


@pytest.mark.parametrize("nodes", [1, 2])
def test_write_then_load_round_trips(tmp_path: Path, nodes: int) -> None:
    kw = _inputs("one-disk", tmp_path / "in") if nodes == 1 else _two_nodes(tmp_path / "in", False)
    b = bundle.write(tmp_path / "b", **kw)
    doc = json.loads((b / "bundle.json").read_text())
    got = bundle.load(b)
    assert got.doc == doc and doc["format"] == 2 and got.nodes == doc["nodes"] == nodes
    names = [f"log{i}.bin" for i in range(nodes)]
    assert [p.name for p in got.logs] == names and got.log_path == b / "log0.bin"
    assert [p["file"] for p in got.pins] == names and len(doc["blame"]) == nodes
    assert sorted(p.name for p in b.glob("log*")) == names
    for log, pin in zip(got.logs, got.pins):
        assert bundle.sha256(log) == pin["sha256"]
    assert (got.state, doc["instant"]) == (kw["verdict"].state, kw["verdict"].cut)
    if nodes == 2:
        assert doc["blame"] == [[], []] and got.cause == "" and doc["diagnosis"] is None
    t = repro.resolve(str(b))
    judge = Judge()
    v = repro.run(t, Place("host"), judge=judge)
    (st,) = judge.seen
    assert t.nodes == len(st.nodes) == nodes and st.id == got.state and v.verdict == "lost-ack"


def test_a_two_node_diagnosis_is_blamed_per_node(tmp_path: Path) -> None:
    b = bundle.load(bundle.write(tmp_path / "b", **_two_nodes(tmp_path / "in", True)))
    assert b.doc["blame"] == [["node 0 w6"], ["node 1 w6"]] and b.cause == "c"


def _damage(doc: dict[str, Any], how: str) -> None:
    if how == "no logs":
        del doc["logs"]
    elif how == "no sha256":
        del doc["logs"][0]["sha256"]
    elif how == "file 7":
        doc["logs"][0]["file"] = 7
    elif how == "nodes '1'":
        doc["nodes"] = "1"
    elif how == "nodes True":
        doc["nodes"] = True
    elif how == "nodes 2":
        doc["nodes"] = 2
    elif how == "no nodes":
        del doc["nodes"]
    elif how == "cause 5":
        doc["cause"] = 5
    elif how == "old log list":
        doc["log"] = ["log.bin"]
    elif how == "old no log":
        del doc["log"]
    elif how == "old no sha256":
        del doc["log"]["sha256"]
    elif how == "old cluster nodes 4":
        doc["nodes"] = 4
    else:
        raise AssertionError(how)


NOT_ONE_PER_NODE = "not one log (file and sha256) per node; the bundle is damaged"


@pytest.mark.parametrize(
    ("name", "how", "says"),
    [
        ("new", "no logs", f"nodes is 1 with no logs, {NOT_ONE_PER_NODE}"),
        ("new", "no sha256", f"nodes is 1 with 1 logs, {NOT_ONE_PER_NODE}"),
        ("new", "file 7", f"nodes is 1 with 1 logs, {NOT_ONE_PER_NODE}"),
        ("new", "nodes '1'", f"nodes is '1' with 1 logs, {NOT_ONE_PER_NODE}"),
        ("new", "nodes True", f"nodes is True with 1 logs, {NOT_ONE_PER_NODE}"),
        ("new", "nodes 2", f"nodes is 2 with 1 logs, {NOT_ONE_PER_NODE}"),
        ("new", "no nodes", f"nodes is None with 1 logs, {NOT_ONE_PER_NODE}"),
        ("new", "cause 5", "cause is 5, not a JSON string; the bundle is damaged"),
        ("one-disk", "old log list", "log is ['log.bin'], not an object with the log's sha256"),
        ("one-disk", "old no log", "log is None, not an object with the log's sha256"),
        ("one-disk", "old no sha256", "not an object with the log's sha256; the bundle is damaged"),
        ("cluster", "old cluster nodes 4", f"nodes is 4 with 3 logs, {NOT_ONE_PER_NODE}"),
    ],
)
def test_a_damaged_pin_is_one_line_in_either_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, how: str, says: str
) -> None:
    from powercut.cli import main

    if name == "new":
        b = bundle.write(tmp_path / "new", **_inputs("one-disk", tmp_path / "in"))
    else:
        b = _copy(name, tmp_path)
    doc = json.loads((b / "bundle.json").read_text())
    _damage(doc, how)
    (b / "bundle.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=re.escape(says)):
        bundle.load(b)
    assert main(["repro", str(b), "--check-in", "host"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("fmt", [3, 0, "2", True, 2.0, None])
def test_a_format_it_does_not_read_is_refused(tmp_path: Path, fmt: Any) -> None:
    b = _copy("cluster", tmp_path)
    doc = json.loads((b / "bundle.json").read_text())
    doc["format"] = fmt
    (b / "bundle.json").write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"bundle.json: not a bundle of format 1 or 2$"):
        bundle.load(b)
    for garbage in ("[]", '"x"', "{}", '{"format": 2}'):
        (b / "bundle.json").write_text(garbage)
        with pytest.raises(UsageError, match="not a bundle of format 1 or 2"):
            bundle.load(b)


def test_a_new_bundle_with_a_bad_node_log_is_one_clear_error(tmp_path: Path) -> None:
    b = bundle.write(tmp_path / "c", **inputs.cluster(tmp_path / "in"))
    _bad(b, "altered")
    with pytest.raises(UsageError, match=re.escape("node 1's log log1.bin was altered")):
        bundle.load(b)
    _bad(b, "missing")
    with pytest.raises(
        UsageError,
        match=re.escape(
            "node 1's log log1.bin is missing (the bundle cannot rebuild its cluster state"
        ),
    ):
        bundle.load(b)


def test_a_bundle_has_one_log_cut_per_disk(tmp_path: Path) -> None:
    kw = inputs.cluster(tmp_path / "in")
    with pytest.raises(UsageError, match="one log cut per disk: 3 logs, 2 cuts"):
        bundle.write(tmp_path / "x", **{**kw, "cuts": [0, 0]})
    with pytest.raises(UsageError, match="one log cut per disk: 0 logs, 0 cuts"):
        bundle.write(tmp_path / "x", **{**kw, "logs": [], "cuts": []})
    assert not (tmp_path / "x").exists()


def test_the_one_disk_keywords_and_the_layout_test_are_gone() -> None:
    params = inspect.signature(bundle.write).parameters
    assert "log_path" not in params and "cut" not in params
    assert not hasattr(bundle, "is_cluster") and not hasattr(bundle, "KIND")


def test_an_old_cluster_bundle_without_a_diagnosis_is_blamed_per_node(tmp_path: Path) -> None:
    """The cluster writer before the one format wrote ``blame: []`` without a diagnosis; today's
    writes one empty list per node, and the adapter makes the old one so."""
    b = bundle.write(tmp_path / "b", **_two_nodes(tmp_path / "in", False))
    doc = json.loads((b / "bundle.json").read_text())
    old = {"format": 1, "kind": "cluster", **{k: v for k, v in doc.items() if k != "format"}}
    old["blame"] = []
    (b / "bundle.json").write_text(json.dumps(old))
    assert bundle._upgrade(old, "where") == {**doc, "format": 1}
    assert bundle.load(b).doc["blame"] == [[], []] == doc["blame"]

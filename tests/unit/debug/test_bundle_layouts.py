"""One bundle format for N >= 1 disks (debug/bundle.py): at N = 1 today's writer gives the one-disk
bundle the writer before the one format gave, byte for byte (bundle.json, log.bin, the trace), at
N = 3 the cluster bundle the cluster writer gave; both fixtures (tests/unit/debug/bundles/, written
by those writers) load and replay through the one repro (debug/repro.py) to what they said;
``--keep-image`` writes PATH for one disk and PATH.n<i> per node; a missing, altered or misplaced
node log is one clear error."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from powercut.check.place import Place
from powercut.core.judging.verdict import Verdict
from powercut.core.states.disks import DisksState
from powercut.debug import bundle, repro
from powercut.errors import UsageError
from powercut.replay.materialize import replay_state
from tests.unit.debug import bundleinputs as inputs

FILES = {
    "one-disk": ("bundle.json", "log.bin", "syscalls.txt.gz"),
    "cluster": ("bundle.json", "log0.bin", "log1.bin", "log2.bin"),
}


def _frozen_clock(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """bundle.json's ``created`` as the fixture's (the one key the clock writes)."""
    created = json.loads((inputs.FIXTURES / name / "bundle.json").read_text())["created"]
    monkeypatch.setattr(bundle.time, "strftime", lambda fmt, t=None: created)


def _same_files(got: Path, name: str) -> None:
    want = inputs.FIXTURES / name
    assert sorted(p.name for p in got.iterdir()) == sorted(FILES[name])
    for f in FILES[name]:
        assert (got / f).read_bytes() == (want / f).read_bytes(), f


def test_one_disk_is_todays_bundle_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _frozen_clock(monkeypatch, "one-disk")
    kw = inputs.one_disk(tmp_path / "in")
    _same_files(
        bundle.write(tmp_path / "a", **kw), "one-disk"
    )  # the one-disk keywords (debug/triage.py's)
    log, cut = kw.pop("log_path"), kw.pop("cut")
    _same_files(
        bundle.write(tmp_path / "b", logs=[log], cuts=[cut], **kw), "one-disk"
    )  # N = 1 of N logs


def test_three_nodes_are_todays_cluster_bundle_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _frozen_clock(monkeypatch, "cluster")
    _same_files(bundle.write(tmp_path / "c", **inputs.cluster(tmp_path / "in")), "cluster")


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(inputs.FIXTURES / name, tmp_path / name))


def test_todays_bundles_load(tmp_path: Path) -> None:
    one, three = bundle.load(_copy("one-disk", tmp_path)), bundle.load(_copy("cluster", tmp_path))
    assert (one.nodes, [p.name for p in one.logs], one.log_path.name) == (1, ["log.bin"], "log.bin")
    assert (one.state, one.cause, one.checker.name, one.pins[0]["entries"]) == (
        "write-cache@4/d2",
        "",
        "append-fsync",
        6,
    )
    assert (three.nodes, [p.name for p in three.logs]) == (3, ["log0.bin", "log1.bin", "log2.bin"])
    assert three.state == inputs.CLUSTER_STATE and three.cause == "lost-ack: lost <- node 1: w6"
    assert [p["entries"] for p in three.pins] == [13, 13, 13] and three.checker.name == "replog"


class Judge:
    """A judge callback (debug/repro.JudgeStates) that says what the bundle said, and keeps the states."""

    def __init__(self) -> None:
        self.seen: list[DisksState] = []

    def __call__(self, states: Sequence[DisksState], sink: Any, work: Path) -> None:
        for st in states:
            self.seen.append(st)
            sink(
                Verdict(
                    st.id, st.model, st.instant, "lost-ack", ("acked record 1 missing",), 1, 0, 0.01
                )
            )


@pytest.mark.parametrize("name", ["one-disk", "cluster"])
def test_todays_bundles_replay_through_the_one_repro(tmp_path: Path, name: str) -> None:
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


def test_a_bundle_has_one_log_cut_per_disk(tmp_path: Path) -> None:
    kw = inputs.cluster(tmp_path / "in")
    with pytest.raises(UsageError, match="one log cut per disk: 3 logs, 2 cuts"):
        bundle.write(tmp_path / "x", **{**kw, "cuts": [0, 0]})
    with pytest.raises(UsageError, match="not both"):
        bundle.write(tmp_path / "x", log_path=kw["logs"][0], **kw)
    assert not (tmp_path / "x").exists()

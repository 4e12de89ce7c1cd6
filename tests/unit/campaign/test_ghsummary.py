"""powercut.campaign.ghsummary without pytest runs: pytest's exit status as a shard's, the
acceleration read from the recordings' manifests, the merge's refusals (one line each, exit 2) and
JUnit's node ids.  (The shard and merge steps on a project: tests/unit/ci/test_action.py.)"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from powercut.campaign import ghsummary as gh
from powercut.core.states.shard import Shard


def shard_out(d: Path, shard: str, *, accel: str = "kvm", pytest_status: int = 0) -> Path:
    (d / "tests" / "t1" / "recording").mkdir(parents=True)
    (d / "tests" / "t1" / "recording" / "manifest.toml").write_text(
        f'[recording]\naccel = "{accel}"\n'
    )
    (d / "junit.xml").write_text(
        '<testsuites><testsuite name="pytest"><testcase classname="pkg.test_a.TestX" '
        'name="test_y" time="1.5"/></testsuite></testsuites>'
    )
    gh.finish_shard(d, Shard.parse(shard), "kvm", pytest_status)
    return d


@pytest.mark.parametrize("rc, status", [(0, 0), (5, 0), (1, 3), (2, 1), (3, 1), (4, 1), (137, 1)])
def test_pytest_status_as_the_shards(rc: int, status: int) -> None:
    assert gh.shard_status(rc)[0] == status


def test_the_shard_reads_the_vms_acceleration(tmp_path: Path) -> None:
    doc = json.loads((shard_out(tmp_path / "a", "1/2") / gh.SHARD_JSON).read_text())
    assert doc["accels"] == {"t1": "kvm"} and doc["status"] == 0 and not doc["problems"]
    doc = gh.finish_shard(shard_out(tmp_path / "b", "2/2", accel="tcg"), Shard(2, 2), "kvm", 0)
    assert doc["status"] == 1 and "ran their VM under tcg" in doc["problems"][0]
    assert gh.finish_shard(tmp_path / "b", Shard(2, 2), "auto", 0)["status"] == 0


def test_the_merge_sums_the_shards_junit(tmp_path: Path) -> None:
    outs = [shard_out(tmp_path / f"s{i}", f"{i}/2") for i in (1, 2)]
    merged = gh.merge(outs, tmp_path / "m")
    assert (
        merged.status == 0
        and merged.headline == "pass: 0 crash tests and 2 other tests in 2 of 2 shards; 2 passed"
    )
    root = ET.parse(tmp_path / "m" / "junit.xml").getroot()
    assert (root.get("tests"), root.get("time")) == ("2", "3.000")
    assert [c.nodeid for c in merged.cases] == ["pkg/test_a.py::TestX::test_y"] * 2


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda t: [shard_out(t / "a", "1/2"), shard_out(t / "b", "1/2")],
            "are both shard 1/2: give each once",
        ),
        (
            lambda t: [shard_out(t / "a", "1/2"), shard_out(t / "b", "1/3")],
            "different shard counts cannot be merged",
        ),
        (lambda t: [t], "not a shard output of the powercut action (no shard.json)"),
    ],
)
def test_the_merge_refuses_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make, words: str
) -> None:
    paths = [str(p) for p in make(tmp_path)]
    assert gh.main(["merge", *paths, "-o", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("powercut: error: ") and words in err


def test_bad_shard_arguments_get_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gh.main(["shard", str(tmp_path), "--shard", "3/2", "--pytest-status", "0"]) == 2
    assert gh.main(["shard", str(tmp_path / "none"), "--shard", "1/2", "--pytest-status", "0"]) == 2
    assert (
        gh.main(
            ["shard", str(tmp_path), "--shard", "1/2", "--accel", "fast", "--pytest-status", "0"]
        )
        == 2
    )
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith("powercut: error: ") for line in lines)
    assert "no such directory" in lines[1] and "auto, kvm or tcg, not 'fast'" in lines[2]


def test_a_recordings_logs_and_images_are_left_out_of_the_artifact_for_every_node() -> None:
    """One disk's log.bin and data-final.img and every node's log-n<i>.bin, data-n<i>-final.img:
    large, and no repro needs them; the manifest, the job and a bundle's logs stay."""
    from powercut.campaign.ghsummary import _recording_files

    names = [
        "log.bin",
        "data-final.img",
        "log-n0.bin",
        "log-n12.bin",
        "data-n1-final.img",
        "manifest.toml",
        "job",
        "log0.bin",
        "console.log",
    ]
    assert _recording_files("/x/recording", names) == names[:5]
    assert _recording_files("/x/bundles", names) == []

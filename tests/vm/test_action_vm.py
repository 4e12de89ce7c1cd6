"""The GitHub Action's shard and merge steps (ci/action/shard.sh, merge.sh) on real crash tests: a
tiny project with a durable and a broken store, one crash test per shard (recorded in a VM, judged
on this host under the flush model), merged into one JUnit, report.html and job summary whose repro
command, run from the merge, still fails.  The VMs' acceleration is what the recordings' manifests
say; KVM asked for where they ran under TCG fails the shard.  (tests/unit/ci/test_action.py runs the
same steps with the VM part faked.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.root]

SCRIPTS = Path(__file__).resolve().parents[2] / "ci" / "action"

STORE = """
import os

import pytest

import powercut


def write_keys(mount, n=2, durable=True):
    for i in range(n):
        powercut.begin(i)
        with open(f"k{i}", "w") as f:
            f.write(f"v{i}")
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if durable:
            fd = os.open(".", os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        powercut.ack(i)


def check_keys(state):
    for i in state.acked:
        p = os.path.join(state.mount, f"k{i}")
        assert os.path.exists(p) and open(p).read() == f"v{i}", f"acknowledged key k{i} is lost"


@pytest.mark.powercut(fs="ext4", models=("flush",))
def test_durable_store(crashtest):
    crashtest(write_keys, check_keys)


@pytest.mark.powercut(fs="ext4", models=("flush",))
def test_buffered_store(crashtest):
    crashtest(write_keys, check_keys, params={"durable": False})
"""


def run(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHON": sys.executable, **env}
    full.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        ["bash", str(SCRIPTS / script)],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_shards_of_real_crash_tests_merge_into_one_summary(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the crash tests' host-mode check needs root")
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_store.py").write_text(STORE)
    runs = tmp_path / "runs"
    tests = "test_store.py -q --powercut-check-in host --powercut-max-states 20 --powercut-jobs 2"
    got = {}
    for i in (1, 2):
        res = run(
            "shard.sh",
            project,
            SHARD=f"{i}/2",
            ACCEL="auto",
            TESTS=tests,
            OUT=str(runs / "shards" / f"powercut-shard-{i}-of-2"),
        )
        got[i] = res.returncode
        print(res.stdout + res.stderr)
    # sorted ids: test_buffered_store in shard 1 (fails: it loses acknowledged keys), test_durable_store in 2
    assert got == {1: 3, 2: 0}
    s1 = runs / "shards" / "powercut-shard-1-of-2"
    doc = json.loads((s1 / "shard.json").read_text())
    accel = doc["accels"]["test_store.py_test_buffered_store"]
    assert accel in ("kvm", "tcg")
    if accel == "tcg":  # this machine has no working KVM: asking for it must fail the shard, loudly
        copy = tmp_path / "kvm-asked"
        shutil.copytree(s1, copy)
        again = subprocess.run(
            [
                sys.executable,
                "-m",
                "powercut.campaign.ghsummary",
                "shard",
                str(copy),
                "--shard",
                "1/2",
                "--accel",
                "kvm",
                "--pytest-status",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert again.returncode == 1
        assert "KVM was asked for, but 1 of 1 crash test(s) ran their VM under tcg" in again.stderr

    summary = tmp_path / "summary.md"
    res = run("merge.sh", tmp_path, OUT=str(runs), GITHUB_STEP_SUMMARY=str(summary))
    print(res.stdout + res.stderr)
    assert res.returncode == 3
    md = summary.read_text()
    assert (
        "fail: 2 crash tests in 2 of 2 shards; 1 failed (test_store.py::test_buffered_store)" in md
    )
    assert re.search(r"\| `test_store.py::test_durable_store` \| 2/2 \| passed \| pass \(", md)
    repro = re.search(
        r"^   powercut repro (tests/test_store.py_test_buffered_store/check/bundles/\S+)$", md, re.M
    )
    assert repro, md
    merged = runs / "merged"
    cases = {c.get("name"): c for c in ET.parse(merged / "junit.xml").getroot().iter("testcase")}
    assert (
        cases["test_buffered_store"].find("failure") is not None
        and cases["test_durable_store"].find("failure") is None
    )
    # the repro command, from the merge: the same state still fails
    again = subprocess.run(
        [sys.executable, "-m", "powercut.cli", "repro", repro.group(1)],
        cwd=merged,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 3, again.stdout + again.stderr
    assert "still fails" in again.stdout + again.stderr

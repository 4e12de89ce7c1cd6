"""From failing states to their cause, end to end: a buggy variant (filestorage fsync=1 on a
preallocated file: one missing flush between the data and the status byte) recorded in a VM,
checked with --shrink on the host and in a checker VM; the minimized state is blamed to
/Data.fs; its repro bundle, copied away from the recording, reproduces the verdict in a checker
VM; an altered bundle is one clear error."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fs1") / "rec"
    record(
        RecordSpec(
            fs=FsSpec(size_mb=64),
            workload=WorkloadSpec(
                name="filestorage", params={"n": 4, "fsync": 1, "prealloc": True}
            ),
        ),
        out,
    )
    return out


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900
    )


def test_shrink_blame_and_a_bundle_that_travels(rec: Path, tmp_path: Path) -> None:
    res = _cli(
        "check",
        str(rec),
        "--check-in",
        "host",
        "--model",
        "write-cache",
        "--bound",
        "6",
        "--samples",
        "8",
        "--shrink",
        "2",
        "--out",
        str(tmp_path / "check"),
    )
    print(res.stdout[-4000:])
    assert res.returncode == 3, res.stderr[-2000:]
    summary = json.loads((tmp_path / "check" / "summary.json").read_text())
    groups = summary["groups"]
    assert groups and sum(g["count"] for g in groups) == len(summary["failures"])
    g = groups[0]
    assert g["minimized"] and g["shrink_calls"] >= 1
    assert any("/Data.fs" in c for c in g["culprits"]), g["culprits"]
    assert "GROUP 1: corrupt-data" in res.stdout and "repro: powercut repro" in res.stdout
    # the bundle alone, in another directory, reproduces the verdict in a checker VM
    moved = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(g["bundle"], moved)
    again = _cli("repro", str(moved))
    print(again.stdout)
    assert again.returncode == 3, again.stderr[-2000:]
    assert "still fails: the same verdict as in the bundle" in again.stdout
    _shell(moved)
    _shell_piped(moved)
    with open(moved / "log0.bin", "r+b") as f:  # a bundle's node 0 log, whatever N
        f.seek(1000)
        f.write(b"\x5a\xa5")
    bad = _cli("repro", str(moved))
    assert (
        bad.returncode == 1 and bad.stderr.count("\n") == 1 and "log0.bin was altered" in bad.stderr
    )


def test_diagnosis_runs_in_the_checker_vm(rec: Path, tmp_path: Path) -> None:
    spec = CampaignSpec.of(
        models=("write-cache",),
        check_in="vm",
        jobs=1,
        bound=4,
        samples=2,
        shrink=1,
        shrink_budget=20,
    )
    summary, paths = run_campaign(rec, spec, tmp_path / "vmcheck")
    assert summary.failures and summary.groups
    g = summary.groups[0]
    assert g["minimized"] and any("/Data.fs" in c for c in g["culprits"]), g
    assert Path(g["bundle"], "bundle.json").exists()


def _shell(bundle: Path) -> None:
    """``powercut repro --shell``: a shell on the recovered, mounted state, on our stdin/stdout."""
    p = subprocess.Popen(
        [sys.executable, "-m", "powercut.cli", "repro", str(bundle), "--shell"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert p.stdin is not None and p.stdout is not None
    seen = b""
    deadline = time.monotonic() + 600
    while b"powers the VM off" not in seen and time.monotonic() < deadline:
        chunk = p.stdout.read1(4096)
        if not chunk:
            break
        seen += chunk
    assert b"recovered and mounted" in seen, seen[-2000:]
    time.sleep(2)  # let the shell start before typing
    p.stdin.write(b"ls -l Data.fs && echo listed-$((6*7))\nexit\n")
    p.stdin.flush()
    rest, _ = p.communicate(timeout=300)
    out = (seen + rest).decode(errors="replace")
    print(out[-1500:])
    assert "listed-42" in out and "Data.fs" in out
    assert p.returncode == 3  # the state still fails: the shell does not change the verdict


def _shell_piped(bundle: Path) -> None:
    """#25: ``repro --shell`` without a terminal: input piped at once keeps its first bytes (it is
    held until the guest's shell is ready) and its end of file ends the shell, so the VM powers off."""
    p = subprocess.run(
        [sys.executable, "-m", "powercut.cli", "repro", str(bundle), "--shell"],
        input=b"echo first-$((6*7))\n",
        capture_output=True,
        timeout=600,
    )
    out = p.stdout.decode(errors="replace")
    assert "first-42" in out, out[-2000:]
    assert p.returncode == 3

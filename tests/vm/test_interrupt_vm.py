"""Interrupted runs leave nothing behind: SIGTERM / SIGINT during record and check stop every VM,
undo host-mode mounts and loop devices, label the output ``interrupted``, exit 128+signum, and an
interrupted check resumes to the same verdicts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.linux.loopdev import loops_backed_under
from powercut.linux.mounts import mounts_under
from powercut.record.recording import load
from powercut.record.vm import RecordSpec, record
from tests.margins import EXIT_WAIT, VM_WAIT

pytestmark = pytest.mark.vm
CLI = [sys.executable, "-m", "powercut.cli"]


def inventory(path: Path) -> dict[str, list[str]]:
    """Everything of a run under ``path`` that could outlive it."""
    qemus = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and (b"qemu-system" in argv[0] or b"virtiofsd" in argv[0])
            and any(str(path).encode() in a for a in argv)
        ):
            qemus.append(pid)
    return {
        "qemu": qemus,
        "loops": [d for d, _ in loops_backed_under(path)],
        "mounts": [m.target for m in mounts_under(path)],
    }


def wait_for(pred, timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(poll)
    pytest.fail(f"timed out waiting for {what}")


def interrupt(proc: subprocess.Popen, sig: int) -> tuple[int, float, str]:
    t = time.monotonic()
    os.kill(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=EXIT_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"powercut did not exit within {EXIT_WAIT:.0f} s of the signal")
    return proc.returncode, time.monotonic() - t, err


def journal_lines(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("small") / "rec"
    record(
        RecordSpec(
            fs=FsSpec(size_mb=64), workload=WorkloadSpec(name="append-fsync", params={"n": 8})
        ),
        out,
    )
    return out


def test_sigterm_mid_record_stops_the_vm_and_labels_the_recording(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    proc = subprocess.Popen(
        CLI
        + [
            "record",
            "--workload",
            "append-fsync",
            "--param",
            "n=400",
            "--size",
            "64",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(
        lambda: (out / "job" / "started").exists() or proc.poll() is not None,
        VM_WAIT,
        "the workload to start",
    )
    assert proc.poll() is None, proc.communicate()
    before = inventory(out)
    assert before["qemu"], "no QEMU seen for the running recording"
    rc, took, err = interrupt(proc, signal.SIGTERM)
    after = inventory(out)
    print(f"record interrupt: before {before}, after {after}, cleanup {took:.2f} s")
    assert rc == 128 + signal.SIGTERM, err
    assert after == {"qemu": [], "loops": [], "mounts": []}
    assert "SIGTERM" in err and "Traceback" not in err
    assert load(out).status == "interrupted"


@pytest.mark.parametrize("mode,sig", [("vm", signal.SIGTERM), ("host", signal.SIGINT)])
def test_interrupted_check_cleans_up_and_resumes(
    small: Path, tmp_path: Path, mode: str, sig: int
) -> None:
    out = tmp_path / "check"
    argv = CLI + [
        "check",
        str(small),
        "--out",
        str(out),
        "--check-in",
        mode,
        "-j",
        "2",
        "--model",
        "no-cache",
        "--model",
        "write-cache",
        "--bound",
        "3",
        "--samples",
        "2",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the signal must land mid-check: a host-mode check of 4 commits judged its 132 states in 0.8 s
    # here and once finished between the 10th verdict and the signal; 8 commits are ~216 states
    # (~1.4 s), and the first few verdicts are the cue, watched closely
    need = 3
    wait_for(
        lambda: journal_lines(out / "journal.jsonl") >= need or proc.poll() is not None,
        VM_WAIT,
        f"{need} verdicts",
        poll=0.02,
    )
    assert proc.poll() is None, proc.communicate()
    before = inventory(out)
    rc, took, err = interrupt(proc, sig)
    after = inventory(out)
    print(f"{mode} check interrupt: before {before}, after {after}, cleanup {took:.2f} s")
    assert rc == 128 + sig, err
    assert after == {"qemu": [], "loops": [], "mounts": []}
    assert "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["total"] >= need
    assert summary["total"] < sum(c["judged"] for c in summary["states"].values())
    resumed = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    whole, _ = run_campaign(
        small,
        CampaignSpec.of(
            models=("no-cache", "write-cache"), check_in="host", shrink=0, bound=3, samples=2
        ),
        tmp_path / "whole",
    )
    got = {
        json.loads(x)["state"]: json.loads(x)["verdict"]
        for x in (out / "journal.jsonl").read_text().splitlines()
    }
    want = {
        json.loads(x)["state"]: json.loads(x)["verdict"]
        for x in (tmp_path / "whole" / "journal.jsonl").read_text().splitlines()
    }
    assert got == want
    assert json.loads((out / "summary.json").read_text())["status"] == "complete"

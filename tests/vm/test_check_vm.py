"""End to end: record in a VM, then judge every crash state in the checker VM and on the host."""

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
from powercut.record.vm import RecordSpec, record
from tests.margins import VM_WAIT
from tests.vm.vmcheckers import panic_or_hang

pytestmark = pytest.mark.vm
MODELS = ("flush", "no-cache", "write-cache")
SMALL = dict(bound=2, samples=2, shrink=0)  # keep the write-cache state count small enough for TCG


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("good") / "rec"
    record(
        RecordSpec(
            fs=FsSpec(size_mb=64), workload=WorkloadSpec(name="append-fsync", params={"n": 3})
        ),
        out,
    )
    return out


def verdicts(summary_dir: Path) -> dict[str, str]:
    return {
        v["state"]: v["verdict"]
        for v in map(json.loads, (summary_dir / "journal.jsonl").read_text().splitlines())
    }


def test_append_fsync_passes_every_state_vm_and_host_agree(good: Path, tmp_path: Path) -> None:
    vm, _ = run_campaign(
        good, CampaignSpec.of(models=MODELS, check_in="vm", **SMALL), tmp_path / "vm"
    )
    host, _ = run_campaign(
        good, CampaignSpec.of(models=MODELS, check_in="host", **SMALL), tmp_path / "host"
    )
    assert vm.ok and host.ok, (vm.failures[:3], host.failures[:3])
    assert set(vm.by_model) == set(MODELS)
    assert verdicts(tmp_path / "vm") == verdicts(tmp_path / "host")
    assert vm.total > 30


def test_ack_before_fsync_is_caught_under_every_model(ack_early: Path, tmp_path: Path) -> None:
    vm, _ = run_campaign(
        ack_early, CampaignSpec.of(models=MODELS, check_in="vm", **SMALL), tmp_path / "vm"
    )
    host, _ = run_campaign(
        ack_early, CampaignSpec.of(models=MODELS, check_in="host", **SMALL), tmp_path / "host"
    )
    for s in (vm, host):
        for model in MODELS:
            assert s.by_model[model].get("lost-ack", 0) > 0, (model, s.by_model)
    assert verdicts(tmp_path / "vm") == verdicts(tmp_path / "host")
    junit = (tmp_path / "vm" / "junit.xml").read_text()
    assert 'type="lost-ack"' in junit and "powercut repro" in junit
    for s in (vm, host):  # every failure was judged again alone, or stands on its group's sample
        assert s.failures and not s.flaky
        assert all(f.confirmation in ("confirmed", "confirmed-by-group") for f in s.failures)
        assert s.rejudged == s.confirmed and s.confirmed + s.by_group == len(s.failures)
        print(
            f"confirmation ({s.check_in}): {s.rejudged} failing states re-judged in {s.confirm_s:.1f} s "
            f"(campaign {s.seconds:.1f} s)"
        )


def test_a_flaky_checker_is_reported_as_flaky_not_as_a_finding(good: Path, tmp_path: Path) -> None:
    """A checker that fails the first time it sees each flush state and passes after: every such
    state is flaky (exit 1), none is a finding."""
    from powercut.cli import main

    marks = tmp_path / "seen"
    marks.mkdir()
    cmd = (
        "python3 -c 'import json, sys, os, hashlib\n"
        's = json.load(sys.stdin)["state"]\n'
        f'm = os.path.join("{marks}", hashlib.md5(s.encode()).hexdigest())\n'
        'if s.startswith("flush@") and not os.path.exists(m):\n'
        '    open(m, "w").close(); print("key 1 lost (fake)"); sys.exit(1)\n\''
    )
    rc = main(
        [
            "check",
            str(good),
            "--check-in",
            "host",
            "--model",
            "flush",
            "--model",
            "write-cache",
            "--bound",
            "2",
            "--samples",
            "2",
            "--checker",
            cmd,
            "--out",
            str(tmp_path / "out"),
        ]
    )
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    flush_states = summary["states"]["flush"]["judged"]
    assert rc == 1
    assert summary["flaky"] == flush_states > 0 and summary["failures"] == [] and not summary["ok"]
    first = summary["flaky_states"][0]
    assert (
        first["first"][0] == "fail" and "then alone pass" in first["reasons"][0]
    )  # exit 1: the generic fail


def test_panic_and_hang_in_the_checker_vm_are_findings(good: Path, tmp_path: Path) -> None:
    from powercut.core.log.dmlog import open_log
    from powercut.core.states.selection import select
    from powercut.record.recording import load

    with open_log(load(good).log_path) as index:
        ids = [s.id for s in select(index, ["flush"]).states]
    panic_id, hang_id = ids[2], ids[5]
    cmd = panic_or_hang(panic_id, hang_id)
    summary, _ = run_campaign(
        good,
        CampaignSpec.of(
            models=("flush",), check_in="vm", checker_command=cmd, shrink=0, state_timeout_s=30
        ),
        tmp_path / "out",
    )
    got = verdicts(tmp_path / "out")
    assert got[panic_id] == "kernel-panic"
    assert got[hang_id] == "timeout"
    panic = next(f for f in summary.failures if f.state == panic_id)
    assert panic.confirmed and any("Kernel panic - not syncing" in r for r in panic.reasons), (
        panic.reasons
    )
    assert set(got) == set(ids)  # the campaign went on after both
    assert all(v == "pass" for k, v in got.items() if k not in (panic_id, hang_id))


def test_kill_9_then_resume_equals_uninterrupted(good: Path, tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "powercut.cli",
        "check",
        str(good),
        "--check-in",
        "host",
        "-j",
        "1",
        "--model",
        "flush",
        "--model",
        "write-cache",
        "--bound",
        "3",
        "--samples",
        "4",
    ]
    full = subprocess.run(argv + ["--out", str(tmp_path / "full")], capture_output=True, text=True)
    assert full.returncode == 0, full.stderr
    journal = tmp_path / "cut" / "journal.jsonl"
    proc = subprocess.Popen(
        argv + ["--out", str(tmp_path / "cut")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + VM_WAIT
    while time.monotonic() < deadline and (
        not journal.exists() or len(journal.read_bytes().splitlines()) < 5
    ):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    judged_before = len(journal.read_bytes().splitlines())
    assert judged_before >= 5
    # the killed run may leave loop devices and a mounted workspace behind: resume must cope
    resumed = subprocess.run(
        argv + ["--out", str(tmp_path / "cut"), "--resume"], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    a = json.loads((tmp_path / "full" / "summary.json").read_text())
    b = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert a["by_model"] == b["by_model"] and a["total"] == b["total"]
    assert verdicts(tmp_path / "full") == verdicts(tmp_path / "cut")
    # nothing of the killed run is left mounted or attached
    assert str(tmp_path) not in Path("/proc/self/mounts").read_text()
    loops = subprocess.run(
        ["losetup", "--list", "--noheadings", "-O", "BACK-FILE"], capture_output=True, text=True
    )
    assert str(tmp_path) not in loops.stdout


def test_a_checker_vm_killed_from_outside_is_restarted_not_blamed(
    good: Path, tmp_path: Path
) -> None:
    """``pkill`` of a checker VM's QEMU mid-check (a CI runner's cleanup, a careless operator): the
    VM boots again on the states left and no state gets a kernel-panic verdict for it."""
    import threading

    out = tmp_path / "out"
    killed: list[int] = []

    def qemu_of_this_run() -> int | None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                argv
                and argv[0].endswith(b"qemu-system-x86_64")
                and any(a.startswith(f"powercut-check-{os.getpid()}-".encode()) for a in argv)
            ):
                return int(pid)
        return None

    def killer() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            text = "".join(p.read_text() for p in out.rglob("progress.jsonl"))
            done = text.count('{"verdict"')
            if done >= 2 and text.count('{"begin"') > done:  # mid-state
                pid = qemu_of_this_run()
                if pid:
                    subprocess.run(
                        ["kill", "-TERM", str(pid)], check=False
                    )  # another process's signal
                    killed.append(pid)
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    # a checker that takes 2 s a state: the kill lands while a state is being judged
    summary, _ = run_campaign(
        good,
        CampaignSpec.of(
            models=("flush",),
            check_in="vm",
            jobs=1,
            max_states=6,
            shrink=0,
            checker_command="sleep 2",
        ),
        out,
    )
    t.join(5)
    assert killed, "the checker VM was never killed (the test did not run its case)"
    got = verdicts(out)
    assert got and all(v == "pass" for v in got.values()), got
    assert summary.ok and not summary.flaky
    assert len(list(out.rglob("run2"))) >= 1  # booted again

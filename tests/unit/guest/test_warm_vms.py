"""A checker VM that serves several jobs in one boot (check -> diagnosis), with the real guest agent
loop run as a process on this machine standing in for the VM: the host hands the next job over,
reads each job's own result and progress, stops the VM with the STOP file, kills one that does not
stop, and a VM that dies mid-job is that job's failure."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from powercut.check.context import CheckContext, LogSource
from powercut.check.hosts import CheckHost
from powercut.check.vm import CheckerVm, VmCheckSpec, WarmVms
from powercut.checker import CheckerSpec
from powercut.core.judging.verdict import Verdict
from powercut.errors import GuestHang, PowercutError
from powercut.linux import filesystems
from powercut.vm import guestjob

# The stand-in agent: the real guest.__main__ loop, with job handlers that judge nothing but speak
# the progress protocol ("begin", then a verdict per state; the state "hang" never ends).
AGENT = r"""
import json, sys, time
from pathlib import Path
import powercut.guest.__main__ as agent

def check(job, jobdir):
    if "stuck-before" in job.states:   # hangs before its first state: only the job's limit ends it
        time.sleep(3600)
    with open(jobdir / "progress.jsonl", "a") as f:
        for sid in job.states:
            f.write(json.dumps({"begin": sid}) + "\n"); f.flush()
            if sid == "hang":
                time.sleep(3600)
            if sid == "die":
                sys.exit(3)
            v = {"state": sid, "model": "flush", "cut": 1, "verdict": "pass", "reasons": [], "acked": 0,
                 "begun": 0, "seconds": 0.0}
            f.write(json.dumps({"verdict": v}) + "\n"); f.flush()
    return {"judged": len(job.states)}

def diagnose(job, jobdir):
    with open(jobdir / "progress.jsonl", "a") as f:
        for v in job.failures:
            f.write(json.dumps({"diagnosis": {"state": v["state"], "minimized": v["state"]}}) + "\n")
    return {"diagnosed": len(job.failures)}

agent.handler = lambda kind: {"check": check, "diagnose": diagnose}[kind]
sys.exit(agent.main(sys.argv[1:]))
"""


class ProcessHost(CheckHost):
    """Boots the 'VM' as a local process running the agent on the job share; the watchdog kills it."""

    boots = 0

    def boot(self, make_vm, run: Path, scratch_bytes: int, watchdog) -> None:  # type: ignore[override]
        ProcessHost.boots += 1
        (run / "agent.py").write_text(AGENT)
        proc = subprocess.Popen(
            [sys.executable, str(run / "agent.py"), str(run / "job" / "job.json")], cwd=run
        )
        try:
            while proc.poll() is None:
                reason = watchdog()
                if reason:
                    proc.kill()
                    raise GuestHang(reason, str(run / "console.log"), "")
                time.sleep(0.02)
        finally:
            proc.kill()
            proc.wait()
        if proc.returncode not in (0, 1):
            raise GuestHang(
                f"the agent died (exit {proc.returncode})", str(run / "console.log"), ""
            )


@pytest.fixture
def vm(tmp_path: Path) -> CheckerVm:
    ctx = CheckContext(filesystems.get("ext4"), CheckerSpec(command="true"))
    src = LogSource(tmp_path / "log.bin", 1 << 20)
    spec = VmCheckSpec("/k", "/i", state_timeout_s=2.0)
    ProcessHost.boots = 0
    v = CheckerVm(ctx, src, spec, tmp_path / "vm0", ProcessHost(), serve=True)
    yield v
    v.close(force=True)


def check_job(vm: CheckerVm, *states: str) -> guestjob.CheckJob:
    return guestjob.CheckJob(vm.source(), states)


def test_one_boot_serves_a_check_then_a_diagnosis(vm: CheckerVm) -> None:
    got: list[Verdict] = []
    out = vm.run(check_job(vm, "flush@1", "flush@2"), steps=3, on_verdict=got.append)
    assert out.failure is None and [v.state for v in got] == ["flush@1", "flush@2"] and vm.live()
    diag = guestjob.DiagnoseJob(vm.source(), ({"state": "flush@2", "verdict": "lost-ack"},))
    out = vm.run(diag, steps=2)
    assert out.failure is None and out.diagnoses == [{"state": "flush@2", "minimized": "flush@2"}]
    got.clear()
    out = vm.run(check_job(vm, "flush@3"), steps=2, on_verdict=got.append)
    assert [v.state for v in got] == ["flush@3"]  # job 3's progress only, not job 1's again
    assert ProcessHost.boots == 1 and vm.boots == 1
    log = (vm.workdir / "run1" / "job" / "agent.log").read_text()
    assert "job 1: check (serving)" in log and "job 2: diagnose (serving)" in log and "job 3" in log
    vm.close()
    assert not vm.live()


def test_a_hang_is_the_jobs_failure_and_the_next_job_boots_again(vm: CheckerVm) -> None:
    out = vm.run(check_job(vm, "flush@1", "hang"), steps=3)
    assert isinstance(out.failure, GuestHang) and out.current == "hang" and not vm.live()
    out = vm.run(check_job(vm, "flush@4"), steps=2)
    assert out.failure is None and ProcessHost.boots == 2


def test_a_job_that_hangs_outside_any_state_is_ended_by_its_own_limit(vm: CheckerVm) -> None:
    t = time.monotonic()
    out = vm.run(check_job(vm, "stuck-before"), steps=-29)  # limit: 60 + 2 s x -29 = 2 s
    assert isinstance(out.failure, GuestHang) and "did not finish within" in str(out.failure)
    assert out.current is None and time.monotonic() - t < 30 and not vm.live()


def test_a_vm_that_ends_without_a_result_is_an_error_or_a_failure(vm: CheckerVm) -> None:
    out = vm.run(check_job(vm, "die"), steps=2)
    assert out.failure is not None and out.current == "die"


def test_a_failed_job_result_is_one_line(vm: CheckerVm, tmp_path: Path) -> None:
    bad = guestjob.ShellJob(vm.source(), "flush@1")  # the stand-in has no shell handler
    with pytest.raises(PowercutError, match="guest agent crashed"):
        vm.run(bad, steps=2)


def test_warm_pool_keeps_one_matching_vm_and_closes_the_rest(vm: CheckerVm, tmp_path: Path) -> None:
    vm.run(check_job(vm, "flush@1"), steps=2)
    other = CheckerVm(vm.ctx, vm.src, vm.spec, tmp_path / "vm1", ProcessHost(), serve=True)
    other.run(check_job(other, "flush@2"), steps=2)
    warm = WarmVms()
    warm.park(vm)
    warm.park(other)  # one is kept: the other is stopped at once
    assert vm.live() and not other.live()
    assert warm.take(vm.ctx, LogSource(tmp_path / "other.bin", 1 << 20), vm.spec) is None
    assert warm.take(vm.ctx, vm.src, vm.spec) is vm and warm.take(vm.ctx, vm.src, vm.spec) is None
    warm.park(vm)
    warm.close()
    assert not vm.live()
    third = CheckerVm(vm.ctx, vm.src, vm.spec, tmp_path / "vm2", ProcessHost(), serve=True)
    third.run(check_job(third, "flush@3"), steps=2)
    warm.park(third)  # a closed pool keeps nothing
    assert not third.live()


def test_wait_next_sees_a_later_job_or_stop(tmp_path: Path) -> None:
    job = guestjob.MarkBenchJob(dm_name="x", disks={})
    guestjob.write(tmp_path, job, seq=1, serve=True)
    assert guestjob.peek(tmp_path / "job.json") == (1, True)
    assert not guestjob.wait_next(tmp_path, 1, idle_s=0.2)  # nothing new: ends when idle
    guestjob.write(tmp_path, job, seq=2, serve=True)
    assert guestjob.wait_next(tmp_path, 1, idle_s=5)
    (tmp_path / guestjob.STOP).touch()
    assert not guestjob.wait_next(tmp_path, 2, idle_s=5)
    guestjob.write_result(tmp_path, guestjob.GuestResult(True), seq=2)
    assert guestjob.read_result(tmp_path, 2).ok and not guestjob.read_result(tmp_path, 3).ok
    assert guestjob.peek_result_seq(tmp_path) == 2

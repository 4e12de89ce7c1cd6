"""guestjob.py: jobs round-trip through JSON with their types, versions are checked, the one
result reader turns a missing or garbled result into a clear failure, the one guest PATH."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from powercut.checker import CheckerSpec
from powercut.config import FsSpec, WorkloadSpec
from powercut.errors import PowercutError
from powercut.guest.__main__ import JOBS, handler
from powercut.vm import guestjob


def test_record_job_round_trips(tmp_path: Path) -> None:
    job = guestjob.RecordJob(
        dm_name="x",
        disks={"data": "pcdata", "log": "pclog"},
        fs=FsSpec("xfs", ("-m", "reflink=1"), "noatime"),
        workload=WorkloadSpec(name="append-fsync", params={"n": 3}),
        tools_dir="/t",
    )
    guestjob.write(tmp_path, job)
    back = guestjob.load(tmp_path / "job.json")
    assert back == job and isinstance(back.fs, FsSpec) and back.fs.mkfs_opts == ("-m", "reflink=1")
    script = (tmp_path / "job.sh").read_text()
    assert "boot.py" in script and sys.executable in script and "/t:" in script
    assert "powercut.guest" in (tmp_path / "boot.py").read_text()


def test_checker_vm_jobs_round_trip() -> None:
    src = guestjob.StateSource(
        log="/run/powercut/rec/log.bin",
        size=1 << 20,
        fstype="ext4",
        mount_opts="",
        checker=CheckerSpec(command="true", timeout_s=5),
        disks={"scratch": "s"},
        params={"n": 2},
    )
    jobs = [
        guestjob.CheckJob(src, states=("flush@3", "flush@5")),
        guestjob.DiagnoseJob(
            src,
            failures=({"state": "flush@3", "verdict": "lost-ack"},),
            floors=(2,),
            budget=9,
            tear_only=True,
        ),
        guestjob.DiagnoseJob(
            src,
            failures=({"state": "flush~flush@3+flush@3", "verdict": "lost-ack"},),
            floors=(2, -1),
            logs=("/run/powercut/rec/log0.bin", "/run/powercut/rec/log1.bin"),
        ),
        guestjob.ShellJob(src, state="flush@3"),
        guestjob.ShellJob(
            src,
            logs=("/run/powercut/rec/log0.bin", "/run/powercut/rec/log1.bin"),
            state="flush~flush@3+flush@3",
        ),
        guestjob.CheckJob(
            src,
            states=("flush~flush@3+flush@3",),
            logs=("/run/powercut/rec/log0.bin", "/run/powercut/rec/log1.bin"),
        ),
    ]
    for job in jobs:
        back = guestjob.from_json(json.loads(json.dumps(guestjob.to_json(job))))
        assert back == job and type(back) is type(job)
        assert isinstance(back.src, guestjob.StateSource) and isinstance(
            back.src.checker, CheckerSpec
        )
    assert {guestjob.to_json(j)["kind"] for j in jobs} == {
        "check",
        "diagnose",
        "shell",
    }  # N disks: one kind


def test_every_job_kind_has_a_guest_handler() -> None:
    assert set(guestjob.KINDS) <= set(JOBS) | {"record"} and callable(handler("shell"))


def test_version_and_kind_are_checked() -> None:
    d = guestjob.to_json(guestjob.MarkBenchJob(dm_name="x", disks={}))
    with pytest.raises(PowercutError, match="job version"):
        guestjob.from_json(dict(d, version=1))
    with pytest.raises(PowercutError, match="unknown job kind"):
        guestjob.from_json(dict(d, kind="dance"))
    with pytest.raises(PowercutError, match="job.json: a mark-bench job: .*unknown keys bogus"):
        guestjob.from_json(dict(d, bogus=1))


def test_result_reader(tmp_path: Path) -> None:
    r = guestjob.read_result(tmp_path)
    assert not r.ok and "wrote no result" in r.error
    (tmp_path / "result.json").write_text("[1]")
    assert not guestjob.read_result(tmp_path).ok
    guestjob.write_result(
        tmp_path, guestjob.GuestResult(True, data={"workload_rc": 0, "mkfs_s": 0.4})
    )
    r = guestjob.read_result(tmp_path)
    assert r.ok and r.get("mkfs_s") == 0.4 and r.get("nope", 7) == 7


def test_guest_path_order() -> None:
    p = guestjob.guest_path("/img/tools").split(":")
    assert p[0] == "/img/tools" and p[1] == str(Path(sys.executable).parent) and "/usr/sbin" in p
    assert guestjob.guest_path().split(":")[0] == str(Path(sys.executable).parent)


def _record_job(**workload: object) -> guestjob.RecordJob:
    return guestjob.RecordJob(
        dm_name="x",
        disks={"data": "pcdata", "log": "pclog"},
        fs=FsSpec("ext4"),
        workload=WorkloadSpec(**workload),
    )  # type: ignore[arg-type]


def test_a_builtin_workload_starts_without_site_or_an_entry_point_scan(tmp_path: Path) -> None:
    import subprocess

    guestjob.write(tmp_path, _record_job(name="append-fsync", params={"n": 2}))
    boot = tmp_path / guestjob.WORKLOAD_BOOT
    assert (
        "FULL_SITE = False" in boot.read_text()
        and "powercut.workloads.append_fsync" in boot.read_text()
    )
    work = tmp_path / "mnt"
    work.mkdir()
    env = {"PATH": guestjob.guest_path(), "HOME": "/tmp", "POWERCUT_PARAMS": '{"n": 2}'}
    res = subprocess.run(
        [sys.executable, "-S", "-X", "importtime", str(boot), "append-fsync"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # the workload ran: its first mark needs a recording, so it stops there, after writing its file
    assert "marks work only inside a powercut recording" in res.stderr and any(work.iterdir()), (
        res.stderr[-2000:]
    )
    assert (
        "workloads/append_fsync.py" in res.stderr
    )  # (loaded by importlib: no import-time line of its own)
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in res.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "powercut.workload" in imported and not {"site", "importlib.metadata"} & imported
    # nor does its mark pull in what marking does not use (each module costs the recording ~20-50 ms
    # under TCG and strace): no logging, process runner, subprocess, shutil or pathlib, no fault plan
    assert "powercut._logmark" in imported
    assert (
        not {
            "logging",
            "powercut.linux.process",
            "subprocess",
            "shutil",
            "pathlib",
            "powercut.faults",
        }
        & imported
    )


def test_a_command_or_an_unknown_workload_starts_as_before(tmp_path: Path) -> None:
    guestjob.write(tmp_path, _record_job(name="append-fsync", params={"n": 2}))
    guestjob.write(
        tmp_path, _record_job(name="", cmd="./run.sh")
    )  # the same job dir, a later recording
    assert not (tmp_path / guestjob.WORKLOAD_BOOT).exists()
    guestjob.write(tmp_path, _record_job(name="not-registered-anywhere"))
    assert not (tmp_path / guestjob.WORKLOAD_BOOT).exists()

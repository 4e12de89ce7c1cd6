"""guest/record.workload_argv: how the recording's workload starts -- a command through the shell,
powercut's own workloads by their workload.py without site, any other by name; a Python workload
never with the filesystem under test on sys.path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from powercut.config import WorkloadSpec
from powercut.guest.record import workload_argv


def test_each_kind_of_workload_starts_its_own_way(tmp_path: Path) -> None:
    boot = tmp_path / "workload.py"
    assert workload_argv(WorkloadSpec(name="", cmd="./run.sh --fast"), boot) == [
        "/bin/sh",
        "-c",
        "./run.sh --fast",
    ]
    assert workload_argv(WorkloadSpec(name="theirs"), boot) == [
        sys.executable,
        "-P",
        "-m",
        "powercut.workload",
        "theirs",
    ]
    boot.write_text("")
    assert workload_argv(WorkloadSpec(name="wal"), boot) == [sys.executable, "-S", str(boot), "wal"]


def test_neither_python_start_puts_the_working_directory_on_sys_path(tmp_path: Path) -> None:
    boot = tmp_path / "job" / "workload.py"
    boot.parent.mkdir()
    boot.write_text("import sys; print(sys.path)\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for argv in (
        workload_argv(WorkloadSpec(name="x"), boot)[:3],
        [sys.executable, "-P", "-c", "import sys; print(sys.path)"],
    ):
        out = subprocess.run(
            argv, cwd=mnt, capture_output=True, text=True, timeout=60, check=True
        ).stdout
        assert str(mnt) not in out and "''" not in out, (argv, out)

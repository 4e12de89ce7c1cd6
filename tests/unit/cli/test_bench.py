"""``powercut bench`` on the command line: --list, every user mistake one line (never a
traceback), host mode end to end in a temporary directory (the cache left as it is), and the
results file it writes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", "bench", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_list_names_the_suites_and_profiles() -> None:
    out = run("--list")
    assert out.returncode == 0
    for word in (
        "guarantees",
        "tlpi",
        "zodb-fsync",
        "commit",
        "flush-cost",
        "pg",
        "overhead",
        "group-commit-8-2k",
    ):
        assert word in out.stdout


@pytest.mark.parametrize(
    "args,match",
    [
        (["--qemu-cache", "unsafe"], "drops the guest's flushes"),
        (["--toggle-write-cache"], "go with --on-host"),
        (["--suite", "nope"], "unknown bench suite 'nope'"),
        (["--profile", "fsync-3k"], "unknown fio profile"),
        (["--workload", "nope"], "unknown workload"),
        (["--workload", "filestorage", "--param", "fsync"], "key=value"),
        (["--on-host", "/nonexistent/dir"], "No such file"),
        (["--on-host", "/tmp", "--dry-run"], "runs no VM"),
        (["--fs", "ntfs"], "unknown filesystem"),
    ],
)
def test_mistakes_are_one_line(args: list[str], match: str, tmp_path: Path) -> None:
    out = run(*args, "-o", str(tmp_path))
    assert out.returncode in (1, 2), out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("powercut: error:") and match in lines[0], (
        out.stderr
    )
    assert "Traceback" not in out.stderr


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (Debian package fio)")
def test_host_mode_in_a_directory(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    out = run(
        "--on-host",
        str(target),
        "--profile",
        "buffered-4k",
        "--profile",
        "fsync-4k",
        "--workload",
        "append-fsync",
        "--param",
        "n=4",
        "--quick",
        "--no-plot",
        "-o",
        str(tmp_path / "out"),
    )
    assert out.returncode == 0, out.stderr
    assert "fsync-4k" in out.stdout and "append-fsync n=4" in out.stdout and "as is" in out.stdout
    assert "write cache left as it was" in out.stdout
    (results,) = (tmp_path / "out").glob("*/results.json")
    doc = json.loads(results.read_text())
    assert doc["meta"]["mode"] == "host" and doc["meta"]["accel"] == "host"
    assert [e["name"] for e in doc["entries"]] == ["buffered-4k", "fsync-4k", "append-fsync n=4"]
    assert all(e["write_cache"] is None and e["ops_per_s"] > 0 for e in doc["entries"])
    assert list(target.iterdir()) == []

"""Host mode (root, loop devices, mount; no VM): two runs on one host stay apart.

The recording is made without a VM (tests/unit/synthrec): a real ext4 in a dm-log-writes log and
commits, each appending a line to a file in its own flush window.  Its flush states all pass; its
write-cache states may fail (the file's blocks land in any subset), the same way in every run.

Two ``powercut check --check-in host -j 2`` run at once on it while this process does what the
workspace tests and other programs on the host do: an XFS workspace held write-through, and plain
``losetup -f`` attachments, which must always find their device as a fresh one is (write-back)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from powercut.linux.loopcache import has_write_cache
from powercut.replay.snapshot import XfsWorkspaceProvider
from tests.unit.linux.test_runlock import holder_process
from tests.unit.synthrec import CHECKER, ext4_recording

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0
    or not os.path.exists("/dev/loop-control")
    or not shutil.which("mkfs.ext4")
    or not shutil.which("losetup"),
    reason="needs root, /dev/loop-control, mkfs.ext4 and losetup",
)


def _check(rec: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "check",
            str(rec),
            "--check-in",
            "host",
            "-j",
            "2",
            "--model",
            "flush,write-cache",
            "--bound",
            "3",
            "--checker",
            CHECKER,
            "--shrink",
            "0",
            "-o",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _journal(out: Path) -> dict[str, str]:
    return {
        o["state"]: o["verdict"]
        for o in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
    }


def test_two_host_checks_and_the_workspace_tests_at_once_stay_apart(tmp_path: Path) -> None:
    rec = ext4_recording(tmp_path, commits=16)
    plain = tmp_path / "plain.img"
    plain.write_bytes(bytes(1 << 20))
    (tmp_path / "ws").mkdir()
    checks = [_check(rec, tmp_path / "a"), _check(rec, tmp_path / "b")]
    counts = {"attached": 0, "held": 0}
    wrong: list[str] = []
    deadline = time.monotonic() + 1800  # a hang fails here, not at CI's limit

    def running() -> bool:
        return any(c.poll() is None for c in checks) and time.monotonic() < deadline

    def other_program() -> None:
        """Another program's loop devices: each as the kernel gives a fresh one (write-back),
        whatever powercut did with the device before."""
        while running():
            dev = subprocess.run(
                ["losetup", "-f", "--show", str(plain)], capture_output=True, text=True, timeout=120
            ).stdout.strip()
            if dev:
                try:
                    counts["attached"] += 1
                    if not has_write_cache(dev):
                        wrong.append(f"{dev} attached by losetup came write-through")
                finally:
                    subprocess.run(["losetup", "-d", dev], timeout=120)

    other = threading.Thread(target=other_program)
    other.start()
    try:
        while (
            running()
        ):  # what the workspace tests do: the XFS workspace's loop is write-through while held
            p = XfsWorkspaceProvider(tmp_path / "ws", "test", image_bytes=512 << 20)
            try:
                counts["held"] += 1
                if has_write_cache(p.loop.path):  # type: ignore[union-attr]
                    wrong.append(f"the workspace's {p.loop.path} lost its write-through while held")  # type: ignore[union-attr]
            finally:
                p.close()
    finally:
        other.join()
    outs = [c.communicate(timeout=60) for c in checks]
    for c, (stdout, stderr) in zip(checks, outs):
        assert c.returncode in (0, 3) and "Traceback" not in stderr, (
            stdout[-2000:],
            stderr[-2000:],
        )
    assert not wrong, wrong[:5]
    a, b = _journal(tmp_path / "a"), _journal(tmp_path / "b")
    flush = {k: v for k, v in a.items() if k.startswith("flush")}
    assert a == b and len(a) >= 20 and set(flush.values()) == {"pass"}, (len(a), set(a.values()))
    assert counts["attached"] >= 3  # the checks ran long enough to overlap with the other programs
    print(
        f"2 checks of {len(a)} states each beside {counts['attached']} plain attachments and "
        f"{counts['held']} workspaces"
    )


def test_a_second_check_into_the_same_output_is_refused_in_one_line(tmp_path: Path) -> None:
    rec = ext4_recording(tmp_path, commits=1)
    holder = holder_process(tmp_path / "out")
    try:
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "powercut.cli",
                "check",
                str(rec),
                "--check-in",
                "host",
                "-o",
                str(tmp_path / "out"),
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 1, res.stderr  # a usage error, as every bad input of check
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pid {holder.pid}" in lines[0] and "Traceback" not in res.stderr, (
        res.stderr
    )
    assert not (tmp_path / "out").exists()  # nothing of the other run's was touched or made

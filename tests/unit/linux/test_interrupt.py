"""interrupt.py: a first signal becomes Interrupted (cleanup runs, children are killed, exit
128+signum); a second one during a slow cleanup kills every child group and exits at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = r"""
import sys, time
from powercut.linux import interrupt, process
from powercut.errors import Interrupted
try:
    with interrupt.handled():
        child = process.Spawned(["sleep", "300"])
        print(child.pid, flush=True)
        try:
            time.sleep(300)
        finally:
            print("cleanup", flush=True)
            time.sleep(float(sys.argv[1]))   # a slow (or stuck) cleanup
except KeyboardInterrupt as e:
    print("exit", interrupt.exit_status(e), type(e).__name__, flush=True)
    sys.exit(interrupt.exit_status(e))
"""


def _start(cleanup_s: float) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(cleanup_s)], stdout=subprocess.PIPE, text=True
    )
    child = int(proc.stdout.readline())
    return proc, child


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_first_signal_unwinds_and_kills_children(sig: int) -> None:
    proc, child = _start(0.1)
    time.sleep(0.3)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 128 + sig
    assert "cleanup" in out and f"exit {128 + sig} Interrupted" in out
    assert _gone(child), "the child process group outlived the interrupt"


def test_second_signal_kills_hard_and_never_hangs() -> None:
    proc, child = _start(120)  # the cleanup would take two minutes
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "cleanup"
    t = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    assert time.monotonic() - t < 10
    assert proc.returncode == 128 + signal.SIGINT
    assert _gone(child)

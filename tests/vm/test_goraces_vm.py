"""A Go program's race caught (issue 60): gotwofile, twofile's store as a static Go program whose
syncs are raw system calls (no libc), explored as twofile is (tests/vm/test_delaysync_vm.py): with
``reply_on=index`` the schedule that holds store.log's syncs loses acks and the cause says the
fdatasync was still held; with ``reply_on=both`` every schedule passes.  Needs the program built on
the host (``python -m powercut.workloads.gotwofile --build``; ci/setup.sh does where Go is)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.record import recording
from powercut.workloads import gotwofile

pytestmark = [pytest.mark.vm,
              pytest.mark.skipif(not os.access(gotwofile.binary(), os.X_OK),
                                 reason=f"no gotwofile program at {gotwofile.binary()}: "
                                        "python -m powercut.workloads.gotwofile --build (ci/setup.sh does, with Go)")]


@pytest.mark.parametrize("reply_on, rc", [("index", 3), ("both", 0)])
def test_the_exploration_holds_the_go_programs_syncs_and_finds_the_race(tmp_path: Path, reply_on: str,
                                                                        rc: int) -> None:
    """The Go program replies when its index's fsync returns (reply_on=index): the schedule that
    holds store.log's fdatasync loses acks; the fixed program passes every schedule."""
    out = tmp_path / "ex"
    p = subprocess.run([sys.executable, "-m", "powercut.cli", "run", "--workload", "gotwofile", "--param", "n=6",
                        "--param", f"reply_on={reply_on}", "--explore-races", "--explore-delay", "200ms", "--budget", "2",
                        "--check-in", "host", "--model", "flush", "--model", "write-cache", "--max-states", "150",
                        "-o", str(out)],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == rc, p.stdout + p.stderr
    doc = json.loads((out / "explore.json").read_text())
    # the directory's fsync is the set-up's alone (before begin:0): no candidate
    assert sorted(doc["explored"]) == ["store.idx", "store.log"] and doc["left_out"] == []
    by = {tuple(s["delay_sync"]): s for s in doc["schedules"]}
    held = by[("store.log=200ms",)]
    if reply_on == "index":
        assert held["verdict"] == "lost-ack" and held["first"]
        # the cause places the held fdatasync where the Go program called it: before the ack
        assert held["cause"].startswith("ack-before-sync-returned: ") and "still held" in held["cause"], held["cause"]
        manifest = recording.load(held["dir"]).manifest
        assert manifest["workload"]["delay_sync"] == ["store.log=200ms"]
        assert manifest["result"]["delay_sync"]["files"]["store.log"]["held"] >= 6   # every commit's fdatasync
    else:
        assert all(s["verdict"] == "pass" for s in doc["schedules"])
    assert "explored 2 of 2 files" in doc["coverage"] and "not explored" not in p.stdout

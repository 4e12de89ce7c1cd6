"""``--delay-sync GLOB=TIME`` in a recording VM (core/recording/syncdelay.py, vm-images/powercut_holdsync.c):
only the matching file's syncs are held -- each for at least TIME, seen from inside the program, in
a child thread too, the others not -- with the syscall trace on; the manifest says what was held;
rules that hold nothing fail the recording in one line naming the files the program did sync."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.errors import WorkloadFailed
from powercut.record import recording
from powercut.record.vm import RecordSpec, record
from powercut.workloads import gotwofile

pytestmark = pytest.mark.vm

PROBE = r"""
import json, mmap, os, threading, time
def timed(f):
    t = time.monotonic(); f(); return (time.monotonic() - t) * 1000
out = {}
for name in ("db.wal", "db.idx"):
    fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"x" * 4096)
    out[name] = {"fsync": timed(lambda: os.fsync(fd)), "fdatasync": timed(lambda: os.fdatasync(fd))}
    m = mmap.mmap(fd, 4096)
    m[0:1] = b"y"
    out[name]["msync"] = timed(m.flush)
    box = []
    th = threading.Thread(target=lambda: box.append(timed(lambda: os.fsync(fd))))
    th.start(); th.join()
    out[name]["thread"] = box[0]
print(json.dumps(out))
"""


def test_only_the_matching_files_syncs_are_held_with_the_trace_on(tmp_path: Path) -> None:
    cmd = f"python3 -c {shlex.quote(PROBE)}"
    rec = record(
        RecordSpec(
            fs=FsSpec(size_mb=64), workload=WorkloadSpec(cmd=cmd, delay_sync=("*.wal=150ms",))
        ),
        tmp_path / "rec",
    )
    got = json.loads((tmp_path / "rec" / "job" / "workload.out").read_text())
    assert all(ms >= 150 for ms in got["db.wal"].values()), (
        got
    )  # a lower bound: held before it runs
    assert all(ms < 150 for ms in got["db.idx"].values()), got
    ds = rec.manifest["result"]["delay_sync"]
    assert (
        ds["rules"] == ["*.wal=150ms"]
        and ds["held"] == 4
        and ds["files"]["db.wal"] == {"calls": 4, "held": 4}
    )
    assert ds["files"]["db.idx"] == {"calls": 4, "held": 0} and not any(
        f.startswith("/dev/") for f in ds["files"]
    )
    assert rec.manifest["workload"]["delay_sync"] == ["*.wal=150ms"]
    assert rec.manifest["trace"].get("file")  # traced as well


def test_rules_that_hold_nothing_fail_the_recording_naming_what_was_synced(tmp_path: Path) -> None:
    with pytest.raises(WorkloadFailed, match=r"held no sync call: the program synced append\.log"):
        record(
            RecordSpec(
                fs=FsSpec(size_mb=64),
                workload=WorkloadSpec(
                    name="append-fsync", params={"n": 2}, delay_sync=("*.wal=10ms",)
                ),
            ),
            tmp_path / "rec",
        )
    assert recording.load(tmp_path / "rec").manifest["recording"]["status"] == "delay-sync-unused"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "record",
            "--workload",
            "append-fsync",
            "--param",
            "n=2",
            "--size",
            "64",
            "--delay-sync",
            "*.wal=10ms",
            "--force",
            "-o",
            str(tmp_path / "rec"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 1 and "append.log" in p.stderr.splitlines()[0]


GO_BUILT = pytest.mark.skipif(
    not os.access(gotwofile.binary(), os.X_OK),
    reason=f"no gotwofile program at {gotwofile.binary()}: python -m "
    "powercut.workloads.gotwofile --build (ci/setup.sh does, with Go)",
)


@pytest.mark.parametrize(
    "workload, reply_on, rc",
    [
        pytest.param("gotwofile", "index", 3, marks=GO_BUILT),
        pytest.param("gotwofile", "both", 0, marks=[GO_BUILT, pytest.mark.nightly]),
        pytest.param("twofile", "index", 3, marks=pytest.mark.nightly),
    ],
)
def test_the_exploration_holds_each_synced_file_and_finds_the_race(
    tmp_path: Path, workload: str, reply_on: str, rc: int
) -> None:
    """A store that replies when its index's sync returns (reply_on=index): the schedule that holds
    store.log's syncs loses acks, whatever the base schedule shows; the fixed store passes every
    schedule.  gotwofile is twofile's store as a static Go program (raw system calls, no libc: issue
    60); one mechanism holds every program's syncs, so the Python twofile runs nightly only (the
    Python PROBE above and pggroup's PostgreSQL are held in every run)."""
    out = tmp_path / "ex"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "run",
            "--workload",
            workload,
            "--param",
            "n=6",
            "--param",
            f"reply_on={reply_on}",
            "--explore-races",
            "--explore-delay",
            "200ms",
            "--budget",
            "2",
            "--check-in",
            "host",
            "--model",
            "flush",
            "--model",
            "write-cache",
            "--max-states",
            "150",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert p.returncode == rc, p.stdout + p.stderr
    doc = json.loads((out / "explore.json").read_text())
    # the directory's fsync is the set-up's alone (before begin:0): no candidate
    assert sorted(doc["explored"]) == ["store.idx", "store.log"] and doc["left_out"] == []
    by = {tuple(s["delay_sync"]): s for s in doc["schedules"]}
    held = by[("store.log=200ms",)]
    if reply_on == "index":
        assert held["verdict"] == "lost-ack" and held["first"]
        # the cause places the held fdatasync where the program called it: before the ack
        assert (
            held["cause"].startswith("ack-before-sync-returned: ") and "still held" in held["cause"]
        ), held["cause"]
        manifest = recording.load(held["dir"]).manifest
        assert manifest["workload"]["delay_sync"] == ["store.log=200ms"]
        assert (
            manifest["result"]["delay_sync"]["files"]["store.log"]["held"] >= 6
        )  # every commit's fdatasync
    else:
        assert all(s["verdict"] == "pass" for s in doc["schedules"])
    assert "explored 2 of 2 files" in doc["coverage"] and "not explored" not in p.stdout


def test_one_cluster_nodes_file_is_held_alone(tmp_path: Path) -> None:
    """On a cluster recording the rule names a node's file by its path under the mounts (n1/...):
    only node 1's log syncs are held, through the same supervisor and job."""
    rec = record(
        RecordSpec(
            fs=FsSpec(size_mb=32),
            workload=WorkloadSpec(
                name="replog", params={"n": 4}, delay_sync=("n1/replog.log=50ms",)
            ),
        ),
        tmp_path / "rec",
        nodes=3,
    )
    ds = rec.manifest["result"]["delay_sync"]
    assert ds["held"] == ds["files"]["n1/replog.log"]["held"] == 4
    assert (
        all(f["held"] == 0 for p, f in ds["files"].items() if p != "n1/replog.log")
        and "n0/replog.log" in ds["files"]
    )

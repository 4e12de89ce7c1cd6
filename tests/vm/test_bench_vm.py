"""``powercut bench --quick`` end to end in a TCG VM (AHCI disk, QEMU cache=none): every guarantee
profile with the write cache on and off, the setting read back (hdparm -W and queue/write_cache)
before each run, a workload timed through its acks (zodb-fsync), and the same fio jobs through
dm-log-writes (overhead); results JSON, tables and plots written.  Figures are not judged (an
emulated disk under TCG), only that they exist and say where they come from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.bench.profiles import profiles

pytestmark = pytest.mark.vm


def test_bench_quick_in_a_tcg_vm(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "bench",
            "--quick",
            "--accel",
            "tcg",
            "--suite",
            "guarantees",
            "--suite",
            "zodb-fsync",
            "--suite",
            "overhead",
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (run,) = tmp_path.iterdir()
    doc = json.loads((run / "results.json").read_text())
    meta = doc["meta"]
    assert (
        meta["mode"],
        meta["accel"],
        meta["qemu_cache"],
        meta["bus"],
        meta["fs"],
        meta["quick"],
    ) == ("vm", "tcg", "none", "ahci", "ext4", True)
    assert str(run) in meta["backing"] and " on " in meta["backing"] and meta["guest_kernel"]

    quick = [p.name for p in profiles(quick=True)]
    entries = doc["entries"]
    assert not [e for e in entries if e["error"]], [e["error"] for e in entries if e["error"]]
    for wc in (True, False):
        got = [e for e in entries if e["suite"] == "guarantees" and e["write_cache"] is wc]
        assert [e["name"] for e in got] == quick
        for e in got:
            assert e["ops_per_s"] > 0 and e["mb_per_s"] > 0 and e["commits_per_s"] > 0
            assert 0 < e["p50_us"] <= e["p99_us"] <= e["p999_us"]
    zodb = [e for e in entries if e["suite"] == "zodb-fsync"]
    assert len(zodb) == 6 and all(e["commits_per_s"] > 0 and e["p99_us"] > 0 for e in zodb)
    logged = [e for e in entries if e["target"] == "log-writes"]
    assert [e["name"] for e in logged] == ["fsync-4k", "odirect-4k"] and all(
        e["write_cache"] for e in logged
    )

    # the write cache was read back before every single run, and it was what was asked
    per_item = [c for c in doc["checks"] if "item" in c]
    assert len(per_item) == len(entries)
    assert {c["wanted"] for c in per_item} == {True, False}
    assert all(c["hdparm"] is c["wanted"] and c["sysfs"] is c["wanted"] for c in per_item)

    assert (
        "write cache read back before each of" in out.stdout and "as asked every time" in out.stdout
    )
    assert (
        "QEMU cache=none" in out.stdout
        and "accel tcg" in out.stdout
        and "compare ratios only" in out.stdout
    )
    assert "zodb-fsync" in out.stdout and "overhead" in out.stdout
    assert (run / "latency.png").stat().st_size > 10_000 and (run / "latency.svg").exists()
    assert len(list((run / "job" / "raw").glob("*.json"))) >= 2 * len(quick)
    assert not list(run.glob("bench-*.img"))  # the disk images are gone

"""The disk latency layer (core/recording/latency.py, guest/record.py) times what it promises: in the guest,
under each preset, an fsync of an overwritten block takes at least the layer's write + flush wait
and an O_DIRECT write at least its write wait -- lower bounds only, which dm-delay guarantees (a bio
waits more than jiffies(ms) - 1 ticks); never an upper bound.  A figure below one tick is not
delayed (core/recording/latency.py), and the manifest says so.  The figures are
printed (-s) and the manifest records what the layer gave."""

from __future__ import annotations

import json
import shlex

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.core.recording.latency import PRESETS, DiskLatency
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm

PROBE = r"""
import json, mmap, os, time
fd = os.open("probe", os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b"x" * 4096)
os.fsync(fd)
def least(f, n=5):
    out = []
    for _ in range(n):
        out.append(f())
    return min(out)
def fsync():
    os.pwrite(fd, os.urandom(4096), 0)
    t = time.monotonic(); os.fsync(fd); return (time.monotonic() - t) * 1000
dfd = os.open("probe", os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
def direct():
    t = time.monotonic(); os.pwrite(dfd, buf, 0); return (time.monotonic() - t) * 1000
print(json.dumps({"fsync_ms": least(fsync), "write_ms": least(direct)}))
"""


@pytest.mark.parametrize("preset", list(PRESETS))
def test_fsync_and_a_write_take_at_least_the_presets_latency(tmp_path, preset):
    lat = DiskLatency.parse(preset)
    rec = record(
        RecordSpec(
            fs=FsSpec(fstype="ext4", size_mb=256),
            latency=lat,
            workload=WorkloadSpec(cmd=f"python3 -c {shlex.quote(PROBE)}", trace=False),
            accel="auto",
            timeout_s=600,
        ),
        tmp_path / preset,
    )
    got = json.loads((rec.dir / "job" / "workload.out").read_text().strip().splitlines()[-1])
    m = rec.manifest["latency"]
    print(
        f"{preset}: fsync {got['fsync_ms']:.2f} ms, O_DIRECT write {got['write_ms']:.2f} ms "
        f"(HZ={m['hz']}, dm-delay write {m['dm_write_ms']} ms, flush {m['dm_flush_ms']} ms)"
    )
    assert m["setting"] == preset and m["layer"] == "dm-delay above dm-log-writes"
    for cls, stated in (("write", lat.write_ms), ("flush", lat.flush_ms)):
        # a figure of a tick or more is guaranteed by the layer; one below a tick is not delayed
        assert m[f"{cls}_below_tick"] or m[f"{cls}_min_ms"] >= stated, (cls, m)
        assert not m[f"{cls}_below_tick"] or m[f"dm_{cls}_ms"] == 0, (cls, m)
    assert got["write_ms"] >= m["write_min_ms"]
    assert got["fsync_ms"] >= m["write_min_ms"] + m["flush_min_ms"]

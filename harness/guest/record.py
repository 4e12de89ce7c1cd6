"""The guest's record and mark-bench jobs: create log-writes over the data and log disks, mkfs through
it, run the workload, tear the target down; time marks."""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from powercut.linux import dm, filesystems, process
from powercut.linux.blockdev import find_disk, sectors
from powercut.linux.mounts import mount, umount
from powercut.marks import mark
from powercut.vm import guestjob
from powercut.vm.guestjob import MarkBenchJob, RecordJob

log = logging.getLogger("powercut.guest")

MNT = "/run/powercut/mnt"


def log_writes_status(name: str) -> dict[str, Any]:
    # "<start> <len> log-writes <logged_entries> <highest_sector> [logging_disabled]" per target
    out = dm.status(name)[0].split()
    return {"logged_entries": int(out[3]), "highest_sector": int(out[4]),
            "logging_disabled": "logging_disabled" in out[5:]}


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def run_workload(job: RecordJob, dev: str, jobdir: Path) -> dict[str, Any]:
    wl = job.workload
    argv = ["/bin/sh", "-c", wl.cmd] if wl.cmd else [sys.executable, "-m", "powercut.workload", wl.name]
    env = {"PATH": guestjob.guest_path(job.tools_dir), "HOME": "/tmp", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "POWERCUT_DM_NAME": job.dm_name, "POWERCUT_DEVICE": dev,
           "POWERCUT_MOUNT": MNT, "POWERCUT_FSTYPE": job.fs.fstype, "POWERCUT_PARAMS": json.dumps(wl.params or {})}
    start = time.monotonic()
    with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
        with process.Spawned(argv, cwd=MNT, env=env, stdout=out, stderr=err) as proc:
            rc = proc.wait(wl.timeout_s)
            # leaving the block kills the whole group: its leftovers must not keep the filesystem busy
    return {"workload_rc": rc, "workload_timed_out": rc is None, "workload_s": round(time.monotonic() - start, 3)}


def record(job: RecordJob, jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime()}
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    fs = filesystems.get(job.fs.fstype)
    t0 = time.monotonic()
    dev = dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    process.run(fs.mkfs_argv(dev, job.fs.mkfs_opts), timeout=600)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    mark("mkfs", job.dm_name)
    os.makedirs(MNT, exist_ok=True)
    mount(dev, MNT, fs.name, job.fs.mount_opts)
    res["uptime_workload_start"] = uptime()
    (jobdir / "started").write_text(f"{time.time()}\n")
    res.update(run_workload(job, dev, jobdir))
    umount(MNT, lazy_fallback=False)
    res.update(log_writes_status(job.dm_name))
    dm.remove(job.dm_name)
    return res


def mark_bench(job: MarkBenchJob, jobdir: Path) -> dict[str, Any]:
    """Cost per mark: the ioctl from Python vs running powercut-mark, on a real log-writes target."""
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    n = job.n
    t = time.perf_counter()
    for i in range(n):
        mark(f"ioctl:{i}", job.dm_name)
    ioctl_s = (time.perf_counter() - t) / n
    env = dict(os.environ, POWERCUT_DM_NAME=job.dm_name)
    m = max(10, n // 10)
    costs = {}
    tools = {"python": os.path.join(os.path.dirname(sys.executable), "powercut-mark")}
    if job.tools_dir:
        tools["c"] = os.path.join(job.tools_dir, "powercut-mark")
    for kind, tool in tools.items():
        t = time.perf_counter()
        for i in range(m):
            process.run([tool, f"{kind}:{i}"], env=env, timeout=60)
        costs[f"cmd_{kind}_us"] = round((time.perf_counter() - t) / m * 1e6, 1)
    status = log_writes_status(job.dm_name)
    dm.remove(job.dm_name)
    return {"ioctl_marks": n, "ioctl_us": round(ioctl_s * 1e6, 1), "cmd_marks": m, **costs, **status}

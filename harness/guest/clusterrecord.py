"""The guest's cluster record job (a RecordJob with ``nodes`` > 1): N data disks, each with its own
dm-log-writes target and log disk, in one VM (one clock, one lock for the marks).

Per node the stack is the single-disk one: filesystem -> ``<name>-fs`` linear map (the node's fault
layer, switched by its ``--fault NODE=PLAN`` or ``powercut.fault(kind, node=i)``: guest/clusterfaults.py)
-> the node's delay layer (``<name>-delay``, dm-delay, when its disk latency is not
none: core/latency.DisksLatency, ``1=hdd`` slows node 1 only; loaded after mkfs, as for one disk)
-> log-writes (data disk ``pcdata<i>``, log disk ``pclog<i>``), beside it the ``<name>-order`` map
the marks flush.  Every node is made and mounted at ``MNT/n<i>``; the mark
``mkfs`` goes to every log once all are made; the workload (the client, and the nodes it starts)
runs with ``$POWERCUT_CLUSTER`` so that each of its marks reaches every log under one lock
(marks.py), ``$POWERCUT_MOUNTS`` naming the node mounts, its working directory ``MNT``."""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from powercut._logmark import close as close_marks
from powercut._logmark import insert_cluster
from powercut.core.latency import DisksLatency
from powercut.guest.clusterfaults import NodeFaults
from powercut.guest.record import (
    DELAY_SUFFIX,
    MNT,
    kept_trace,
    log_writes_status,
    slow_down,
    stack,
    traced,
    unstack,
    uptime,
)
from powercut.linux import dm, environ, filesystems, process
from powercut.linux.blockdev import find_disk, sectors
from powercut.linux.mounts import mount, umount
from powercut.vm import guestjob
from powercut.vm.guestjob import RecordJob

log = logging.getLogger("powercut.guest")


def node_name(dm_name: str, i: int) -> str:
    return f"{dm_name}-n{i}"


def record_cluster(job: RecordJob, jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime(), "nodes": job.nodes}
    fs = filesystems.get(job.fs.fstype)
    t0 = time.monotonic()
    latencies = DisksLatency.parse(job.latency)
    names, devs, orders, targets, sizes, lowers = [], [], [], [], [], []
    for i in range(job.nodes):
        data, logdev = find_disk(job.disks[f"data{i}"]), find_disk(job.disks[f"log{i}"])
        name = node_name(job.dm_name, i)
        target = dm.create(name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
        lower = target if latencies.of(i).none else dm.create(name + DELAY_SUFFIX,
                                                               [(0, sectors(data), "linear", f"{target} 0")])
        dev, order_dev, info = stack(name, target, sectors(data), lower)
        targets.append(target)
        lowers.append(lower)
        sizes.append(sectors(data))
        res.setdefault("target_write_cache", []).append(info["target_write_cache"])
        process.run(fs.eager_mkfs_argv(dev, job.fs.mkfs_opts), timeout=600)
        names.append(name)
        devs.append(dev)
        orders.append(order_dev)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    spec = ",".join(f"{n}={o}" for n, o in zip(names, orders))
    insert_cluster("mkfs", spec)   # the one lock, from the agent too
    res["latency"] = {"setting": str(latencies), "nodes": [
        latencies.of(i).to_json() if latencies.of(i).none else slow_down(name, target, size, latencies.of(i))
        for i, (name, target, size) in enumerate(zip(names, targets, sizes))]}
    mounts = []
    for i, dev in enumerate(devs):
        mnt = os.path.join(MNT, f"n{i}")
        os.makedirs(mnt, exist_ok=True)
        mount(dev, mnt, fs.name, job.fs.mount_opts)
        mounts.append(mnt)
    faults = NodeFaults.of(job.workload.fault, names, lowers, sizes, orders, devs, mounts)
    res["uptime_workload_start"] = uptime()
    (jobdir / "started").write_text(f"{time.time()}\n")
    faults.start()
    try:
        res.update(run_client(job, jobdir, spec, mounts, faults.env()))
    finally:
        res.update(faults.finish())
    close_marks()   # the order devices' descriptors, before the devices go
    for name in names:
        if dm.info(name).suspended:   # a marker killed between its suspend and resume
            log.warning("%s was left suspended by a mark; resuming it", name)
            dm.resume(name)
    res.update(faults.end())
    for mnt in mounts:
        umount(mnt, lazy_fallback=False)
    res["logs"] = []
    for name in names:
        unstack(name)
        res["logs"].append(log_writes_status(name))
        dm.remove(name)
    res["logging_disabled"] = any(x["logging_disabled"] for x in res["logs"])
    return res


def run_client(job: RecordJob, jobdir: Path, spec: str, mounts: list[str],
               fault_env: dict[str, str] | None = None) -> dict[str, Any]:
    """The workload with the cluster's environment and its nodes' fault layers (``fault_env``), under
    strace as for one disk."""
    wl = job.workload
    argv = ["/bin/sh", "-c", wl.cmd] if wl.cmd else [sys.executable, "-m", "powercut.workload", wl.name]
    env = {"PATH": guestjob.guest_path(""), "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           environ.CLUSTER: spec, environ.MOUNTS: ":".join(mounts), environ.MOUNT: MNT,
           environ.FSTYPE: job.fs.fstype, environ.PARAMS: json.dumps(wl.params or {}), **(fault_env or {})}
    # PATH without the image's C powercut-mark: it knows one log; the Python one sends to every node
    res: dict[str, Any] = {}
    argv = traced(argv, wl.trace, job.tools_dir, res)   # -f: the nodes the client starts are its children
    start = time.monotonic()
    with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
        with process.Spawned(argv, cwd=MNT, env=env, stdout=out, stderr=err) as proc:
            rc = proc.wait(wl.timeout_s)
    res.update(workload_rc=rc, workload_timed_out=rc is None, workload_s=round(time.monotonic() - start, 3))
    kept_trace(wl.trace, jobdir, res)
    return res


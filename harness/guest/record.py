"""The guest's record job, for one data disk or the N of a cluster (one VM: one clock, one lock for
the marks; record/vm.py has why).

Per disk the stack of guest/stack.py, its fault layer (guest/faultlayers.py) and its latency;
every disk made through its log (mkfs), the mark ``mkfs`` on every log, the latency loaded, every
filesystem mounted; then the workload, under strace when asked (guest/tracing.py); then every
layer torn down and each target's last status read; for a filesystem whose extents are the
device's, each disk's file map (guest/filemap.py).

What differs with the number of disks is the workload's contract, not the recording: one disk is
mounted at ``MNT`` and the workload is told its target ($POWERCUT_DM_NAME, $POWERCUT_DEVICE, the
order device: the C powercut-mark writes to it directly); a cluster's node i is mounted at
``MNT/n<i>`` and the workload (the client, and the nodes it starts) is told every node
($POWERCUT_CLUSTER, $POWERCUT_MOUNTS) so that each of its marks reaches every log under one lock
(marks.py), with the Python powercut-mark first on its PATH (the C one knows one log).

The result has what is common at its top and, under ``disks``, one dict per disk in disk order:
its target's write cache and last status, its latency as loaded, its fault plan's outcome,
whether the workload left its fault on, its file map (record/vm.py turns it into the manifest)."""
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
from powercut.config import WorkloadSpec
from powercut.core import syncdelay
from powercut.core.latency import DisksLatency
from powercut.errors import PowercutError
from powercut.guest.faultlayers import DiskFaults
from powercut.guest.filemap import FILE_MAP, file_map
from powercut.guest.stack import DiskStack
from powercut.guest.tracing import kept_trace, traced
from powercut.linux import environ, filesystems, process
from powercut.linux.mounts import mount, umount
from powercut.marks import ORDER_ENV, mark
from powercut.vm import guestjob
from powercut.vm.guestjob import RecordJob

log = logging.getLogger("powercut.guest")

MNT = guestjob.GUEST_MNT
DELAY_LOG = "/run/powercut/delay-sync.log"   # guest-local: the shim's line per sync call
DELAY_LOG_FILE = "delay-sync.log"           # in the job directory: the shim's log, kept


def disk_name(dm_name: str, i: int, disks: int) -> str:
    """Disk i's log-writes target name: the job's for one disk, ``<name>-n<i>`` for a cluster's."""
    return dm_name if disks == 1 else f"{dm_name}-n{i}"


def disk_mount(i: int, disks: int) -> str:
    return MNT if disks == 1 else os.path.join(MNT, f"n{i}")


def cluster_spec(stacks: list[DiskStack]) -> str:
    """$POWERCUT_CLUSTER: ``name=order`` per node (_logmark.cluster_nodes)."""
    return ",".join(f"{s.name}={s.order}" for s in stacks)


def record(job: RecordJob, jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime()}
    fs = filesystems.get(job.fs.fstype)
    n = job.nodes
    latencies = DisksLatency.parse(job.latency)
    t0 = time.monotonic()
    stacks = []
    for i in range(n):
        data_role, log_role = guestjob.record_roles(i, n)
        s = DiskStack.make(disk_name(job.dm_name, i, n), job.disks[data_role], job.disks[log_role],
                           latencies.of(i), disk_mount(i, n))
        process.run(fs.eager_mkfs_argv(s.dev, job.fs.mkfs_opts), timeout=600)
        stacks.append(s)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    if n == 1:
        mark("mkfs", stacks[0].name)
    else:
        insert_cluster("mkfs", cluster_spec(stacks))   # the one lock, from the agent too
    disks: list[dict[str, Any]] = [{**s.info, "latency": s.slow()} for s in stacks]
    for s in stacks:
        os.makedirs(s.mount, exist_ok=True)
        mount(s.dev, s.mount, fs.name, job.fs.mount_opts)
    faults = DiskFaults.of(job.workload.fault, stacks)
    res["uptime_workload_start"] = uptime()
    (jobdir / "started").write_text(f"{time.time()}\n")
    faults.start()
    try:
        res.update(run_workload(job, jobdir, stacks, faults.env()))
    finally:
        for i, plan in faults.finish().items():
            disks[i]["fault_plan"] = plan
    close_marks()   # the order devices' descriptors, before the devices go
    for s in stacks:
        s.resume_if_suspended()
    for d, left in zip(disks, faults.end()):
        d["fault_left_on"] = left
    for s in stacks:
        umount(s.mount, lazy_fallback=False)
    for d, s in zip(disks, stacks):
        d.update(s.teardown())
    for i, (d, s) in enumerate(zip(disks, stacks)):
        d.update(file_map(s.data, fs, jobdir, MNT, FILE_MAP if n == 1 else f"files-n{i}.json"))
    res["disks"] = disks
    return res


def workload_env(job: RecordJob, stacks: list[DiskStack]) -> dict[str, str]:
    """The workload's environment (its contract, docs/workloads.md): one disk's target, or every node."""
    wl = job.workload
    env = {"HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", environ.MOUNT: MNT,
           environ.FSTYPE: job.fs.fstype, environ.PARAMS: json.dumps(wl.params or {})}
    if len(stacks) == 1:
        s = stacks[0]
        return {**env, "PATH": guestjob.guest_path(job.tools_dir), environ.DM_NAME: s.name, environ.DEVICE: s.dev,
                ORDER_ENV: s.order}
    # PATH without the image's C powercut-mark: it knows one log; the Python one sends to every node
    return {**env, "PATH": guestjob.guest_path(""), environ.CLUSTER: cluster_spec(stacks),
            environ.MOUNTS: ":".join(s.mount for s in stacks)}


def run_workload(job: RecordJob, jobdir: Path, stacks: list[DiskStack], fault_env: dict[str, str]) -> dict[str, Any]:
    """Run the workload in ``MNT`` with its environment and the disks' fault layers (``fault_env``),
    under strace when asked (-f: a cluster's nodes are the client's children)."""
    wl = job.workload
    argv = workload_argv(wl, jobdir / guestjob.WORKLOAD_BOOT)
    env = {**workload_env(job, stacks), **fault_env, **delay_env(job)}
    res: dict[str, Any] = {}
    argv = traced(argv, wl.trace, job.tools_dir, res)
    start = time.monotonic()
    with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
        with process.Spawned(argv, cwd=MNT, env=env, stdout=out, stderr=err) as proc:
            rc = proc.wait(wl.timeout_s)
            # leaving the block kills the whole group: its leftovers must not keep the filesystem busy
    res.update(workload_rc=rc, workload_timed_out=rc is None, workload_s=round(time.monotonic() - start, 3))
    kept_trace(wl.trace, jobdir, res)
    if wl.delay_sync:
        try:
            text = Path(DELAY_LOG).read_text(errors="replace")
        except FileNotFoundError:
            text = ""
        marks = {os.path.realpath(s.order) for s in stacks}   # powercut's own: each mark's flush (marks.py)
        res["delay_sync"] = {"rules": list(wl.delay_sync), **syncdelay.held_summary(text, MNT, ignore=marks)}
        if text:   # kept whole: where each held call was made (debug/cause places it in the trace)
            (jobdir / DELAY_LOG_FILE).write_text(text)
            res["delay_sync"]["log"] = DELAY_LOG_FILE
    return res


def workload_argv(wl: WorkloadSpec, boot: Path) -> list[str]:
    """A command through the shell; one of powercut's own workloads by its ``workload.py`` (``boot``,
    when the host wrote one: started without site, vm/guestjob.py); any other Python workload by
    name.  A Python workload never has the filesystem under test on sys.path (``-P``; ``boot``'s
    directory is the job's): its imports would list that directory mid-workload, and the atime that
    updates would be a write of powercut's in the recording."""
    if wl.cmd:
        return ["/bin/sh", "-c", wl.cmd]
    if boot.exists():
        return [sys.executable, "-S", str(boot), wl.name]
    return [sys.executable, "-P", "-m", "powercut.workload", wl.name]


def delay_env(job: RecordJob) -> dict[str, str]:
    """The --delay-sync shim preloaded into the workload, its rules and its log (core/syncdelay.py);
    {} without rules.  An image built without the shim (no C compiler then) cannot hold a sync: a
    recording that asks is refused rather than made without the delay."""
    if not job.workload.delay_sync:
        return {}
    shim = os.path.join(job.tools_dir, syncdelay.SHIM) if job.tools_dir else ""
    if not shim or not os.path.exists(shim):
        raise PowercutError(f"--delay-sync needs the image's {syncdelay.SHIM}, which was not built (no C compiler "
                            "when the image was made: apt-get install gcc, then powercut image build --force)")
    rules = [syncdelay.SyncDelay.parse(r) for r in job.workload.delay_sync]
    return {"LD_PRELOAD": shared_shim(shim), environ.DELAY_SYNC: syncdelay.env_text(rules),
            environ.DELAY_SYNC_LOG: DELAY_LOG}


def shared_shim(shim: str) -> str:
    """The shim and its log where a child that drops root (PostgreSQL's server runs as ``postgres``)
    can use them: the image's copy sits under root's cache, which ld.so then cannot open (the child
    runs without the shim, unheld), and the log's directory is root's.  A copy beside the log,
    world-readable; the log made empty and world-writable before the workload starts."""
    shared = os.path.join(os.path.dirname(DELAY_LOG), syncdelay.SHIM)
    with open(shim, "rb") as src, open(shared + ".tmp", "wb") as dst:
        dst.write(src.read())
    os.chmod(shared + ".tmp", 0o755)
    os.replace(shared + ".tmp", shared)
    fd = os.open(DELAY_LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.fchmod(fd, 0o666)   # past the umask: every user's sync calls are appended
    os.close(fd)
    return shared


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])

"""The guest's record job, for one data disk or the N of a cluster (one VM: one clock, one lock for
the marks; record/vm.py has why).

Per disk the stack of guest/stack.py, its fault layer (guest/faultlayers.py) and its latency;
every disk made through its log (mkfs; not for a recording that starts from another's crash
state, ``record --from``: its disk holds that state, and that state's own ``begin:``/``ack:`` marks
come first, ``prior``: what was acknowledged before the first crash must survive every state of
this one), the mark ``mkfs`` on every log (the floor: no state is cut before it), the latency
loaded, every filesystem mounted (the kernel's recovery of a crash state is logged writes, judged
like the program's); then the workload, under strace when asked (guest/tracing.py); then every
layer torn down and each target's last status read; for a filesystem whose extents are the
device's, each disk's file map (guest/filemap.py).

The unmount comes before the log-writes target goes: it writes back what the page cache still
held -- stores through a shared mapping never msynced among it -- into the log, after the last
mark, where a counterfactual finds them (core/cause/counterfactual.py); no sync of the recording's own
is needed for that.  What the program dropped before its exit (a mapped file it truncated or
removed with its pages dirty) never reaches any disk: no writeback at the end can log it.

What differs with the number of disks is the workload's contract, not the recording: one disk is
mounted at ``MNT`` and the workload is told its target ($POWERCUT_DM_NAME, $POWERCUT_DEVICE, the
order device: the C powercut-mark writes to it directly); a cluster's node i is mounted at
``MNT/n<i>`` and the workload (the client, and the nodes it starts) is told every node
($POWERCUT_NODES, $POWERCUT_MOUNTS) so that each of its marks reaches every log under one lock
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
from powercut._logmark import insert_on_nodes
from powercut.config import WorkloadSpec
from powercut.core.recording import syncdelay
from powercut.core.recording.latency import NodesLatency
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
DELAY_LOG = (
    "/run/powercut/delay-sync.log"  # guest-local: the --delay-sync supervisor's line per sync call
)
DELAY_LOG_FILE = "delay-sync.log"  # in the job directory: the supervisor's log, kept


def disk_name(dm_name: str, i: int, disks: int) -> str:
    """Disk i's log-writes target name: the job's for one disk, ``<name>-n<i>`` for a cluster's."""
    return dm_name if disks == 1 else f"{dm_name}-n{i}"


def disk_mount(i: int, disks: int) -> str:
    return MNT if disks == 1 else os.path.join(MNT, f"n{i}")


def nodes_spec(stacks: list[DiskStack]) -> str:
    """$POWERCUT_NODES: ``name=order`` per node (_logmark.node_pairs)."""
    return ",".join(f"{s.name}={s.order}" for s in stacks)


def record(job: RecordJob, jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime()}
    fs = filesystems.get(job.fs.fstype)
    n = job.nodes
    latencies = NodesLatency.parse(job.latency)
    t0 = time.monotonic()
    stacks = []
    for i in range(n):
        data_role, log_role = guestjob.record_roles(i)
        s = DiskStack.make(
            disk_name(job.dm_name, i, n),
            job.disks[data_role],
            job.disks[log_role],
            latencies.of(i),
            disk_mount(i, n),
        )
        if job.mkfs:
            process.run(fs.eager_mkfs_argv(s.dev, job.fs.mkfs_opts), timeout=600)
        stacks.append(s)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    # a recording from a crash state: that state's marks first, then ``mkfs``, the floor no state
    # is cut before (core/states/selection.py): every state of this log has all of them
    for text in (*job.prior, "mkfs"):
        if n == 1:
            mark(text, stacks[0].name)
        else:
            insert_on_nodes(text, nodes_spec(stacks))  # the one lock, from the agent too
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
    close_marks()  # the order devices' descriptors, before the devices go
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
    env = {
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        environ.MOUNT: MNT,
        environ.FSTYPE: job.fs.fstype,
        environ.PARAMS: json.dumps(wl.params or {}),
    }
    if len(stacks) == 1:
        s = stacks[0]
        return {
            **env,
            "PATH": guestjob.guest_path(job.tools_dir),
            environ.DM_NAME: s.name,
            environ.DEVICE: s.dev,
            ORDER_ENV: s.order,
        }
    # PATH without the image's C powercut-mark: it knows one log; the Python one sends to every node
    return {
        **env,
        "PATH": guestjob.guest_path(""),
        environ.NODES: nodes_spec(stacks),
        environ.MOUNTS: ":".join(s.mount for s in stacks),
    }


def run_workload(
    job: RecordJob, jobdir: Path, stacks: list[DiskStack], fault_env: dict[str, str]
) -> dict[str, Any]:
    """Run the workload in ``MNT`` with its environment and the disks' fault layers (``fault_env``),
    under strace when asked (-f: a cluster's nodes are the client's children), and under the
    --delay-sync supervisor when rules hold syncs (outside strace: strace traces only the workload)."""
    wl = job.workload
    argv = workload_argv(wl, jobdir / guestjob.WORKLOAD_BOOT)
    env = {**workload_env(job, stacks), **fault_env}
    res: dict[str, Any] = {}
    argv = traced(argv, wl.trace, job.tools_dir, res, holding=bool(wl.delay_sync))
    argv = held(argv, job)
    start = time.monotonic()
    with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
        with process.Spawned(argv, cwd=MNT, env=env, stdout=out, stderr=err) as proc:
            rc = proc.wait(wl.timeout_s)
            # leaving the block kills the whole group: its leftovers must not keep the filesystem busy
    res.update(
        workload_rc=rc, workload_timed_out=rc is None, workload_s=round(time.monotonic() - start, 3)
    )
    kept_trace(wl.trace, jobdir, res)
    if wl.delay_sync:
        res["delay_sync"] = held_result(job, jobdir, stacks)
    return res


def held(argv: list[str], job: RecordJob) -> list[str]:
    """``argv`` under the --delay-sync supervisor (core/recording/syncdelay.py), its log made empty; ``argv``
    without rules.  An image built without the supervisor (no C compiler then) cannot hold a sync: a
    recording that asks is refused rather than made without the hold."""
    if not job.workload.delay_sync:
        return argv
    supervisor = os.path.join(job.tools_dir, syncdelay.SUPERVISOR) if job.tools_dir else ""
    if not supervisor or not os.path.exists(supervisor):
        raise PowercutError(
            f"--delay-sync needs the image's {syncdelay.SUPERVISOR}, which was not built (no C "
            "compiler when the image was made: apt-get install gcc, then powercut image build --force)"
        )
    rules = [syncdelay.SyncDelay.parse(r) for r in job.workload.delay_sync]
    os.makedirs(os.path.dirname(DELAY_LOG), exist_ok=True)
    Path(DELAY_LOG).write_text("")
    return [*syncdelay.supervisor_argv(supervisor, rules, MNT, DELAY_LOG), *argv]


def held_result(job: RecordJob, jobdir: Path, stacks: list[DiskStack]) -> dict[str, Any]:
    """What the supervisor held, for the manifest's [result]; its log kept whole in the job directory
    (where each held call was made: debug/cause places it in the trace).  A log without the
    supervisor's first line: the filter was never installed -- the supervisor exited 125 with its
    reason in workload.err, which the host reports as the failed workload's last line."""
    try:
        text = Path(DELAY_LOG).read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    marks = {
        os.path.realpath(s.order) for s in stacks
    }  # powercut's own: each mark's flush (marks.py)
    out = {
        "rules": list(job.workload.delay_sync),
        "by": "seccomp",
        **syncdelay.held_summary(text, MNT, ignore=marks),
    }
    (jobdir / DELAY_LOG_FILE).write_text(text)
    out["log"] = DELAY_LOG_FILE
    return out


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


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])

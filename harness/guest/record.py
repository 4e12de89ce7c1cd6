"""The guest's record and mark-bench jobs: create log-writes over the data and log disks, mkfs through
it, run the workload, tear the target down; time marks."""
from __future__ import annotations

import fcntl
import gzip
import json
import logging
import os
import shutil
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from powercut import marks
from powercut.core import syscalls
from powercut.core.faultwindows import FAULT_OFF
from powercut.core.latency import FALLBACK_HZ, DiskLatency, DisksLatency, snap_hz
from powercut.core.nodefaults import DisksFaults
from powercut.errors import PowercutError
from powercut.faults import FAULT_ENV, FaultError, PlanRun, Target, file_sectors, plan_env
from powercut.faults import table as fault_table
from powercut.linux import dm, environ, filesystems, process
from powercut.linux.blockdev import find_disk, sectors
from powercut.linux.mounts import mount, umount
from powercut.marks import ORDER_ENV, mark
from powercut.vm import guestjob
from powercut.vm.guestjob import MarkBenchJob, RecordJob

log = logging.getLogger("powercut.guest")

MNT = guestjob.GUEST_MNT
FS_SUFFIX = "-fs"        # the linear map over the log-writes target that holds the recorded filesystem
ORDER_SUFFIX = "-order"  # the linear map beside it that marks flush (marks.py)
DELAY_SUFFIX = "-delay"  # the disk latency layer (dm-delay, core/latency.py) between the fs map and log-writes
PLAN_STATE = "/run/powercut/fault-plan.json"   # the fault plan's state (faults.PlanRun), guest-local
PLAN_POLL_S = 0.002
TRACE_TMP = "/tmp/powercut-syscalls.txt"   # strace writes here (the guest's tmpfs), copied to the job share after
TRACE_FILE = "syscalls.txt.gz"             # in the job directory: the recording's trace (core/syscalls.py)


def strace_argv(out: str) -> list[str]:
    """strace around the workload: every thread and child (-f), descriptors with their paths (-y),
    the mark ioctls' messages decoded (abbrev=none), only the traced calls stopped (seccomp-bpf)."""
    return ["strace", "-f", "-y", "-qq", "-ttt", "-s", "512", "--seccomp-bpf", "-e", "abbrev=none",
            "-e", "signal=none", "-e", "trace=" + ",".join(syscalls.TRACED), "-o", out, "--"]


def log_writes_status(name: str) -> dict[str, Any]:
    # "<start> <len> log-writes <logged_entries> <highest_sector> [logging_disabled]" per target
    out = dm.status(name)[0].split()
    return {"logged_entries": int(out[3]), "highest_sector": int(out[4]),
            "logging_disabled": "logging_disabled" in out[5:]}


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def stack(dm_name: str, dev: str, size: int, fs_lower: str = "") -> tuple[str, str, dict[str, Any]]:
    """Two linear maps over the log-writes target ``dev``: ``<name>-fs``, where the filesystem lives
    (over ``fs_lower`` when given: the delay layer), and ``<name>-order``, which marks flush to order
    the log (marks.py; no filesystem, so no page cache, so its fsync is one empty flush; never
    delayed).  Both are needed because a mounted filesystem holds its
    device exclusively, and device-mapper tables share a claim: the order device can sit beside the
    filesystem's, not over the target the filesystem holds.  Also what the target's queue says of
    its write cache: without one no flush reaches the target and marks stay unordered.  ``size``:
    the target's, in 512-byte sectors."""
    table = [(0, size, "linear", f"{dev} 0")]
    fsdev = dm.create(dm_name + FS_SUFFIX, [(0, size, "linear", f"{fs_lower or dev} 0")])
    order = dm.create(dm_name + ORDER_SUFFIX, table)
    minor = os.minor(os.stat(dev).st_rdev)
    try:
        cache = Path(f"/sys/block/dm-{minor}/queue/write_cache").read_text().strip()
    except OSError:
        cache = "unknown"
    if cache == "write through":
        log.warning("%s has no write cache: no flush reaches the log, marks cannot be ordered", dev)
    return fsdev, order, {"target_write_cache": cache}


def end_fault(dm_name: str, lower: str, size: int) -> bool:
    """A fault the workload left on is switched off before the unmount (which must reach the log),
    with its ``powercut-fault:off`` mark; True if there was one."""
    live = dm.status(dm_name + FS_SUFFIX, table=True)
    if all(" linear " in f" {t} " for t in live) and len(live) == 1:
        return False
    if dm.info(dm_name + FS_SUFFIX).suspended:
        dm.resume(dm_name + FS_SUFFIX)
    dm.reload(dm_name + FS_SUFFIX, fault_table("", lower, size))
    mark(FAULT_OFF, dm_name)
    log.warning("the workload left a fault on: switched off before the unmount")
    return True


def unstack(dm_name: str) -> None:
    for suffix in (ORDER_SUFFIX, FS_SUFFIX):
        dm.remove(dm_name + suffix)
    if any(d.name == dm_name + DELAY_SUFFIX for d in dm.devices()):
        dm.remove(dm_name + DELAY_SUFFIX)


def measure_hz(wait_s: float = 0.25) -> int:
    """The guest kernel's tick rate (CONFIG_HZ): jiffies counted over ``wait_s`` (/proc/timer_list),
    snapped to a configurable value; FALLBACK_HZ (the coarsest) when it cannot be read."""
    def jiffies() -> tuple[int, float]:
        with open("/proc/timer_list") as f:
            for line in f:
                if line.startswith("jiffies:"):
                    return int(line.split()[1]), time.monotonic()
        raise ValueError("no jiffies: line")
    try:
        j0, t0 = jiffies()
        time.sleep(wait_s)
        j1, t1 = jiffies()
    except (OSError, ValueError, IndexError) as e:
        log.warning("cannot tell the kernel's HZ (%s): assuming %d, the coarsest", e, FALLBACK_HZ)
        return FALLBACK_HZ
    return snap_hz((j1 - j0) / (t1 - t0))


def slow_down(dm_name: str, target: str, size: int, latency: DiskLatency) -> dict[str, Any]:
    """Load the latency into the delay layer (a linear map until now: mkfs is not delayed); what
    the manifest's [latency] records of it."""
    hz = measure_hz()
    table = latency.table(target, size, hz)
    dm.reload(dm_name + DELAY_SUFFIX, table)
    return {**latency.to_json(), **latency.realized(hz), "layer": "dm-delay above dm-log-writes",
            "table": table[0][3] if table[0][2] == "delay" else ""}


class PlanTrigger:
    """The plan's job-side triggers: ``start`` before the workload, ``writes``/``after`` from a thread
    polling the filesystem device's completed writes (/sys/block/dm-N/stat) and the clock."""

    def __init__(self, run: PlanRun, dev: str) -> None:
        self.run, self.plan = run, run.plan
        self.stat = f"/sys/block/dm-{os.minor(os.stat(dev).st_rdev)}/stat"
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.error = ""

    def writes(self) -> int:
        return int(Path(self.stat).read_text().split()[4])   # writes completed

    def start(self) -> None:
        if self.plan.trigger == "start":
            self._fire()
        elif self.plan.trigger in ("writes", "after"):
            self.base, self.t0 = self.writes(), time.monotonic()
            self.thread = threading.Thread(target=self._poll, name="fault-plan", daemon=True)
            self.thread.start()

    def _poll(self) -> None:
        while not self.stop.wait(PLAN_POLL_S):
            met = (self.writes() - self.base >= self.plan.writes if self.plan.trigger == "writes"
                   else time.monotonic() - self.t0 >= self.plan.after)
            if met:
                self._fire()
                return

    def _fire(self) -> None:
        try:
            self.run.fire()
        except (FaultError, OSError) as e:
            self.error = str(e)
            log.error("%s", e)

    def finish(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def run_workload(job: RecordJob, dev: str, jobdir: Path, order_dev: str, target: str) -> dict[str, Any]:
    """Run the workload on the filesystem at MNT; ``target``: the device under the fault layer."""
    wl = job.workload
    argv = ["/bin/sh", "-c", wl.cmd] if wl.cmd else [sys.executable, "-m", "powercut.workload", wl.name]
    fault_dev = Target(job.dm_name + FS_SUFFIX, target, sectors(dev), job.dm_name, order_dev)
    env = {"PATH": guestjob.guest_path(job.tools_dir), "HOME": "/tmp", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", environ.DM_NAME: job.dm_name, environ.DEVICE: dev,
           environ.MOUNT: MNT, environ.FSTYPE: job.fs.fstype, environ.PARAMS: json.dumps(wl.params or {}),
           ORDER_ENV: order_dev, FAULT_ENV: fault_dev.spec()}
    res: dict[str, Any] = {}
    trigger = None
    argv = traced(argv, wl.trace, job.tools_dir, res)
    plan = DisksFaults.parse(wl.fault).of(0)   # one disk: node 0's (``0=PLAN`` or ``PLAN``)
    if plan is not None:
        run = PlanRun(plan, PLAN_STATE, fault_dev, MNT)
        for leftover in (PLAN_STATE, PLAN_STATE + ".done"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        env.update(plan_env(run.plan, PLAN_STATE))
        trigger = PlanTrigger(run, dev)
        trigger.start()
    start = time.monotonic()
    try:
        with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
            with process.Spawned(argv, cwd=MNT, env=env, stdout=out, stderr=err) as proc:
                rc = proc.wait(wl.timeout_s)
                # leaving the block kills the whole group: its leftovers must not keep the filesystem busy
    finally:
        if trigger is not None:
            trigger.finish()
    res.update(workload_rc=rc, workload_timed_out=rc is None, workload_s=round(time.monotonic() - start, 3))
    kept_trace(wl.trace, jobdir, res)
    if trigger is not None:
        st = trigger.run.state()
        res["fault_plan"] = {"plan": wl.fault, **st.to_json(), "error": st.error or trigger.error}
    return res


def traced(argv: list[str], trace: bool, tools_dir: str, res: dict[str, Any]) -> list[str]:
    """``argv`` under strace when ``trace`` is asked for (one disk or a cluster's client, whose nodes
    are its children); without strace in the image, ``argv`` as it is and ``res["trace_error"]``."""
    if not trace:
        return argv
    strace = shutil.which("strace", path=guestjob.guest_path(tools_dir))
    if not strace:
        res["trace_error"] = "strace is not installed (apt-get install strace): recorded without a trace"
        log.warning("%s", res["trace_error"])
        return argv
    if os.path.exists(TRACE_TMP):
        os.unlink(TRACE_TMP)
    return [strace, *strace_argv(TRACE_TMP)[1:], *argv]


def kept_trace(trace: bool, jobdir: Path, res: dict[str, Any]) -> None:
    """After the workload: its trace kept in the job directory (``res`` says where, or why not)."""
    if trace and "trace_error" not in res:
        res.update(keep_trace(jobdir))


def keep_trace(jobdir: Path) -> dict[str, Any]:
    """The trace, gzipped into the job directory; what went wrong if there is none."""
    try:
        size = os.path.getsize(TRACE_TMP)
    except OSError:
        return {"trace_error": "strace wrote no trace (see workload.err)"}
    with open(TRACE_TMP, "rb") as src, gzip.open(jobdir / TRACE_FILE, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.unlink(TRACE_TMP)
    return {"trace_file": TRACE_FILE, "trace_bytes": size}


def record(job: RecordJob, jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime()}
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    fs = filesystems.get(job.fs.fstype)
    t0 = time.monotonic()
    target = dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    latency = DisksLatency.parse(job.latency).of(0)
    lower = target if latency.none else dm.create(job.dm_name + DELAY_SUFFIX,
                                                   [(0, sectors(data), "linear", f"{target} 0")])
    dev, order_dev, info = stack(job.dm_name, target, sectors(data), lower)
    res.update(info)
    process.run(fs.eager_mkfs_argv(dev, job.fs.mkfs_opts), timeout=600)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    mark("mkfs", job.dm_name)
    res["latency"] = latency.to_json() if latency.none else slow_down(job.dm_name, target, sectors(data), latency)
    os.makedirs(MNT, exist_ok=True)
    mount(dev, MNT, fs.name, job.fs.mount_opts)
    res["uptime_workload_start"] = uptime()
    (jobdir / "started").write_text(f"{time.time()}\n")
    res.update(run_workload(job, dev, jobdir, order_dev, lower))
    if dm.info(job.dm_name).suspended:  # a marker killed between its suspend and resume
        log.warning("%s was left suspended by a mark; resuming it", job.dm_name)
        dm.resume(job.dm_name)
    res["fault_left_on"] = end_fault(job.dm_name, lower, sectors(data))
    umount(MNT, lazy_fallback=False)
    unstack(job.dm_name)
    res.update(log_writes_status(job.dm_name))
    dm.remove(job.dm_name)
    res.update(file_map(data, fs, jobdir))
    return res


FILE_MAP = "files.json"
BLKROSET = 0x125D


def _writable(fd: int) -> None:
    try:
        fcntl.ioctl(fd, BLKROSET, struct.pack("i", 0))
    finally:
        os.close(fd)

FILE_MAP_LIMIT = 20000   # files; a program with more is mapped in part (said in the map)


def file_map(data: str, fs: filesystems.Filesystem, jobdir: Path) -> dict[str, Any]:
    """Where the program's files lie on the data device at the end (FIEMAP over a read-only mount
    of the final, cleanly unmounted filesystem: nothing is written, the log is already closed), as
    512-byte sector ranges per file -- what the lying-disk models target first (core/lies.py).
    A filesystem whose extents are not the device's (btrfs) or a mount that fails: no map, why."""
    if fs.name == "btrfs":
        return {"file_map_error": "btrfs extents are logical addresses, not the device's sectors"}
    files: dict[str, list[list[int]]] = {}
    skipped = 0
    guard = os.open(data, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # the device itself read-only (BLKROSET): a filesystem that writes at a read-only mount (XFS
        # clears its log) must not change the final image the log already ends at
        fcntl.ioctl(guard, BLKROSET, struct.pack("i", 1))
        mount(data, MNT, fs.name, "ro")
    except (OSError, PowercutError) as e:
        _writable(guard)
        why = e.one_line() if isinstance(e, PowercutError) else str(e)
        return {"file_map_error": f"cannot mount the final filesystem read-only: {why}"}
    try:
        for root, dirs, names in os.walk(MNT):
            dirs[:] = sorted(d for d in dirs if not (root == MNT and d == "lost+found"))
            for name in sorted(names):
                path = os.path.join(root, name)
                if not os.path.isfile(path) or os.path.islink(path):
                    continue
                if len(files) >= FILE_MAP_LIMIT:
                    skipped += 1
                    continue
                try:
                    files[os.path.relpath(path, MNT)] = [[a, n] for a, n in file_sectors(path)]
                except (OSError, FaultError):
                    skipped += 1
    finally:
        umount(MNT, lazy_fallback=False)
        _writable(guard)
    (jobdir / FILE_MAP).write_text(json.dumps({"sector_bytes": 512, "files": files, "skipped": skipped}))
    return {"file_map": FILE_MAP, "file_map_files": len(files), "file_map_skipped": skipped}


def mark_bench(job: MarkBenchJob, jobdir: Path) -> dict[str, Any]:
    """Cost per mark on a real log-writes target: the ioctl from Python, unordered and ordered, and
    running powercut-mark (C and Python), unordered and ordered."""
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    target = dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    _, order_dev, info = stack(job.dm_name, target, sectors(data))
    n = job.n
    costs: dict[str, Any] = {"ioctl_marks": n, **info}
    for kind, order in (("ioctl", None), ("ioctl_ordered", order_dev)):
        t = time.perf_counter()
        for i in range(n):
            mark(f"{kind}:{i}", job.dm_name, order_dev=order)
        costs[f"{kind}_us"] = round((time.perf_counter() - t) / n * 1e6, 1)
    marks.close()
    m = costs["cmd_marks"] = max(10, n // 10)
    tools = {"python": os.path.join(os.path.dirname(sys.executable), "powercut-mark")}
    if job.tools_dir:
        tools["c"] = os.path.join(job.tools_dir, "powercut-mark")
    for kind, tool in tools.items():
        for suffix, extra in (("", {}), ("_ordered", {ORDER_ENV: order_dev})):
            env = {k: v for k, v in os.environ.items() if k != ORDER_ENV}
            env.update({environ.DM_NAME: job.dm_name, **extra})
            t = time.perf_counter()
            for i in range(m):
                process.run([tool, f"{kind}{suffix}:{i}"], env=env, timeout=60)
            costs[f"cmd_{kind}{suffix}_us"] = round((time.perf_counter() - t) / m * 1e6, 1)
    unstack(job.dm_name)
    status = log_writes_status(job.dm_name)
    dm.remove(job.dm_name)
    return {**costs, **status}

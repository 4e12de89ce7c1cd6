"""The guest half of ``powercut bench`` (runs inside the VM, as root, from the guest agent: the
``bench`` job kind).

For each run set: set the data disk's write cache with ``hdparm -W1``/``-W0`` (the emulated AHCI
drive's own setting: QEMU then flushes each write itself when it is off), make a fresh filesystem
(on the bare disk, or through a dm-log-writes target over data + log disk for the recording-overhead
comparison), mount it, and time each item: a fio profile, a workload in timing mode
(``$POWERCUT_TIMING``), or ``pg_test_fsync``.  Before every item the setting is read back with
``hdparm -W`` and ``/sys/block/<dev>/queue/write_cache`` (bench.verify_write_cache): a run whose
setting did not take is refused, never timed.  Raw fio JSON / timing files / pg_test_fsync output go
to the job share; ``progress.jsonl`` gets one line per item for the host's progress bar."""
from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import bench, dm, filesystems, fioprofiles, guestjob, process
from .benchspec import BenchItem, RunSet
from .errors import EnvironmentNotReady, PowercutError
from .guestjob import BenchJob
from .journal import JsonLines
from .marks import TIMING_ENV
from .mounts import mount, umount

log = logging.getLogger("powercut.benchguest")

MNT = "/run/powercut/mnt"
PG_GLOB = "/usr/lib/postgresql/*/bin/pg_test_fsync"
SYS_BLOCK = Path("/sys/block")
#: initialise everything at mkfs time: ext4's lazy init would write in the background during the runs
EAGER_INIT = {"ext4": ("-E", "lazy_itable_init=0,lazy_journal_init=0")}


def hdparm() -> str:
    return process.require("hdparm", "hdparm")


def read_write_cache(dev: str, wanted: bool) -> bench.WriteCacheCheck:
    """Read the setting back from the drive (hdparm -W) and from the kernel's block queue; refuse
    (EnvironmentNotReady) unless both say ``wanted``."""
    out = process.run([hdparm(), "-W", dev], timeout=60).stdout
    sysfs = (SYS_BLOCK / os.path.basename(dev) / "queue" / "write_cache").read_text()
    return bench.verify_write_cache(wanted, device=dev, hdparm_output=out, sysfs_text=sysfs)


def set_write_cache(dev: str, on: bool) -> bench.WriteCacheCheck:
    """``hdparm -W1``/``-W0`` then the read-back.  If the drive took it but the kernel's view
    (queue/write_cache) lags, rescanning the SCSI disk makes the kernel read the drive's caching
    page again; a drive that did not take it is refused."""
    process.run([hdparm(), f"-W{int(on)}", dev], timeout=60)
    try:
        return read_write_cache(dev, on)
    except EnvironmentNotReady:
        rescan = (SYS_BLOCK / os.path.basename(dev) / "device" / "rescan")
        if not rescan.exists():
            raise
        log.info("%s: queue/write_cache lags hdparm -W%d; rescanning the disk", dev, int(on))
        rescan.write_text("1\n")
        return read_write_cache(dev, on)


def _check_dict(c: bench.WriteCacheCheck) -> dict[str, Any]:
    return {"device": c.device, "wanted": c.wanted, "hdparm": c.hdparm, "sysfs": c.sysfs}


@dataclass(frozen=True, slots=True)
class Where:
    """Where items run: a directory (on the filesystem under test), the environment they get, and
    -- for raw fio runs on the host -- a block device written directly."""
    directory: str
    env: dict[str, str]
    raw_device: str = ""
    tmp: str = "/tmp"           # where timing files go (not on the filesystem under test)


def guest_where(job: BenchJob, dev: str) -> Where:
    return Where(MNT, {"PATH": guestjob.guest_path(job.tools_dir), "HOME": "/tmp", "LANG": "C.UTF-8",
                       "PYTHONDONTWRITEBYTECODE": "1", "POWERCUT_DEVICE": dev, "POWERCUT_MOUNT": MNT,
                       "POWERCUT_FSTYPE": job.fs.fstype})


def run_fio(item: BenchItem, where: Where, out: Path) -> dict[str, Any]:
    profile = fioprofiles.by_name(item.name)
    cmd = fioprofiles.fio_command(profile, where.directory, item.size_bytes, fio=process.require("fio", "fio"),
                                  runtime_s=item.runtime_s, device=where.raw_device)
    res = process.run(cmd.argv, timeout=item.timeout_s, env={**where.env, **cmd.env_dict()}, check=False)
    out.with_suffix(".json").write_text(res.stdout)
    if res.returncode != 0:
        tail = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""
        raise PowercutError(f"fio {profile.name} exited {res.returncode}: {tail}")
    return bench.parse_fio_json(res.stdout, profile).as_dict()


def run_workload(item: BenchItem, where: Where, out: Path) -> dict[str, Any]:
    """The workload with ``$POWERCUT_TIMING`` set: its begin/ack marks become timestamps."""
    if where.raw_device:
        raise PowercutError(f"workload {item.name} needs a filesystem, not the raw device {where.raw_device}")
    cwd = Path(where.directory) / f"powercut-wl-{out.name}"
    cwd.mkdir()
    timing = Path(where.tmp) / f"powercut-timing-{os.getpid()}-{out.name}.txt"
    timing.unlink(missing_ok=True)
    env = {**where.env, TIMING_ENV: str(timing), "POWERCUT_PARAMS": json.dumps(item.params)}
    argv = [sys.executable, "-m", "powercut.workload", item.name]
    with open(out.with_suffix(".out"), "wb") as so, open(out.with_suffix(".err"), "wb") as se:
        with process.Spawned(argv, cwd=str(cwd), env=env, stdout=so, stderr=se) as proc:
            rc = proc.wait(item.timeout_s)
    text = timing.read_text() if timing.exists() else ""
    timing.unlink(missing_ok=True)
    shutil.rmtree(cwd, ignore_errors=True)
    out.with_suffix(".timing").write_text(text)
    if rc != 0:
        raise PowercutError(f"workload {item.name} " + ("timed out" if rc is None else f"exited {rc}") +
                            f" (see {out.name}.err in the job share)")
    return bench.parse_timing(text, f"{item.label} timing").as_dict()


def run_pg_test_fsync(item: BenchItem, where: Where, out: Path) -> dict[str, Any]:
    found = sorted(glob.glob(PG_GLOB), key=lambda p: [int(x) for x in p.split("/")[4].split(".") if x.isdigit()])
    if not found:
        raise EnvironmentNotReady("pg_test_fsync not found (Debian package postgresql)")
    if where.raw_device:
        raise PowercutError(f"pg_test_fsync needs a filesystem, not the raw device {where.raw_device}")
    res = process.run([found[-1], "-s", str(max(1, item.runtime_s)), "-f",
                       f"{where.directory}/powercut-pg_test_fsync.out"], timeout=item.timeout_s, env=where.env)
    out.with_suffix(".txt").write_text(res.stdout)
    return {"ops_per_s": bench.parse_pg_test_fsync(res.stdout), "binary": found[-1]}


RUNNERS = {"fio": run_fio, "workload": run_workload, "pg_test_fsync": run_pg_test_fsync}


def _prepare(job: BenchJob, rs: RunSet, data: str, logdev: str | None) -> str:
    """The device to mkfs for ``rs``: the data disk, or a log-writes target over data + log."""
    if rs.target == "disk":
        return data
    if logdev is None:
        raise PowercutError("a log-writes run set needs the log disk, and the job has none")
    sectors = int((SYS_BLOCK / os.path.basename(data) / "size").read_text())
    return dm.create(job.dm_name, [(0, sectors, "log-writes", f"{data} {logdev}")])


def run_set(job: BenchJob, rs: RunSet, index: int, devs: tuple[str, str | None], jobdir: Path,
            progress: JsonLines) -> dict[str, Any]:
    data, logdev = devs
    fs = filesystems.get(job.fs.fstype)
    checks = [_check_dict(set_write_cache(data, rs.write_cache))]
    if logdev and rs.target == "log-writes":
        checks.append(_check_dict(set_write_cache(logdev, rs.write_cache)))
    dev = _prepare(job, rs, data, logdev)
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    try:
        process.run(fs.mkfs_argv(dev, EAGER_INIT.get(fs.name, ()) + job.fs.mkfs_opts), timeout=600)
        mount(dev, MNT, fs.name, filesystems.join_opts(fs.mount_opts, job.fs.mount_opts, rs.mount_opts))
        mkfs_s = round(time.monotonic() - t0, 3)
        try:
            for k, item in enumerate(rs.items):
                results.append(_run_item(item, guest_where(job, dev), jobdir / "raw" / f"s{index}-i{k}", data, rs))
                progress.add({"set": index, "item": k, "label": item.label, "ok": results[-1]["ok"]})
        finally:
            umount(MNT, lazy_fallback=False)
    finally:
        if rs.target == "log-writes":
            dm.remove(job.dm_name)
    return {"write_cache": rs.write_cache, "target": rs.target, "mount_opts": rs.mount_opts, "device": dev,
            "mkfs_s": mkfs_s, "checks": checks, "items": results}


def _run_item(item: BenchItem, where: Where, out: Path, data: str, rs: RunSet) -> dict[str, Any]:
    check = read_write_cache(data, rs.write_cache)   # refuses (raises) if the setting did not hold
    outcome = run_item(item, where, out)
    return {**outcome, "check": _check_dict(check)}


def run_item(item: BenchItem, where: Where, out: Path) -> dict[str, Any]:
    """One item -> ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": one line}``."""
    t = time.monotonic()
    try:
        result = RUNNERS[item.kind](item, where, out)
    except PowercutError as e:
        log.error("%s: %s", item.label, e)
        return {"ok": False, "error": e.one_line()}
    log.info("%s: done in %.1f s", item.label, time.monotonic() - t)
    return {"ok": True, "result": result, "wall_s": round(time.monotonic() - t, 3)}


def bench_job(job: BenchJob, jobdir: Path) -> dict[str, Any]:
    from .guest import find_disk

    data = find_disk(job.disks["data"])
    logdev = find_disk(job.disks["log"]) if "log" in job.disks else None
    (jobdir / "raw").mkdir(exist_ok=True)
    os.makedirs(MNT, exist_ok=True)
    model = (SYS_BLOCK / os.path.basename(data) / "device" / "model")
    out: dict[str, Any] = {"kernel": os.uname().release, "device": data,
                           "model": model.read_text().strip() if model.exists() else "", "sets": []}
    with JsonLines(jobdir / "progress.jsonl", durable=False) as progress:
        for i, rs in enumerate(job.runsets):
            out["sets"].append(run_set(job, rs, i, (data, logdev), jobdir, progress))
    return out

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

import logging
import os
import time
from pathlib import Path
from typing import Any

from powercut.bench import parse as bench
from powercut.bench.items import ItemTarget, run_item
from powercut.config import BenchItem, RunSet
from powercut.errors import EnvironmentNotReady, PowercutError
from powercut.linux import dm, environ, filesystems, process
from powercut.linux.blockdev import find_disk
from powercut.linux.jsonlines import JsonLines
from powercut.linux.mounts import mount, umount
from powercut.vm import guestjob
from powercut.vm.guestjob import BenchJob

log = logging.getLogger(__name__)


MNT = "/run/powercut/mnt"


SYS_BLOCK = Path("/sys/block")


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
        rescan = SYS_BLOCK / os.path.basename(dev) / "device" / "rescan"
        if not rescan.exists():
            raise
        log.info("%s: queue/write_cache lags hdparm -W%d; rescanning the disk", dev, int(on))
        rescan.write_text("1\n")
        return read_write_cache(dev, on)


def _check_dict(c: bench.WriteCacheCheck) -> dict[str, Any]:
    return {"device": c.device, "wanted": c.wanted, "hdparm": c.hdparm, "sysfs": c.sysfs}


def guest_where(job: BenchJob, dev: str) -> ItemTarget:
    return ItemTarget(
        MNT,
        {
            "PATH": guestjob.guest_path(job.tools_dir),
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            environ.DEVICE: dev,
            environ.MOUNT: MNT,
            environ.FSTYPE: job.fs.fstype,
        },
        fork=True,
    )


def _prepare(job: BenchJob, rs: RunSet, data: str, logdev: str | None) -> str:
    """The device to mkfs for ``rs``: the data disk, or a log-writes target over data + log."""
    if rs.target == "disk":
        return data
    if logdev is None:
        raise PowercutError("a log-writes run set needs the log disk, and the job has none")
    sectors = int((SYS_BLOCK / os.path.basename(data) / "size").read_text())
    return dm.create(job.dm_name, [(0, sectors, "log-writes", f"{data} {logdev}")])


def run_set(
    job: BenchJob,
    rs: RunSet,
    index: int,
    devs: tuple[str, str | None],
    jobdir: Path,
    progress: JsonLines,
) -> dict[str, Any]:
    data, logdev = devs
    fs = filesystems.get(job.fs.fstype)
    checks = [_check_dict(set_write_cache(data, rs.write_cache))]
    if logdev and rs.target == "log-writes":
        checks.append(_check_dict(set_write_cache(logdev, rs.write_cache)))
    dev = _prepare(job, rs, data, logdev)
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    try:
        process.run(fs.eager_mkfs_argv(dev, job.fs.mkfs_opts), timeout=600)
        mount(
            dev,
            MNT,
            fs.name,
            filesystems.join_opts(fs.mount_opts, job.fs.mount_opts, rs.mount_opts),
        )
        mkfs_s = round(time.monotonic() - t0, 3)
        try:
            for k, item in enumerate(rs.items):
                results.append(
                    _run_item(
                        item, guest_where(job, dev), jobdir / "raw" / f"s{index}-i{k}", data, rs
                    )
                )
                progress.add(
                    {"set": index, "item": k, "label": item.label, "ok": results[-1]["ok"]}
                )
        finally:
            umount(MNT, lazy_fallback=False)
    finally:
        if rs.target == "log-writes":
            dm.remove(job.dm_name)
    return {
        "write_cache": rs.write_cache,
        "target": rs.target,
        "mount_opts": rs.mount_opts,
        "device": dev,
        "mkfs_s": mkfs_s,
        "checks": checks,
        "items": results,
    }


def _run_item(
    item: BenchItem, where: ItemTarget, out: Path, data: str, rs: RunSet
) -> dict[str, Any]:
    check = read_write_cache(data, rs.write_cache)  # refuses (raises) if the setting did not hold
    outcome = run_item(item, where, out)
    return {**outcome, "check": _check_dict(check)}


def bench_job(job: BenchJob, jobdir: Path) -> dict[str, Any]:

    data = find_disk(job.disks["data"])
    logdev = find_disk(job.disks["log"]) if "log" in job.disks else None
    (jobdir / "raw").mkdir(exist_ok=True)
    os.makedirs(MNT, exist_ok=True)
    model = SYS_BLOCK / os.path.basename(data) / "device" / "model"
    out: dict[str, Any] = {
        "kernel": os.uname().release,
        "device": data,
        "model": model.read_text().strip() if model.exists() else "",
        "sets": [],
    }
    with JsonLines(jobdir / "progress.jsonl", durable=False) as progress:
        for i, rs in enumerate(job.runsets):
            out["sets"].append(run_set(job, rs, i, (data, logdev), jobdir, progress))
    return out

"""The device stack of one recorded disk in the guest (a recording has one per data disk: one for a
single disk, one per node of a cluster).

From the bottom: the dm-log-writes target over the data and log disks (``<name>``); above it the
disk's latency layer (``<name>-delay``, dm-delay, only when its latency is not none: loaded after
mkfs, so mkfs is not delayed; core/recording/latency.py); above that the ``<name>-fs`` linear map where the
filesystem lives and whose table a fault swaps (faults.py); beside it, over the target, the
``<name>-order`` map that marks flush to order the log (marks.py)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.core.log.faultwindows import FAULT_OFF
from powercut.core.recording.latency import FALLBACK_HZ, DiskLatency, snap_hz
from powercut.faults import table as fault_table
from powercut.linux import dm
from powercut.linux.blockdev import find_disk, sectors
from powercut.marks import mark

log = logging.getLogger("powercut.guest")

FS_SUFFIX = "-fs"  # the linear map over the log-writes target that holds the recorded filesystem
ORDER_SUFFIX = "-order"  # the linear map beside it that marks flush (marks.py)
DELAY_SUFFIX = "-delay"  # the disk latency layer (dm-delay, core/recording/latency.py) between the fs map and log-writes


def log_writes_status(name: str) -> dict[str, Any]:
    # "<start> <len> log-writes <logged_entries> <highest_sector> [logging_disabled]" per target
    out = dm.status(name)[0].split()
    return {
        "logged_entries": int(out[3]),
        "highest_sector": int(out[4]),
        "logging_disabled": "logging_disabled" in out[5:],
    }


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
    return {
        **latency.to_json(),
        **latency.realized(hz),
        "layer": "dm-delay above dm-log-writes",
        "table": table[0][3] if table[0][2] == "delay" else "",
    }


@dataclass(slots=True)
class DiskStack:
    """One recorded disk's stack, made (``make``), slowed after mkfs (``slow``), torn down (``teardown``)."""

    name: str  # the log-writes target's device-mapper name (marks go to it)
    data: str  # the data disk's device
    target: str  # the log-writes target's device
    lower: str  # what the fs map sits on: the delay layer, or the target
    dev: str  # the filesystem's device (the fs map)
    order: str  # the order device (marks.py)
    size: int  # 512-byte sectors
    mount: str  # where the recorded filesystem is mounted
    latency: DiskLatency
    info: dict[str, Any] = field(
        default_factory=dict
    )  # what the target's queue says (its write cache)

    @staticmethod
    def make(
        name: str, data_serial: str, log_serial: str, latency: DiskLatency, mount: str
    ) -> DiskStack:
        data, logdev = find_disk(data_serial), find_disk(log_serial)
        size = sectors(data)
        target = dm.create(name, [(0, size, "log-writes", f"{data} {logdev}")])
        lower = (
            target
            if latency.none
            else dm.create(name + DELAY_SUFFIX, [(0, size, "linear", f"{target} 0")])
        )
        dev, order, info = stack(name, target, size, lower)
        return DiskStack(name, data, target, lower, dev, order, size, mount, latency, info)

    def slow(self) -> dict[str, Any]:
        """The disk's latency loaded (after mkfs); what the manifest's [latency] says of it."""
        if self.latency.none:
            return self.latency.to_json()
        return slow_down(self.name, self.target, self.size, self.latency)

    def resume_if_suspended(self) -> None:
        if dm.info(self.name).suspended:  # a marker killed between its suspend and resume
            log.warning("%s was left suspended by a mark; resuming it", self.name)
            dm.resume(self.name)

    def end_fault(self) -> bool:
        return end_fault(self.name, self.lower, self.size)

    def teardown(self) -> dict[str, Any]:
        """The maps and the target removed (the filesystem unmounted before); the target's last status."""
        unstack(self.name)
        status = log_writes_status(self.name)
        dm.remove(self.name)
        return status

"""``powercut bench --on-host DIR_OR_DEVICE`` (host): the same items timed on this machine, in a
directory the user names or on a block device written raw (refused while it or a partition of it
is mounted, held by device-mapper/md, or used as swap).

The disk write cache is left alone unless ``--toggle-write-cache``: then the tool that fits the
disk sets it (``hdparm -W`` for ATA, ``sdparm --set/--clear WCE`` for SCSI, ``nvme set-feature -f 6``
for NVMe), reads it back (the tool and ``queue/write_cache``; a setting that did not take is
refused), and the original setting is **restored afterwards**, also on an error or an interrupt
(the restore runs in a ``finally`` with SIGINT/SIGTERM/SIGHUP blocked, so a second Ctrl-C cannot cut
it short).  Every subprocess goes through ``run`` (process.run; tests pass a fake)."""

from __future__ import annotations

import logging
import os
import re
import signal
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.bench import parse as bench
from powercut.bench.items import ItemTarget, run_item
from powercut.bench.results import entries_for
from powercut.errors import EnvironmentNotReady, UsageError
from powercut.linux import process

log = logging.getLogger(__name__)

Runner = Callable[..., process.Result]
_SDPARM_WCE = re.compile(r"^\s*WCE\s+(\d)", re.MULTILINE)
_NVME_VALUE = re.compile(r"Current value:\s*(?:0x)?([0-9a-fA-F]+)")


@dataclass(frozen=True, slots=True)
class HostTarget:
    path: str  # what the user named
    raw: bool  # a block device, written directly
    disk: str  # the whole disk behind it, /dev/NAME ("" if none: tmpfs, overlay...)
    transport: str  # ata | scsi | nvme | virtio | other
    majmin: str = ""  # of the device itself (raw) or of the filesystem holding the directory


@dataclass(frozen=True, slots=True)
class CacheTool:
    name: str  # hdparm | sdparm | nvme
    package: str
    device: str  # what the tool is pointed at

    def set_argv(self, on: bool) -> list[str]:
        if self.name == "hdparm":
            return ["hdparm", f"-W{int(on)}", self.device]
        if self.name == "sdparm":
            return ["sdparm", "--set" if on else "--clear", "WCE", self.device]
        return ["nvme", "set-feature", self.device, "-f", "6", "-v", str(int(on))]

    def get_argv(self) -> list[str]:
        if self.name == "hdparm":
            return ["hdparm", "-W", self.device]
        if self.name == "sdparm":
            return ["sdparm", "--get", "WCE", self.device]
        return ["nvme", "get-feature", self.device, "-f", "6"]

    def parse(self, output: str) -> bool:
        """The tool's read-back -> is the cache on."""
        if self.name == "hdparm":
            return bench.parse_hdparm_write_cache(output, self.device)
        m = (_SDPARM_WCE if self.name == "sdparm" else _NVME_VALUE).search(output)
        if not m:
            raise EnvironmentNotReady(
                f"{self.device}: {self.name} printed no write cache setting: "
                f"{output.strip()[:120]!r}"
            )
        return bool(int(m.group(1), 10 if self.name == "sdparm" else 16) & 1)


def _disk_of(majmin: str, sysfs: Path) -> tuple[str, str]:
    """(whole-disk name, transport) of the block device ``majmin``; ("", "") for a non-block fs."""
    link = sysfs / "dev" / "block" / majmin
    if not link.exists():
        return "", ""
    node = Path(os.path.realpath(link))
    if (node / "partition").exists():
        node = node.parent
    name = node.name
    if (node / "dm").exists() or (node / "md").exists() or name.startswith(("dm-", "md")):
        return name, "stacked"
    if name.startswith("nvme"):
        return name, "nvme"
    if name.startswith("vd"):
        return name, "virtio"
    vendor = node / "device" / "vendor"
    if vendor.exists():
        return name, "ata" if vendor.read_text().strip() == "ATA" else "scsi"
    return name, "other"


def resolve_target(path: str, *, sysfs: str | os.PathLike[str] = "/sys") -> HostTarget:
    """What ``--on-host`` names: a directory (its filesystem's disk) or a block device (raw)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise UsageError(f"--on-host {path}: {e.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        majmin, raw = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}", True
    elif stat.S_ISDIR(st.st_mode):
        majmin, raw = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", False
    else:
        raise UsageError(f"--on-host {path}: neither a directory nor a block device")
    name, transport = _disk_of(majmin, Path(sysfs))
    return HostTarget(
        os.path.abspath(path), raw, f"/dev/{name}" if name else "", transport or "other", majmin
    )


def cache_tool(target: HostTarget) -> CacheTool:
    """The tool that sets this disk's write cache, or a one-line refusal saying why none fits."""
    if not target.disk:
        raise UsageError(
            f"--toggle-write-cache: {target.path} is on no block device (tmpfs, overlay?)"
        )
    if target.transport == "ata":
        return CacheTool("hdparm", "hdparm", target.disk)
    if target.transport == "scsi":
        return CacheTool("sdparm", "sdparm", target.disk)
    if target.transport == "nvme":
        ctrl = re.sub(r"n\d+$", "", target.disk)  # the feature is the controller's: /dev/nvme0
        return CacheTool("nvme", "nvme-cli", ctrl)
    why = {
        "stacked": "a device-mapper/md device (name the disk under it)",
        "virtio": "a virtio disk (its cache is the hypervisor's: use the VM mode, or set it on the host)",
    }
    raise UsageError(
        f"--toggle-write-cache: {target.disk} is {why.get(target.transport, 'of no known transport')}"
    )


def read_cache(
    tool: CacheTool,
    target: HostTarget,
    wanted: bool | None,
    *,
    run: Runner = process.run,
    sysfs: str | os.PathLike[str] = "/sys",
) -> bool:
    """The tool's read-back (and the kernel's queue/write_cache); with ``wanted``, refuse a mismatch."""
    out = run(tool.get_argv(), timeout=60).stdout
    seen = tool.parse(out)
    qfile = Path(sysfs) / "block" / os.path.basename(target.disk) / "queue" / "write_cache"
    sysfs_text = qfile.read_text() if qfile.exists() else None
    if wanted is not None:
        bench.verify_write_cache(
            wanted,
            device=target.disk,
            hdparm_output=out if tool.name == "hdparm" else None,
            sysfs_text=sysfs_text,
        )
        if seen != wanted:
            raise EnvironmentNotReady(
                f"{target.disk}: asked for the write cache {'on' if wanted else 'off'}, "
                f"{tool.name} says {'on' if seen else 'off'}; refusing to time it"
            )
    return seen


@contextmanager
def _signals_blocked() -> Iterator[None]:
    sigs = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def write_cache_set(
    tool: CacheTool,
    target: HostTarget,
    on: bool,
    *,
    run: Runner = process.run,
    sysfs: str | os.PathLike[str] = "/sys",
) -> Iterator[bool]:
    """Set the cache ``on``/off for the block, verified; put the original setting back afterwards
    whatever happens (signals blocked while restoring)."""
    if run is process.run:
        process.require(tool.name, tool.package)
    original = read_cache(tool, target, None, run=run, sysfs=sysfs)
    try:
        run(tool.set_argv(on), timeout=60)
        yield read_cache(tool, target, on, run=run, sysfs=sysfs)
    finally:
        with _signals_blocked():
            try:
                run(tool.set_argv(original), timeout=60)
                log.info("%s: write cache restored to %s", target.disk, "on" if original else "off")
            except Exception as e:  # the restore must not hide the original error
                log.error(
                    "%s: could not restore the write cache to %s: %s",
                    target.disk,
                    "on" if original else "off",
                    e,
                )


def check_unused(
    target: HostTarget,
    *,
    sysfs: str | os.PathLike[str] = "/sys",
    mountinfo_text: str | None = None,
    swaps_text: str | None = None,
) -> None:
    """Refuse raw writes to a device that is (or has a partition that is) mounted, held or swap."""
    sysfs = Path(sysfs)
    node = Path(os.path.realpath(sysfs / "dev" / "block" / target.majmin))
    devs = {target.majmin}
    names = {node.name}
    for part in node.iterdir() if node.is_dir() else ():
        if (part / "partition").exists() and (part / "dev").exists():
            devs.add((part / "dev").read_text().strip())
            names.add(part.name)
    if mountinfo_text is None:
        mountinfo_text = Path("/proc/self/mountinfo").read_text()
    for line in mountinfo_text.splitlines():
        f = line.split()
        if len(f) > 4 and f[2] in devs:
            raise UsageError(
                f"--on-host {target.path}: it (or a partition of it) is mounted on {f[4]}; "
                "raw tests would destroy that filesystem"
            )
    for name in names:
        holders = sysfs / "class" / "block" / name / "holders"
        if holders.is_dir() and any(holders.iterdir()):
            raise UsageError(
                f"--on-host {target.path}: /dev/{name} is held by "
                f"{', '.join(p.name for p in holders.iterdir())} (device-mapper, md...)"
            )
    if swaps_text is None:
        swaps_text = Path("/proc/swaps").read_text() if Path("/proc/swaps").exists() else ""
    for line in swaps_text.splitlines()[1:]:
        if line.split() and os.path.basename(line.split()[0]) in names:
            raise UsageError(f"--on-host {target.path}: {line.split()[0]} is in use as swap")


def run_on_host(
    runsets: tuple[Any, ...],
    target: HostTarget,
    rundir: Path,
    *,
    toggle: bool,
    on_progress: Callable[[int, int, str], None] | None = None,
    run: Runner = process.run,
) -> tuple:
    """Time every item of ``runsets`` on ``target``: (entries, checks).  Without ``toggle`` the
    cache is left as it is and run sets of one target/mount are merged (entries say "as is")."""

    if os.geteuid() != 0 and (toggle or target.raw):
        raise EnvironmentNotReady("--on-host with --toggle-write-cache or a raw device needs root")
    if target.raw:
        check_unused(target)
    if any(rs.target != "disk" or rs.mount_opts for rs in runsets):
        raise UsageError(
            "--on-host runs on what you name: the overhead and nobarrier runs need the VM mode"
        )
    tool = cache_tool(target) if toggle else None
    if not toggle:  # one pass, cache as it is
        seen: dict[tuple[str, str], Any] = {}
        for rs in runsets:
            for item in rs.items:
                seen.setdefault((item.suite, item.label), item)
        runsets = ((None, tuple(seen.values())),)
    else:
        runsets = tuple((rs.write_cache, rs.items) for rs in runsets)
    where = ItemTarget(
        target.path if not target.raw else "/",
        dict(os.environ),
        raw_device=target.path if target.raw else "",
    )
    (rundir / "raw").mkdir(parents=True, exist_ok=True)
    total, done = sum(len(items) for _, items in runsets), 0
    entries: list[Any] = []
    checks: list[dict[str, Any]] = []
    for i, (wc, items) in enumerate(runsets):
        ctx = (
            write_cache_set(tool, target, wc, run=run)
            if tool is not None and wc is not None
            else None
        )
        with ctx if ctx is not None else _nothing():
            for k, item in enumerate(items):
                if tool is not None and wc is not None:
                    read_cache(tool, target, wc, run=run)
                    checks.append(
                        {"device": target.disk, "wanted": wc, "tool": tool.name, "item": item.label}
                    )
                outcome = run_item(item, where, rundir / "raw" / f"s{i}-i{k}")
                entries += entries_for(
                    item, outcome, write_cache=wc, target=target.path, mount_opts=""
                )
                done += 1
                if on_progress:
                    on_progress(done, total, item.label)
    return entries, checks


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def describe(target: HostTarget) -> str:
    kind = "raw device" if target.raw else "directory"
    return f"{kind} {target.path} on {target.disk or 'no block device'} ({target.transport})"

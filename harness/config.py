"""Frozen value types for everything a run is made of, with TOML in/out.

VmSpec describes one VM independent of the backend (QEMU argv or libvirt domain XML)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import tomli_w

from powercut.core.recording import syncdelay
from powercut.core.recording.latency import DiskLatency, LatencyError, NodesLatency
from powercut.core.recording.nodefaults import FaultsError, NodesFaults
from powercut.errors import UsageError
from powercut.linux import environ, filesystems

Bus = Literal["virtio", "ahci"]
Cache = Literal["none", "writeback", "writethrough", "directsync", "unsafe"]
Transport = Literal["virtiofs", "9p"]
Accel = Literal["auto", "kvm", "tcg"]

CACHE_MODES = ("none", "writeback", "writethrough", "directsync", "unsafe")

# Defaults written once: the value classes here, the specs that copy them (record/vm's RecordSpec,
# bench/run's BenchVmSpec and BenchRequest, check/place's Place, the campaigns) and the command line's
# options (cli/parser.py) all read these (tests/unit/cli/test_parser.py holds the parser to them).
DEFAULT_ACCEL: Accel = "auto"  # probe KVM once (cached), else TCG
DEFAULT_MEMORY_MB = 1024  # a recording or bench VM (a checker VM: check.place.Place's memory_mb)
DEFAULT_CPUS = 1
DEFAULT_BUS: Bus = "virtio"
DEFAULT_TRANSPORT: Transport = "9p"
DEFAULT_BACKEND = "qemu"  # or libvirt (--backend)
DEFAULT_LIBVIRT_URI = "qemu:///system"
RECORD_TIMEOUT_S = 900.0  # a recording VM is killed after this long (--vm-timeout)
WORKLOAD_TIMEOUT_S = 300.0  # the workload in it (--workload-timeout)
DEFAULT_CHECK_IN = "vm"  # where states are judged: checker VMs (or host)
STATE_TIMEOUT_S = 300.0  # one state's limit in a checker VM (--state-timeout)
DEFAULT_CONFIRM_MODE = "group"  # failing states judged again: a sample of each group (or all)
BENCH_QEMU_CACHE = "none"  # the bench disk's QEMU cache mode: it honours the guest's flushes
BENCH_SUITE = "guarantees"  # the bench suite run when no suite, profile or workload is given
BENCH_OUT = "runs/bench"  # where bench run directories go


@dataclass(frozen=True, slots=True)
class DiskSpec:
    """A raw disk image attached to the guest.

    ``cache`` is QEMU's host-side cache mode (explicit, never QEMU's default); ``write_cache`` is what
    the guest sees: on = a volatile write cache, so the guest issues FLUSH/FUA (required for the log to
    contain flushes); off = the disk reports write-through (``hdparm -W0`` on AHCI does the same)."""

    path: str
    serial: str
    bus: Bus = DEFAULT_BUS
    cache: Cache = "unsafe"
    write_cache: bool = True
    readonly: bool = False
    discard: bool = True

    def __post_init__(self) -> None:
        if self.bus not in ("virtio", "ahci"):
            raise UsageError(f"disk bus must be virtio or ahci, not {self.bus!r}")
        if self.cache not in CACHE_MODES:
            raise UsageError(
                f"disk cache must be one of {', '.join(CACHE_MODES)}, not {self.cache!r}"
            )
        if not self.serial.isalnum() or len(self.serial) > 20:
            raise UsageError(f"disk serial must be alphanumeric, at most 20 chars: {self.serial!r}")


@dataclass(frozen=True, slots=True)
class ShareSpec:
    """A host directory shared into the guest under a mount tag."""

    tag: str
    path: str
    readonly: bool = True


@dataclass(frozen=True, slots=True)
class VmSpec:
    kernel: str
    initrd: str
    memory_mb: int = DEFAULT_MEMORY_MB
    cpus: int = DEFAULT_CPUS
    disks: tuple[DiskSpec, ...] = ()
    shares: tuple[ShareSpec, ...] = ()
    transport: Transport = DEFAULT_TRANSPORT
    cmdline: tuple[str, ...] = ()
    accel: Accel = DEFAULT_ACCEL
    machine: Literal["auto", "microvm", "q35", "pc"] = "auto"
    timeout_s: float = 600.0
    console_path: str = "console.log"
    name: str = "powercut"
    # module groups the guest needs beyond the basics (e.g. the filesystem: "ext4"); empty = load
    # every module of the image.  The runner adds the transport, "pci" and "ahci" as needed.
    modules: tuple[str, ...] = ()
    interactive: bool = (
        False  # the serial console on this terminal (stdin/stdout), logged to console_path
    )
    restore: str = (
        ""  # start from this saved VM (a template's state, vmstart/template.py), not a boot
    )
    qmp: str = ""  # a QMP socket here (vm/qmp.py), for saving a template

    def __post_init__(self) -> None:
        if self.memory_mb < 128:
            raise UsageError(f"VM memory must be at least 128 MiB, not {self.memory_mb}")
        if not 1 <= self.cpus <= 64:
            raise UsageError(f"VM cpus must be 1..64, not {self.cpus}")
        if self.transport not in ("virtiofs", "9p"):
            raise UsageError(f"share transport must be virtiofs or 9p, not {self.transport!r}")
        if self.accel not in ("auto", "kvm", "tcg"):
            raise UsageError(f"accel must be auto, kvm or tcg, not {self.accel!r}")
        if self.timeout_s <= 0:
            raise UsageError("VM timeout must be positive")

    def module_groups(self) -> tuple[str, ...]:
        """Groups for the guest's powercut.load= (empty: load everything)."""
        if not self.modules:
            return ()
        extra: list[str] = [self.transport]
        if self.resolved_machine() != "microvm":
            extra.append("pci")
        if any(d.bus == "ahci" for d in self.disks):
            extra.append("ahci")
        return tuple(dict.fromkeys(self.modules + tuple(extra)))

    def resolved_machine(self) -> str:
        """microvm (fast boot, virtio-mmio) unless a disk needs AHCI, which needs PCI."""
        if self.machine != "auto":
            return self.machine
        return "q35" if any(d.bus == "ahci" for d in self.disks) else "microvm"


@dataclass(frozen=True, slots=True)
class FsSpec:
    fstype: str = filesystems.DEFAULT_FS
    mkfs_opts: tuple[str, ...] = ()
    mount_opts: str = ""
    size_mb: int = 0  # 0: the filesystem's default size

    def __post_init__(self) -> None:
        fs = filesystems.get(self.fstype)
        if not self.size_mb:
            object.__setattr__(self, "size_mb", fs.default_mb)
        minimum = fs.min_mb
        if self.size_mb < minimum:
            raise UsageError(
                f"{self.fstype} needs a data disk of at least {minimum} MiB, not {self.size_mb}"
            )


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A built-in workload by ``name`` (with ``params``) or any shell ``cmd``: exactly one of the two."""

    name: str = ""
    cmd: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = WORKLOAD_TIMEOUT_S
    fault: str = (
        ""  # the recording's fault plan(s) (core/recording/nodefaults.NodesFaults), canonical text
    )
    trace: bool = (
        True  # trace its durability-relevant system calls (core/trace/syscalls.py) with strace
    )
    delay_sync: tuple[
        str, ...
    ] = ()  # GLOB=TIME rules: those files' syncs held (core/recording/syncdelay.py), canonical

    def __post_init__(self) -> None:
        if bool(self.name) == bool(self.cmd):
            raise UsageError(
                "give exactly one of a workload name (--workload) or a command (--cmd)"
            )
        if self.fault:
            try:
                object.__setattr__(self, "fault", str(NodesFaults.parse(self.fault)))
            except FaultsError as e:
                raise UsageError(f"--fault {self.fault}: {e}") from None
        object.__setattr__(self, "delay_sync", syncdelay.canonical(self.delay_sync))

    @property
    def label(self) -> str:
        return self.name or "cmd"


DEFAULT_SHRINK = 3  # failure groups minimized and blamed (CLI, library and pytest plugin alike)
DEFAULT_SHRINK_BUDGET = 60  # judgments one minimization may take (a cluster's nodes share them)
# the recording's data-disk latency (core/recording/latency.py): none, a preset, or write=...,flush=... -- the one
# default of record/run's --disk-latency, the pytest marker's disk_latency and a matrix row's disk_latency
DEFAULT_DISK_LATENCY = NodesLatency()


def disk_latency(
    text: str | DiskLatency | NodesLatency, where: str = "--disk-latency"
) -> NodesLatency:
    """A latency setting read as a user gave it (one for every disk, or per node: core/recording/latency.NodesLatency):
    a bad one is one UsageError line naming ``where``."""
    if isinstance(text, NodesLatency):
        return text
    if isinstance(text, DiskLatency):
        return NodesLatency(text)
    try:
        return NodesLatency.parse(str(text))
    except LatencyError as e:
        raise UsageError(f"{where}: {e}") from None


def fault_for(text: str, disks: int, where: str = "--fault ") -> str:
    """A fault setting (a plan, or per node: core/recording/nodefaults.NodesFaults) for a recording of ``disks``
    data disks, canonical; a bad one, a node beyond them or a cluster's plan without a node is one
    UsageError line naming ``where``."""
    try:
        return str(NodesFaults.parse(text).for_nodes(disks))
    except FaultsError as e:
        raise UsageError(f"{where}{text}: {e}") from None


def disk_latency_for(
    text: str | DiskLatency | NodesLatency, disks: int, where: str = "--disk-latency"
) -> NodesLatency:
    """``disk_latency`` for a recording of ``disks`` data disks, in its canonical form; a node it
    names beyond them is one UsageError line naming ``where``."""
    lat = disk_latency(text, where)
    try:
        return lat.for_nodes(disks)
    except LatencyError as e:
        raise UsageError(f"{where}: {e}") from None


def to_dict(obj: Any) -> Any:
    """Dataclasses to plain TOML-able values (tuples to lists, None dropped)."""
    if dataclasses.is_dataclass(obj):
        return {
            f.name: to_dict(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if getattr(obj, f.name) is not None
        }
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, Path):
        return str(obj)
    return obj


def from_dict(cls: type, data: dict[str, Any], nested: dict[str, type] | None = None) -> Any:
    """Inverse of to_dict for frozen value classes: lists back to tuples, nested values rebuilt
    (``nested``: field -> class for one nested value; VmSpec's disks and shares are built in)."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise UsageError(f"{cls.__name__}: unknown keys {', '.join(sorted(unknown))}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if cls is VmSpec and name in _LISTS:
            value = tuple(from_dict(_LISTS[name], d) for d in value)
        elif nested and name in nested:
            value = from_dict(nested[name], value, nested)
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise UsageError(f"{cls.__name__}: {e}") from None


_LISTS: dict[str, type] = {"disks": DiskSpec, "shares": ShareSpec}


def dumps_toml(sections: dict[str, Any]) -> str:
    return tomli_w.dumps(to_dict(sections))


def loads_toml(text: str, source: str = "<toml>") -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{source}: not valid TOML: {e}") from None


def cache_root() -> Path:
    root = environ.text(environ.CACHE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "powercut"
    )
    return Path(root)


KINDS = ("fio", "workload", "pg_test_fsync")
TARGETS = ("disk", "log-writes")


@dataclass(frozen=True, slots=True)
class BenchItem:
    kind: str  # fio | workload | pg_test_fsync
    name: str  # a profile, a workload name, or "pg_test_fsync"
    suite: str = ""
    size_bytes: int = 0  # fio: bytes to write
    runtime_s: int = 0  # fio: time cap (0: none); pg_test_fsync: seconds per test
    params: dict[str, Any] = field(default_factory=dict)  # a workload's parameters
    label: str = ""  # how results name it (default: name)
    note: str = ""  # said next to its figures (e.g. TLPI's scaling)
    scale_to: int = 0  # tlpi: scale the time to this many bytes
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(
                f"bench item kind must be one of {', '.join(KINDS)}, not {self.kind!r}"
            )
        if not self.label:
            object.__setattr__(self, "label", self.name)


@dataclass(frozen=True, slots=True)
class RunSet:
    """Items timed on one fresh filesystem with the disk write cache ``write_cache``."""

    write_cache: bool
    items: tuple[BenchItem, ...]
    target: str = "disk"  # disk | log-writes
    mount_opts: str = ""
    group: str = ""  # items of another group never share this filesystem (a fresh mkfs)

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise UsageError(
                f"bench target must be one of {', '.join(TARGETS)}, not {self.target!r}"
            )
        items = tuple(
            i if isinstance(i, BenchItem) else from_dict(BenchItem, i) for i in self.items
        )
        object.__setattr__(self, "items", items)

    @property
    def label(self) -> str:
        extra = [self.target] if self.target != "disk" else []
        extra += [self.mount_opts] if self.mount_opts else []
        return f"cache {'on' if self.write_cache else 'off'}" + "".join(f", {x}" for x in extra)

    @staticmethod
    def of(d: dict[str, Any] | RunSet) -> RunSet:
        return d if isinstance(d, RunSet) else from_dict(RunSet, d)

"""The host half of a recording: prepare disks and the job share, boot the VM, collect the log
into a recording directory (layout and manifest: record/recording.py).

The initial data-disk state is all zeros (mkfs runs through the log), recorded as such.  An
interrupt (SIGINT/SIGTERM/SIGHUP) kills the VM on the way out and leaves the manifest with status
``interrupted``."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut import workload as workloads
from powercut.config import (
    DEFAULT_ACCEL,
    DEFAULT_BACKEND,
    DEFAULT_BUS,
    DEFAULT_CPUS,
    DEFAULT_DISK_LATENCY,
    DEFAULT_LIBVIRT_URI,
    DEFAULT_MEMORY_MB,
    DEFAULT_TRANSPORT,
    RECORD_TIMEOUT_S,
    DiskSpec,
    FsSpec,
    ShareSpec,
    VmSpec,
    WorkloadSpec,
    fault_for,
    to_dict,
)
from powercut.core.dmlog import open_log
from powercut.core.faultwindows import Faults
from powercut.core.latency import DiskLatency, DisksLatency, LatencyError
from powercut.core.markorder import mark_order
from powercut.errors import LogDeviceFull, PowercutError, UsageError, VmError, WorkloadFailed
from powercut.images.build import ImageSpec, build_image, tools_dir
from powercut.linux import filesystems, process, runlock
from powercut.record import recording
from powercut.record.recording import FORMAT_VERSION, MANIFEST, Recording
from powercut.vm import guestjob
from powercut.vm.libvirt import run_vm_libvirt
from powercut.vm.qemu import QEMU, run_vm

log = logging.getLogger(__name__)

DM_NAME = "powercut-rec"


@dataclass(frozen=True, slots=True)
class RecordSpec:
    fs: FsSpec = field(default_factory=FsSpec)
    workload: WorkloadSpec = WorkloadSpec(name="append-fsync")
    log_size_mb: int = 0          # 0: sized from the data disk
    memory_mb: int = DEFAULT_MEMORY_MB
    cpus: int = DEFAULT_CPUS
    bus: str = DEFAULT_BUS
    transport: str = DEFAULT_TRANSPORT
    accel: str = DEFAULT_ACCEL
    timeout_s: float = RECORD_TIMEOUT_S
    backend: str = DEFAULT_BACKEND
    libvirt_uri: str = DEFAULT_LIBVIRT_URI
    image: dict[str, Any] = field(default_factory=dict)
    latency: DisksLatency = DEFAULT_DISK_LATENCY   # the data disks' write and flush latency (core/latency.py)

    def __post_init__(self) -> None:
        if isinstance(self.latency, DiskLatency):   # one setting for every disk, as the library took it before
            object.__setattr__(self, "latency", DisksLatency(self.latency))

    def latency_for(self, disks: int) -> DisksLatency:
        """The latency for a recording of ``disks`` data disks; UsageError if it names a node beyond them."""
        try:
            return self.latency.for_disks(disks)
        except LatencyError as e:
            raise UsageError(f"--disk-latency: {e}") from None

    def workload_for(self, disks: int) -> WorkloadSpec:
        """The workload with its fault setting for ``disks`` data disks (core/nodefaults.DisksFaults);
        UsageError if it names a node beyond them or gives a cluster a plan without a node."""
        return dataclasses.replace(self.workload, fault=fault_for(self.workload.fault, disks))

    def log_bytes(self) -> int:
        mb = self.log_size_mb or max(4 * self.fs.size_mb + 64, 512)
        return mb << 20


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def vm_spec(spec: RecordSpec, image: Any, out: Path, jobdir: Path) -> VmSpec:
    disks = (DiskSpec(str(out / "data-final.img"), "pcdata", bus=spec.bus, cache="unsafe", write_cache=True),  # type: ignore[arg-type]
             DiskSpec(str(out / "log.bin"), "pclog", bus=spec.bus, cache="unsafe", write_cache=True))  # type: ignore[arg-type]
    return VmSpec(kernel=image.kernel, initrd=image.initrd, memory_mb=spec.memory_mb, cpus=spec.cpus, disks=disks,
                  shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(jobdir), readonly=False)),
                  transport=spec.transport, accel=spec.accel, timeout_s=spec.timeout_s,  # type: ignore[arg-type]
                  console_path=str(out / "console.log"), name=f"powercut-record-{os.getpid()}",
                  modules=(filesystems.get(spec.fs.fstype).module_group, "record"))


def run_job(vmspec: VmSpec, backend: str, uri: str, rundir: Path, start_marker: Path | None):
    """Run a VmSpec on the chosen backend (qemu or libvirt)."""
    if backend == "libvirt":
        return run_vm_libvirt(vmspec, uri=uri, rundir=rundir, start_marker=start_marker)
    if backend != "qemu":
        raise UsageError(f"unknown backend {backend!r}: qemu or libvirt")
    return run_vm(vmspec, rundir=rundir, start_marker=start_marker)


# what powercut itself puts in a recording directory (the recording, its check, the matrix's extras)
OWN_FILES = frozenset({MANIFEST, f".{MANIFEST}.tmp", "log.bin", "data-final.img", "console.log", "job", "check",
                       "qemu.argv", "qemu.stderr", "domain.xml", "libvirt-qemu.log", "accel-probe-console.log",
                       "untorn", "diagnose", "report"}
                      | {f for i in range(8) for f in (f"log-n{i}.bin", f"data-n{i}-final.img")})   # clusters


def prepare_outdir(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"{out} exists and is not empty (use --force to replace it)")
        if not (out / MANIFEST).exists() and not (out / "job").exists():
            raise UsageError(f"{out} is not a recording; refusing to delete it even with --force")
        foreign = sorted(p.name for p in out.iterdir() if p.name not in OWN_FILES and not p.name.startswith("virtiofsd"))
        if foreign:
            raise UsageError(f"{out} holds files powercut did not make ({', '.join(foreign[:3])}"
                             f"{', ...' if len(foreign) > 3 else ''}): refusing to delete them even with --force; "
                             "move them or choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def run_recording_vm(vmspec: VmSpec, spec: RecordSpec, out: Path, jobdir: Path,
                     manifest: dict[str, Any]) -> guestjob.GuestResult:
    """Write the manifest, run the recording VM, note in the manifest how it ran (or why it did
    not: the VmError goes on up) and return the guest job's result (one disk or a cluster)."""
    recording.write(out, manifest)
    try:
        res = run_job(vmspec, spec.backend, spec.libvirt_uri, out, jobdir / "started")
    except VmError as e:
        manifest["recording"].update(status=e.kind, error=e.one_line())
        raise
    manifest["recording"].update(accel=res.accel, vm_wall_s=round(res.wall_s, 3),
                                 boot_to_workload_s=round(res.boot_s, 3) if res.boot_s else None)
    return guestjob.read_result(jobdir)


def ready(spec: RecordSpec, disks: int) -> tuple[RecordSpec, Any]:
    """``spec`` for a recording of ``disks`` disks (one latency setting and one fault plan per disk)
    and its guest image (built, or found cached), once the workload's name and parameters, and QEMU,
    are known good: a bad one fails here, before anything is written."""
    if spec.workload.name:
        workloads.get(spec.workload.name).params(spec.workload.params)  # unknown names/params fail here
    spec = dataclasses.replace(spec, latency=spec.latency_for(disks), workload=spec.workload_for(disks))
    if spec.backend == "qemu":
        process.require(QEMU, "qemu-system-x86")
    return spec, build_image(ImageSpec(**spec.image))


def record(spec: RecordSpec, out: str | os.PathLike, *, force: bool = False) -> Recording:
    """Record ``spec.workload`` on ``spec.fs`` into the directory ``out``.  On any failure (or an
    interrupt) the directory is kept with a manifest whose status says what happened, and the
    error is raised."""

    spec, image = ready(spec, 1)
    out = Path(out).absolute()
    with runlock.hold(out, "--out"):   # no other run records into it meanwhile
        prepare_outdir(out, force)
        data_bytes = spec.fs.size_mb << 20
        need = data_bytes + spec.log_bytes()
        free = shutil.disk_usage(out).free
        if free < need:
            raise PowercutError(f"not enough free space in {out}: {free >> 20} MiB free, a recording may need up "
                                f"to {need >> 20} MiB (data {spec.fs.size_mb} MiB + log {spec.log_bytes() >> 20} MiB)")
        _sparse(out / "data-final.img", data_bytes)
        _sparse(out / "log.bin", spec.log_bytes())
        jobdir = out / "job"
        guestjob.write(jobdir, guestjob.RecordJob(dm_name=DM_NAME, disks={"data": "pcdata", "log": "pclog"},
                                                  fs=spec.fs, workload=spec.workload, tools_dir=tools_dir(image) or "",
                                                  latency=str(spec.latency)))
        vmspec = vm_spec(spec, image, out, jobdir)
        manifest = base_manifest(spec, image, vmspec, data_bytes)
        with finishing(out, manifest):
            result = run_recording_vm(vmspec, spec, out, jobdir, manifest)
            data = {k: v for k, v in result.data.items() if k != "latency"}   # its own section, [latency]
            manifest["result"] = {"ok": result.ok, **data, **({"error": result.error} if result.error else {})}
            if isinstance(result.get("latency"), dict):
                manifest["latency"] = dict(result.get("latency"))
            judge_result(result, manifest, out)
            if result.get("file_map"):
                manifest["files"] = {**manifest.get("files", {}), "map": f"job/{result.get('file_map')}"}
            note_trace(result, manifest, spec.workload.trace)
            manifest["log"].update(recording.pin_log(out / "log.bin"))   # what check/replay/repro verify
            manifest["marks"] = marks_of(out / "log.bin")
            if section := faults_section(out / "log.bin", result.get("fault_plan"), bool(result.get("fault_left_on"))):
                manifest["faults"] = {**section, "workload_rc": int(result.get("workload_rc") or 0)}
        return Recording(out, manifest)


def note_trace(result: guestjob.GuestResult, manifest: dict[str, Any], asked: bool) -> None:
    """The manifest's ``[trace]`` (one disk or a cluster): the trace file in the job directory, or
    why there is none when one was ``asked`` for."""
    if result.get("trace_file"):
        manifest["trace"] = {"file": f"job/{result.get('trace_file')}", "bytes": int(result.get("trace_bytes") or 0)}
    elif asked:
        manifest["trace"] = {"error": str(result.get("trace_error") or "no trace")}


def faults_section(log_path: Path, plan: dict[str, Any] | None, left_on: bool) -> dict[str, Any]:
    """The manifest's [faults] of one log (a cluster's: per node): its fault windows, the commits
    acked after an error, whether the workload left the fault on, the plan; {} with no window."""
    faults = _faults(log_path)
    if not faults:
        return {}
    return {"windows": [w.describe() for w in faults.windows], "acked_after_error": list(faults.after_error),
            "left_on": left_on, **({"plan": plan.get("plan")} if plan else {})}


def cluster_faults(out: Path, logs: list[str], result: guestjob.GuestResult) -> dict[str, Any]:
    """A cluster recording's [faults]: each node's section with its ``node``; {} with no window."""
    plans = {p.get("node"): p for p in result.get("fault_plans") or []}
    left = set(result.get("fault_left_on") or [])
    nodes = [{"node": i, **sec} for i, name in enumerate(logs)
             if (sec := faults_section(out / name, plans.get(i), i in left))]
    return {"workload_rc": int(result.get("workload_rc") or 0), "node": nodes} if nodes else {}


@contextlib.contextmanager
def finishing(out: Path, manifest: dict[str, Any]) -> Iterator[None]:
    """Around a recording VM's run and what is read from it (one disk or a cluster): the manifest's
    status is ``ok`` when the body ends, ``interrupted`` on an interrupt (raised on), and as the
    body's error left it otherwise; its wall time and the manifest are written however it ends."""
    start = time.monotonic()
    try:
        yield
        manifest["recording"]["status"] = recording.OK
    except KeyboardInterrupt as e:
        manifest["recording"].update(status=recording.INTERRUPTED, error=str(e) or "interrupted")
        raise
    finally:
        manifest["recording"]["wall_s"] = round(time.monotonic() - start, 3)
        recording.write(out, manifest)


def marks_of(path: Path) -> dict[str, Any]:
    """The manifest's [marks]: how many key marks the log orders after every write completed before
    them (core/models.py, blind spot (c)); ``ordered`` false means the old false alarm is possible."""
    with open_log(path) as index:
        return mark_order(index.entries)


def _faults(path: Path) -> Faults:
    """The log's fault windows (core/faultwindows.py); none when the log cannot be read."""
    try:
        with open_log(path) as index:
            return Faults.from_marks(index.marks())
    except (PowercutError, ValueError, OSError):
        return Faults()


def base_manifest(spec: RecordSpec, image: Any, vmspec: VmSpec, data_bytes: int) -> dict[str, Any]:
    return {
        "recording": {"format": FORMAT_VERSION, "status": recording.RUNNING,
                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "backend": spec.backend, "image": image.hash,
                      "kernel_release": image.kernel_release, "image_source": image.source},
        "fs": to_dict(spec.fs), "workload": to_dict(spec.workload), "latency": spec.latency.to_json(),
        "vm": {"memory_mb": spec.memory_mb, "cpus": spec.cpus, "bus": spec.bus, "transport": spec.transport,
               "disk_cache": "unsafe", "write_cache": True, "machine": vmspec.resolved_machine()},
        "data": {"initial": "zeros", "size_bytes": data_bytes, "final": "data-final.img"},
        "log": {"file": "log.bin", "device_bytes": spec.log_bytes()},
        "files": {"console": "console.log", "job": "job"},
    }


def judge_result(result: guestjob.GuestResult, manifest: dict[str, Any], out: Path,
                 logs: tuple[str, ...] = ("log.bin",)) -> None:
    """The recording's status from the guest's result (raised on unless ok); ``logs``: its log files
    (a cluster's, one per node), whose fault windows excuse a workload that exits after an error."""
    rec = manifest["recording"]
    if not result.ok:
        rec.update(status="guest-error", error=result.error or "guest job failed")
        raise PowercutError(f"recording failed in the guest: {rec['error']} (see {out}/job/agent.log)")
    if result.get("logging_disabled"):
        rec.update(status="log-full", error="dm-log-writes ran out of log space")
        raise LogDeviceFull(f"the log device filled up: the log is incomplete; record again with a larger "
                            f"--log-size (now {manifest['log']['device_bytes'] >> 20} MiB)")
    if result.get("workload_timed_out"):
        rec.update(status="workload-timeout", error="workload killed by its timeout")
        raise WorkloadFailed(f"the workload did not finish within {manifest['workload']['timeout_s']:g} s and "
                             f"was killed (see {out}/job/workload.err)")
    plans = [result.get("fault_plan")] if result.get("fault_plan") else list(result.get("fault_plans") or [])
    for plan in plans:   # one disk's, or each planned node's (``node``) of a cluster
        if plan.get("error") or not plan.get("on"):
            node = f"node {plan['node']}: " if "node" in plan else ""
            why = node + (plan.get("error") or (f"the fault plan '{plan['plan']}' never fired" +
                                                (f" ({plan.get('matches', 0)} marks matched its trigger)"
                                                 if "mark=" in plan["plan"] or "p=" in plan["plan"] else "") +
                                                ": nothing was injected, so nothing about errors would be tested"))
            rec.update(status="fault-plan-failed", error=why)
            raise WorkloadFailed(f"{why} (see {out}/job/workload.err)")
    if result.get("workload_rc") and any(_faults(out / name) for name in logs):
        log.info("the workload exited %s after an injected I/O error: recorded", result.get("workload_rc"))
    elif result.get("workload_rc"):
        rc = result.get("workload_rc")
        tail = _tail(out / "job" / "workload.err")
        rec.update(status="workload-failed", error=f"workload exited {rc}")
        raise WorkloadFailed(f"the workload exited {rc}" + (f": {tail}" if tail else "") +
                             f" (see {out}/job/workload.err)")


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""

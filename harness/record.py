"""The host-side half of a recording: prepare disks and the job share, boot the VM, collect the log.

A recording directory holds::

    manifest.toml     what ran, on what, how it ended (TOML; see Recording)
    log.bin           the dm-log-writes log (the log disk, sparse)
    data-final.img    the data disk after the run (= replaying the whole log onto the initial state)
    console.log       the guest's serial console
    job/              job.json, job.sh, agent.log, workload.out/.err, result.json
    qemu.argv, qemu.stderr

The initial data-disk state is all zeros (mkfs runs through the log), recorded as such."""
from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import process
from .config import DiskSpec, FsSpec, ShareSpec, VmSpec, WorkloadSpec, dumps_toml, loads_toml, to_dict
from .errors import (BadRecording, LogDeviceFull, PowercutError, UsageError, VmError, WorkloadFailed)

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
DM_NAME = "powercut-rec"
MANIFEST = "manifest.toml"


@dataclass(frozen=True, slots=True)
class RecordSpec:
    fs: FsSpec = FsSpec()
    workload: WorkloadSpec = WorkloadSpec(name="append-fsync")
    log_size_mb: int = 0          # 0: sized from the data disk
    memory_mb: int = 1024
    cpus: int = 1
    bus: str = "virtio"
    transport: str = "9p"
    accel: str = "auto"
    timeout_s: float = 900.0
    backend: str = "qemu"
    libvirt_uri: str = "qemu:///system"
    image: dict[str, Any] = field(default_factory=dict)

    def log_bytes(self) -> int:
        mb = self.log_size_mb or max(4 * self.fs.size_mb + 64, 512)
        return mb << 20


@dataclass(frozen=True, slots=True)
class Recording:
    dir: Path
    manifest: dict[str, Any]

    @property
    def log_path(self) -> Path:
        return self.dir / self.manifest["log"]["file"]

    @property
    def final_image(self) -> Path:
        return self.dir / self.manifest["data"]["final"]

    @property
    def data_size(self) -> int:
        return int(self.manifest["data"]["size_bytes"])

    @property
    def ok(self) -> bool:
        return self.manifest["recording"]["status"] == "ok"


def load_recording(path: str | os.PathLike) -> Recording:
    p = Path(path)
    if not (p / MANIFEST).is_file():
        raise BadRecording(f"{p}: not a recording (no {MANIFEST})")
    m = loads_toml((p / MANIFEST).read_text(), str(p / MANIFEST))
    for section in ("recording", "log", "data", "fs", "workload"):
        if section not in m:
            raise BadRecording(f"{p / MANIFEST}: no [{section}] section")
    return Recording(p, m)


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def job_script(jobdir_in_guest: str) -> str:
    scripts = os.path.dirname(sys.executable)
    path = f"{scripts}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return ("#!/bin/sh\n# written by powercut: runs the guest agent in the guest\n"
            f"exec /usr/bin/env -i PATH={shlex.quote(path)} HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "
            f"{shlex.quote(sys.executable)} -m powercut.guest {jobdir_in_guest}/job.json\n")


def vm_spec(spec: RecordSpec, image: Any, out: Path, jobdir: Path) -> VmSpec:
    disks = (DiskSpec(str(out / "data-final.img"), "pcdata", bus=spec.bus, cache="unsafe", write_cache=True),  # type: ignore[arg-type]
             DiskSpec(str(out / "log.bin"), "pclog", bus=spec.bus, cache="unsafe", write_cache=True))  # type: ignore[arg-type]
    return VmSpec(kernel=image.kernel, initrd=image.initrd, memory_mb=spec.memory_mb, cpus=spec.cpus, disks=disks,
                  shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(jobdir), readonly=False)),
                  transport=spec.transport, accel=spec.accel, timeout_s=spec.timeout_s,  # type: ignore[arg-type]
                  console_path=str(out / "console.log"), name=f"powercut-record-{os.getpid()}",
                  modules=(spec.fs.fstype,))


def run_job(vmspec: VmSpec, backend: str, uri: str, rundir: Path, start_marker: Path | None):
    """Run a VmSpec on the chosen backend (qemu or libvirt)."""
    if backend == "libvirt":
        from .vm.libvirt import run_vm_libvirt
        return run_vm_libvirt(vmspec, uri=uri, rundir=rundir, start_marker=start_marker)
    if backend != "qemu":
        raise UsageError(f"unknown backend {backend!r}: qemu or libvirt")
    from .vm.qemu import run_vm
    return run_vm(vmspec, rundir=rundir, start_marker=start_marker)


def prepare_outdir(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"{out} exists and is not empty (use --force to replace it)")
        if not (out / MANIFEST).exists() and not (out / "job").exists():
            raise UsageError(f"{out} is not a recording; refusing to delete it even with --force")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def record(spec: RecordSpec, out: str | os.PathLike, *, force: bool = False) -> Recording:
    """Record ``spec.workload`` on ``spec.fs`` into the directory ``out``.  On any failure the
    directory is kept with a manifest whose status says what went wrong, and the error is raised."""
    from powercut.images.build import ImageSpec, build_image, tools_dir

    from . import workload as workloads

    if spec.workload.name:
        workloads.get(spec.workload.name).params(spec.workload.params)  # unknown names/params fail here
    if spec.backend == "qemu":
        from .vm.qemu import QEMU
        process.require(QEMU, "qemu-system-x86")
    image = build_image(ImageSpec(**spec.image))
    out = Path(out).absolute()
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
    jobdir.mkdir()
    job = {"kind": "record", "dm_name": DM_NAME, "disks": {"data": "pcdata", "log": "pclog"},
           "fs": to_dict(spec.fs), "workload": to_dict(spec.workload), "tools_dir": tools_dir(image)}
    (jobdir / "job.json").write_text(json.dumps(job, indent=1))
    (jobdir / "job.sh").write_text(job_script("/run/powercut/job"))
    vmspec = vm_spec(spec, image, out, jobdir)
    manifest: dict[str, Any] = {
        "recording": {"format": FORMAT_VERSION, "status": "running", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                      "backend": spec.backend, "image": image.hash, "kernel_release": image.kernel_release,
                      "image_source": image.source},
        "fs": to_dict(spec.fs), "workload": to_dict(spec.workload),
        "vm": {"memory_mb": spec.memory_mb, "cpus": spec.cpus, "bus": spec.bus, "transport": spec.transport,
               "disk_cache": "unsafe", "write_cache": True, "machine": vmspec.resolved_machine()},
        "data": {"initial": "zeros", "size_bytes": data_bytes, "final": "data-final.img"},
        "log": {"file": "log.bin", "device_bytes": spec.log_bytes()},
        "files": {"console": "console.log", "job": "job"},
    }
    start = time.monotonic()
    try:
        try:
            res = run_job(vmspec, spec.backend, spec.libvirt_uri, out, jobdir / "started")
        except VmError as e:
            manifest["recording"].update(status=e.kind, error=e.one_line())
            raise
        manifest["recording"].update(accel=res.accel, vm_wall_s=round(res.wall_s, 3),
                                     boot_to_workload_s=round(res.boot_s, 3) if res.boot_s else None)
        result = _read_result(jobdir)
        manifest["result"] = result
        _judge(result, res.exit_status, manifest, out)
        manifest["recording"]["status"] = "ok"
    finally:
        manifest["recording"]["wall_s"] = round(time.monotonic() - start, 3)
        (out / MANIFEST).write_text(dumps_toml(manifest))
    return Recording(out, manifest)


def _read_result(jobdir: Path) -> dict[str, Any]:
    try:
        return json.loads((jobdir / "result.json").read_text())
    except (OSError, ValueError):
        return {"ok": False, "error": "the guest agent wrote no result (see job/agent.log and console.log)"}


def _judge(result: dict[str, Any], exit_status: int, manifest: dict[str, Any], out: Path) -> None:
    rec = manifest["recording"]
    if not result.get("ok"):
        rec.update(status="guest-error", error=result.get("error", f"guest job exited {exit_status}"))
        raise PowercutError(f"recording failed in the guest: {rec['error']} (see {out}/job/agent.log)")
    if result.get("logging_disabled"):
        rec.update(status="log-full", error="dm-log-writes ran out of log space")
        raise LogDeviceFull(f"the log device filled up: the log is incomplete; record again with a larger "
                            f"--log-size (now {manifest['log']['device_bytes'] >> 20} MiB)")
    if result.get("workload_timed_out"):
        rec.update(status="workload-timeout", error="workload killed by its timeout")
        raise WorkloadFailed(f"the workload did not finish within {manifest['workload']['timeout_s']:g} s and "
                             f"was killed (see {out}/job/workload.err)")
    if result.get("workload_rc"):
        rc = result["workload_rc"]
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

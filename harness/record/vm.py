"""The host half of a recording, of one data disk or of a cluster's N (one VM, guest/record.py):
prepare the disks and the job share, boot the VM, collect the logs into a recording directory
(layout and manifest: record/recording.py).

The initial data-disk state is all zeros (mkfs runs through the log), recorded as such -- or, for
crash, recover, crash again (``record --from REC --state ID``, ``Start``), the crash state ID of
the recording REC, replayed here into ``initial.img`` and recorded as the data disk's initial
image: the guest makes no filesystem, logs that state's acks and begun keys as marks before it
mounts, then mounts (the kernel's recovery of the crash state is the new log's first writes) and
runs the workload (the program's recovery, then what follows it).  An
interrupt (SIGINT/SIGTERM/SIGHUP) kills the VM on the way out and leaves the manifest with status
``interrupted``."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
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
from powercut.core.log.dmlog import open_log
from powercut.core.log.faultwindows import Faults
from powercut.core.log.markorder import mark_order
from powercut.core.recording import syncdelay
from powercut.core.recording.latency import DiskLatency, LatencyError, NodesLatency
from powercut.core.states.models import state_from_id
from powercut.core.states.nodes import MAX_NODES
from powercut.errors import LogDeviceFull, PowercutError, UsageError, VmError, WorkloadFailed
from powercut.images.build import ImageSpec, build_image, tools_dir
from powercut.linux import filesystems, process, runlock
from powercut.linux.imageio import sparse_copy
from powercut.record import recording
from powercut.record.recording import FORMAT_VERSION, MANIFEST, Recording
from powercut.vm import guestjob
from powercut.vm.libvirt import run_vm_libvirt
from powercut.vm.qemu import QEMU, run_vm
from powercut.vmstart import template

log = logging.getLogger(__name__)

DM_NAME = "powercut-rec"
INITIAL = "initial.img"  # a recording's data disk before its log, when it is not zeros (--from)


@dataclass(frozen=True, slots=True)
class Start:
    """Crash, recover, crash again: record from the crash state ``state`` of the recording
    ``recording`` (one disk's) instead of an empty disk."""

    recording: Path
    state: str


@dataclass(frozen=True, slots=True)
class RecordSpec:
    fs: FsSpec = field(default_factory=FsSpec)
    workload: WorkloadSpec = WorkloadSpec(name="append-fsync")
    log_size_mb: int = 0  # 0: sized from the data disk
    memory_mb: int = DEFAULT_MEMORY_MB
    cpus: int = DEFAULT_CPUS
    bus: str = DEFAULT_BUS
    transport: str = DEFAULT_TRANSPORT
    accel: str = DEFAULT_ACCEL
    timeout_s: float = RECORD_TIMEOUT_S
    backend: str = DEFAULT_BACKEND
    libvirt_uri: str = DEFAULT_LIBVIRT_URI
    image: dict[str, Any] = field(default_factory=dict)
    latency: NodesLatency = (
        DEFAULT_DISK_LATENCY  # the data disks' write and flush latency (core/recording/latency.py)
    )
    start: Start | None = None  # record from another recording's crash state (--from, --state)

    def __post_init__(self) -> None:
        if isinstance(
            self.latency, DiskLatency
        ):  # one setting for every disk, as the library took it before
            object.__setattr__(self, "latency", NodesLatency(self.latency))

    def latency_for(self, disks: int) -> NodesLatency:
        """The latency for a recording of ``disks`` data disks; UsageError if it names a node beyond them."""
        try:
            return self.latency.for_nodes(disks)
        except LatencyError as e:
            raise UsageError(f"--disk-latency: {e}") from None

    def workload_for(self, disks: int) -> WorkloadSpec:
        """The workload with its fault setting for ``disks`` data disks (core/recording/nodefaults.NodesFaults);
        UsageError if it names a node beyond them or gives a cluster a plan without a node."""
        return dataclasses.replace(self.workload, fault=fault_for(self.workload.fault, disks))

    def log_bytes(self) -> int:
        mb = self.log_size_mb or max(4 * self.fs.size_mb + 64, 512)
        return mb << 20


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def disk_files(i: int, disks: int) -> tuple[str, str]:
    """(log, final data image) file names of data disk i: ``log.bin`` and ``data-final.img`` for one
    disk, ``log-n<i>.bin`` and ``data-n<i>-final.img`` for a cluster's node i."""
    return (
        ("log.bin", "data-final.img") if disks == 1 else (f"log-n{i}.bin", f"data-n{i}-final.img")
    )


def disk_serials(i: int) -> tuple[str, str]:
    """The QEMU serials of node i's data and log disks (the guest finds them by these)."""
    return (f"pcdata{i}", f"pclog{i}")


def vm_disks(
    spec: RecordSpec, out: Path, nodes: int
) -> tuple[tuple[DiskSpec, ...], dict[str, str]]:
    """The recording VM's disks (each data disk's image, then its log) and the guest job's roles of them."""
    disks: list[DiskSpec] = []
    roles: dict[str, str] = {}
    for i in range(nodes):
        (logf, final), serials = disk_files(i, nodes), disk_serials(i)
        disks += [
            DiskSpec(str(out / final), serials[0], bus=spec.bus, cache="unsafe", write_cache=True),  # type: ignore[arg-type]
            DiskSpec(str(out / logf), serials[1], bus=spec.bus, cache="unsafe", write_cache=True),  # type: ignore[arg-type]
        ]
        roles.update(zip(guestjob.record_roles(i), serials))
    return tuple(disks), roles


def vm_spec(
    spec: RecordSpec, image: Any, out: Path, jobdir: Path, disks: tuple[DiskSpec, ...]
) -> VmSpec:
    """The recording VM: ``disks`` (each data disk's, then its log's), the host's root and the job
    directory shared."""
    return VmSpec(
        kernel=image.kernel,
        initrd=image.initrd,
        memory_mb=spec.memory_mb,
        cpus=spec.cpus,
        disks=disks,
        shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(jobdir), readonly=False)),
        transport=spec.transport,  # type: ignore[arg-type]
        accel=spec.accel,  # type: ignore[arg-type]
        timeout_s=spec.timeout_s,
        console_path=str(out / "console.log"),
        name=f"powercut-record-{os.getpid()}",
        modules=(filesystems.get(spec.fs.fstype).module_group, "record"),
    )


def run_job(vmspec: VmSpec, backend: str, uri: str, rundir: Path, start_marker: Path | None):
    """Run a VmSpec on the chosen backend (qemu or libvirt).  On QEMU here a recording VM starts
    from a saved template of its shape (vmstart/template.py: kernel, initramfs and the agent's start
    done once, ~6 s of a TCG recording VM's ~14 s), with its control disk in the job directory."""
    if backend == "libvirt":
        return run_vm_libvirt(vmspec, uri=uri, rundir=rundir, start_marker=start_marker)
    if backend != "qemu":
        raise UsageError(f"unknown backend {backend!r}: qemu or libvirt")
    start = lambda spec: run_vm(spec, rundir=rundir, start_marker=start_marker)  # noqa: E731
    if start_marker is None:
        return start(vmspec)
    try:
        return template.run_restored(
            vmspec, start_marker.parent, start
        )  # boots it when it is not eligible
    finally:
        (start_marker.parent / template.CONTROL.path).unlink(missing_ok=True)


# what powercut itself puts in a recording directory (the recording, its check, the matrix's extras)
OWN_FILES = frozenset(
    {
        MANIFEST,
        f".{MANIFEST}.tmp",
        "log.bin",
        "data-final.img",
        INITIAL,
        f".{INITIAL}.partial",
        "console.log",
        "job",
        "check",
        "qemu.argv",
        "qemu.stderr",
        "domain.xml",
        "libvirt-qemu.log",
        "accel-probe-console.log",
        "untorn",
        "diagnose",
        "report",
    }
    | {f for i in range(MAX_NODES) for f in disk_files(i, MAX_NODES)}
)  # clusters


def prepare_outdir(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()):
        if not force:
            raise UsageError(f"{out} exists and is not empty (use --force to replace it)")
        if not (out / MANIFEST).exists() and not (out / "job").exists():
            raise UsageError(f"{out} is not a recording; refusing to delete it even with --force")
        foreign = sorted(
            p.name
            for p in out.iterdir()
            if p.name not in OWN_FILES and not p.name.startswith("virtiofsd")
        )
        if foreign:
            raise UsageError(
                f"{out} holds files powercut did not make ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}): refusing to delete them even with --force; "
                "move them or choose another --out"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def run_recording_vm(
    vmspec: VmSpec, spec: RecordSpec, out: Path, jobdir: Path, manifest: dict[str, Any]
) -> guestjob.GuestResult:
    """Write the manifest, run the recording VM, note in the manifest how it ran (or why it did
    not: the VmError goes on up) and return the guest job's result (one disk or a cluster)."""
    recording.write(out, manifest)
    try:
        res = run_job(vmspec, spec.backend, spec.libvirt_uri, out, jobdir / "started")
    except VmError as e:
        manifest["recording"].update(status=e.kind, error=e.one_line())
        raise
    manifest["recording"].update(
        accel=res.accel,
        vm_wall_s=round(res.wall_s, 3),
        boot_to_workload_s=round(res.boot_s, 3) if res.boot_s else None,
    )
    return guestjob.read_result(jobdir)


def ready(spec: RecordSpec, disks: int) -> tuple[RecordSpec, Any]:
    """``spec`` for a recording of ``disks`` disks (one latency setting and one fault plan per disk)
    and its guest image (built, or found cached), once the workload's name and parameters, and QEMU,
    are known good: a bad one fails here, before anything is written."""
    if spec.workload.name:
        named = workloads.get(spec.workload.name)
        named.params(spec.workload.params)  # unknown names/params fail here
        if disks > 1 and not named.nodes:
            raise UsageError(
                f"workload {named.name} writes to one disk: --nodes {disks} would record "
                f"{disks - 1} idle node(s) and judge its acks where it never wrote them; give a "
                f"cluster workload ({', '.join(n for n in workloads.names() if workloads.get(n).nodes)}) "
                "or --cmd with a program that uses $POWERCUT_MOUNTS"
            )
    spec = dataclasses.replace(
        spec, latency=spec.latency_for(disks), workload=spec.workload_for(disks)
    )
    if spec.backend == "qemu":
        process.require(QEMU, "qemu-system-x86")
    return spec, build_image(ImageSpec(**spec.image))


def check_nodes(nodes: int) -> None:
    """UsageError unless ``nodes`` is a number of data disks a recording can have."""
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes must be 1..{MAX_NODES}, not {nodes!r}")


Replayer = Callable[..., Path]  # replay/materialize.replay_state: (recording, state id, image)


def record(
    spec: RecordSpec,
    out: str | os.PathLike,
    *,
    nodes: int = 1,
    force: bool = False,
    replayer: Replayer | None = None,
) -> Recording:
    """Record ``spec.workload`` on ``nodes`` data disks (each ``spec.fs``; one: a single disk, more:
    a cluster's nodes, in one VM) into the directory ``out``.  On any failure (or an interrupt) the
    directory is kept with a manifest whose status says what happened, and the error is raised.

    Why one VM for a cluster: the marks that define a cluster crash instant (core/states/nodes.py) must
    reach every node's log in the same order, under one lock.  In one guest that lock is an flock
    and the order is the order of a few ioctls; with one VM per node it would be a network round
    trip per mark and per node, and the logs would share no clock.  One VM also costs one boot, not
    N (docs/clusters.md has the figures).  What one VM cannot show -- a network between the nodes,
    independent kernels -- does not change what reaches each disk, which is what a power cut judges.

    Layout: per disk its log and final image (``disk_files``); the manifest names them in one
    [[node]] table per disk, whatever their number (record/recording.py), with its pinned log and
    what the guest said of that disk.

    ``spec.start`` (crash, recover, crash again) needs ``replayer``, replay/materialize.replay_state,
    given by the caller: the replay stack is a layer above the recording's."""
    check_nodes(nodes)
    first = None
    if spec.start is not None:
        if replayer is None:
            raise UsageError("a recording from a crash state needs the replayer (replay_state)")
        spec, first = starting_from(spec, nodes)
    spec, image = ready(spec, nodes)
    out = Path(out).absolute()
    with runlock.hold(out, "--out"):  # no other run records into it meanwhile
        prepare_outdir(out, force)
        data_bytes = spec.fs.size_mb << 20
        need = nodes * (data_bytes + spec.log_bytes())
        free = shutil.disk_usage(out).free
        if free < need:
            what = f"data {spec.fs.size_mb} MiB + log {spec.log_bytes() >> 20} MiB" + (
                f", per node of {nodes}" if nodes > 1 else ""
            )
            raise PowercutError(
                f"not enough free space in {out}: {free >> 20} MiB free, a recording may need up "
                f"to {need >> 20} MiB ({what})"
            )
        for i in range(nodes):
            for name, size in zip(disk_files(i, nodes), (spec.log_bytes(), data_bytes)):
                _sparse(out / name, size)
        prior: tuple[str, ...] = ()
        if spec.start is not None and first is not None and replayer is not None:
            prior = start_image(
                first, spec.start.state, out, out / disk_files(0, nodes)[1], replayer
            )
        disks, roles = vm_disks(spec, out, nodes)
        jobdir = out / "job"
        guestjob.write(
            jobdir,
            guestjob.RecordJob(
                dm_name=DM_NAME,
                disks=roles,
                fs=spec.fs,
                workload=spec.workload,
                tools_dir=tools_dir(image) or "",
                nodes=nodes,
                latency=str(spec.latency),
                mkfs=spec.start is None,
                prior=prior,
            ),
        )
        vmspec = vm_spec(spec, image, out, jobdir, disks)
        manifest = base_manifest(spec, image, vmspec, data_bytes)
        manifest["node"] = [recording.node_table(*disk_files(i, nodes)) for i in range(nodes)]
        if spec.start is not None and first is not None:
            manifest["data"]["initial"] = INITIAL
            manifest["from"] = from_section(first, spec.start.state, prior)
        logs = [t["log"] for t in manifest["node"]]
        with finishing(out, manifest):
            result = run_recording_vm(vmspec, spec, out, jobdir, manifest)
            per_disk = per_disk_results(result, nodes)
            manifest["result"] = {
                "ok": result.ok,
                **result_section(result),
                **({"error": result.error} if result.error else {}),
            }
            note_nodes(per_disk, manifest["node"])
            if per_disk and all(
                isinstance(d.get("latency"), dict) for d in per_disk
            ):  # each delay layer, as made
                manifest["latency"] = (
                    per_disk[0]["latency"]
                    if nodes == 1
                    else {"setting": str(spec.latency), "nodes": [d["latency"] for d in per_disk]}
                )
            judge_result(result, per_disk, manifest, out, logs)
            note_trace(
                result, manifest, spec.workload.trace
            )  # one trace: a cluster's client and every node
            for table in manifest["node"]:
                table.update(recording.pin_log(out / table["log"]))  # what check/repro verify
            manifest["marks"] = marks_of(out / logs[0])
            if section := faults_of(out, logs, per_disk, int(result.get("workload_rc") or 0)):
                manifest["faults"] = section
        return recording.of(out, manifest)


def per_disk_results(result: guestjob.GuestResult, disks: int) -> list[dict[str, Any]]:
    """The guest's ``disks`` (one dict per data disk, guest/record.py); empty when it has none (a
    failed job)."""
    got = result.get("disks")
    return [dict(d) for d in got] if isinstance(got, list) and len(got) == disks else []


def result_section(result: guestjob.GuestResult) -> dict[str, Any]:
    """The manifest's [result]: what the guest said of the whole job (each disk's values go to its
    [[node]] table: ``note_nodes``)."""
    return {k: v for k, v in result.data.items() if k != "disks"}


def note_nodes(per_disk: list[dict[str, Any]], tables: list[dict[str, Any]]) -> None:
    """Each disk's values from the guest (its target's write cache and status, logged entries,
    fault plan, whether a fault was left on, ...) into its [[node]] table; its file map as the
    path in the recording (``job/<map>``); its delay layer stays in [latency]."""
    for d, table in zip(per_disk, tables):
        table.update({k: v for k, v in d.items() if k not in ("latency", "file_map")})
        if d.get("file_map"):
            table["file_map"] = f"job/{d['file_map']}"


def note_trace(result: guestjob.GuestResult, manifest: dict[str, Any], asked: bool) -> None:
    """The manifest's ``[trace]``: the trace file in the job directory, or why there is none when
    one was ``asked`` for."""
    if result.get("trace_file"):
        manifest["trace"] = {
            "file": f"job/{result.get('trace_file')}",
            "bytes": int(result.get("trace_bytes") or 0),
        }
    elif asked:
        manifest["trace"] = {"error": str(result.get("trace_error") or "no trace")}


def faults_section(log_path: Path, plan: dict[str, Any] | None, left_on: bool) -> dict[str, Any]:
    """The [faults] of one log: its fault windows, the commits acked after an error, whether the
    workload left the fault on, the plan; {} with no window."""
    faults = _faults(log_path)
    if not faults:
        return {}
    return {
        "windows": [w.describe() for w in faults.windows],
        "acked_after_error": list(faults.after_error),
        "left_on": left_on,
        **({"plan": plan.get("plan")} if plan else {}),
    }


def faults_of(
    out: Path, logs: list[str], per_disk: list[dict[str, Any]], rc: int
) -> dict[str, Any]:
    """The manifest's [faults]: the workload's exit status and each faulted node's section (its
    ``node``); {} with no window on any node."""
    per_disk = per_disk or [{} for _ in logs]
    secs = [
        faults_section(out / name, d.get("fault_plan"), bool(d.get("fault_left_on")))
        for name, d in zip(logs, per_disk)
    ]
    nodes = [{"node": i, **sec} for i, sec in enumerate(secs) if sec]
    return {"workload_rc": rc, "node": nodes} if nodes else {}


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
    them (core/states/models.py, blind spot (c)); ``ordered`` false means the old false alarm is possible."""
    with open_log(path) as index:
        return mark_order(index.entries)


def _faults(path: Path) -> Faults:
    """The log's fault windows (core/log/faultwindows.py); none when the log cannot be read."""
    try:
        with open_log(path) as index:
            return Faults.from_marks(index.marks())
    except (PowercutError, ValueError, OSError):
        return Faults()


def starting_from(spec: RecordSpec, nodes: int) -> tuple[RecordSpec, Recording]:
    """The spec of a recording from another's crash state: that recording's filesystem (type,
    size, mkfs and mount options), which it must have been made of one disk, whole."""
    assert spec.start is not None
    src = spec.start.recording
    if nodes != 1:
        raise UsageError(
            "--from: a recording of one data disk only (N nodes from a crash state is not built yet)"
        )
    first = recording.load(src)
    if len(first.nodes) != 1:
        raise UsageError(f"--from {src}: a recording of {len(first.nodes)} nodes; give one disk's")
    first.require_ok()
    recording.verify_logs(first)
    with open_log(first.log_path) as index:
        state_from_id(index, spec.start.state)  # a bad id: one line, before anything is written
    f = first.manifest["fs"]
    fs = FsSpec(
        fstype=str(f["fstype"]),
        mkfs_opts=tuple(f.get("mkfs_opts", ())),
        mount_opts=str(f.get("mount_opts", "")),
        size_mb=first.data_size >> 20,
    )
    return dataclasses.replace(spec, fs=fs), first


def start_image(
    first: Recording, state: str, out: Path, data: Path, replayer: Replayer
) -> tuple[str, ...]:
    """Replay ``first``'s crash state ``state`` into ``out/initial.img`` and the data disk ``data``;
    the state's marks for the guest to log before it mounts: an ``ack:`` per acknowledged key (they
    must survive every state of the new recording), a ``begin:`` per key begun and not acked."""
    with open_log(first.log_path) as index:
        st = state_from_id(index, state)  # a bad id: one UsageError line, nothing replayed
    replayer(first.dir, state, out / INITIAL)
    sparse_copy(out / INITIAL, data)
    acked = list(st.acks)
    done = set(acked)
    return (*(f"ack:{k}" for k in acked), *(f"begin:{k}" for k in st.begun if k not in done))


def from_section(first: Recording, state: str, prior: tuple[str, ...]) -> dict[str, Any]:
    """The manifest's [from]: the first recording, its state, its log's pin, and how many of that
    state's keys were acknowledged and begun."""
    return {
        "recording": str(first.dir),
        "state": state,
        "log_sha256": str(first.nodes[0].pin.get("sha256", "")),
        "acked": sum(m.startswith("ack:") for m in prior),
        "begun": sum(m.startswith("begin:") for m in prior),
    }


def base_manifest(spec: RecordSpec, image: Any, vmspec: VmSpec, data_bytes: int) -> dict[str, Any]:
    return {
        "recording": {
            "format": FORMAT_VERSION,
            "status": recording.RUNNING,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "backend": spec.backend,
            "image": image.hash,
            "kernel_release": image.kernel_release,
            "image_source": image.source,
        },
        "fs": to_dict(spec.fs),
        "workload": to_dict(spec.workload),
        "latency": spec.latency.to_json(),
        "vm": {
            "memory_mb": spec.memory_mb,
            "cpus": spec.cpus,
            "bus": spec.bus,
            "transport": spec.transport,
            "disk_cache": "unsafe",
            "write_cache": True,
            "machine": vmspec.resolved_machine(),
        },
        "data": {"initial": "zeros", "size_bytes": data_bytes},
        "log": {"device_bytes": spec.log_bytes()},
        "files": {"console": "console.log", "job": "job"},
    }


def judge_result(
    result: guestjob.GuestResult,
    per_disk: list[dict[str, Any]],
    manifest: dict[str, Any],
    out: Path,
    logs: list[str],
) -> None:
    """The recording's status from the guest's result and its disks' (raised on unless ok); ``logs``:
    its log files, whose fault windows excuse a workload that exits after an error."""
    rec = manifest["recording"]
    if not result.ok:
        rec.update(status="guest-error", error=result.error or "guest job failed")
        raise PowercutError(
            f"recording failed in the guest: {rec['error']} (see {out}/job/agent.log)"
        )
    if any(d.get("logging_disabled") for d in per_disk):
        rec.update(status="log-full", error="dm-log-writes ran out of log space")
        raise LogDeviceFull(
            f"the log device filled up: the log is incomplete; record again with a larger "
            f"--log-size (now {manifest['log']['device_bytes'] >> 20} MiB)"
        )
    if result.get("workload_timed_out"):
        rec.update(status="workload-timeout", error="workload killed by its timeout")
        raise WorkloadFailed(
            f"the workload did not finish within {manifest['workload']['timeout_s']:g} s and "
            f"was killed (see {out}/job/workload.err)"
        )
    for i, d in enumerate(per_disk):  # each planned disk's plan (a cluster's named by its node)
        plan = d.get("fault_plan")
        if plan and (plan.get("error") or not plan.get("on")):
            node = f"node {i}: " if len(per_disk) > 1 else ""
            why = node + (
                plan.get("error")
                or (
                    f"the fault plan '{plan['plan']}' never fired"
                    + (
                        f" ({plan.get('matches', 0)} marks matched its trigger)"
                        if "mark=" in plan["plan"] or "p=" in plan["plan"]
                        else ""
                    )
                    + ": nothing was injected, so nothing about errors would be tested"
                )
            )
            rec.update(status="fault-plan-failed", error=why)
            raise WorkloadFailed(f"{why} (see {out}/job/workload.err)")
    delays = result.get("delay_sync")
    if isinstance(delays, dict) and not delays.get("held") and not result.get("workload_rc"):
        why = syncdelay.unused_note(
            [syncdelay.SyncDelay.parse(r) for r in delays.get("rules", [])], delays
        )
        rec.update(
            status="delay-sync-unused", error=why
        )  # a recording like any other: nothing new tested
        raise WorkloadFailed(f"{why} (the trace: {out}/job/)")
    if result.get("workload_rc") and any(_faults(out / name) for name in logs):
        log.info(
            "the workload exited %s after an injected I/O error: recorded",
            result.get("workload_rc"),
        )
    elif result.get("workload_rc"):
        rc = result.get("workload_rc")
        tail = _tail(out / "job" / "workload.err")
        rec.update(status="workload-failed", error=f"workload exited {rc}")
        raise WorkloadFailed(
            f"the workload exited {rc}"
            + (f": {tail}" if tail else "")
            + f" (see {out}/job/workload.err)"
        )


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""

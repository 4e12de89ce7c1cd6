"""The host half of ``powercut bench`` in a VM: one VM with the data disk (and, for the
recording-overhead suite, a log disk) on **AHCI**, so that ``hdparm -W`` reaches the emulated
drive, with a QEMU cache mode that honours the guest's flushes (``none`` by default; ``unsafe``,
which drops them, is refused); the guest half is guest/bench.py.  While the VM runs, the guest's
``progress.jsonl`` feeds a progress callback.  The result is a ``BenchResults`` whose meta says the
accel, the cache mode and the host file and device behind the disk.

A run directory holds ``results.json``, the plots, ``console.log``, ``qemu.argv`` and ``job/`` (the
agent log and every raw fio JSON / timing file / pg_test_fsync report); the disk images are deleted
at the end, also on an error or an interrupt."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import powercut
from powercut import workload as workloads
from powercut.bench import results as benchresults
from powercut.bench.host import describe, resolve_target, run_on_host
from powercut.bench.plan import count_items, needs_log_disk, plan
from powercut.bench.results import TCG_NOTE, BenchMeta, BenchResults, from_sets
from powercut.config import (
    BENCH_OUT,
    BENCH_QEMU_CACHE,
    BENCH_SUITE,
    CACHE_MODES,
    DEFAULT_ACCEL,
    DEFAULT_MEMORY_MB,
    DiskSpec,
    FsSpec,
    RunSet,
    ShareSpec,
    VmSpec,
)
from powercut.errors import PowercutError, UsageError
from powercut.images.build import ImageSpec, build_image, tools_dir
from powercut.linux import filesystems, jsonlines, process
from powercut.linux.mounts import mountinfo
from powercut.vm import guestjob
from powercut.vm.accel import resolve_accel
from powercut.vm.qemu import QEMU, build_argv, run_vm
from powercut.vmstart import template

log = logging.getLogger(__name__)

FLUSHING_CACHE_MODES = tuple(m for m in CACHE_MODES if m != "unsafe")
DATA_SERIAL, LOG_SERIAL = "pcbench", "pcbenchlog"
Progress = Callable[[int, int, str], None]  # (done, total, label of the item just done)


@dataclass(frozen=True, slots=True)
class BenchVmSpec:
    fs: FsSpec = field(default_factory=FsSpec)
    qemu_cache: str = BENCH_QEMU_CACHE
    accel: str = DEFAULT_ACCEL
    memory_mb: int = DEFAULT_MEMORY_MB
    timeout_s: float = 0.0  # 0: estimated from the items
    disk_dir: str = ""  # where the disk images go (default: the run directory)
    image: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.qemu_cache == "unsafe":
            raise UsageError(
                "--qemu-cache unsafe drops the guest's flushes: nothing durable would be timed; "
                f"use one of {', '.join(FLUSHING_CACHE_MODES)}"
            )
        if self.qemu_cache not in FLUSHING_CACHE_MODES:
            raise UsageError(
                f"--qemu-cache must be one of {', '.join(FLUSHING_CACHE_MODES)}, not {self.qemu_cache!r}"
            )


def estimate_timeout(runsets: tuple[RunSet, ...]) -> float:
    """Boot, one mkfs per run set, and each item's cap with room (pg_test_fsync runs 15 tests)."""
    per = sum(
        (it.runtime_s * 16 if it.kind == "pg_test_fsync" else it.runtime_s) + 60
        for rs in runsets
        for it in rs.items
    )
    return 300.0 + 60.0 * len(runsets) + per


def block_device_of(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(``/dev/NAME``, filesystem type) holding ``path`` on the host ("" where unknown)."""

    st = os.stat(path)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    name = ""
    try:
        for line in Path(f"/sys/dev/block/{majmin}/uevent").read_text().splitlines():
            if line.startswith("DEVNAME="):
                name = "/dev/" + line.split("=", 1)[1]
    except OSError:
        pass
    real = os.path.realpath(path)
    best = None
    for m in mountinfo():
        if m.dev == majmin and (real == m.target or real.startswith(m.target.rstrip("/") + "/")):
            if best is None or len(m.target) > len(best.target):
                best = m
    if best is not None and not name:
        name = best.source
    return name or f"device {majmin}", best.fstype if best else ""


def describe_backing(path: Path) -> str:
    dev, fstype = block_device_of(path)
    return f"{path} on {dev}" + (f" ({fstype})" if fstype else "")


def _check_direct_io(path: Path, cache: str) -> None:
    """cache=none/directsync open the image with O_DIRECT: refuse a filesystem without it (tmpfs)."""
    if cache not in ("none", "directsync"):
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    except OSError as e:
        raise UsageError(
            f"--qemu-cache {cache} needs O_DIRECT, which {path.parent} does not support "
            f"({e.strerror}); put the disk elsewhere (--disk-dir) or use --qemu-cache writeback"
        ) from None
    os.close(fd)


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def vm_spec(
    spec: BenchVmSpec, image: Any, rundir: Path, disks: list[tuple[Path, str]], timeout_s: float
) -> VmSpec:
    return VmSpec(
        kernel=image.kernel,
        initrd=image.initrd,
        memory_mb=spec.memory_mb,
        cpus=1,
        disks=tuple(
            DiskSpec(
                str(p),
                serial,
                bus="ahci",
                cache=spec.qemu_cache,  # type: ignore[arg-type]
                write_cache=True,
                discard=False,
            )
            for p, serial in disks
        ),
        shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(rundir / "job"), readonly=False)),
        accel=spec.accel,  # type: ignore[arg-type]
        timeout_s=timeout_s,
        console_path=str(rundir / "console.log"),
        name=f"powercut-bench-{os.getpid()}",
        modules=(filesystems.get(spec.fs.fstype).module_group, "record"),
    )


def prepare(
    spec: BenchVmSpec, runsets: tuple[RunSet, ...], rundir: Path
) -> tuple[Any, VmSpec, list[Path]]:
    """Build (or find) the image, write the job and the sparse disks: (image, VmSpec, disk paths)."""

    image = build_image(ImageSpec(**spec.image))
    rundir.mkdir(parents=True, exist_ok=True)
    disk_dir = Path(spec.disk_dir).absolute() if spec.disk_dir else rundir
    if not disk_dir.is_dir():
        raise UsageError(f"--disk-dir {disk_dir}: not a directory")
    disks = _disk_files(spec, runsets, disk_dir)
    _check_direct_io(disks[0][0], spec.qemu_cache)
    roles = dict(zip(("data", "log"), (serial for _, serial in disks), strict=False))
    job = guestjob.BenchJob(
        disks=roles, fs=spec.fs, runsets=runsets, tools_dir=tools_dir(image) or ""
    )
    guestjob.write(rundir / "job", job)
    timeout = spec.timeout_s or estimate_timeout(runsets)
    return image, vm_spec(spec, image, rundir, disks, timeout), [p for p, _ in disks]


def _disk_files(
    spec: BenchVmSpec, runsets: tuple[RunSet, ...], disk_dir: Path
) -> list[tuple[Path, str]]:
    """The bench VM's sparse disks in ``disk_dir``: (path, serial) of the data disk and, for the
    recording-overhead suite, the log disk."""
    disks = [(disk_dir / f"bench-data-{os.getpid()}.img", DATA_SERIAL)]
    if needs_log_disk(runsets):
        disks.append((disk_dir / f"bench-log-{os.getpid()}.img", LOG_SERIAL))
    for i, (path, _) in enumerate(disks):
        _sparse(path, (spec.fs.size_mb << 20) * (1 if i == 0 else 4) + (0 if i == 0 else 64 << 20))
    return disks


def start_vm(vmspec: VmSpec, rundir: Path, watchdog: Callable[[], str | None]) -> Any:
    """The bench VM, restored from a saved template of its shape where it can be (vmstart/
    template.py; its control disk in ``rundir``), else booted.  A boot spent ~10 s of the main job's
    ~34 s bench VM under TCG before the first item (2026-11-28).  Nothing timed runs before the
    restore: the restored VM runs the same kernel on the same emulated AHCI drive, with its write
    cache as a boot leaves it (on) and no disk block cached (the template agent dropped them), and
    each run set sets the cache and makes its filesystem anew, as after a boot."""
    start = lambda spec: run_vm(spec, rundir=rundir, start_marker=None, watchdog=watchdog)  # noqa: E731
    try:
        return template.run_restored(vmspec, rundir, start)  # boots it when it is not eligible
    finally:
        (rundir / template.CONTROL.path).unlink(missing_ok=True)


def prewarm(spec: BenchVmSpec, runsets: tuple[RunSet, ...]) -> None:
    """Build now the template the bench VM of ``runsets`` will start from (the main job calls this
    in its recording lane once the recordings are done, while checks run): its
    disks sparse in a temporary directory, never an output directory.  A template that exists, or
    cannot be built here, costs no more than asking (the bench then builds it or boots)."""
    d = Path(tempfile.mkdtemp(prefix="powercut-bench-prewarm-"))
    try:
        image = build_image(ImageSpec(**spec.image))
        vm = vm_spec(spec, image, d, _disk_files(spec, runsets, d), estimate_timeout(runsets))
        if template.eligible(vm):
            template.template_for(vm)
    except (PowercutError, OSError) as e:
        log.debug("bench VM template not built ahead: %s", e)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _watch(
    progress_path: Path, total: int, on_progress: Progress | None
) -> Callable[[], str | None]:
    seen = [0, 0]  # lines, byte offset

    def poll() -> None:
        if on_progress is None or not progress_path.exists():
            return None
        lines, seen[1] = jsonlines.read_lines(progress_path, seen[1])
        for line in lines:
            seen[0] += 1
            on_progress(
                seen[0],
                total,
                f"{line.get('label', '')}{'' if line.get('ok', True) else ' (failed)'}",
            )
        return None

    return poll


def run_bench_vm(
    spec: BenchVmSpec,
    runsets: tuple[RunSet, ...],
    rundir: str | os.PathLike[str],
    *,
    suites: tuple[str, ...],
    quick: bool,
    on_progress: Progress | None = None,
) -> BenchResults:
    rundir = Path(rundir).absolute()
    image, vmspec, disks = prepare(spec, runsets, rundir)
    backing = describe_backing(disks[0])
    total = count_items(runsets)
    if on_progress:
        on_progress(0, total, "booting the VM")
    start = time.monotonic()
    try:
        res = start_vm(
            vmspec, rundir, _watch(rundir / "job" / "progress.jsonl", total, on_progress)
        )
    finally:
        for path in disks:
            path.unlink(missing_ok=True)
    result = guestjob.read_result(rundir / "job")
    if not result.ok:
        raise PowercutError(
            f"bench failed in the guest: {result.error or 'no result'} (see {rundir}/job/agent.log)"
        )
    entries, checks = from_sets(runsets, result.get("sets", []))
    meta = BenchMeta(
        mode="vm",
        accel=res.accel,
        qemu_cache=spec.qemu_cache,
        backing=backing,
        guest_kernel=str(result.get("kernel", image.kernel_release)),
        fs=spec.fs.fstype,
        bus="ahci",
        quick=quick,
        date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        suites=suites,
        device=f"{result.get('device', '')} ({result.get('model', '')})".replace(" ()", ""),
        note=TCG_NOTE if res.accel == "tcg" else "",
        version=_version(),
    )
    log.info("bench: %d entries in %.1f s", len(entries), time.monotonic() - start)
    return BenchResults(meta, tuple(entries), tuple(checks))


def dry_run_argv(
    spec: BenchVmSpec, runsets: tuple[RunSet, ...], rundir: str | os.PathLike[str]
) -> list[str]:
    """The exact QEMU argv a run would use (the job and sparse disks are written, then removed)."""

    image, vmspec, disks = prepare(spec, runsets, Path(rundir).absolute())
    try:
        return build_argv(
            vmspec,
            resolve_accel(spec.accel, image.kernel, image.initrd),
            qemu=process.require(QEMU, "qemu-system-x86"),
        )
    finally:
        for path in disks:
            path.unlink(missing_ok=True)


def _version() -> str:
    return getattr(powercut, "__version__", "")


# --- one whole bench run (the CLI's entry point) --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchRequest:
    suites: tuple[str, ...] = (BENCH_SUITE,)
    profiles: tuple[str, ...] = ()
    workload: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    quick: bool = False
    caches: tuple[bool, ...] = (True, False)
    vm: BenchVmSpec = field(default_factory=BenchVmSpec)
    on_host: str = ""  # a directory or block device: time it on this machine
    toggle: bool = False  # host mode: set the write cache on/off (and restore it)
    raw_ok: bool = False  # host mode: a block device may be written raw
    out: str = BENCH_OUT
    plots: bool = True


def plan_request(req: BenchRequest) -> tuple[RunSet, ...]:
    params = workloads.get(req.workload).params(req.params) if req.workload else {}
    if req.params and not req.workload:
        raise UsageError("--param goes with --workload")
    if req.workload:  # only the given parameters name the item; the workload fills its defaults
        params = {k: params[k] for k in req.params}
    caches = req.caches if (not req.on_host or req.toggle) else (True,)
    return plan(
        req.suites,
        quick=req.quick,
        fstype=req.vm.fs.fstype,
        profiles=req.profiles,
        workload=req.workload,
        params=params,
        caches=caches,
    )


def run_dir(req: BenchRequest) -> Path:
    names = "+".join(
        req.suites
        + (("workload",) if req.workload else ())
        + (("profiles",) if req.profiles else ())
    )
    path = Path(req.out).absolute() / f"{time.strftime('%Y%m%d-%H%M%S')}-{names or 'bench'}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def run_bench(
    req: BenchRequest, on_progress: Progress | None = None
) -> tuple[BenchResults, Path, list[str]]:
    """Plan, time (VM or host) and write ``results.json``: (results, run dir, warnings).  The plots are
    the caller's (report.bench.plot), so the cost half does not depend on the report."""

    runsets = plan_request(req)
    out = run_dir(req)
    warnings: list[str] = []
    if req.on_host:
        results = _host(req, runsets, out, on_progress)
    else:
        results = run_bench_vm(
            req.vm, runsets, out, suites=req.suites, quick=req.quick, on_progress=on_progress
        )
    benchresults.write(results, out / "results.json")
    return results, out, warnings


def _host(
    req: BenchRequest, runsets: tuple[RunSet, ...], out: Path, on_progress: Progress | None
) -> BenchResults:
    target = resolve_target(req.on_host)
    if target.raw and not req.raw_ok:
        raise UsageError(
            f"--on-host {req.on_host} is a block device: fio would overwrite it from its start; "
            "add --raw to allow that"
        )
    entries, checks = run_on_host(runsets, target, out, toggle=req.toggle, on_progress=on_progress)
    dev, fstype = block_device_of(req.on_host) if not target.raw else (target.path, "")
    meta = BenchMeta(
        mode="host",
        accel="host",
        qemu_cache="",
        backing=describe(target),
        guest_kernel=os.uname().release,
        fs=fstype or "raw",
        bus=target.transport,
        quick=req.quick,
        date=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        suites=req.suites,
        device=dev,
        note="" if req.toggle else "write cache left as it was (no --toggle-write-cache)",
        version=_version(),
    )
    return BenchResults(meta, tuple(entries), tuple(checks))

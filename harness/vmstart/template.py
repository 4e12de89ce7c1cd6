"""Checker and recording VMs started from a saved template instead of a boot (host side, QEMU on
this machine; ``run_restored``).

A cold checker VM spends ~4 s under TCG before its first state: kernel, init, modules, the Python
agent's start and imports over 9p.  A template is that VM saved once, just before it would mount
its shares (QEMU refuses to save a VM with a mounted 9p export), and each checker VM of the same
shape is that state restored (``-incoming``), which takes a fraction of a second:

* the template boots the image's kernel with the image's initramfs plus the agent's runtime
  (images/runtime.py) appended, ``powercut.template=1``; the template agent (guest/template.py)
  imports the checker job's modules, drops every cached disk block and says it is ready; the host
  then stops the VM and saves it to ``state`` over QMP (vm/qmp.py);
* a restored VM has the template's exact device list, kernel command line, memory and disk sizes
  (the guest keeps what it probed), with its own files: the run's scratch disk, job share,
  console, and a control disk whose first block is the go block (host clock, random bytes); the
  agent then mounts the shares, chroots into the host root and serves the job as a booted one.

A recording VM (record/vm.py) starts the same way, from a template of its own shape (its data and
log disks, the job share, the filesystem's and dm-log-writes' modules loaded at the template's
boot): the recording job runs after the restore -- mkfs, the dm-log-writes target, the workload --
on disks no guest has touched, with the host's clock and random bytes.

Templates are cached under ``<cache>/templates/<key>/``; the key covers everything the saved
state depends on (the VM's shape, the accelerator, QEMU, kernel, initramfs, and every runtime
file's path, size and mtime), so a change to any of them builds a new one.  A template that cannot
be built, or a restore that fails before the guest says ``powercut-restored``, falls back to a cold
boot (logged): the start-up path may change how fast a VM is ready, never what it judges.
``POWERCUT_VM_START=boot`` turns templates off."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from powercut.config import DiskSpec, VmSpec, cache_root
from powercut.errors import PowercutError, UsageError, VmError
from powercut.images import runtime
from powercut.linux import environ, interrupt, process
from powercut.vm import guestjob
from powercut.vm.accel import resolve_accel
from powercut.vm.agentboot import TEMPLATE_AGENT, boot_script, compile_package, package_dirs
from powercut.vm.cmdline import kernel_cmdline
from powercut.vm.console import ConsoleWatch, console_tail
from powercut.vm.qemu import QEMU, build_argv
from powercut.vm.qmp import Qmp, unlink_socket, wait_migration

T = TypeVar("T")

log = logging.getLogger(__name__)

PRELOAD = (*guestjob.TEMPLATE_PRELOAD, "powercut.guest.template")
CONTROL = DiskSpec("control.img", guestjob.CONTROL_SERIAL)
CONTROL_BYTES = 1 << 20
BUILD_TIMEOUT_S = 300.0
TSC_RE = re.compile(r"\btsc_early_khz=\d+ ?")
KEEP = 6  # templates kept in the cache (the newest)

_failed: set[str] = set()  # template keys that failed to build or restore in this process
_lock = threading.Lock()


def enabled() -> bool:
    start = environ.text(environ.VM_START, "snapshot")
    if start not in ("snapshot", "boot"):
        raise UsageError(f"POWERCUT_VM_START={start!r}: 'snapshot' (the default) or 'boot'")
    return start == "snapshot"


def eligible(spec: VmSpec) -> bool:
    """A VM a template can stand for: 9p shares (vhost-user-fs cannot be saved), not interactive."""
    return (
        enabled()
        and spec.transport == "9p"
        and not spec.interactive
        and not spec.restore
        and not spec.qmp
    )


def scratch_bytes(n: int) -> int:
    """A scratch disk's size, rounded up to a power of two (at least 1 GiB) so that runs over
    recordings of similar sizes share a template (the disks are sparse)."""
    size = 1 << 30
    while size < n:
        size <<= 1
    return size


@functools.cache
def agent_runtime() -> runtime.Runtime:
    """The template agent's files, asked once per process."""
    compile_package()
    env = guestjob.agent_env()
    boot = boot_script(env["PATH"], full_site=False, entry=TEMPLATE_AGENT)
    inits = tuple(
        os.path.join(d, "__init__.py") for d in package_dirs().values()
    )  # the finder checks them
    return runtime.probe(PRELOAD, boot, env, inits)


def _identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}"


def template_key(spec: VmSpec, accel: str, rt: runtime.Runtime, qemu: str) -> str:
    """Everything the saved state depends on; paths of the run's own files excluded."""
    shape = {
        "v": 1,
        "accel": accel,
        "qemu": _identity(qemu),
        "kernel": _identity(spec.kernel),
        "initrd": _identity(spec.initrd),
        "runtime": rt.key(),
        "memory": spec.memory_mb,
        "cpus": spec.cpus,
        # the guest read its command line at the template's boot; tsc_early_khz comes from the
        # host's current "cpu MHz", which wanders on hosts that scale their clock
        "machine": spec.machine,
        "cmdline": TSC_RE.sub("", kernel_cmdline(spec)),
        "modules": spec.modules,
        "disks": [
            (
                os.path.getsize(d.path),
                d.serial,
                d.bus,
                d.cache,
                d.write_cache,
                d.readonly,
                d.discard,
            )
            for d in spec.disks
        ],
        "shares": [(s.tag, s.readonly, s.path if s.tag == "hostroot" else "") for s in spec.shares],
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _template_spec(spec: VmSpec, tdir: Path, initrd: str, *, rundir: Path, console: str) -> VmSpec:
    """``spec`` as a template-started VM: the template's initramfs and command line, the control disk
    after the others, files in ``rundir`` (the template's own, or a restored VM's run directory)."""
    return replace(
        spec,
        initrd=initrd,
        cmdline=spec.cmdline + ("powercut.template=1",),
        disks=spec.disks + (replace(CONTROL, path=str(rundir / CONTROL.path)),),
        console_path=console,
    )


class Template:
    def __init__(self, tdir: Path) -> None:
        self.dir = tdir
        self.initrd = str(tdir / "initrd.cpio")
        self.state = str(tdir / "state")

    def ready(self) -> bool:
        return os.path.isfile(self.state)

    def restored_spec(self, spec: VmSpec, rundir: Path) -> VmSpec:
        """The VM ``spec`` as this template restored in ``rundir`` (its go block written there)."""
        ctl = rundir / CONTROL.path
        with open(ctl, "wb") as f:
            f.write(guestjob.go_block(time.time(), secrets.token_hex(64)))
            f.truncate(CONTROL_BYTES)
        return replace(
            _template_spec(spec, self.dir, self.initrd, rundir=rundir, console=spec.console_path),
            restore=self.state,
        )

    def build(self, spec: VmSpec, accel: str, rt: runtime.Runtime) -> None:
        """Boot the template VM and save it (the caller holds the template's lock)."""
        tdir = self.dir
        work = tdir / "build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        t0 = time.monotonic()
        part = tdir / "initrd.cpio.part"
        with open(part, "wb") as out:
            with open(spec.initrd, "rb") as base:
                shutil.copyfileobj(base, out)
            out.write(b"\0" * (-out.tell() % 4))
            runtime.write_archive(rt, out)
        os.replace(part, self.initrd)
        disks = []
        for i, d in enumerate(spec.disks):
            path = work / f"disk{i}.img"
            with open(path, "wb") as f:
                f.truncate(os.path.getsize(d.path))
            disks.append(replace(d, path=str(path)))
        with open(work / CONTROL.path, "wb") as f:
            f.truncate(CONTROL_BYTES)
        shares = []
        for s in spec.shares:
            if s.tag != "hostroot":
                (work / f"share-{s.tag}").mkdir()
                s = replace(s, path=str(work / f"share-{s.tag}"))
            shares.append(s)
        qmp_path = str(work / "qmp.sock")
        vm = replace(
            _template_spec(
                replace(spec, disks=tuple(disks), shares=tuple(shares)),
                tdir,
                self.initrd,
                rundir=work,
                console=str(work / "console.log"),
            ),
            qmp=qmp_path,
            name=f"powercut-template-{os.getpid()}",
        )
        Path(vm.console_path).write_bytes(b"")
        argv = build_argv(vm, accel, qemu=process.require(QEMU, "qemu-system-x86"))
        (work / "qemu.argv").write_text(shlex.join(argv) + "\n")
        ready = ConsoleWatch(vm.console_path, guestjob.TEMPLATE_READY.encode())
        state_part = tdir / "state.part"
        with (
            open(work / "qemu.stderr", "wb") as errf,
            process.Spawned(argv, stdout=errf, stderr=errf) as q,
        ):
            deadline = time.monotonic() + BUILD_TIMEOUT_S
            while not ready.seen():
                if q.wait(0.05) is not None or time.monotonic() > deadline:
                    raise VmError(
                        "the template VM did not get ready",
                        vm.console_path,
                        console_tail(vm.console_path),
                    )
            booted = time.monotonic() - t0
            qmp = Qmp(qmp_path)
            try:
                # saved running (not stopped first): the runstate travels with the state, and a
                # restored VM starts running only if it was saved running
                qmp.command("migrate", uri=f"exec:cat > {shlex.quote(str(state_part))}")
                wait_migration(qmp, 120)
                qmp.command("quit")
            finally:
                qmp.close()
            if q.wait(30) is None:
                q.kill()
        unlink_socket(qmp_path)
        os.replace(state_part, self.state)
        (tdir / "meta.json").write_text(
            json.dumps(
                {
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "boot_s": round(booted, 2),
                    "total_s": round(time.monotonic() - t0, 2),
                    "state_bytes": os.path.getsize(self.state),
                    "runtime_files": len(rt.files),
                    "accel": accel,
                },
                indent=1,
            )
        )
        shutil.rmtree(work, ignore_errors=True)
        log.info(
            "VM template %s built in %.1f s (state %d MiB)",
            tdir.name,
            time.monotonic() - t0,
            os.path.getsize(self.state) >> 20,
        )


def template_for(spec: VmSpec) -> Template | None:
    """The template ``spec`` can start from, built now if needed; None: boot it (not eligible, or the
    template cannot be built here, which is logged once)."""
    if not eligible(spec):
        return None
    try:
        qemu = process.require(QEMU, "qemu-system-x86")
        accel = resolve_accel(spec.accel, spec.kernel, spec.initrd)
        rt = agent_runtime()
        key = template_key(spec, accel, rt, qemu)
    except (PowercutError, OSError) as e:
        log.warning("VMs boot (no template): %s", e)
        return None
    with _lock:
        if key in _failed:
            return None
    root = cache_root() / "templates"
    tmpl = Template(root / key)
    if tmpl.ready():
        os.utime(tmpl.dir)  # recently used: kept by _prune
        return tmpl
    tmpl.dir.mkdir(parents=True, exist_ok=True)
    with open(tmpl.dir / "lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # one builder; the others wait for its template
        if tmpl.ready():
            return tmpl
        try:
            tmpl.build(replace(spec, accel=accel), accel, rt)  # type: ignore[arg-type]
        except (PowercutError, OSError) as e:
            (tmpl.dir / "state.part").unlink(missing_ok=True)  # a full disk must not stay full
            with _lock:
                _failed.add(key)
            log.warning(
                "VMs boot: the template VM could not be saved: %s (see %s/build)",
                e.one_line() if isinstance(e, PowercutError) else e,
                tmpl.dir,
            )
            return None
    _prune(root, keep=tmpl.dir)
    return tmpl


def discard(tmpl: Template, why: str) -> None:
    """A template that failed to restore: removed (the next process builds a new one), and this
    process's VMs boot from now on."""
    log.warning("VM template %s failed to restore (%s); booting instead", tmpl.dir.name, why)
    with _lock:
        _failed.add(tmpl.dir.name)
    try:
        os.unlink(tmpl.state)
    except FileNotFoundError:
        pass


def run_restored(vm: VmSpec, rundir: Path, run: Callable[[VmSpec], T]) -> T:
    """``run(spec)`` on ``vm`` restored from its template (built now if needed; the control disk
    and, on a failed restore, ``console-restore.log`` go in ``rundir``), or on ``vm`` booted when it
    is not eligible, its template cannot be built here, or the restore failed before the guest ran
    anything of the job (the template is then discarded): a checker VM's and a recording VM's start."""
    tmpl = template_for(vm)
    if tmpl is not None:
        try:
            out = run(tmpl.restored_spec(vm, rundir))
            why = "" if restored(vm.console_path) else "its guest ended before the job"
        except VmError as e:
            if restored(vm.console_path) or interrupt.stopping():
                raise  # the job's failure (a panic or hang in a state), not the restore's
            why = e.one_line()
        if not why:
            return out
        shutil.copyfile(vm.console_path, rundir / "console-restore.log")
        discard(tmpl, f"{why}; console: {rundir / 'console-restore.log'}")
    return run(vm)


def restored(console_path: str) -> bool:
    """Whether a template-started VM got past its restore (its agent said so on the console)."""
    return ConsoleWatch(console_path, guestjob.TEMPLATE_RESTORED.encode()).seen()


def _prune(root: Path, keep: Path) -> None:
    """Only the KEEP most recently used templates stay (each holds a saved VM of ~100-200 MB), and
    none used in the last hour goes (another run may be about to restore it)."""
    try:
        dirs = sorted(
            (d for d in root.iterdir() if d.is_dir() and d != keep),
            key=lambda d: d.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return
    for d in dirs[KEEP - 1 :]:
        if time.time() - d.stat().st_mtime < 3600:
            continue
        lockf = open(d / "lock", "a")
        try:
            fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lockf.close()
            continue
        shutil.rmtree(d, ignore_errors=True)
        lockf.close()

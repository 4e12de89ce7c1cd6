"""VmSpec -> QEMU argv, and running it: timeout, console to a file, the guest's exit status back,
panic / hang / QEMU crash told apart.

An interactive VM (``repro --shell``) has the serial console on this terminal.  When standard input
is not a terminal (a pipe, a file, /dev/null) it is relayed only once the guest says its shell is
ready (``guestjob.SHELL_READY`` on the console), so piped input keeps its first bytes, and its end
of file ends the shell (``exit``), so the VM powers off instead of waiting for input forever."""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from powercut.config import DiskSpec, VmSpec
from powercut.errors import EnvironmentNotReady, GuestHang
from powercut.linux import process
from powercut.vm.accel import resolve_accel
from powercut.vm.cmdline import kernel_cmdline
from powercut.vm.console import PANIC_RE, ConsoleWatch, VmResult, classify_end, console_tail
from powercut.vm.guestjob import SHELL_READY

log = logging.getLogger(__name__)

QEMU = "qemu-system-x86_64"


def _drive_args(i: int, disk: DiskSpec, pci: bool) -> list[str]:
    drive = (
        f"file={disk.path},format=raw,if=none,id=disk{i},cache={disk.cache},aio=threads"
        + (",discard=unmap" if disk.discard else "")
        + (",readonly=on" if disk.readonly else "")
    )
    wc = "on" if disk.write_cache else "off"
    if disk.bus == "ahci":
        return [
            "-drive",
            drive,
            "-device",
            f"ide-hd,drive=disk{i},bus=ahci0.{i},serial={disk.serial},write-cache={wc}",
        ]
    dev = "virtio-blk-pci" if pci else "virtio-blk-device"
    return [
        "-drive",
        drive,
        "-device",
        f"{dev},drive=disk{i},serial={disk.serial},write-cache={wc}",
    ]


def build_argv(
    spec: VmSpec, accel: str, *, virtiofs_sockets: dict[str, str] | None = None, qemu: str = QEMU
) -> list[str]:
    """The exact QEMU argv for ``spec`` with a resolved ``accel`` ('kvm' or 'tcg')."""
    machine = spec.resolved_machine()
    pci = machine != "microvm"
    argv = [qemu, "-name", spec.name, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot"]
    if machine == "microvm":
        # modern (virtio 1.0) MMIO transport: vhost-user-fs (virtiofsd) refuses legacy devices
        argv += [
            "-machine",
            "microvm,x-option-roms=off,isa-serial=on"
            + (",memory-backend=mem" if spec.transport == "virtiofs" else ""),
            "-global",
            "virtio-mmio.force-legacy=false",
        ]
    else:
        argv += [
            "-machine",
            f"{machine}" + (",memory-backend=mem" if spec.transport == "virtiofs" else ""),
        ]
    argv += [
        "-accel",
        accel,
        "-cpu",
        "host" if accel == "kvm" else "max",
        "-m",
        str(spec.memory_mb),
        "-smp",
        str(spec.cpus),
        "-kernel",
        spec.kernel,
        "-initrd",
        spec.initrd,
        "-append",
        kernel_cmdline(spec),
        "-chardev",
        (
            f"stdio,id=con,signal=off,logfile={spec.console_path}"
            if spec.interactive
            else f"file,id=con,path={spec.console_path}"
        ),
        "-serial",
        "chardev:con",
    ]
    if spec.transport == "virtiofs":
        argv += ["-object", f"memory-backend-memfd,id=mem,size={spec.memory_mb}M,share=on"]
    if any(d.bus == "ahci" for d in spec.disks):
        argv += ["-device", "ahci,id=ahci0"]
    for i, disk in enumerate(spec.disks):
        argv += _drive_args(i, disk, pci)
    if spec.qmp:
        argv += ["-qmp", f"unix:{spec.qmp},server=on,wait=off"]
    if spec.restore:
        argv += ["-incoming", f"exec:cat {shlex.quote(spec.restore)}"]
    for i, share in enumerate(spec.shares):
        if spec.transport == "virtiofs":
            sock = (virtiofs_sockets or {}).get(share.tag, f"{share.tag}.sock")
            dev = "vhost-user-fs-pci" if pci else "vhost-user-fs-device"
            argv += [
                "-chardev",
                f"socket,id=vfs{i},path={sock}",
                "-device",
                f"{dev},chardev=vfs{i},tag={share.tag}",
            ]
        else:
            dev = "virtio-9p-pci" if pci else "virtio-9p-device"
            argv += [
                "-fsdev",
                f"local,id=fs{i},path={share.path},security_model=none,multidevs=remap"
                + (",readonly=on" if share.readonly else ""),
                "-device",
                f"{dev},fsdev=fs{i},mount_tag={share.tag}",
            ]
    return argv


class VirtiofsDaemons:
    """One virtiofsd per share for the lifetime of a VM run."""

    def __init__(self, spec: VmSpec, rundir: Path) -> None:
        self.sockets: dict[str, str] = {}
        self.daemons: list[process.Spawned] = []
        if spec.transport != "virtiofs":
            return
        binary = process.require("virtiofsd", "qemu-system-common (or virtiofsd)")
        for share in spec.shares:
            sock = str(rundir / f"vfs-{share.tag}.sock")
            if os.path.exists(sock):
                os.unlink(sock)
            errf = open(rundir / f"virtiofsd-{share.tag}.log", "wb")
            self.daemons.append(
                process.Spawned(
                    [
                        binary,
                        f"--socket-path={sock}",
                        "-o",
                        f"source={share.path}",
                        "-o",
                        "sandbox=chroot",
                        "-o",
                        "cache=always" if share.readonly else "cache=none",
                    ],
                    stdout=errf,
                    stderr=errf,
                )
            )
            self.sockets[share.tag] = sock
        deadline = time.monotonic() + 10
        while not all(os.path.exists(s) for s in self.sockets.values()):
            if time.monotonic() > deadline or any(d.poll() is not None for d in self.daemons):
                self.close()
                raise EnvironmentNotReady(f"virtiofsd did not start (see {rundir}/virtiofsd-*.log)")
            time.sleep(0.02)

    def close(self) -> None:
        for d in self.daemons:
            d.kill()


class _StdinRelay:
    """Copies a non-terminal standard input to QEMU's serial console once the guest's shell is
    ready, then ``exit`` at its end of file."""

    def __init__(self, console_path: str) -> None:
        self.read_end, self._w = os.pipe()
        self._ready = ConsoleWatch(console_path, SHELL_READY)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="powercut-stdin", daemon=True)

    def start(self) -> None:
        os.close(self.read_end)  # QEMU has its copy
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            while not self._ready.seen():
                if self._stop.wait(0.1):
                    return
            while chunk := os.read(sys.stdin.fileno(), 65536):
                os.write(self._w, chunk)
            os.write(self._w, b"\nexit\n")
        except OSError:  # QEMU went away: nothing more to say to it
            pass
        finally:
            os.close(self._w)


def run_vm(
    spec: VmSpec,
    *,
    accel: str | None = None,
    rundir: Path | None = None,
    start_marker: Path | None = None,
    watchdog: Callable[[], str | None] | None = None,
) -> VmResult:
    """Boot ``spec`` and wait for it; return the guest's exit status or raise a VmError subclass.

    ``start_marker``: a file the guest creates when the job starts; its appearance (polled) gives
    the boot-to-job time.  ``watchdog``: polled about once a second while the VM runs; a returned
    reason kills the VM and raises GuestHang with it (e.g. one state of a campaign taking too long)."""

    qemu = process.require(QEMU, "qemu-system-x86")
    accel = accel or resolve_accel(spec.accel, spec.kernel, spec.initrd)
    rundir = Path(rundir or Path(spec.console_path).parent)
    rundir.mkdir(parents=True, exist_ok=True)
    Path(spec.console_path).write_bytes(b"")
    daemons = VirtiofsDaemons(spec, rundir)
    try:
        argv = build_argv(spec, accel, virtiofs_sockets=daemons.sockets, qemu=qemu)
        (rundir / "qemu.argv").write_text(shlex.join(argv) + "\n")
        stderr_path = rundir / "qemu.stderr"
        start = time.monotonic()
        boot_s = None
        relay = (
            _StdinRelay(spec.console_path)
            if spec.interactive and not os.isatty(sys.stdin.fileno())
            else None
        )
        term: dict[str, Any] = (
            {
                "stdin": relay.read_end if relay else sys.stdin.fileno(),
                "stdout": sys.stdout.fileno(),
            }
            if spec.interactive
            else {}
        )
        with (
            open(stderr_path, "wb") as errf,
            process.Spawned(argv, **{"stdout": errf, **term}, stderr=errf) as vm,
        ):
            if relay:
                relay.start()
            deadline = start + spec.timeout_s
            rc = None
            stop_reason = None
            while rc is None and time.monotonic() < deadline:
                rc = vm.wait(
                    0.05
                    if start_marker and boot_s is None
                    else min(1.0, max(0.0, deadline - time.monotonic()))
                )
                if start_marker and boot_s is None and start_marker.exists():
                    boot_s = time.monotonic() - start
                if rc is None and watchdog and (stop_reason := watchdog()):
                    break
            timed_out = rc is None
            if timed_out:
                vm.kill()
        wall = time.monotonic() - start
    finally:
        daemons.close()
        if relay:
            relay.stop()
    console = Path(spec.console_path).read_bytes()
    if stop_reason and not PANIC_RE.search(console):
        raise GuestHang(stop_reason, spec.console_path, console_tail(spec.console_path))
    status = classify_end(console, rc, timed_out, spec, stderr_path.read_text(errors="replace"))
    log.info("VM %s: exit %d in %.1f s (%s)", spec.name, status, wall, accel)
    return VmResult(status, spec.console_path, wall, accel, boot_s=boot_s)

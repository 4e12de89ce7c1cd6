"""VmSpec -> libvirt domain XML, and running it as a transient domain through libvirt-python, with
exactly the semantics of :func:`powercut.vm.qemu.run_vm` (exit status back; panic / hang / crash of
the QEMU process told apart by :func:`powercut.vm.qemu.classify_end`).

Mapping (checked against libvirt 9.0 + QEMU 7.2, see tests/unit/test_libvirt_xml.py):

* direct kernel boot (``<kernel>``, ``<initrd>``, ``<cmdline>`` = :func:`qemu.kernel_cmdline`);
  ``<on_reboot>destroy</on_reboot>``: the guest's reset ends the domain (QEMU's ``-no-reboot``).
* the machine type is ``spec.resolved_machine()``: libvirt runs ``microvm`` when every device has a
  ``virtio-mmio`` address, ACPI is on (the guest finds virtio-mmio devices through ACPI) and the
  implicit USB controller and memballoon are turned off; AHCI disks need PCI (q35).
* disks: raw files, explicit ``cache=``, ``io='threads'``, ``discard='unmap'``, serial, bus virtio or
  sata.  libvirt derives the guest-visible ``write-cache`` from the cache mode (on for none /
  writeback / unsafe, off for writethrough / directsync) and has no attribute of its own for it, so
  every disk's frontend property is set explicitly with ``<qemu:override>`` (libvirt >= 8.2) on the
  disk's user alias ``ua-diskN``: the ``-device`` JSON QEMU gets carries ``"write-cache":"on|off"``
  as DiskSpec.write_cache says, independent of the cache mode.
* shares: 9p (``accessmode='passthrough'``, ``multidevs='remap'``, ``<readonly/>``) or virtiofs
  (libvirt starts virtiofsd with the chroot sandbox; memfd shared memory backing).  libvirt 9.0 has no read-only virtiofs:
  the guest mounts ``hostroot`` read-only itself, as with the QEMU backend's virtiofsd.
* console: ``<serial type='file'>`` with ``append='on'`` (libvirt opens the file and hands QEMU the
  fd; no virtlogd, no log rotation).  No graphics, network, USB or balloon.
* permissions: the guest shares the whole host root, and qemu:///system runs QEMU as libvirt-qemu
  by default; the domain therefore carries a static DAC label ``+0:+0`` with ``relabel='no'`` (QEMU
  runs as root, and libvirt never chowns kernels, disks or console files).  That suffices for file
  access, but a daemon whose qemu.conf user cannot open /dev/kvm (e.g. ``crw------- root``) re-probes
  QEMU's capabilities on every lookup ("KVM was enabled when probing, but it is not available now"):
  ~45 s per domain start.  ci/start-libvirtd.sh therefore also sets ``user``/``group`` root and
  ``dynamic_ownership = 0`` in qemu.conf for the local daemon.

Remote URIs (``qemu+ssh://host/system``) are passed to libvirt untouched.  Every path in the spec
(kernel, initrd, disks, shares, console) is then a path *on the hypervisor host*, and the console
file and the start marker are read locally after the run, so they must sit on a filesystem both
hosts see at the same path.  ``accel`` auto on a remote URI is decided by the host's domain
capabilities (kvm if it offers KVM), not by the local probe."""
from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import urlsplit

from ..config import VmSpec
from ..errors import EnvironmentNotReady, QemuCrashed, VmError
from .qemu import VmResult, classify_end, console_tail, kernel_cmdline

log = logging.getLogger(__name__)

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
LOCAL_QEMU_LOG_DIR = Path("/var/log/libvirt/qemu")
ET.register_namespace("qemu", QEMU_NS)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def domain_xml(spec: VmSpec, accel: str, *, name: str | None = None) -> str:
    """The libvirt domain XML for ``spec`` with a resolved ``accel`` ('kvm' or 'tcg')."""
    machine = spec.resolved_machine()
    mmio = machine == "microvm"
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    _sub(dom, "name", name or spec.name)
    _sub(dom, "memory", str(spec.memory_mb), unit="MiB")
    _sub(dom, "vcpu", str(spec.cpus))
    if spec.transport == "virtiofs":
        mb = _sub(dom, "memoryBacking")
        _sub(mb, "source", type="memfd")
        _sub(mb, "access", mode="shared")
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine=machine)
    _sub(os_el, "kernel", os.path.abspath(spec.kernel))
    _sub(os_el, "initrd", os.path.abspath(spec.initrd))
    _sub(os_el, "cmdline", kernel_cmdline(spec))
    _sub(_sub(dom, "features"), "acpi")
    _sub(dom, "cpu", mode="host-passthrough" if accel == "kvm" else "maximum")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    dev = _sub(dom, "devices")
    _sub(dev, "controller", type="usb", model="none")
    if any(d.bus == "ahci" for d in spec.disks):
        _sub(dev, "controller", type="sata", index="0")
    letters = {"virtio": 0, "ahci": 0}
    for i, disk in enumerate(spec.disks):
        d = _sub(dev, "disk", type="file", device="disk")
        _sub(d, "driver", name="qemu", type="raw", cache=disk.cache, io="threads",
             discard="unmap" if disk.discard else "ignore")
        _sub(d, "source", file=os.path.abspath(disk.path))
        prefix = "vd" if disk.bus == "virtio" else "sd"
        _sub(d, "target", dev=prefix + "abcdefghijklmnopqrstuvwxyz"[letters[disk.bus]],
             bus="virtio" if disk.bus == "virtio" else "sata")
        letters[disk.bus] += 1
        _sub(d, "serial", disk.serial)
        if disk.readonly:
            _sub(d, "readonly")
        _sub(d, "alias", name=f"ua-disk{i}")
        if mmio:
            _sub(d, "address", type="virtio-mmio")
    for share in spec.shares:
        if spec.transport == "virtiofs":
            fs = _sub(dev, "filesystem", type="mount", accessmode="passthrough")
            _sub(fs, "driver", type="virtiofs", queue="1024")
            binary = _sub(fs, "binary")  # virtiofsd as qemu.VirtiofsDaemons runs it
            _sub(binary, "cache", mode="always" if share.readonly else "none")
            _sub(binary, "sandbox", mode="chroot")  # namespace mode: pivot_root fails in containers
        else:
            fs = _sub(dev, "filesystem", type="mount", accessmode="passthrough", multidevs="remap")
            _sub(fs, "driver", type="path")
        _sub(fs, "source", dir=os.path.abspath(share.path))
        _sub(fs, "target", dir=share.tag)
        if share.readonly and spec.transport != "virtiofs":
            _sub(fs, "readonly")
        if mmio:
            _sub(fs, "address", type="virtio-mmio")
    serial = _sub(dev, "serial", type="file")
    _sub(serial, "source", path=os.path.abspath(spec.console_path), append="on")
    _sub(serial, "target", port="0")
    _sub(dev, "memballoon", model="none")
    sec = _sub(dom, "seclabel", type="static", model="dac", relabel="no")
    _sub(sec, "label", "+0:+0")
    if spec.disks:
        override = _sub(dom, f"{{{QEMU_NS}}}override")
        for i, disk in enumerate(spec.disks):
            frontend = _sub(_sub(override, f"{{{QEMU_NS}}}device", alias=f"ua-disk{i}"), f"{{{QEMU_NS}}}frontend")
            _sub(frontend, f"{{{QEMU_NS}}}property", name="write-cache", type="string",
                 value="on" if disk.write_cache else "off")
    if mmio:
        # modern (virtio 1.0) MMIO, as in qemu.build_argv: vhost-user-fs refuses legacy devices
        cmdline = _sub(dom, f"{{{QEMU_NS}}}commandline")
        _sub(cmdline, f"{{{QEMU_NS}}}arg", value="-global")
        _sub(cmdline, f"{{{QEMU_NS}}}arg", value="virtio-mmio.force-legacy=false")
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode") + "\n"


# ---------------------------------------------------------------- libvirt-python plumbing

_EVENT_LOOP_LOCK = threading.Lock()
_event_loop_started = False


def _import_libvirt():
    try:
        import libvirt
    except ImportError:
        raise EnvironmentNotReady("the libvirt backend needs libvirt-python: pip install 'powercut[libvirt]' "
                                  "(and the Debian package libvirt-dev to build it)") from None
    return libvirt


def _ensure_event_loop(libvirt) -> None:
    """libvirt's default event loop in a daemon thread (once per process; before any connection opens,
    so lifecycle events reach our callbacks)."""
    global _event_loop_started
    with _EVENT_LOOP_LOCK:
        if _event_loop_started:
            return
        libvirt.registerErrorHandler(lambda _ctx, err: log.debug("libvirt: %s", err), None)
        libvirt.virEventRegisterDefaultImpl()

        def loop() -> None:
            while True:
                libvirt.virEventRunDefaultImpl()

        threading.Thread(target=loop, name="libvirt-events", daemon=True).start()
        _event_loop_started = True


def is_local_uri(uri: str) -> bool:
    return not urlsplit(uri).netloc


def _connect(libvirt, uri: str):
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as e:
        hint = " (start the local daemon with ci/start-libvirtd.sh)" if is_local_uri(uri) else ""
        raise EnvironmentNotReady(f"cannot connect to libvirt at {uri}: {e.get_error_message()}{hint}") from None


def _remote_accel(libvirt, conn, requested: str) -> str:
    if requested in ("kvm", "tcg"):
        return requested
    try:
        conn.getDomainCapabilities(None, "x86_64", None, "kvm", 0)
        return "kvm"
    except libvirt.libvirtError:  # the host offers no KVM domains
        return "tcg"


def _qemu_log(uri: str, name: str) -> str:
    """libvirt's per-domain log (the QEMU command line and its stderr); local daemons only."""
    if not is_local_uri(uri):
        return ""
    try:
        return (LOCAL_QEMU_LOG_DIR / f"{name}.log").read_text(errors="replace")
    except OSError:
        return ""


def _qemu_stderr(qemu_log: str) -> str:
    """What QEMU itself wrote to stderr, without libvirt's own lines, the argv, and QEMU's warnings."""
    lines = [line for line in qemu_log.splitlines()
             if line.startswith("qemu-system") or (line[:4].isdigit() and "Z qemu-system" in line)]
    return "\n".join(line for line in lines if ": warning: " not in line)


class _Watch:
    """Collects the lifecycle events of one domain: whether it stopped, and why."""

    def __init__(self, libvirt, name: str) -> None:
        self.lv = libvirt
        self.name = name
        self.stopped = threading.Event()
        self.stop_detail: int | None = None

    def lifecycle(self, _conn, dom, event: int, detail: int, _opaque) -> None:
        if event == self.lv.VIR_DOMAIN_EVENT_STOPPED and dom.name() == self.name:
            self.stop_detail = detail
            self.stopped.set()

    def reason(self) -> str:
        names = {self.lv.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN: "shutdown",
                 self.lv.VIR_DOMAIN_EVENT_STOPPED_DESTROYED: "destroyed",
                 self.lv.VIR_DOMAIN_EVENT_STOPPED_CRASHED: "crashed",
                 self.lv.VIR_DOMAIN_EVENT_STOPPED_FAILED: "failed"}
        return names.get(self.stop_detail, "unknown") if self.stop_detail is not None else "vanished"


def _gone(libvirt, dom) -> bool:
    try:
        return not dom.isActive()
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return True
        raise


def _destroy(libvirt, dom) -> None:
    try:
        dom.destroy()
    except libvirt.libvirtError as e:
        if e.get_error_code() not in (libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_ERR_OPERATION_INVALID):
            log.warning("could not destroy libvirt domain: %s", e.get_error_message())


def run_vm_libvirt(spec: VmSpec, *, uri: str = "qemu:///system", accel: str | None = None,
                   rundir: Path | None = None, start_marker: Path | None = None) -> VmResult:
    """Boot ``spec`` as a transient libvirt domain and wait for it; return the guest's exit status or
    raise a VmError subclass, exactly like :func:`powercut.vm.qemu.run_vm`.  The domain XML and
    libvirt's QEMU log (local URIs) are kept in ``rundir`` as domain.xml and libvirt-qemu.log."""
    libvirt = _import_libvirt()
    _ensure_event_loop(libvirt)
    rundir = Path(rundir or Path(spec.console_path).parent)
    rundir.mkdir(parents=True, exist_ok=True)
    conn = _connect(libvirt, uri)
    name = f"{spec.name}-{secrets.token_hex(4)}"
    watch = _Watch(libvirt, name)
    callback = None
    dom = None
    try:
        if accel is None:
            if is_local_uri(uri):
                from .accel import resolve_accel
                accel = resolve_accel(spec.accel, spec.kernel, spec.initrd)
            else:
                accel = _remote_accel(libvirt, conn, spec.accel)
        xml = domain_xml(spec, accel, name=name)
        (rundir / "domain.xml").write_text(xml)
        Path(spec.console_path).write_bytes(b"")
        callback = conn.domainEventRegisterAny(None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, watch.lifecycle, None)
        start = time.monotonic()
        try:
            dom = conn.createXML(xml, 0)
        except libvirt.libvirtError as e:
            raise QemuCrashed(f"libvirt could not start domain {name}: {e.get_error_message()}"
                              f"  (XML: {rundir / 'domain.xml'})", spec.console_path,
                              console_tail(spec.console_path)) from None
        try:
            timed_out, boot_s = _wait(libvirt, dom, watch, spec, start, start_marker)
        except libvirt.libvirtError as e:  # e.g. libvirtd went away under us
            raise VmError(f"lost libvirt at {uri} while waiting for domain {name}: {e.get_error_message()}",
                          spec.console_path, console_tail(spec.console_path)) from None
        if timed_out:
            _destroy(libvirt, dom)
        wall = time.monotonic() - start
    finally:
        if dom is not None:
            _destroy(libvirt, dom)
        if callback is not None:
            try:
                conn.domainEventDeregisterAny(callback)
            except libvirt.libvirtError:
                pass
        try:
            conn.close()
        except libvirt.libvirtError:
            pass
        qemu_log = _qemu_log(uri, name)
        if qemu_log:
            (rundir / "libvirt-qemu.log").write_text(qemu_log)
    reason = "timeout" if timed_out else watch.reason()
    crashed = reason in ("crashed", "failed", "destroyed")
    console = Path(spec.console_path).read_bytes()
    stderr = _qemu_stderr(qemu_log)
    try:
        status = classify_end(console, None if crashed or timed_out else 0, timed_out, spec, stderr)
    except VmError as e:
        if type(e) is VmError and crashed:  # classify_end's "no exit status" case: the QEMU process died
            err = stderr.strip().splitlines()[-1] if stderr.strip() else ""
            raise QemuCrashed(f"QEMU process of libvirt domain {name} ended abnormally ({reason})"
                              + (f": {err}" if err else ""), spec.console_path, e.console_tail) from None
        raise
    log.info("VM %s (libvirt %s): exit %d in %.1f s (%s)", name, uri, status, wall, accel)
    return VmResult(status, spec.console_path, wall, accel, boot_s=boot_s)


def _wait(libvirt, dom, watch: _Watch, spec: VmSpec, start: float,
          start_marker: Path | None) -> tuple[bool, float | None]:
    """Wait for the domain to stop or the timeout: (timed_out, boot-to-job seconds)."""
    deadline = time.monotonic() + spec.timeout_s  # from the domain's start: createXML may take a while
    boot_s = None
    last_check = start
    while not watch.stopped.is_set() and time.monotonic() < deadline:
        fast = start_marker is not None and boot_s is None
        watch.stopped.wait(0.05 if fast else min(0.5, max(0.0, deadline - time.monotonic())))
        if fast and start_marker is not None and start_marker.exists():
            boot_s = time.monotonic() - start
        if time.monotonic() - last_check > 2:  # a lost event (e.g. libvirtd restarted) must not hang us
            last_check = time.monotonic()
            if _gone(libvirt, dom):
                return False, boot_s
    return not watch.stopped.is_set() and not _gone(libvirt, dom), boot_s

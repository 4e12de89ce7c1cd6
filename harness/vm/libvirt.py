"""VmSpec -> libvirt domain XML, and running it as a transient domain through libvirt-python, with
exactly the semantics of :func:`powercut.vm.qemu.run_vm` (exit status back; panic / hang / crash of
the QEMU process told apart by :func:`powercut.vm.console.classify_end`).

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
  (virtiofsd with the chroot sandbox; memfd shared memory).  libvirt 9.0 has no read-only virtiofs:
  the guest mounts ``hostroot`` read-only itself, as with the QEMU backend's virtiofsd.
* console: ``<serial type='file'>`` with ``append='on'`` (libvirt opens the file and hands QEMU the
  fd; no virtlogd, no log rotation).  No graphics, network, USB or balloon.
* permissions: the guest shares the whole host root, so the domain carries a static DAC label
  ``+0:+0`` with ``relabel='no'`` (QEMU runs as root; libvirt never chowns kernels, disks or console
  files).  A daemon whose qemu.conf user cannot open /dev/kvm re-probes QEMU on every lookup (~45 s
  per domain start), so ci/start-libvirtd.sh also sets ``user``/``group`` root and
  ``dynamic_ownership = 0`` in qemu.conf for the local daemon.

Lifetime: a domain is transient, started with AUTODESTROY on a connection held open for its whole
life (libvirtd destroys it when the connection closes, even after ``kill -9`` of powercut), and
destroyed explicitly on every way out.  A domain found paused (e.g. a KVM internal error) is an error
at once, one that shows no powercut line on its console within the boot timeout a GuestHang; both name
the URI and the accel.  Remote URIs (:func:`is_local_uri`) go to libvirt untouched: every path in the
spec is then a path *on the hypervisor host*, and the console and the start marker are read here, so
they must sit on a filesystem both hosts see at the same path.  ``accel`` auto on a remote URI boots
the probe guest there as a kvm domain (:func:`powercut.vm.accel.resolve_libvirt_accel`)."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from powercut.config import DEFAULT_LIBVIRT_URI, VmSpec
from powercut.errors import EnvironmentNotReady, GuestHang, QemuCrashed, VmError
from powercut.linux import environ
from powercut.vm import accel as _accel
from powercut.vm.console import ConsoleWatch, VmResult, classify_end, console_tail
from powercut.vm.libvirt_xml import domain_xml
from powercut.vm.remote import Mirror

log = logging.getLogger(__name__)

LOCAL_QEMU_LOG_DIR = Path("/var/log/libvirt/qemu")


_EVENT_LOOP_LOCK = threading.Lock()
_event_loop_started = False
BOOT_TIMEOUTS_S = {
    "kvm": 60.0,
    "tcg": 300.0,
}  # to the first powercut line; POWERCUT_BOOT_TIMEOUT overrides
PROBE_CONSOLE = "accel-probe-console.log"
POLL_S = 0.5  # domain state (paused? gone?) is polled this often


def _import_libvirt():
    try:
        import libvirt
    except ImportError:
        raise EnvironmentNotReady(
            "the libvirt backend needs libvirt-python: pip install 'powercut[libvirt]' "
            "(and the Debian package libvirt-dev to build it)"
        ) from None
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
    """The rule: local = no host in the URI and the unix-socket transport (``qemu:///system``,
    ``qemu:///session``, ``qemu+unix:///system?socket=...``): QEMU runs on this host, so the local
    probe's verdict holds.  Anything else -- a host part (even 127.0.0.1), or the ssh, libssh, tcp,
    tls or ext transport -- is remote, and ``auto`` is probed through libvirt."""
    parts = urlsplit(uri)
    return not parts.netloc and parts.scheme.partition("+")[2] in ("", "unix")


def boot_timeout_s(accel: str, total_s: float) -> float:
    """Seconds a domain may take to show the guest's first powercut line (capped by the VM timeout)."""
    limit = environ.number(environ.BOOT_TIMEOUT, BOOT_TIMEOUTS_S.get(accel, BOOT_TIMEOUTS_S["tcg"]))
    return min(limit, total_s)


def _connect(libvirt, uri: str):
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as e:
        hint = " (start the local daemon with ci/start-libvirtd.sh)" if is_local_uri(uri) else ""
        raise EnvironmentNotReady(
            f"cannot connect to libvirt at {uri}: {_message(e)}{hint}"
        ) from None


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
    lines = [
        line
        for line in qemu_log.splitlines()
        if line.startswith("qemu-system") or (line[:4].isdigit() and "Z qemu-system" in line)
    ]
    return "\n".join(line for line in lines if ": warning: " not in line)


def _message(e: Exception) -> str:
    """libvirt's error message in one line (QEMU's own words can span several: an abort's assertion)."""
    text = e.get_error_message() if hasattr(e, "get_error_message") else str(e)
    return " | ".join(line.strip() for line in str(text or e).splitlines() if line.strip())


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


@dataclass(frozen=True, slots=True)
class _Domain:
    """What names one domain run in messages: the domain, the URI and the accel it runs with."""

    name: str
    uri: str
    accel: str

    def where(self) -> str:
        return f"libvirt domain {self.name} at {self.uri} (accel {self.accel})"


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
        names = {
            self.lv.VIR_DOMAIN_EVENT_STOPPED_SHUTDOWN: "shutdown",
            self.lv.VIR_DOMAIN_EVENT_STOPPED_DESTROYED: "destroyed",
            self.lv.VIR_DOMAIN_EVENT_STOPPED_CRASHED: "crashed",
            self.lv.VIR_DOMAIN_EVENT_STOPPED_FAILED: "failed",
        }
        return (
            names.get(self.stop_detail, "unknown") if self.stop_detail is not None else "vanished"
        )


def domain_state(libvirt, dom) -> tuple[int, int] | None:
    """(state, reason) of the domain, or None once it is shut off or gone (a transient domain)."""
    try:
        state, reason = dom.state()
    except libvirt.libvirtError as e:
        if e.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise
    return None if state == libvirt.VIR_DOMAIN_SHUTOFF else (state, reason)


def paused_reason(libvirt, state: tuple[int, int] | None) -> str | None:
    """Why a domain is paused ('crashed', 'ioerror', 'user', ...), or None if it is not stuck paused
    (running, gone, or in the brief pauses of its own start and shutdown)."""
    if state is None or state[0] != libvirt.VIR_DOMAIN_PAUSED:
        return None
    prefix = "VIR_DOMAIN_PAUSED_"
    names = {
        getattr(libvirt, n): n[len(prefix) :].lower().replace("_", "-")
        for n in dir(libvirt)
        if n.startswith(prefix)
    }
    why = names.get(state[1], f"reason {state[1]}")
    return None if why in ("starting-up", "shutting-down") else why


def destroy_domain(libvirt, dom) -> None:
    try:
        dom.destroy()
    except libvirt.libvirtError as e:
        if e.get_error_code() not in (libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_ERR_OPERATION_INVALID):
            log.warning("could not destroy libvirt domain: %s", _message(e))


def create_domain(libvirt, conn, xml: str):
    """Start a transient domain that libvirtd destroys by itself when this connection closes -- even
    when this process is killed with SIGKILL and no ``finally`` runs."""
    return conn.createXML(xml, libvirt.VIR_DOMAIN_START_AUTODESTROY)


# ---------------------------------------------------------------- running a VmSpec


def run_vm_libvirt(
    spec: VmSpec,
    *,
    uri: str = DEFAULT_LIBVIRT_URI,
    accel: str | None = None,
    rundir: Path | None = None,
    start_marker: Path | None = None,
    watchdog: Callable[[], str | None] | None = None,
    mirror: Mirror | None = None,
) -> VmResult:
    """Boot ``spec`` as a transient libvirt domain and wait for it; return the guest's exit status or
    raise a VmError subclass, exactly like :func:`powercut.vm.qemu.run_vm`.  The domain XML and
    libvirt's QEMU log (local URIs) are kept in ``rundir`` as domain.xml and libvirt-qemu.log.

    The domain lives exactly as long as this call: it is started with AUTODESTROY on a connection
    held open until the end, and destroyed explicitly on every way out (return, error, Ctrl-C)."""
    libvirt = _import_libvirt()
    _ensure_event_loop(libvirt)
    rundir = Path(rundir or Path(spec.console_path).parent)
    rundir.mkdir(parents=True, exist_ok=True)
    conn = _connect(libvirt, uri)
    name = f"{spec.name}-{secrets.token_hex(4)}"
    watch = _Watch(libvirt, name)
    callback = dom = None
    qemu_log = ""
    try:
        accel = accel or resolve_libvirt_accel(
            libvirt,
            conn,
            spec.accel,
            uri=uri,
            kernel=spec.kernel,
            initrd=spec.initrd,
            workdir=rundir,
            mirror=mirror,
        )
        who = _Domain(name, uri, accel)
        xml = domain_xml(spec, accel, name=name)
        (rundir / "domain.xml").write_text(xml)
        if mirror is None:
            Path(spec.console_path).write_bytes(b"")
        else:  # the domain writes its console there; everything below reads the local copy
            spec = dataclasses.replace(spec, console_path=str(mirror.local(spec.console_path)))
        callback = conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, watch.lifecycle, None
        )
        start = time.monotonic()
        try:
            dom = create_domain(libvirt, conn, xml)
        except libvirt.libvirtError as e:
            raise QemuCrashed(
                f"libvirt could not start {who.where()}: {_message(e)}"
                f"  (XML: {rundir / 'domain.xml'})",
                spec.console_path,
                console_tail(spec.console_path),
            ) from None
        try:
            timed_out, boot_s = _wait(
                libvirt, dom, watch, spec, start, start_marker, who, watchdog, mirror
            )
        except libvirt.libvirtError as e:  # e.g. libvirtd went away under us
            raise VmError(
                f"lost libvirt while waiting for {who.where()}: {_message(e)}",
                spec.console_path,
                console_tail(spec.console_path),
            ) from None
        wall = time.monotonic() - start
    finally:
        if dom is not None:
            destroy_domain(libvirt, dom)
        if mirror is not None:
            mirror.sync(final=True)
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
    status = _exit_status(
        spec, "timeout" if timed_out else watch.reason(), _qemu_stderr(qemu_log), who
    )
    log.info("VM %s (libvirt %s): exit %d in %.1f s (%s)", name, uri, status, wall, accel)
    return VmResult(status, spec.console_path, wall, accel, boot_s=boot_s)


def _exit_status(spec: VmSpec, reason: str, stderr: str, who: _Domain) -> int:
    """The guest's exit status from the console, or the VmError that says how the domain ended."""
    timed_out = reason == "timeout"
    crashed = reason in ("crashed", "failed", "destroyed")
    console = Path(spec.console_path).read_bytes()
    try:
        return classify_end(console, None if crashed or timed_out else 0, timed_out, spec, stderr)
    except VmError as e:
        if (
            type(e) is VmError and crashed
        ):  # classify_end's "no exit status" case: the QEMU process died
            err = _last_line(stderr)
            raise QemuCrashed(
                f"the QEMU process of {who.where()} ended abnormally ({reason})"
                + (f": {err}" if err else ""),
                spec.console_path,
                e.console_tail,
            ) from None
        if (
            type(e) is VmError
        ):  # "stopped without an exit status": say which domain, where, with which accel
            what = str(e).removesuffix(f" (console: {e.console_path})")
            raise VmError(f"{who.where()}: {what}", spec.console_path, e.console_tail) from None
        raise


def _wait(
    libvirt,
    dom,
    watch: _Watch,
    spec: VmSpec,
    start: float,
    start_marker: Path | None,
    who: _Domain,
    watchdog: Callable[[], str | None] | None = None,
    mirror: Mirror | None = None,
) -> tuple[bool, float | None]:
    """Wait for the domain to stop or the VM timeout: (timed_out, boot-to-job seconds).  A domain
    found paused is an error at once; a guest that shows no powercut line on its console (and has not
    started the job) within the boot timeout is a GuestHang -- never a silent wait; a reason from
    ``watchdog`` is a GuestHang too."""
    deadline = start + spec.timeout_s  # from the domain's start: createXML may take a while
    boot_deadline = start + boot_timeout_s(who.accel, spec.timeout_s)
    alive = ConsoleWatch(spec.console_path, b"powercut-")
    boot_s = None
    next_poll = start
    while not watch.stopped.is_set():
        now = time.monotonic()
        if start_marker is not None and boot_s is None and start_marker.exists():
            boot_s = now - start
        if now >= next_poll:  # also catches a lost stop event (e.g. libvirtd restarted)
            next_poll = now + POLL_S
            if mirror is not None:
                mirror.sync()
            state = domain_state(libvirt, dom)
            if state is None:
                return False, boot_s
            if why := paused_reason(libvirt, state):
                _raise_paused(who, why, spec)
            if watchdog is not None and (reason := watchdog()):
                raise GuestHang(
                    f"{who.where()}: {reason}", spec.console_path, console_tail(spec.console_path)
                )
            if boot_s is None and not alive.seen() and now >= boot_deadline:
                hint = (
                    ": KVM may not work on that host (try --accel tcg)"
                    if who.accel == "kvm"
                    else ""
                )
                raise GuestHang(
                    f"{who.where()} did not reach the guest init within "
                    f"{boot_deadline - start:g} s (no powercut line on its console){hint}",
                    spec.console_path,
                    console_tail(spec.console_path),
                )
        if now >= deadline:
            return domain_state(libvirt, dom) is not None, boot_s
        fast = start_marker is not None and boot_s is None
        watch.stopped.wait(0.05 if fast else min(POLL_S, max(0.0, deadline - now)))
    return False, boot_s


def _raise_paused(who: _Domain, why: str, spec: VmSpec) -> None:
    err = _last_line(_qemu_stderr(_qemu_log(who.uri, who.name)))
    hint = (
        "KVM cannot run this guest there (try --accel tcg)"
        if who.accel == "kvm"
        else "the guest cannot run"
    )
    raise VmError(
        f"{who.where()} is paused ({why}): {hint}" + (f"; QEMU: {err}" if err else ""),
        spec.console_path,
        console_tail(spec.console_path),
    )


# ------------------------------------------------------------ KVM probe through libvirt


def probe_kvm_libvirt(
    libvirt,
    conn,
    kernel: str,
    initrd: str,
    workdir: Path,
    *,
    uri: str,
    timeout: float | None = None,
    mirror: Mirror | None = None,
) -> tuple[bool, str]:
    """The probe on the hypervisor behind the libvirt connection ``conn``: kernel+initrd with
    ``powercut.probe=1`` as a transient kvm domain (AUTODESTROY, destroyed at the end), waiting for
    ``powercut-probe-ok`` on its console ``workdir``/accel-probe-console.log (a path both hosts see,
    like every console of the libvirt backend, or, with ``mirror``, in its remote directory, read
    through it); (ok, reason)."""
    timeout = _accel.probe_timeout_s() if timeout is None else timeout
    name = f"powercut-accel-probe-{secrets.token_hex(4)}"
    console = Path(mirror.remote_dir if mirror else workdir) / PROBE_CONSOLE
    if mirror is None:
        console.write_bytes(b"")
    spec = VmSpec(
        kernel=kernel,
        initrd=initrd,
        memory_mb=256,
        console_path=str(console),
        name=name,
        cmdline=("powercut.probe=1",),
        timeout_s=timeout,
    )
    start = time.monotonic()
    try:
        dom = create_domain(libvirt, conn, domain_xml(spec, "kvm", name=name))
    except libvirt.libvirtError as e:
        return False, f"libvirt at {uri} could not start a KVM domain: {_message(e)}"
    ok = ConsoleWatch(mirror.local(str(console)) if mirror else console, _accel.PROBE_OK)
    try:
        while True:
            if mirror is not None:
                mirror.sync()
            took = time.monotonic() - start
            state = domain_state(libvirt, dom)
            if ok.seen():
                return True, f"KVM domain at {uri} booted in {took:.1f} s"
            if state is None:
                return False, f"KVM domain at {uri} stopped without booting"
            if why := paused_reason(libvirt, state):
                return False, f"KVM domain at {uri} paused ({why})"
            if took > timeout:
                return False, f"KVM domain at {uri} did not boot within {timeout:g} s"
            time.sleep(0.1)
    except libvirt.libvirtError as e:  # no verdict, so nothing is cached
        raise VmError(f"lost libvirt at {uri} during the KVM probe: {_message(e)}") from None
    finally:
        destroy_domain(libvirt, dom)


def resolve_libvirt_accel(
    libvirt,
    conn,
    requested: str,
    *,
    uri: str,
    kernel: str,
    initrd: str,
    workdir: Path,
    mirror: Mirror | None = None,
) -> str:
    """kvm/tcg for a domain through the libvirt connection ``conn`` to ``uri``: a local URI
    (powercut.vm.libvirt.is_local_uri) uses the local probe; a remote one boots the probe there."""
    if is_local_uri(uri):
        return _accel.resolve_accel(requested, kernel, initrd)
    try:
        version: int | str = conn.getVersion()
    except libvirt.libvirtError:
        version = ""
    return _accel.resolve_remote_accel(
        requested,
        uri=uri,
        kernel=kernel,
        hypervisor_version=version,
        probe=lambda: probe_kvm_libvirt(
            libvirt, conn, kernel, initrd, workdir, uri=uri, mirror=mirror
        ),
    )

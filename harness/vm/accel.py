"""Acceleration probe (host side): 'auto' boots the guest kernel under KVM with a short timeout (the
init answers ``powercut-probe-ok`` at once); if that fails or hangs, TCG.

Two probes, one verdict cache (``<cache_root>/accel.json``, see :mod:`powercut.paths`):

* local (the QEMU backend, local libvirt URIs): QEMU itself, here; keyed by host kernel release, QEMU
  binary and guest kernel (:func:`local_key`).
* remote (a libvirt URI that is not local, see powercut.vm.libvirt.is_local_uri): the same probe
  guest booted as a libvirt domain of type kvm on that hypervisor (:func:`probe_kvm_libvirt`, with
  the libvirt backend's helpers); keyed by the URI, the hypervisor's version and the guest kernel
  (:func:`remote_key`).  A paused, failed or silent probe domain means TCG.

Either probe runs once per key."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from powercut.config import cache_root
from powercut.errors import EnvironmentNotReady
from powercut.linux import environ, process

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 15.0  # $POWERCUT_KVM_PROBE_TIMEOUT overrides it (probe_timeout_s)


def probe_timeout_s() -> float:
    """Seconds the KVM probe may take: $POWERCUT_KVM_PROBE_TIMEOUT, else PROBE_TIMEOUT_S."""
    return environ.number(environ.KVM_PROBE_TIMEOUT, PROBE_TIMEOUT_S)


PROBE_OK = b"powercut-probe-ok"


def _cache_file() -> Path:
    return cache_root() / "accel.json"


def _identity(path: str) -> str:
    st = os.stat(path)
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


def local_key(qemu: str, kernel: str) -> str:
    """Cache key of the local probe: host kernel release, QEMU binary, guest kernel."""
    raw = f"{platform.release()}|{_identity(qemu)}|{_identity(kernel)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def remote_key(uri: str, kernel: str, hypervisor_version: int | str = "") -> str:
    """Cache key of a probe through libvirt: the URI as given, the hypervisor's version (libvirt's
    getVersion(), i.e. QEMU's there) and the guest kernel (a path on both hosts)."""
    raw = f"libvirt|{uri}|{hypervisor_version}|{_identity(kernel)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _store(key: str, entry: dict) -> None:
    cache = _cache_file()
    verdicts = cached_verdicts()
    verdicts[key] = entry
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(verdicts, indent=1))
    tmp.replace(cache)


def cached_probe(key: str, probe: Callable[[], tuple[bool, str]], *, where: str) -> str:
    """'kvm' or 'tcg': the cached verdict for ``key``, else run ``probe`` once and cache its verdict."""
    known = cached_verdicts().get(key)
    if known and known.get("accel") in ("kvm", "tcg"):
        return known["accel"]
    ok, reason = probe()
    accel = "kvm" if ok else "tcg"
    log.info("acceleration probe on %s: %s (%s)", where, accel, reason)
    _store(key, {"accel": accel, "reason": reason, "where": where, "at": time.time()})
    return accel


def kvm_usable_device() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def probe_kvm(
    qemu: str, kernel: str, initrd: str, timeout: float | None = None
) -> tuple[bool, str]:
    """Boot kernel+initrd under KVM with ``powercut.probe=1``; (ok, reason)."""
    timeout = probe_timeout_s() if timeout is None else timeout
    if not kvm_usable_device():
        return False, "/dev/kvm missing or not accessible"
    with tempfile.TemporaryDirectory(prefix="powercut-probe-") as tmp:
        console = os.path.join(tmp, "console")
        argv = [
            qemu,
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-no-reboot",
            "-machine",
            "microvm,x-option-roms=off,pit=off,pic=off,rtc=off,isa-serial=on",
            "-accel",
            "kvm",
            "-cpu",
            "host",
            "-m",
            "256",
            "-kernel",
            kernel,
            "-initrd",
            initrd,
            "-append",
            "console=ttyS0 panic=-1 reboot=t rdinit=/init powercut.probe=1 loglevel=1",
            "-chardev",
            f"file,id=con,path={console}",
            "-serial",
            "chardev:con",
        ]
        start = time.monotonic()
        with process.Spawned(argv, stderr=open(os.path.join(tmp, "err"), "wb")) as vm:
            rc = vm.wait(timeout)
            vm.kill()
        took = time.monotonic() - start
        out = Path(console).read_bytes() if os.path.exists(console) else b""
        if PROBE_OK in out:
            return True, f"KVM guest booted in {took:.1f} s"
        if rc is None:
            return False, f"KVM guest did not boot within {timeout:g} s"
        err = Path(tmp, "err").read_text(errors="replace").strip()
        return False, f"QEMU with KVM exited {rc}: {err.splitlines()[-1] if err else 'no message'}"


def resolve_accel(requested: str, kernel: str, initrd: str) -> str:
    """'kvm' or 'tcg' for ``requested`` in auto/kvm/tcg, for a VM run by QEMU on this host."""
    if requested == "tcg":
        return "tcg"
    qemu = process.require("qemu-system-x86_64", "qemu-system-x86")
    if requested == "kvm":
        if not kvm_usable_device():
            raise EnvironmentNotReady("--accel kvm: /dev/kvm is missing or not accessible")
        return "kvm"
    return cached_probe(
        local_key(qemu, kernel), lambda: probe_kvm(qemu, kernel, initrd), where="local"
    )


def resolve_remote_accel(
    requested: str,
    *,
    uri: str,
    kernel: str,
    probe: Callable[[], tuple[bool, str]],
    hypervisor_version: int | str = "",
) -> str:
    """'kvm' or 'tcg' for a VM on the hypervisor behind libvirt ``uri``: kvm/tcg as asked (nothing
    here can check the remote /dev/kvm); auto runs ``probe`` (a KVM boot there: (ok, reason)) once per
    :func:`remote_key` and caches its verdict."""
    if requested in ("kvm", "tcg"):
        return requested
    return cached_probe(remote_key(uri, kernel, hypervisor_version), probe, where=uri)


def cached_verdicts() -> dict:
    try:
        verdicts = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return verdicts if isinstance(verdicts, dict) else {}

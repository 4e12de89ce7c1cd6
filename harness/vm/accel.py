"""Acceleration probe: 'auto' boots the guest kernel under KVM with a short timeout (the init answers
``powercut-probe-ok`` at once); if that fails or hangs, TCG.  The verdict is cached per host kernel,
QEMU binary and guest kernel, so the probe runs once per machine."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from pathlib import Path

from .. import process
from ..errors import EnvironmentNotReady

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = float(os.environ.get("POWERCUT_KVM_PROBE_TIMEOUT", "15"))


def _cache_file() -> Path:
    from powercut.images.build import cache_root
    return cache_root() / "accel.json"


def _key(qemu: str, kernel: str) -> str:
    st = os.stat(qemu)
    kst = os.stat(kernel)
    raw = f"{platform.release()}|{qemu}|{st.st_size}|{st.st_mtime_ns}|{kernel}|{kst.st_size}|{kst.st_mtime_ns}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def kvm_usable_device() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def probe_kvm(qemu: str, kernel: str, initrd: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Boot kernel+initrd under KVM with ``powercut.probe=1``; (ok, reason)."""
    if not kvm_usable_device():
        return False, "/dev/kvm missing or not accessible"
    with tempfile.TemporaryDirectory(prefix="powercut-probe-") as tmp:
        console = os.path.join(tmp, "console")
        argv = [qemu, "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
                "-machine", "microvm,x-option-roms=off,pit=off,pic=off,rtc=off,isa-serial=on",
                "-accel", "kvm", "-cpu", "host", "-m", "256", "-kernel", kernel, "-initrd", initrd,
                "-append", "console=ttyS0 panic=-1 reboot=t rdinit=/init powercut.probe=1 loglevel=1",
                "-chardev", f"file,id=con,path={console}", "-serial", "chardev:con"]
        start = time.monotonic()
        with process.Spawned(argv, stderr=open(os.path.join(tmp, "err"), "wb")) as vm:
            rc = vm.wait(timeout)
            vm.kill()
        took = time.monotonic() - start
        out = Path(console).read_bytes() if os.path.exists(console) else b""
        if b"powercut-probe-ok" in out:
            return True, f"KVM guest booted in {took:.1f} s"
        if rc is None:
            return False, f"KVM guest did not boot within {timeout:g} s"
        err = Path(tmp, "err").read_text(errors="replace").strip()
        return False, f"QEMU with KVM exited {rc}: {err.splitlines()[-1] if err else 'no message'}"


def resolve_accel(requested: str, kernel: str, initrd: str) -> str:
    """'kvm' or 'tcg' for ``requested`` in auto/kvm/tcg."""
    if requested == "tcg":
        return "tcg"
    qemu = process.require("qemu-system-x86_64", "qemu-system-x86")
    if requested == "kvm":
        if not kvm_usable_device():
            raise EnvironmentNotReady("--accel kvm: /dev/kvm is missing or not accessible")
        return "kvm"
    key = _key(qemu, kernel)
    cache = _cache_file()
    try:
        verdicts = json.loads(cache.read_text())
    except (OSError, ValueError):
        verdicts = {}
    if key in verdicts:
        return verdicts[key]["accel"]
    ok, reason = probe_kvm(qemu, kernel, initrd)
    accel = "kvm" if ok else "tcg"
    log.info("acceleration probe: %s (%s)", accel, reason)
    verdicts[key] = {"accel": accel, "reason": reason, "at": time.time()}
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(verdicts, indent=1))
    tmp.replace(cache)
    return accel


def cached_verdicts() -> dict:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}

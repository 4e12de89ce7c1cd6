"""Can a crash test run on this machine, and what would make it ready (host): ``powercut doctor``
and ``powercut setup``.

``checks()`` looks, one ``Check`` each, at what a crash test needs -- QEMU, the guest image and
dm-log-writes in its kernel, /dev/kvm and whether a KVM guest really boots, each filesystem's mkfs
and fsck, root, the checker-VM template cache, the pytest plugin -- and says for each what is
there, or what is missing and the command that fixes it.  ``missing`` is what stops every crash
test (doctor exits 1); ``warn`` is what makes them slower or rules out some of them (xfs without
xfsprogs, TCG without KVM).  Nothing is built or installed by looking, except that KVM is probed
(a short VM boot, cached) once the image is there.

``setup()`` installs the missing Debian packages (linux/packages.py: the one list, which
ci/setup.sh uses too), builds the guest image, and probes KVM once."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

from powercut.config import cache_root
from powercut.errors import EnvironmentNotReady, PowercutError
from powercut.images.build import Image, ImageSpec, build_image, find_image
from powercut.linux import environ, filesystems, packages
from powercut.vm import accel
from powercut.vm.qemu import QEMU

OK = "ok"
MISSING = "missing"
WARN = "warn"
SETUP = "powercut setup"
LOG_WRITES = "dm_log_writes"
FS_PACKAGE = {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs"}


@dataclass(frozen=True, slots=True)
class Check:
    status: str  # ok | missing | warn
    what: str
    detail: str
    fix: str = ""  # the command that fixes it (empty when there is nothing to fix)

    def line(self) -> str:
        text = f"{self.status:<8} {self.what}: {self.detail}"
        return text + (f" -- fix: {self.fix}" if self.fix and self.status != OK else "")

    def to_json(self) -> dict[str, str]:
        return {"status": self.status, "what": self.what, "detail": self.detail, "fix": self.fix}


def ready(found: list[Check]) -> bool:
    """Can a crash test run (nothing ``missing``)?"""
    return not any(c.status == MISSING for c in found)


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}") if os.access(p, os.X_OK)), None
    )


def check_root() -> Check:
    if os.geteuid() == 0:
        return Check(OK, "root", "running as root (host mode, loop devices, powercut setup)")
    return Check(
        WARN,
        "root",
        "not root: host mode (--check-in host) and powercut setup need root, and a VM reads "
        "the host's files with this user's rights (crash tests are run as root)",
        "sudo powercut doctor",
    )


def check_qemu() -> Check:
    qemu = _which(QEMU)
    if qemu:
        return Check(OK, "QEMU", qemu)
    return Check(
        MISSING,
        "QEMU",
        f"{QEMU} not found (Debian package qemu-system-x86): no VM can start",
        SETUP,
    )


def check_filesystems() -> list[Check]:
    out = []
    for name in filesystems.names():
        fs = filesystems.get(name)
        tools = list(dict.fromkeys((fs.mkfs[0], fs.fsck[0])))
        lacking = [t for t in tools if not _which(t)]
        what = f"{name} tools"
        if not lacking:
            static = (
                f" (and {fs.fsck_static}: a faster fsck)"
                if fs.fsck_static and _which(fs.fsck_static)
                else ""
            )
            out.append(Check(OK, what, " and ".join(tools) + static))
        else:
            status = (
                MISSING if name == filesystems.DEFAULT_FS else WARN
            )  # without its tools no crash test runs
            out.append(
                Check(
                    status,
                    what,
                    f"{', '.join(lacking)} not found (Debian package {FS_PACKAGE.get(name, '?')}):"
                    f" no crash test on {name}",
                    SETUP,
                )
            )
    return out


def check_tools() -> list[Check]:
    """The tools a crash test runs better with, or a part of powercut needs."""
    out = []
    cc = _which("cc")
    out.append(
        Check(OK, "C compiler", f"{cc} (the C powercut-mark)")
        if cc
        else Check(
            WARN,
            "C compiler",
            "no cc: workloads mark with the Python powercut-mark, ~1000x slower a mark "
            "in a TCG guest",
            SETUP,
        )
    )
    strace = _which("strace")
    out.append(
        Check(OK, "strace", strace)
        if strace
        else Check(
            WARN, "strace", "not found: no syscall traces of the workload in the guest", SETUP
        )
    )
    fio = _which("fio")
    out.append(
        Check(OK, "fio", f"{fio} (powercut bench)")
        if fio
        else Check(WARN, "fio", "not found: powercut bench cannot time fio profiles", SETUP)
    )
    return out


def check_image() -> tuple[list[Check], Image | None]:
    """The guest image (found, never built here) and dm-log-writes in its kernel."""
    try:
        image = find_image(ImageSpec())
    except PowercutError as e:
        return [Check(MISSING, "guest image", f"cannot tell: {e.one_line()}", SETUP)], None
    if image is None:
        return [
            Check(
                MISSING,
                "guest image",
                "not built (a Debian kernel and an initramfs, cached; a few minutes "
                "the first time)",
                "powercut image build",
            ),
            Check(
                MISSING,
                "dm-log-writes",
                "unknown until the guest image is built",
                "powercut image build",
            ),
        ], None
    found = [
        Check(
            OK,
            "guest image",
            f"{image.hash}: {image.source}, kernel {image.kernel_release}, "
            f"{len(image.modules)} modules ({image.dir})",
        )
    ]
    # modules.txt requires dm-log-writes: an image is built only from a kernel that has it, as a
    # module (then in the image's list) or built in (then resolve_modules skipped it)
    where = "module" if LOG_WRITES in image.modules else "built into the kernel,"
    found.append(
        Check(
            OK, "dm-log-writes", f"{where} {LOG_WRITES} in the guest kernel {image.kernel_release}"
        )
    )
    return found, image


def check_kvm(image: Image | None, probe: bool = True) -> list[Check]:
    """/dev/kvm, and whether a KVM guest boots (the accel probe VMs use, cached)."""
    if not os.path.exists("/dev/kvm"):
        return [
            Check(
                WARN,
                "KVM",
                "no /dev/kvm: VMs run under TCG (software emulation, several times slower)",
                "modprobe kvm_intel (or kvm_amd); on a VM, enable nested virtualization",
            )
        ]
    if not accel.kvm_usable_device():
        return [
            Check(
                WARN,
                "KVM",
                "/dev/kvm is not accessible to this user: VMs run under TCG",
                "sudo powercut doctor",
            )
        ]
    qemu = _which(QEMU)
    if image is None or qemu is None or not probe:
        return [
            Check(
                WARN,
                "KVM",
                "/dev/kvm is there; whether a KVM guest boots is probed once the guest image is "
                "built",
                SETUP,
            )
        ]
    key = accel.local_key(qemu, image.kernel)
    try:
        verdict = accel.cached_probe(
            key, lambda: accel.probe_kvm(qemu, image.kernel, image.initrd), where="local"
        )
    except (PowercutError, OSError) as e:
        return [Check(WARN, "KVM", f"the KVM probe failed ({e}): VMs run under TCG")]
    reason = accel.cached_verdicts().get(key, {}).get("reason", "")
    if verdict == "kvm":
        return [Check(OK, "KVM", f"works: {reason}" if reason else "works")]
    return [
        Check(
            WARN,
            "KVM",
            f"/dev/kvm is there but a KVM guest does not boot ({reason}): VMs run under TCG, "
            "several times slower",
            "dmesg | grep -i kvm (on a VM: enable nested virtualization)",
        )
    ]


def check_templates() -> Check:
    """Checker-VM templates: a checker VM restored from one starts in a fraction of a second."""
    root = cache_root()
    if environ.text(environ.VM_START, "snapshot") == "boot":
        return Check(OK, "template cache", f"off ({environ.VM_START}=boot): every checker VM boots")
    tdir = root / "templates"
    saved = sorted(p.parent.name for p in tdir.glob("*/state")) if tdir.is_dir() else []
    probe = root if root.exists() else root.parent
    if probe.exists() and not os.access(probe, os.W_OK):
        return Check(
            MISSING,
            "template cache",
            f"{root} is not writable: no image, template or KVM verdict can be cached",
            f"export {environ.CACHE}=/a/writable/dir",
        )
    if saved:
        return Check(
            OK,
            "template cache",
            f"{len(saved)} checker-VM template{'s' * (len(saved) != 1)} in {tdir}",
        )
    return Check(
        OK,
        "template cache",
        f"none yet in {tdir}: the first checker VM saves one (seconds, once per VM shape)",
    )


def check_pytest_plugin() -> Check:
    if importlib.util.find_spec("pytest") is None:
        return Check(
            WARN,
            "pytest plugin",
            "pytest is not installed for this Python: no crash tests in pytest",
            f"{sys.executable} -m pip install pytest",
        )
    eps = [
        e
        for e in importlib.metadata.entry_points(group="pytest11")
        if e.value == "powercut.pytest_plugin"
    ]
    if not eps:
        return Check(
            WARN,
            "pytest plugin",
            "powercut's pytest11 entry point is not registered (powercut is not "
            "installed, only importable)",
            f"{sys.executable} -m pip install powercut",
        )
    return Check(OK, "pytest plugin", f"registered ({eps[0].name} = {eps[0].value})")


def checks(probe_kvm: bool = True) -> list[Check]:
    """Every check, in the order doctor prints them."""
    image_checks, image = check_image()
    return [
        check_root(),
        check_qemu(),
        *image_checks,
        *check_kvm(image, probe_kvm),
        *check_filesystems(),
        *check_tools(),
        check_templates(),
        check_pytest_plugin(),
    ]


def setup(
    *,
    dev: bool = False,
    image: bool = True,
    dry_run: bool = False,
    say: Callable[[str], None] = print,
) -> None:
    """Install the missing Debian packages, then (``image``) build the guest image and probe KVM."""
    wanted = packages.names(packages.GROUPS if dev else packages.DEFAULT_GROUPS)
    try:
        done = packages.install(wanted, dry_run=dry_run, say=say)
    except packages.InstallError as e:
        raise EnvironmentNotReady(str(e)) from None
    verb = "would install" if dry_run else "installed"
    say(
        f"Debian packages: {len(wanted)} wanted, "
        + (f"{verb} {' '.join(done)}" if done else "all installed")
    )
    if not image:
        return
    if dry_run:
        try:
            found = find_image(ImageSpec())
        except PowercutError as e:
            found = None
            say(f"guest image: cannot tell yet ({e.one_line()})")
        say(
            f"guest image: {found.hash}, built already"
            if found
            else "guest image: would build it (powercut image build)"
        )
        return
    built = build_image(ImageSpec())
    say(
        f"guest image: {built.hash}: {built.source}, kernel {built.kernel_release}, {len(built.modules)} modules"
    )
    for c in check_kvm(built):
        say(f"{c.what}: {c.detail}")

"""The Debian/Ubuntu packages powercut needs on the host, in one place, and how to install the
missing ones with apt-get.

The guest runs the host's own binaries (it chroots into the host root), so every tool a VM uses
(dmsetup, mkfs, fsck, strace, the C compiler that builds the mark tool) is a host package too.
``powercut setup`` installs what is missing (campaign/doctor.py), ``powercut doctor`` names it, and
ci/setup.sh runs this very file before powercut is installed (``python3 harness/linux/packages.py
--dev``: libvirt-python, one of the checkout's Python dependencies, builds against libvirt-dev), so
the list lives here and nowhere else.

Run as a script from a checkout, it needs the standard library only: ``powercut`` is then the
checkout's harness/ directory, loaded by path (its ``__init__``, ``errors`` and ``linux/process``
import nothing else), so dpkg-query and apt-get go through the one runner, linux/process.py, either
way.  ``plan`` is pure, ``install`` the adapter that runs dpkg-query and apt-get."""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass


def checkout_package() -> None:
    """Run as a script (ci/setup.sh, before powercut is installed): make ``powercut`` this checkout's
    harness/ directory, found by path; imported as powercut.linux.packages: nothing to do."""
    if __package__ or "powercut" in sys.modules:
        return
    harness = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "powercut", os.path.join(harness, "__init__.py"), submodule_search_locations=[harness]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no powercut package at {harness}")
    sys.modules["powercut"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


checkout_package()
from powercut.linux import process  # noqa: E402  (after checkout_package: the script's powercut is its checkout)

# groups: "crash" -- a crash test needs it (``powercut setup`` and ``doctor``); "bench" -- powercut
# bench (``powercut setup`` installs it too); "dev" -- powercut's own test suite and workloads
# (``powercut setup --dev``, ci/setup.sh)
GROUPS = ("crash", "bench", "dev")
DEFAULT_GROUPS = ("crash", "bench")


@dataclass(frozen=True, slots=True)
class Package:
    name: str
    group: str
    why: str


PACKAGES = (
    Package("qemu-system-x86", "crash", "QEMU: every VM"),
    Package("e2fsprogs", "crash", "ext4: mkfs.ext4, e2fsck"),
    Package("e2fsck-static", "crash", "e2fsck without dynamic linking: a faster fsck per state"),
    Package("xfsprogs", "crash", "xfs: mkfs.xfs, xfs_repair"),
    Package("btrfs-progs", "crash", "btrfs: mkfs.btrfs, btrfs check"),
    Package("busybox-static", "crash", "the guest image's init"),
    Package("kmod", "crash", "depmod for the guest kernel's modules"),
    Package("zstd", "crash", "the guest kernel's compressed modules"),
    Package("util-linux", "crash", "mount and the other tools a workload's script may use"),
    Package("gcc", "crash", "the C powercut-mark (without it: the slower Python one)"),
    Package(
        "strace", "crash", "syscall traces of the workload in the guest, and of what a checker read"
    ),
    Package("fio", "bench", "powercut bench's profiles"),
    Package("hdparm", "bench", "powercut bench: the disk write cache on and off"),
    Package("qemu-utils", "dev", "qemu-img, to look at a disk image by hand"),
    Package(
        "dmsetup", "dev", "device-mapper tables by hand and in tests (powercut itself uses ioctls)"
    ),
    Package("cpio", "dev", "tests: reading the guest image"),
    Package("libvirt-daemon-system", "dev", "the libvirt backend and its tests"),
    Package("libvirt-dev", "dev", "building libvirt-python"),
    Package("pkg-config", "dev", "building libvirt-python"),
    Package("openssh-server", "dev", "tests of checker VMs on remote libvirt hosts"),
    Package("openssh-client", "dev", "tests of checker VMs on remote libvirt hosts"),
    Package("postgresql", "dev", "the postgres workload"),
    Package("chromium", "dev", "tests: report.html rendered by a browser"),
)

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive"}
APT_TIMEOUT_S = 3600.0  # one apt-get update or install (a fresh machine downloads a few hundred MB)
QUERY_TIMEOUT_S = 60.0  # dpkg-query
INSTALL = ("apt-get", "install", "-y", "-q", "--no-install-recommends")
UPDATE = ("apt-get", "update", "-q")


def names(groups: Iterable[str] = DEFAULT_GROUPS) -> list[str]:
    """The packages of ``groups``, in the table's order."""
    want = set(groups)
    unknown = want - set(GROUPS)
    if unknown:
        raise ValueError(
            f"unknown package group(s) {', '.join(sorted(unknown))}: {', '.join(GROUPS)}"
        )
    return [p.name for p in PACKAGES if p.group in want]


def plan(wanted: list[str], installed: set[str], have_lists: bool) -> list[tuple[str, ...]]:
    """The apt-get commands that install what of ``wanted`` is not ``installed``: an update first
    when the machine has no package lists (a fresh container; the guest kernel also comes from
    ``apt-get download``, so the lists are fetched even when nothing is missing)."""
    missing = [n for n in wanted if n not in installed]
    out: list[tuple[str, ...]] = [] if have_lists else [UPDATE]
    if missing:
        out.append((*INSTALL, *missing))
    return out


def parse_dpkg_query(text: str) -> set[str]:
    """The installed packages in ``dpkg-query -W -f '${Package} ${Status}\\n'`` output."""
    out = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[-3:] == ["install", "ok", "installed"]:
            out.add(words[0].split(":")[0])
    return out


def installed(wanted: list[str]) -> set[str]:
    """Which of ``wanted`` dpkg says are installed (empty where there is no dpkg)."""
    if not shutil.which("dpkg-query") or not wanted:
        return set()
    r = process.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *wanted],
        timeout=QUERY_TIMEOUT_S,
        check=False,
    )
    return parse_dpkg_query(r.stdout)


def have_lists(lists_dir: str = "/var/lib/apt/lists") -> bool:
    return bool(
        glob.glob(os.path.join(lists_dir, "*_Packages"))
        or glob.glob(os.path.join(lists_dir, "*_Packages.*"))
    )


class InstallError(Exception):
    """apt-get failed, or this is no Debian/Ubuntu machine (the message says which)."""


def apt_ready() -> None:
    """InstallError unless apt-get can run here (Debian/Ubuntu, as root)."""
    if not shutil.which("apt-get") or not shutil.which("dpkg-query"):
        raise InstallError(
            "no apt-get here: powercut setup installs Debian/Ubuntu packages; install the "
            f"equivalents of {' '.join(names())} with this system's package manager"
        )
    if os.geteuid() != 0:
        raise InstallError(
            "installing Debian packages needs root (apt-get): run it as root, or with sudo"
        )


def _run(argv: tuple[str, ...]) -> None:
    r = process.run(argv, env={**os.environ, **APT_ENV}, timeout=APT_TIMEOUT_S, check=False)
    if not r.ok:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
        how = f"timed out after {APT_TIMEOUT_S:g} s" if r.timed_out else f"exited {r.returncode}"
        raise InstallError(f"{' '.join(argv[:2])} {how}:\n{tail}")


def install(
    wanted: list[str], *, dry_run: bool = False, say: Callable[[str], None] = print
) -> list[str]:
    """Install what of ``wanted`` is missing; the packages installed (or, with ``dry_run``, that
    would be).  An install that fails is tried once more after ``apt-get update`` (stale lists)."""
    if dry_run and not shutil.which("dpkg-query"):
        have: set[str] = set()
    else:
        if not dry_run:
            apt_ready()
        have = installed(wanted)
    steps = plan(wanted, have, have_lists())
    missing = [n for n in wanted if n not in have]
    if dry_run:
        for step in steps:
            say("would run: " + " ".join(step))
        return missing
    for step in steps:
        say(
            "running: "
            + " ".join(step[:2])
            + (
                f" ({len(missing)} packages: {' '.join(missing)})"
                if step[:2] == INSTALL[:2]
                else ""
            )
        )
        try:
            _run(step)
        except InstallError:
            if step[:2] != INSTALL[:2]:
                raise
            _run(UPDATE)
            _run(step)
    return missing


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="packages.py",
        description="install the Debian packages powercut needs "
        "(what 'powercut setup' installs, before powercut itself is installed)",
    )
    p.add_argument("--dev", action="store_true", help="also powercut's own test suite's packages")
    p.add_argument("--dry-run", action="store_true", help="print the apt-get commands, run nothing")
    p.add_argument("--list", action="store_true", help="print the package names and stop")
    args = p.parse_args(argv)
    wanted = names(GROUPS if args.dev else DEFAULT_GROUPS)
    if args.list:
        print(" ".join(wanted))
        return 0
    try:
        done = install(wanted, dry_run=args.dry_run, say=lambda line: print(f"packages: {line}"))
    except InstallError as e:
        print(f"packages: error: {e}", file=sys.stderr)
        return 1
    if not args.dry_run:
        print(
            f"packages: {len(wanted)} Debian packages there"
            + (f" ({len(done)} installed now)" if done else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

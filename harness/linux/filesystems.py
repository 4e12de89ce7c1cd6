"""The one table of per-filesystem knowledge (host and guest): how to make one, how to check one
read-only and what its checker's exit codes mean, its minimum and default size, its default mount
options, what clones of one filesystem need to be mounted side by side in one kernel, and which
module group the guest loads for it.  record, check, the guest agent and the CLI all read it here."""

from __future__ import annotations

import functools
import os
import re
import shutil
import threading
from dataclasses import dataclass

from powercut.errors import PowercutError, UsageError
from powercut.linux import process

EAGER_INIT = {
    "ext4": ("-E", "lazy_itable_init=0,lazy_journal_init=0")
}  # Filesystem.eager_mkfs_argv


@dataclass(frozen=True, slots=True)
class Filesystem:
    name: str
    mkfs: tuple[str, ...]  # argv; the device is appended
    fsck: tuple[str, ...]  # read-only check argv; the device is appended
    fsck_clean: frozenset[int]  # exit codes that mean "no problem found"
    fsck_meaning: dict[int, str]  # what the other exit codes mean (for reasons)
    min_mb: int
    default_mb: int
    mount_opts: str = ""  # options every mount of this filesystem gets
    # Clones of one filesystem (every crash state of a recording is one) carry the same UUID/fsid.
    clone_mount_opts: str = ""  # what lets two clones be mounted at once in one kernel
    clones_mount_together: bool = True  # False: no two clones mounted together in one kernel
    module_group: str = ""
    # the same checker statically linked (Debian's e2fsck-static), used when it is there and reports
    # the same version: a TCG guest spends ~0.09 s of each state's ~0.2 s dynamically linking e2fsck
    fsck_static: str = ""
    # (the first kernel release that knows it, option): keeps a timer's background work of the
    # kernel off a crash state while it is judged, so its fsck and kernel lines do not depend on how
    # long the check took (check_mount_opts)
    settle_opts: tuple[tuple[tuple[int, int], str], ...] = ()

    def fsck_argv(self, device: str) -> list[str]:
        return [*fsck_program(self), device]

    def mkfs_argv(self, device: str, extra: tuple[str, ...] = ()) -> list[str]:
        return [*self.mkfs, *extra, device]

    def eager_mkfs_argv(self, device: str, extra: tuple[str, ...] = ()) -> list[str]:
        """mkfs that leaves nothing for the kernel to initialize later: ext4's lazy inode-table and
        journal init would otherwise zero inode tables from a background thread (ext4lazyinit) in
        the middle of a recorded workload -- 512 KiB writes of no program's, inflating its commits'
        anatomy and write-cache windows.  The user's own options come after, and win."""
        return self.mkfs_argv(device, EAGER_INIT.get(self.name, ()) + tuple(extra))

    def check_mount_opts(self, user: str, release: str | None = None) -> str:
        """Options for mounting a crash state: the user's, plus what clones need and the settle
        options the running kernel (``release``: os.uname's, if not given) knows -- never a change
        to the image itself, and the user's come last (they win)."""
        have = running_kernel() if release is None else kernel_version(release)
        settle = ",".join(o for since, o in self.settle_opts if have >= since)
        return join_opts(self.mount_opts, self.clone_mount_opts, settle, user)

    def explain_fsck(self, rc: int | None) -> str:
        if rc is None:
            return "timed out"
        return self.fsck_meaning.get(rc, f"exit {rc}")


def kernel_version(release: str) -> tuple[int, int]:
    """(major, minor) of a kernel release string ("6.1.0-28-amd64"); (0, 0) when it has none."""
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m[1]), int(m[2])) if m else (0, 0)


@functools.cache
def running_kernel() -> tuple[int, int]:
    """(major, minor) of the kernel this process runs on (asked once: every state's mount needs it)."""
    return kernel_version(os.uname().release)


def join_opts(*parts: str) -> str:
    seen: dict[str, None] = {}
    for p in parts:
        for o in filter(None, (x.strip() for x in p.split(","))):
            seen.setdefault(o, None)
    return ",".join(seen)


DEFAULT_FS = (
    "ext4"  # the filesystem under test when none is given (--fs, FsSpec), the one doctor insists on
)

FILESYSTEMS: dict[str, Filesystem] = {
    "ext4": Filesystem(
        "ext4",
        ("mkfs.ext4", "-F", "-q"),
        ("e2fsck", "-fn"),
        frozenset({0}),
        {
            1: "errors corrected",
            2: "errors corrected, reboot",
            4: "errors left uncorrected",
            8: "operational error",
            12: "interrupted",
            16: "usage error",
        },
        min_mb=16,
        default_mb=256,
        module_group="ext4",
        fsck_static="e2fsck.static",
        # ext4lazyinit starts 0-5 s (at random) after a mount: it zeroes inode tables mkfs left lazy,
        # and (5.13 and later) reads every block bitmap, and one that disagrees with its group
        # descriptor marks the group corrupt and takes its free blocks off the count written at
        # umount -- so a damaged state's fsck summary and kernel lines would depend on the timer
        settle_opts=(((2, 6), "noinit_itable"), ((5, 13), "no_prefetch_block_bitmaps")),
    ),
    "xfs": Filesystem(
        "xfs",
        ("mkfs.xfs", "-f", "-q"),
        ("xfs_repair", "-n"),
        frozenset({0}),
        {1: "corruption found", 2: "dirty log (needs a mount to replay it)"},
        min_mb=300,
        default_mb=300,
        clone_mount_opts="nouuid",
        module_group="xfs",
    ),
    "btrfs": Filesystem(
        "btrfs",
        ("mkfs.btrfs", "-f", "-q"),
        ("btrfs", "check", "--readonly"),
        frozenset({0}),
        {1: "errors found"},
        # kernels before temp-fsid support (6.7; Debian 12's 6.1) refuse a second device with a
        # mounted fsid: clones are judged one at a time per kernel
        min_mb=128,
        default_mb=256,
        clones_mount_together=False,
        module_group="btrfs",
    ),
}


def get(name: str) -> Filesystem:
    try:
        return FILESYSTEMS[name]
    except KeyError:
        raise UsageError(
            f"unknown filesystem {name!r}: choose one of {', '.join(FILESYSTEMS)}"
        ) from None


def names() -> tuple[str, ...]:
    return tuple(FILESYSTEMS)


_fsck: dict[str, tuple[str, ...]] = {}
_fsck_lock = threading.Lock()


def _version(program: str) -> str:
    try:
        res = process.run(
            [program, "-V"],
            timeout=30,
            check=False,
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LANG": "C"},
        )
    except PowercutError:
        return ""
    first = (res.stderr or res.stdout).strip().splitlines()
    return first[0] if first else ""


def fsck_program(fs: Filesystem) -> tuple[str, ...]:
    """``fs.fsck``, with its program replaced by ``fs.fsck_static`` where that is on PATH and
    says it is the same version (decided once per process, or as the host decided: preset_fsck)."""
    with _fsck_lock:
        known = _fsck.get(fs.name)
    if known is not None:
        return known
    argv = fs.fsck
    if fs.fsck_static and shutil.which(fs.fsck_static) and shutil.which(fs.fsck[0]):
        mine = _version(fs.fsck[0])
        if mine and _version(fs.fsck_static) == mine:
            argv = (fs.fsck_static, *fs.fsck[1:])
    with _fsck_lock:
        _fsck[fs.name] = argv
    return argv


def preset_fsck(name: str, argv: tuple[str, ...]) -> None:
    """The fsck argv the host chose (fsck_program) for a guest that runs the host's userspace: the
    guest skips the version check, and keeps the table's program if the chosen one is not there."""
    fs = get(name)
    if (
        argv
        and tuple(argv[1:]) == fs.fsck[1:]
        and argv[0] in (fs.fsck[0], fs.fsck_static)
        and shutil.which(argv[0])
    ):
        with _fsck_lock:
            _fsck[name] = tuple(argv)

"""Mounts by system call: option words split into MS_* flags and filesystem data, mountinfo parsing
(octal escapes, optional fields, unmount order), and -- as root, with loop devices -- a real ext4
image mounted, found, refused, kept busy and unmounted; the guest's mount table (vm-images/mounts.txt)
parsed, refused line by line, and walked for each kind of kernel command line."""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from powercut.errors import ImageError, PowercutError, UsageError
from powercut.linux import mounts, process
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import (
    MS_DIRSYNC,
    MS_LAZYTIME,
    MS_MANDLOCK,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_RELATIME,
    MS_STRICTATIME,
    MS_SYNCHRONOUS,
    parse_options,
)


# -- option words ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "opts, readonly, flags, data",
    [
        ("", False, 0, ""),
        ("", True, MS_RDONLY, ""),
        ("ro", False, MS_RDONLY, ""),
        ("ro,rw", False, 0, ""),
        ("rw", True, 0, ""),
        (
            "nosuid,nodev,noexec,sync,dirsync",
            False,
            MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_SYNCHRONOUS | MS_DIRSYNC,
            "",
        ),
        ("noatime,nodiratime", False, MS_NOATIME | MS_NODIRATIME, ""),
        ("relatime,lazytime,mand", False, MS_RELATIME | MS_LAZYTIME | MS_MANDLOCK, ""),
        ("strictatime,sync,async", False, MS_STRICTATIME, ""),
        ("nouuid,norecovery", True, MS_RDONLY, "nouuid,norecovery"),
        (
            "noatime,data=writeback,ro,errors=remount-ro",
            False,
            MS_NOATIME | MS_RDONLY,
            "data=writeback,errors=remount-ro",
        ),
        ("defaults,noauto,nofail,x-systemd.device-timeout=1,user_xattr", False, 0, "user_xattr"),
        (
            ' context="system_u:object_r:tmp_t:s0,c1" , noexec',
            False,
            MS_NOEXEC,
            'context="system_u:object_r:tmp_t:s0,c1"',
        ),
    ],
)
def test_options_split_into_flags_and_data(
    opts: str, readonly: bool, flags: int, data: str
) -> None:
    assert parse_options(opts, readonly=readonly) == (flags, data)


def test_loop_option_is_refused() -> None:
    for opts in ("loop", "ro,loop=/dev/loop3"):
        with pytest.raises(UsageError, match="loopdev"):
            parse_options(opts)


# -- mountinfo ---------------------------------------------------------------------------------------------
INFO = b"""\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
30 22 0:25 / /work rw,nosuid shared:5 master:2 - tmpfs tmpfs rw,size=100k
31 30 7:0 / /work/a\\040b rw - xfs /dev/loop0 rw,nouuid
32 31 7:1 /sub /work/a\\040b/tab\\011x\\134y rw - ext4 /dev/loop1 rw
33 30 0:26 / /work/a\\040bc rw - tmpfs tmp\\040fs rw
34 31 7:2 / /work/a\\040b/tab\\011x\\134y rw - ext4 /dev/loop2 rw
35 22 0:27 / /worker rw - tmpfs tmpfs rw
garbage line without the separator
"""


def test_parse_mountinfo_unescapes_and_skips_garbage() -> None:
    rows = mounts.parse_mountinfo(INFO)
    assert len(rows) == 7
    a, inner = rows[2], rows[3]
    assert (a.mount_id, a.parent_id, a.dev, a.target) == (31, 30, "7:0", "/work/a b")
    assert (a.fstype, a.source) == ("xfs", "/dev/loop0")
    assert a.super_options == "rw,nouuid" and a.options == "rw"
    assert inner.root == "/sub" and inner.target == "/work/a b/tab\tx\\y"
    assert rows[1].fstype == "tmpfs" and rows[1].options == "rw,nosuid"  # optional fields skipped
    assert rows[4].source == "tmp fs"
    assert mounts.unescape(b"a\\012b\\134\\040") == "a\nb\\ "


def test_mounts_under_deepest_and_last_stacked_first() -> None:
    table = mounts.parse_mountinfo(INFO)
    got = [(m.mount_id, m.target) for m in mounts.mounts_under("/work/a b", table)]
    assert got == [(34, "/work/a b/tab\tx\\y"), (32, "/work/a b/tab\tx\\y"), (31, "/work/a b")]
    assert [m.mount_id for m in mounts.mounts_under("/work", table)] == [
        34,
        32,
        33,
        31,
        30,
    ]  # same depth: later first
    assert mounts.mounts_under("/work/a b/nothing-here", table) == []


def test_fs_type_of_real_paths(tmp_path: Path) -> None:
    assert mounts.fs_type("/proc/self") == "proc"
    assert mounts.fs_type(tmp_path) not in ("?", "proc")
    assert mounts.fs_type(tmp_path / "not" / "there") == mounts.fs_type(tmp_path)


def test_umount_of_a_non_mount(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (umount2 answers EPERM otherwise)")
    assert mounts.umount(tmp_path, missing_ok=True) == "not-mounted"
    with pytest.raises(
        mounts.MountError, match=f"umount\\(2\\) of {tmp_path}: Invalid argument"
    ) as ei:
        mounts.umount(tmp_path)
    assert ei.value.errno == errno.EINVAL and isinstance(ei.value, PowercutError)


# -- a real filesystem (root, loop devices) ---------------------------------------------------------------------
@pytest.fixture
def ext4_loop(tmp_path: Path) -> Iterator[str]:
    if os.geteuid() != 0 or not os.path.exists("/dev/loop-control"):
        pytest.skip("needs root and /dev/loop-control")
    img = tmp_path / "fs.img"
    with open(img, "wb") as f:
        f.truncate(16 << 20)
    process.run([process.require("mkfs.ext4", "e2fsprogs"), "-F", "-q", str(img)], timeout=60)
    with LoopDevice(img) as dev:
        yield dev


def test_mount_find_and_umount_ext4(ext4_loop: str, tmp_path: Path) -> None:
    mnt = tmp_path / "mount point"  # a space: \040 in mountinfo
    mnt.mkdir()
    mounts.mount(ext4_loop, mnt, "ext4", "noatime,data=writeback,nodev")
    try:
        (m,) = mounts.mounts_under(tmp_path)
        assert (m.target, m.fstype, m.source) == (str(mnt), "ext4", ext4_loop)
        assert {"noatime", "nodev"} <= set(
            m.options.split(",")
        ) and "data=writeback" in m.super_options
        (mnt / "f").write_text("x")
    finally:
        assert mounts.umount(mnt) == "unmounted"
    assert mounts.mounts_under(tmp_path) == [] and not (mnt / "f").exists()


def test_readonly_mount(ext4_loop: str, tmp_path: Path) -> None:
    mounts.mount(ext4_loop, tmp_path, "ext4", readonly=True)
    try:
        assert "ro" in mounts.mounts_under(tmp_path)[0].options.split(",")
        with pytest.raises(OSError) as ei:
            (tmp_path / "f").write_text("x")
        assert ei.value.errno == errno.EROFS
    finally:
        mounts.umount(tmp_path)


def test_mount_errors_are_one_line(ext4_loop: str, tmp_path: Path) -> None:
    with pytest.raises(mounts.MountError) as ei:
        mounts.mount(ext4_loop, tmp_path, "ext4", "ro,bogus_option_xyz")
    msg = str(ei.value)
    assert msg == ei.value.one_line() and ei.value.errno == errno.EINVAL
    assert (
        msg
        == f"mount(2) of {ext4_loop} as ext4 on {tmp_path} (-o ro,bogus_option_xyz): Invalid argument"
    )
    with pytest.raises(mounts.MountError, match="as xfs on"):
        mounts.mount(ext4_loop, tmp_path, "xfs")
    assert mounts.mounts_under(tmp_path) == []


def test_busy_umount_retries_then_detaches(ext4_loop: str, tmp_path: Path) -> None:
    mounts.mount(ext4_loop, tmp_path, "ext4")
    held = open(tmp_path / "held", "w")
    try:
        with pytest.raises(
            mounts.MountError, match="Device or resource busy \\(after 2 attempts\\)"
        ):
            mounts.umount(tmp_path, attempts=2, lazy_fallback=False)
        assert len(mounts.mounts_under(tmp_path)) == 1
        assert mounts.umount(tmp_path, attempts=2) == "detached"
        assert mounts.mounts_under(tmp_path) == []
        held.write("still works after the detach")
    finally:
        held.close()


# -- the guest's mount table (vm-images/mounts.txt; init.sh agrees: tests/unit/images/test_init.py) ------
TABLE = """\
# a comment, then a blank line

9p-options  trans=virtio,msize=4096
always  hostroot  /                   9p     ro,cache=loose
keep    /tmp      /run/hosttmp        bind   -
kept    /run/hosttmp%  /tmp%          bind   ro
always  -         /run/mnt            dir    -
share   %         /run/shares/%       9p     ro
if-dir  configfs  /sys/kernel/config  configfs  -
"""


def test_guest_table_rows_and_9p_options() -> None:
    ninep, rows = mounts.parse_guest_table(TABLE)
    assert ninep == "trans=virtio,msize=4096"
    assert [r.when for r in rows] == ["always", "keep", "kept", "always", "share", "if-dir"]
    assert rows[2] == mounts.TableRow("kept", "/run/hosttmp%", "/tmp%", "bind", "ro")


@pytest.mark.parametrize(
    "text, why",
    [
        (
            "9p-options o\nsometimes proc /proc proc -\n",
            "line 2: 'sometimes proc /proc proc -' is not",
        ),
        ("9p-options o\nalways proc /proc proc\n", "line 2: 'always proc /proc proc' is not"),
        (
            "always proc /proc proc -\n9p-options o\n",
            "line 2: '9p-options o' is not",
        ),  # after a mount
        ("always proc proc proc -\n", "line 1: the target must be absolute"),
        (
            "always hostroot / 9p ro\n9p-options o\n",
            "line 1: the target must be absolute, and a 9p share comes after",
        ),
    ],
)
def test_a_bad_guest_table_line_is_named(text: str, why: str) -> None:
    with pytest.raises(ImageError, match=re.escape(why)):
        mounts.parse_guest_table(text)


def test_guest_mounts_under_a_root_for_each_command_line() -> None:
    gm = mounts.GuestMount
    bare = mounts.guest_mounts(TABLE, "/r", {})
    assert bare == [
        gm("hostroot", "/r", "9p", "trans=virtio,msize=4096,ro,cache=loose"),
        gm("", "/r/run/mnt", "", ""),
        gm("configfs", "/r/sys/kernel/config", "configfs", "", optional=True),
    ]
    full = mounts.guest_mounts(
        TABLE,
        "/r",
        {
            "powercut.transport": "virtiofs",
            "powercut.keep": "/tmp/a,/opt/b,/tmp/c/d",
            "powercut.mount": "x,y",
        },
    )
    assert full == [
        gm("hostroot", "/r", "virtiofs", "ro"),
        gm("/r/tmp", "/r/run/hosttmp", "none", "bind"),
        gm("/r/run/hosttmp/a", "/r/tmp/a", "none", "bind,ro"),
        gm("/r/run/hosttmp/c/d", "/r/tmp/c/d", "none", "bind,ro"),
        gm("", "/r/run/mnt", "", ""),
        gm("x", "/r/run/shares/x", "virtiofs", "ro"),
        gm("y", "/r/run/shares/y", "virtiofs", "ro"),
        gm("configfs", "/r/sys/kernel/config", "configfs", "", optional=True),
    ]
    # keep names nothing under /tmp: no bind at all
    assert len(mounts.guest_mounts(TABLE, "/r", {"powercut.keep": "/opt/b"})) == len(bare)


def test_the_guest_table_of_the_image_parses() -> None:
    from importlib import resources

    ninep, rows = mounts.parse_guest_table(
        resources.files("powercut.images").joinpath("mounts.txt").read_text()
    )
    assert (
        ninep.startswith("trans=virtio,") and rows[0].source == "hostroot" and rows[0].target == "/"
    )

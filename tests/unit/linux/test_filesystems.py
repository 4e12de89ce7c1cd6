"""filesystems.py: the one table; sizes feed FsSpec, options for clones never change the image."""

from __future__ import annotations

import pytest

from powercut.config import FsSpec
from powercut.errors import UsageError
from powercut.linux import filesystems


def test_every_filesystem_is_complete() -> None:
    for name in filesystems.names():
        fs = filesystems.get(name)
        assert fs.name == name and fs.mkfs and fs.fsck and 0 in fs.fsck_clean
        assert 0 < fs.min_mb <= fs.default_mb and fs.module_group
        assert fs.fsck_argv("/dev/x")[-1] == "/dev/x" and fs.mkfs_argv("/dev/x", ("-L", "a"))[
            -3:
        ] == ["-L", "a", "/dev/x"]


def test_clone_options() -> None:
    xfs = filesystems.get("xfs")
    assert xfs.check_mount_opts("") == "nouuid"
    assert xfs.check_mount_opts("noatime,nouuid") == "nouuid,noatime"
    assert not filesystems.get("btrfs").clones_mount_together
    assert filesystems.join_opts("a,b", "", "b, c") == "a,b,c"


@pytest.mark.parametrize(
    ("release", "want"),
    [
        ("6.1.0-28-amd64", "noinit_itable,no_prefetch_block_bitmaps,data=writeback"),
        ("5.13.0", "noinit_itable,no_prefetch_block_bitmaps,data=writeback"),
        (
            "5.12.19-generic",
            "noinit_itable,data=writeback",
        ),  # no prefetch to keep off, no such option
        ("4.19.0-27-amd64", "noinit_itable,data=writeback"),
        ("garbage", "data=writeback"),  # unknown: nothing the kernel might refuse
    ],
)
def test_a_crash_state_mount_keeps_ext4s_lazy_init_off_where_the_kernel_knows_how(
    release: str, want: str
) -> None:
    assert filesystems.get("ext4").check_mount_opts("data=writeback", release) == want
    assert filesystems.get("xfs").check_mount_opts("", release) == "nouuid"


def test_kernel_version() -> None:
    assert filesystems.kernel_version("6.18.44-fc-v769") == (6, 18)
    assert filesystems.kernel_version("5.4") == (5, 4) and filesystems.kernel_version("") == (0, 0)


def test_fsck_meaning() -> None:
    ext4 = filesystems.get("ext4")
    assert (
        ext4.explain_fsck(4) == "errors left uncorrected" and ext4.explain_fsck(None) == "timed out"
    )
    assert ext4.explain_fsck(77) == "exit 77"


def test_sizes_come_from_the_table() -> None:
    assert FsSpec("xfs").size_mb == filesystems.get("xfs").default_mb
    assert FsSpec("ext4").size_mb == filesystems.get("ext4").default_mb
    with pytest.raises(UsageError, match="at least 300 MiB"):
        FsSpec("xfs", size_mb=64)
    with pytest.raises(UsageError, match="unknown filesystem 'zfs'"):
        FsSpec("zfs")


def test_recordings_make_ext4_with_nothing_left_to_initialize_later() -> None:
    """ext4lazyinit would zero inode tables in the background during a recorded workload."""
    from powercut.linux import filesystems

    argv = filesystems.get("ext4").eager_mkfs_argv("/dev/x", ("-b", "4096"))
    assert argv[-1] == "/dev/x" and "lazy_itable_init=0,lazy_journal_init=0" in argv
    assert argv.index("lazy_itable_init=0,lazy_journal_init=0") < argv.index(
        "-b"
    )  # the user's options win
    assert filesystems.get("xfs").eager_mkfs_argv("/dev/x") == filesystems.get("xfs").mkfs_argv(
        "/dev/x"
    )

"""A crash state's mount options keep ext4's lazy-init thread off it (filesystems.settle_opts): a
state whose block bitmap disagrees with its group descriptor (a lost write can leave one) reads the
same to e2fsck whether it stayed mounted 10 ms or longer than that thread's random start delay
(0-5 s).  Without them a 6.x kernel's bitmap prefetch marks the group corrupt and writes a different
free-block count at umount: a fsck summary that depended on how long the check took.  Root: loop
devices and mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from powercut.linux import filesystems
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import mount, umount

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0
    or not os.path.exists("/dev/loop-control")
    or not shutil.which("mkfs.ext4")
    or not shutil.which("debugfs"),
    reason="needs root, /dev/loop-control, mkfs.ext4 and debugfs",
)
DELAY_S = 5.5  # ext4's EXT4_DEF_LI_MAX_START_DELAY is 5 s


def damaged(img: Path) -> None:
    """A small lazily made ext4 whose group 0 claims 4000 free blocks its bitmap does not have."""
    with open(img, "wb") as f:
        f.truncate(4 << 20)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-b", "1024", "-O", "^has_journal", str(img)],
        check=True,
        timeout=60,
    )
    for cmd in ("set_bg 0 free_blocks_count 4000", "set_bg 0 checksum calc"):
        subprocess.run(
            ["debugfs", "-w", "-R", cmd, str(img)], check=True, timeout=60, capture_output=True
        )


def fsck_after_a_mount(img: Path, mnt: Path, held_s: float) -> str:
    with LoopDevice(img) as dev:
        mount(dev, str(mnt), "ext4", filesystems.get("ext4").check_mount_opts(""))
        time.sleep(held_s)
        umount(str(mnt))
    res = subprocess.run(["e2fsck", "-fn", str(img)], capture_output=True, text=True, timeout=60)
    return f"exit {res.returncode}: {res.stdout.strip().splitlines()[-1].split(': ', 1)[-1]}"  # not the name


def test_a_damaged_states_fsck_does_not_depend_on_how_long_it_stayed_mounted(
    tmp_path: Path,
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    quick, slow = tmp_path / "quick.img", tmp_path / "slow.img"
    damaged(quick)
    shutil.copyfile(quick, slow)
    assert fsck_after_a_mount(quick, mnt, 0) == fsck_after_a_mount(slow, mnt, DELAY_S)

"""The unreadable-sector layer's table (linux/badsector.py): linear around ``error`` segments,
clipped to the device; and, where this kernel has device-mapper (root), reads of the bad sector
fail with EIO while the others read the image."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from powercut.linux import dm
from powercut.linux.badsector import device_sectors, error_table, unreadable
from powercut.linux.loopdev import LoopDevice


def test_error_table() -> None:
    assert error_table("/dev/x", 100, [(10, 2)]) == [
        (0, 10, "linear", "/dev/x 0"),
        (10, 2, "error", ""),
        (12, 88, "linear", "/dev/x 12"),
    ]
    assert error_table("/dev/x", 100, [(0, 8), (96, 8)]) == [
        (0, 8, "error", ""),
        (8, 88, "linear", "/dev/x 8"),
        (96, 4, "error", ""),
    ]
    assert error_table("/dev/x", 100, []) == [(0, 100, "linear", "/dev/x 0")]
    assert error_table("/dev/x", 100, [(200, 1)]) == [(0, 100, "linear", "/dev/x 0")]
    with pytest.raises(ValueError):
        error_table("/dev/x", 100, [(10, 4), (12, 1)])


def test_no_bad_sector_is_the_device_itself(tmp_path: Path) -> None:
    img = tmp_path / "i.img"
    img.write_bytes(bytes(4096))
    assert device_sectors(str(img)) == 8
    with unreadable(str(img), ()) as dev:
        assert dev == str(img)


@pytest.mark.skipif(
    os.geteuid() != 0 or not dm.dm_available(), reason="needs root and device-mapper"
)
def test_reads_of_the_bad_sector_fail(tmp_path: Path) -> None:  # pragma: no cover - kernels with dm
    img = tmp_path / "i.img"
    img.write_bytes(bytes(range(256)) * 64)  # 16 KiB
    with LoopDevice(img) as loop, unreadable(loop, [(3, 1)]) as dev:
        fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
        try:
            with pytest.raises(OSError):
                os.preadv(fd, [bytearray(512)], 3 * 512)
        finally:
            os.close(fd)
        with open(dev, "rb") as f:
            assert f.read(1024) == img.read_bytes()[:1024]

"""Loop devices by ioctl (root only: skipped elsewhere)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from powercut.loopdev import LoopDevice

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/loop-control"),
                                reason="needs root and /dev/loop-control")


def test_attach_read_write_detach(tmp_path: Path) -> None:
    img = tmp_path / "x.img"
    img.write_bytes(b"\1" * 4096 + b"\0" * 4096)
    with LoopDevice(img) as dev:
        assert dev.startswith("/dev/loop")
        with open(dev, "rb+") as f:
            assert f.read(4096) == b"\1" * 4096
            f.seek(4096)
            f.write(b"\2" * 512)
            f.flush()
            os.fsync(f.fileno())
        backing = Path(f"/sys/block/{os.path.basename(dev)}/loop/backing_file").read_text().strip()
        assert backing == str(img)
    assert not Path(f"/sys/block/{os.path.basename(dev)}/loop/backing_file").exists()
    assert img.read_bytes()[4096:4608] == b"\2" * 512


def test_many_at_once(tmp_path: Path) -> None:
    imgs = []
    for i in range(4):
        p = tmp_path / f"{i}.img"
        p.write_bytes(bytes([i]) * 512)
        imgs.append(LoopDevice(p))
    assert len({d.path for d in imgs}) == 4
    for d in imgs:
        d.close()

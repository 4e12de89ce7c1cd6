"""Loop devices by ioctl and sysfs: attach (read-write, read-only, autoclear, write-through), find
the loops backed by files under a path, detach (root only: skipped elsewhere)."""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from powercut.errors import PowercutError
from powercut.linux.loopdev import (
    LoopDevice,
    LoopError,
    LoopSlot,
    backing_file,
    detach,
    has_write_cache,
    loops_backed_under,
    set_write_cache,
)

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


def _sys(dev: str, attr: str) -> str:
    return Path(f"/sys/block/{os.path.basename(dev)}/{attr}").read_text().strip()


def test_readonly_and_autoclear(tmp_path: Path) -> None:
    img = tmp_path / "ro.img"
    img.write_bytes(b"\3" * 8192)
    with LoopDevice(img, readonly=True) as dev:
        assert _sys(dev, "ro") == "1" and _sys(dev, "loop/autoclear") == "1"
        with open(dev, "rb") as f:
            assert f.read(4096) == b"\3" * 4096
        fd = os.open(dev, os.O_WRONLY)  # the open may work, the write may not
        try:
            with pytest.raises(OSError) as ei:
                os.write(fd, b"x" * 4096)
                os.fsync(fd)
            assert ei.value.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        finally:
            os.close(fd)
    assert img.read_bytes() == b"\3" * 8192
    with LoopDevice(img, autoclear=False) as dev:
        assert _sys(dev, "ro") == "0" and _sys(dev, "loop/autoclear") == "0"


def test_loops_backed_under_and_detach(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in dir", tmp_path / "in"
    inside.mkdir()
    outside.mkdir()
    a, b = inside / "a.img", outside / "b.img"
    for p in (a, b):
        p.write_bytes(bytes(4096))
    la, lb = LoopDevice(a, autoclear=False), LoopDevice(b)
    try:
        assert loops_backed_under(inside) == [(la.path, str(a))]  # not the sibling "in", a prefix of "in dir"
        assert sorted(loops_backed_under(tmp_path)) == sorted([(la.path, str(a)), (lb.path, str(b))])
        a.unlink()  # sysfs says "... (deleted)": still found, by its old name
        assert loops_backed_under(inside) == [(la.path, str(a))]
        os.close(la.fd)  # a run killed without autoclear: the loop stays behind
        la.fd = -1
        assert loops_backed_under(inside) == [(la.path, str(a))]
        assert detach(la.path) is True
        assert backing_file(la.path) is None and loops_backed_under(inside) == []
        with open(lb.path, "rb"):  # still held: (here: lb's fd) the kernel detaches it at the last close
            assert detach(lb.path) is False
    finally:
        la.close()
        lb.close()
    assert loops_backed_under(tmp_path) == []


def test_write_through_holds_the_data_and_the_cache_comes_back(tmp_path: Path) -> None:
    img = tmp_path / "wt.img"
    img.write_bytes(bytes(8192))
    lo = LoopDevice(img, write_cache=False, autoclear=False)
    try:
        assert not has_write_cache(lo.path) and lo.write_through
        with open(lo.path, "rb+") as f:
            f.write(b"\7" * 4096)
            f.flush()
            os.fsync(f.fileno())   # a flush the block layer completes itself
        with open(lo.path, "rb") as f:
            assert f.read(4096) == b"\7" * 4096
    finally:
        lo.close()
    # the setting belongs to /dev/loopN, not to the attachment: close() turned it back on
    lo = LoopDevice(img, autoclear=False)
    try:
        assert has_write_cache(lo.path)
        set_write_cache(lo.path, False)   # as a run killed before close() leaves it
        os.close(lo.fd)
        lo.fd = -1
        assert detach(lo.path) is True    # the stale-run cleanup turns it back on
        assert has_write_cache(lo.path)
    finally:
        lo.close()
    assert img.read_bytes()[:4096] == b"\7" * 4096


def test_write_through_refused_leaves_a_working_write_back_device(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only /sys: the device is attached all the same, its flushes still fsync."""
    from powercut.linux import loopdev

    def refused(dev: str, enabled: bool) -> None:
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(loopdev, "set_write_cache", refused)
    img = tmp_path / "ro-sys.img"
    img.write_bytes(bytes(4096))
    with LoopDevice(img, write_cache=False) as dev:
        assert has_write_cache(dev)
        with open(dev, "rb") as f:
            assert f.read(4096) == bytes(4096)


def test_autoclear_frees_a_loop_left_open_nowhere(tmp_path: Path) -> None:
    """A run killed before close(): its fds close, autoclear detaches the device."""
    img = tmp_path / "x.img"
    img.write_bytes(bytes(4096))
    lo = LoopDevice(img)
    os.close(lo.fd)  # what process exit does
    lo.fd = -1
    for _ in range(100):
        if not loops_backed_under(tmp_path):
            break
        time.sleep(0.01)
    assert loops_backed_under(tmp_path) == []


def test_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(LoopError, match=f"cannot attach a loop device to {tmp_path}/missing: No such file"):
        LoopDevice(tmp_path / "missing")
    with pytest.raises(LoopError, match="cannot detach /dev/nonexistent-loop"):
        detach("/dev/nonexistent-loop")
    assert issubclass(LoopError, PowercutError)


def test_slot_binds_each_image_in_turn_and_reads_its_own_data(tmp_path: Path) -> None:
    """A slot rebinds one device: every image reads back its own bytes (nothing cached from the one
    before), writes land in the image bound at the time, and close() restores the write cache."""
    imgs = []
    for i in range(6):
        img = tmp_path / f"s{i}.img"
        img.write_bytes(bytes([i + 1]) * 16384)
        imgs.append(img)
    devices = set()
    with LoopSlot() as slot:
        for i, img in enumerate(imgs):
            dev = slot.attach(img)
            devices.add(dev)
            with open(dev, "rb+") as f:
                assert f.read(16384) == bytes([i + 1]) * 16384
                f.seek(4096)
                f.write(b"w" * 512)
                f.flush()
                os.fsync(f.fileno())
            assert backing_file(dev) == str(img)
            slot.detach()
            assert backing_file(dev) is None
        kept = slot.device
        through = slot.through
    assert len(devices) == 1 or not through, "a write-through slot keeps its device"
    for i, img in enumerate(imgs):
        data = img.read_bytes()
        assert data[4096:4608] == b"w" * 512 and data[:4096] == bytes([i + 1]) * 4096
    assert has_write_cache(kept)


def test_slot_takes_a_new_device_when_its_own_was_taken(tmp_path: Path) -> None:
    a, b = tmp_path / "a.img", tmp_path / "b.img"
    a.write_bytes(b"a" * 4096)
    b.write_bytes(b"b" * 4096)
    slot = LoopSlot()
    try:
        first = slot.attach(a)
        slot.detach()
        other = LoopDevice(b, device=first, write_cache=None)   # someone else binds it meanwhile
        try:
            dev = slot.attach(a)
            assert dev != first
            with open(dev, "rb") as f:
                assert f.read(4096) == b"a" * 4096
            slot.detach()
        finally:
            other.close()
    finally:
        slot.close()
    assert has_write_cache(first)


def test_slot_goes_write_back_where_the_kernel_resets_the_cache(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Linux before 6.11 turns a loop's write cache on when a file is attached: the slot notices and
    does not pay for a queue freeze per state."""
    from powercut.linux import loopdev
    img = tmp_path / "r.img"
    img.write_bytes(bytes(4096))
    calls: list[bool] = []
    real = loopdev.set_write_cache

    def counted(dev: str, enabled: bool) -> None:
        calls.append(enabled)
        real(dev, enabled)
    monkeypatch.setattr(loopdev, "set_write_cache", counted)
    with LoopSlot() as slot:
        slot.attach(img)
        slot.detach()
        real(slot.device, True)   # what such a kernel does at the next attach
        for _ in range(3):
            slot.attach(img)
            slot.detach()
        assert not slot.through
    assert calls == [False]       # once, at the first attach; nothing to restore at close


def test_slot_refuses_a_second_attach(tmp_path: Path) -> None:
    img = tmp_path / "x.img"
    img.write_bytes(bytes(4096))
    with LoopSlot() as slot:
        slot.attach(img)
        with pytest.raises(LoopError, match="still attached"):
            slot.attach(img)

"""Loop devices by ioctl and sysfs: attach (read-write, read-only, autoclear, write-through), find
the loops backed by files under a path, detach (root only: skipped elsewhere).  A device is
write-through only while it is held: it is claimed before, and given back before it is free."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from powercut.errors import PowercutError
from powercut.linux import loopcache
from powercut.linux.loopcache import has_write_cache, set_write_cache
from powercut.linux.loopdev import LoopDevice, LoopError, backing_file, detach, loops_backed_under

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/loop-control"),
    reason="needs root and /dev/loop-control",
)


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
        assert loops_backed_under(inside) == [
            (la.path, str(a))
        ]  # not the sibling "in", a prefix of "in dir"
        assert sorted(loops_backed_under(tmp_path)) == sorted(
            [(la.path, str(a)), (lb.path, str(b))]
        )
        a.unlink()  # sysfs says "... (deleted)": still found, by its old name
        assert loops_backed_under(inside) == [(la.path, str(a))]
        os.close(la.fd)  # a run killed without autoclear: the loop stays behind
        la.fd = -1
        assert loops_backed_under(inside) == [(la.path, str(a))]
        assert detach(la.path) is True
        assert backing_file(la.path) is None and loops_backed_under(inside) == []
        with open(
            lb.path, "rb"
        ):  # still held: (here: lb's fd) the kernel detaches it at the last close
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
            os.fsync(f.fileno())  # a flush the block layer completes itself
        with open(lo.path, "rb") as f:
            assert f.read(4096) == b"\7" * 4096
    finally:
        lo.close()
    # the setting belongs to /dev/loopN, not to the attachment: close() turned it back on
    lo = LoopDevice(img, autoclear=False)
    try:
        assert has_write_cache(lo.path)
        set_write_cache(lo.path, False)  # as a run killed before close() leaves it
        os.close(lo.fd)
        lo.fd = -1
        assert detach(lo.path) is True  # the stale-run cleanup turns it back on
        assert has_write_cache(lo.path)
    finally:
        lo.close()
    assert img.read_bytes()[:4096] == b"\7" * 4096


def test_write_through_refused_leaves_a_working_write_back_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only /sys: the device is attached all the same, its flushes still fsync, and nothing
    stays claimed."""
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))

    def refused(dev: str, enabled: bool) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(loopcache, "set_write_cache", refused)
    img = tmp_path / "ro-sys.img"
    img.write_bytes(bytes(4096))
    with LoopDevice(img, write_cache=False) as dev:
        assert has_write_cache(dev)
        with open(dev, "rb") as f:
            assert f.read(4096) == bytes(4096)
        assert list((tmp_path / "run" / "write-through").glob("loop*")) == []


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
    with pytest.raises(
        LoopError, match=f"cannot attach a loop device to {tmp_path}/missing: No such file"
    ):
        LoopDevice(tmp_path / "missing")
    with pytest.raises(LoopError, match="cannot detach /dev/nonexistent-loop"):
        detach("/dev/nonexistent-loop")
    assert issubclass(LoopError, PowercutError)


def test_a_write_through_device_is_claimed_while_held_and_free_only_with_its_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is in the registry before the device is write-through and gone after close(); the
    cache is back on while the device is still attached, so the kernel never hands a free
    write-through device to the next program (Linux 6.11 and later keep the setting)."""
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(loopcache, "GUARD", False)
    img = tmp_path / "c.img"
    img.write_bytes(bytes(8192))
    seen_at_clear: list[tuple[str | None, bool]] = []
    from powercut.linux import loopdev

    real_clear = loopdev._clear

    def spy(fd: int, path: str, attempts: int = 50) -> None:
        seen_at_clear.append((backing_file(path), has_write_cache(path)))
        real_clear(fd, path, attempts)

    monkeypatch.setattr(loopdev, "_clear", spy)
    lo = LoopDevice(img, write_cache=False)
    name = os.path.basename(lo.path)
    rec = json.loads((tmp_path / "run" / "write-through" / name).read_text())
    assert rec["pid"] == os.getpid() and rec["backing"] == str(img) and rec["start"]
    lo.close()
    assert seen_at_clear == [(str(img), True)]  # given back while still attached
    assert not (tmp_path / "run" / "write-through" / name).exists()


def test_a_dead_runs_device_is_given_back_and_a_live_runs_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(loopcache, "GUARD", False)
    a, b = tmp_path / "a.img", tmp_path / "b.img"
    a.write_bytes(bytes(4096))
    b.write_bytes(bytes(4096))
    mine = LoopDevice(a, write_cache=False)
    dead = LoopDevice(b, autoclear=False)
    try:
        set_write_cache(dead.path, False)
        gone = subprocess.Popen(["true"])  # a pid that no longer lives
        gone.wait()
        (tmp_path / "run" / "write-through" / os.path.basename(dead.path)).write_text(
            json.dumps({"pid": gone.pid, "start": "1", "backing": str(b)})
        )
        assert loopcache.restore_orphans() == [dead.path]
        assert has_write_cache(dead.path) and not has_write_cache(mine.path)
        assert loopcache.restore_orphans() == []
        assert not (tmp_path / "run" / "write-through" / os.path.basename(dead.path)).exists()
    finally:
        mine.close()
        dead.close()


def test_a_run_killed_with_sigkill_has_its_guardian_give_the_cache_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kill -9 runs no code of the run: its guardian sees the pipe from it end and restores the
    device (free by then: autoclear detached it when the run's fds closed)."""
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))
    img = tmp_path / "k.img"
    img.write_bytes(bytes(8192))
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from powercut.linux.loopdev import LoopDevice\n"
            f"lo = LoopDevice({str(img)!r}, write_cache=False)\n"
            "print(lo.path, lo.write_through, flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        dev, through = run.stdout.readline().split()  # type: ignore[union-attr]
        assert through == "True" and not has_write_cache(dev)
    finally:
        run.kill()
        run.wait()
    for _ in range(
        300
    ):  # the guardian's Python starts and restores: bounded, generous for slow machines
        if not (tmp_path / "run" / "write-through" / os.path.basename(dev)).exists():
            break
        time.sleep(0.1)
    assert not (tmp_path / "run" / "write-through" / os.path.basename(dev)).exists()
    if backing_file(dev) is None:  # nobody took it meanwhile: it is free and as it was found
        assert has_write_cache(dev)


def test_errors_stay_one_line_for_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run directory that cannot be made is one line naming it, not a traceback."""
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "file"))
    with pytest.raises(PowercutError, match="file/write-through"):
        loopcache.restore_orphans()

"""Loop devices by ioctl (LOOP_CTL_GET_FREE, LOOP_CONFIGURE or LOOP_SET_FD + LOOP_SET_STATUS64,
LOOP_CLR_FD) and by sysfs (which loops are backed by files under a path): attaching and detaching
one per crash state without forking losetup, which in host mode costs more than the mount.  Their
write cache, and who may hold it off, is linux/loopcache's.

Runs on the host (host-mode checks, the XFS workspace, stale-run cleanup) and in the guest
(dm-snapshot's pristine and COW devices); needs root and /dev/loop-control."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import time
from pathlib import Path

from powercut.errors import PowercutError
from powercut.linux import loopcache
from powercut.linux.loopcache import ensure_write_cache

log = logging.getLogger(__name__)

LOOP_SET_FD = 0x4C00
LOOP_CLR_FD = 0x4C01
LOOP_SET_STATUS64 = 0x4C04
LOOP_CONFIGURE = 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4
LO_NAME_SIZE = 64
# struct loop_info64: device, inode, rdevice, offset, sizelimit; number, encrypt_type,
# encrypt_key_size, flags; file_name[64], crypt_name[64], encrypt_key[32]; init[2]
LOOP_INFO64 = struct.Struct("<5Q 4I 64s 64s 32s 2Q")
LOOP_CONFIG_SIZE = (
    8 + LOOP_INFO64.size + 64
)  # struct loop_config: fd, block_size, info, reserved[8]


class LoopError(PowercutError):
    """A loop device could not be attached or detached; ``errno`` says why."""

    def __init__(self, message: str, err: int = 0) -> None:
        super().__init__(message)
        self.errno = err


def loop_info(backing: str, flags: int) -> bytes:
    """struct loop_info64 carrying ``flags`` and (as losetup does) the backing file's name."""
    return LOOP_INFO64.pack(
        0, 0, 0, 0, 0, 0, 0, 0, flags, os.fsencode(backing)[: LO_NAME_SIZE - 1], b"", b"", 0, 0
    )


def loop_config(fd: int, backing: str, flags: int) -> bytes:
    """struct loop_config for LOOP_CONFIGURE (Linux >= 5.8): attach and set flags in one call."""
    return struct.pack("<2I", fd, 0) + loop_info(backing, flags) + bytes(64)


class LoopDevice:
    """``with LoopDevice(path) as dev:`` -- dev is /dev/loopN backed by ``path``.

    ``readonly`` attaches a read-only device.  ``autoclear`` (default) lets the kernel detach it
    when its last user goes away -- so a killed run leaves no loop behind once its fds are closed
    and its mounts unmounted; ``close()`` detaches it at once when nothing else holds it.

    ``write_cache=False`` makes the device write-through where sysfs lets it
    (``loopcache.set_write_cache``; ``write_through`` says whether it is): the block layer completes
    flushes without passing them on, so a flush never becomes an fsync of the backing file -- only
    for scratch devices whose contents nobody reads after a host crash, held for a long time (a
    queue freeze, ~20 ms, each way).  The setting outlives the attachment (it belongs to
    /dev/loopN, and Linux 6.11 and later keep it at the next attach, whoever attaches), so the
    device is claimed in loopcache's registry before, and ``close()`` restores it before it
    detaches; a run killed before that has its guardian, or the next run, restore it.  A device
    attached with the default finds its write cache on even if a dead run left it off."""

    def __init__(
        self,
        backing: str | os.PathLike[str],
        *,
        readonly: bool = False,
        autoclear: bool = True,
        attempts: int = 20,
        write_cache: bool | None = True,
    ) -> None:
        self.path = ""
        self.fd = -1
        self.write_through = False
        self.backing = os.path.abspath(backing)
        flags = (LO_FLAGS_READ_ONLY if readonly else 0) | (LO_FLAGS_AUTOCLEAR if autoclear else 0)
        mode = os.O_RDONLY if readonly else os.O_RDWR
        try:
            ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise LoopError(
                f"cannot attach a loop device to {self.backing}: /dev/loop-control: {e.strerror}",
                e.errno or 0,
            ) from None
        try:
            try:
                backing_fd = os.open(self.backing, mode | os.O_CLOEXEC)
            except OSError as e:
                raise LoopError(
                    f"cannot attach a loop device to {self.backing}: {e.strerror}", e.errno or 0
                ) from None
            try:
                self._attach(ctl, backing_fd, mode, flags, attempts)
            finally:
                os.close(backing_fd)
        finally:
            os.close(ctl)
        if readonly or write_cache is None:  # None: the device's setting as it is
            return
        if write_cache:
            ensure_write_cache(self.path)  # a killed run may have left it off
            return
        try:
            loopcache.claim(self.path, self.backing)
            loopcache.set_write_cache(self.path, False)
            self.write_through = True
        except OSError as e:  # a read-only /sys: slower, not wrong
            loopcache.release(self.path)
            log.info(
                "%s stays write-back (%s): its flushes fsync %s",
                self.path,
                e.strerror,
                self.backing,
            )
        except BaseException:
            self.close()
            raise

    def _attach(self, ctl: int, backing_fd: int, mode: int, flags: int, attempts: int) -> None:
        for attempt in range(attempts):
            n = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
            path = f"/dev/loop{n}"
            try:
                fd = os.open(path, mode | os.O_CLOEXEC)
            except OSError as e:
                # ENXIO/ENOENT: the node is being created or torn down by a parallel attach/detach
                if e.errno in (errno.ENXIO, errno.ENOENT) and attempt + 1 < attempts:
                    time.sleep(0.002 * (attempt + 1))
                    continue
                raise LoopError(
                    f"cannot open {path} for {self.backing}: {e.strerror}", e.errno or 0
                ) from None
            try:
                _configure(fd, backing_fd, self.backing, flags)
            except OSError as e:
                os.close(fd)
                if e.errno == errno.EBUSY and attempt + 1 < attempts:
                    # another thread or process bound it first: the next LOOP_CTL_GET_FREE names
                    # another device, so the first retry goes at once (two workers collide often)
                    if attempt:
                        time.sleep(0.001 * attempt)
                    continue
                raise LoopError(
                    f"cannot attach {path} to {self.backing}: {e.strerror}", e.errno or 0
                ) from None
            self.path, self.fd = path, fd
            return

    def close(self) -> None:
        if self.fd >= 0:
            try:
                if (
                    self.write_through
                ):  # given back while held: a free device is never write-through
                    self.write_through = False
                    ensure_write_cache(self.path)
                    loopcache.release(self.path)
                _clear(self.fd, self.path)
            finally:
                os.close(self.fd)
                self.fd = -1

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<LoopDevice {self.path or '(detached)'} -> {self.backing}>"


_configure_works = True  # False once LOOP_CONFIGURE is known missing (kernel < 5.8)


def _configure(fd: int, backing_fd: int, backing: str, flags: int) -> None:
    global _configure_works
    if _configure_works:
        try:
            fcntl.ioctl(fd, LOOP_CONFIGURE, loop_config(backing_fd, backing, flags))
            return
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOTTY):
                raise
            _configure_works = False
    fcntl.ioctl(fd, LOOP_SET_FD, backing_fd)  # read-only follows from the fds' modes
    if flags & LO_FLAGS_AUTOCLEAR:
        try:
            fcntl.ioctl(fd, LOOP_SET_STATUS64, loop_info(backing, LO_FLAGS_AUTOCLEAR))
        except OSError:
            fcntl.ioctl(fd, LOOP_CLR_FD)
            raise


def _clear(fd: int, path: str, attempts: int = 50) -> None:
    """LOOP_CLR_FD; a device still held elsewhere is marked to clear when released (ENXIO: already
    clear)."""
    for attempt in range(attempts):
        try:
            fcntl.ioctl(fd, LOOP_CLR_FD)
            return
        except OSError as e:
            if e.errno == errno.ENXIO:
                return
            if e.errno != errno.EBUSY or attempt + 1 == attempts:
                raise LoopError(f"cannot detach {path}: {e.strerror}", e.errno or 0) from None
            time.sleep(0.01)


def detach(dev: str) -> bool:
    """Detach loop device ``dev`` (e.g. one a killed run left behind), its write cache back on.
    True when it is free now; False when something still holds it (a mount, a dm table, an open
    fd): the kernel then detaches it when the last holder lets go."""
    try:
        fd = os.open(dev, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise LoopError(f"cannot detach {dev}: {e.strerror}", e.errno or 0) from None
    try:
        ensure_write_cache(dev)
        _clear(fd, dev)
    finally:
        os.close(fd)
    return backing_file(dev) is None


def backing_file(dev: str) -> str | None:
    """The file behind loop device ``dev`` (sysfs; " (deleted)" stripped), None if unattached."""
    try:
        raw = Path(f"/sys/block/{os.path.basename(dev)}/loop/backing_file").read_bytes()
    except OSError:
        return None
    return os.fsdecode(raw.rstrip(b"\n")).removesuffix(" (deleted)")


def loops_backed_under(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """(device, backing file) of every attached loop device whose backing file lies under ``path``."""
    top = os.path.realpath(path)
    out = []
    for entry in sorted(Path("/sys/block").glob("loop*"), key=lambda p: (len(p.name), p.name)):
        back = backing_file(entry.name)
        if back is not None and (back == top or back.startswith(top.rstrip("/") + "/")):
            out.append((f"/dev/{entry.name}", back))
    return out

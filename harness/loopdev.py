"""Loop devices by ioctl (LOOP_CTL_GET_FREE, LOOP_SET_FD, LOOP_CLR_FD): attaching and detaching one
per crash state without forking losetup twice, which in host mode costs more than the mount."""
from __future__ import annotations

import errno
import fcntl
import os
import time

LOOP_SET_FD = 0x4C00
LOOP_CLR_FD = 0x4C01
LOOP_CTL_GET_FREE = 0x4C82


class LoopDevice:
    """``with LoopDevice(path) as dev:`` -- dev is /dev/loopN backed by ``path`` (read-write)."""

    def __init__(self, backing: str | os.PathLike[str], attempts: int = 20) -> None:
        self.path = ""
        self.fd = -1
        ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            backing_fd = os.open(backing, os.O_RDWR | os.O_CLOEXEC)
            try:
                for attempt in range(attempts):
                    n = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
                    path = f"/dev/loop{n}"
                    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                    try:
                        fcntl.ioctl(fd, LOOP_SET_FD, backing_fd)
                    except OSError as e:
                        os.close(fd)
                        if e.errno == errno.EBUSY and attempt + 1 < attempts:  # another thread won it
                            time.sleep(0.001 * (attempt + 1))
                            continue
                        raise
                    self.path, self.fd = path, fd
                    return
            finally:
                os.close(backing_fd)
        finally:
            os.close(ctl)

    def close(self) -> None:
        if self.fd >= 0:
            for attempt in range(50):
                try:
                    fcntl.ioctl(self.fd, LOOP_CLR_FD)
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or attempt == 49:
                        raise
                    time.sleep(0.01)
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> str:
        return self.path

    def __exit__(self, *exc: object) -> None:
        self.close()

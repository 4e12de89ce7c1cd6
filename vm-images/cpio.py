"""A minimal writer of the newc cpio format the kernel unpacks as initramfs (no root, no cpio binary).

The kernel does not create missing parent directories: every entry is preceded by its parents."""

from __future__ import annotations

import stat
from typing import BinaryIO


class CpioWriter:
    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.ino = 1
        self.dirs: set[str] = set()

    def _entry(
        self,
        name: str,
        mode: int,
        data: bytes = b"",
        rdev: tuple[int, int] = (0, 0),
        nlink: int = 1,
        mtime: int = 0,
    ) -> None:
        namez = name.encode() + b"\0"
        fields = (
            self.ino,
            mode,
            0,
            0,
            nlink,
            mtime,
            len(data),
            0,
            0,
            rdev[0],
            rdev[1],
            len(namez),
            0,
        )
        header = b"070701" + b"".join(b"%08X" % v for v in fields)
        self.ino += 1
        self.f.write(header + namez)
        self.f.write(b"\0" * (-(len(header) + len(namez)) % 4))
        self.f.write(data)
        self.f.write(b"\0" * (-len(data) % 4))

    def dir(self, name: str, mode: int = 0o755) -> None:
        """A directory, after its parents (the kernel does not create missing parents)."""
        if "/" in name:
            self.parents(name)
        if name not in self.dirs:
            self.dirs.add(name)
            self._entry(name, stat.S_IFDIR | mode, nlink=2)

    def parents(self, path: str) -> None:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dir("/".join(parts[:i]))

    def file(self, name: str, data: bytes, mode: int = 0o644, mtime: int = 0) -> None:
        """A regular file; ``mtime`` matters to Python, whose bytecode records its source's mtime."""
        self.parents(name)
        self._entry(name, stat.S_IFREG | mode, data, mtime=mtime)

    def symlink(self, name: str, target: str) -> None:
        self.parents(name)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int, mode: int = 0o600) -> None:
        self.parents(name)
        self._entry(name, stat.S_IFCHR | mode, rdev=(major, minor))

    def close(self) -> None:
        self._entry("TRAILER!!!", 0)

"""Where the program's files lie on a recorded data disk at the end (the recording's file map, guest
side): what the lying-disk models target first (core/crashmodels/lies.py, core/crashmodels/target.py)."""

from __future__ import annotations

import fcntl
import json
import os
import struct
from pathlib import Path
from typing import Any

from powercut.errors import PowercutError
from powercut.faults import FaultError, file_sectors
from powercut.linux import filesystems
from powercut.linux.mounts import mount, umount

FILE_MAP = "files.json"
FILE_MAP_LIMIT = 20000  # files; a program with more is mapped in part (said in the map)
BLKROSET = 0x125D


def _writable(fd: int) -> None:
    try:
        fcntl.ioctl(fd, BLKROSET, struct.pack("i", 0))
    finally:
        os.close(fd)


def file_map(
    data: str, fs: filesystems.Filesystem, jobdir: Path, mnt: str, out: str = FILE_MAP
) -> dict[str, Any]:
    """Where the program's files lie on the data device at the end (FIEMAP over a read-only mount at
    ``mnt`` of the final, cleanly unmounted filesystem: nothing is written, the log is already
    closed), as 512-byte sector ranges per file, written to ``out`` in the job directory -- what the
    lying-disk models target first (core/crashmodels/lies.py).
    A filesystem whose extents are not the device's (btrfs) or a mount that fails: no map, why."""
    if fs.name == "btrfs":
        return {"file_map_error": "btrfs extents are logical addresses, not the device's sectors"}
    files: dict[str, list[list[int]]] = {}
    skipped = 0
    guard = os.open(data, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # the device itself read-only (BLKROSET): a filesystem that writes at a read-only mount (XFS
        # clears its log) must not change the final image the log already ends at
        fcntl.ioctl(guard, BLKROSET, struct.pack("i", 1))
        mount(data, mnt, fs.name, "ro")
    except (OSError, PowercutError) as e:
        _writable(guard)
        why = e.one_line() if isinstance(e, PowercutError) else str(e)
        return {"file_map_error": f"cannot mount the final filesystem read-only: {why}"}
    try:
        for root, dirs, names in os.walk(mnt):
            dirs[:] = sorted(d for d in dirs if not (root == mnt and d == "lost+found"))
            for name in sorted(names):
                path = os.path.join(root, name)
                if not os.path.isfile(path) or os.path.islink(path):
                    continue
                if len(files) >= FILE_MAP_LIMIT:
                    skipped += 1
                    continue
                try:
                    files[os.path.relpath(path, mnt)] = [[a, n] for a, n in file_sectors(path)]
                except (OSError, FaultError):
                    skipped += 1
    finally:
        umount(mnt, lazy_fallback=False)
        _writable(guard)
    (jobdir / out).write_text(json.dumps({"sector_bytes": 512, "files": files, "skipped": skipped}))
    return {"file_map": out, "file_map_files": len(files), "file_map_skipped": skipped}

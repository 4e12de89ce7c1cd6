"""Unreadable sectors at check time (host and guest, root): a device-mapper layer over a replayed
image whose table maps every sector through (``linear``) but the bad ones, which are ``error``
segments -- every read or write there fails with EIO, as on a disk with a sector it cannot read.
The unreadable-sector model's states (core/crashmodels/lies.py) are judged on it (check/judge.py); the host
puts it over the state's loop device, the checker VM over its dm-snapshot clone."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Iterator, Sequence

from powercut.linux import dm

log = logging.getLogger(__name__)

_count = itertools.count()


def error_table(
    lower: str, size: int, bad: Sequence[tuple[int, int]]
) -> list[tuple[int, int, str, str]]:
    """The table of ``lower`` (``size`` 512-byte sectors) with ``error`` over the ``bad`` ranges
    (start, count), clipped to the device; ValueError for overlapping ranges."""
    out: list[tuple[int, int, str, str]] = []
    pos = 0
    for start, n in sorted(bad):
        start, end = max(start, 0), min(start + n, size)
        if start < pos:
            raise ValueError(f"bad sector range {start}+{n} overlaps another")
        if end <= start:
            continue
        if start > pos:
            out.append((pos, start - pos, "linear", f"{lower} {pos}"))
        out.append((start, end - start, "error", ""))
        pos = end
    if pos < size:
        out.append((pos, size - pos, "linear", f"{lower} {pos}"))
    return out


def device_sectors(device: str) -> int:
    """The size of a block device (or image file) in 512-byte sectors."""
    fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END) // 512
    finally:
        os.close(fd)


@contextlib.contextmanager
def unreadable(device: str, bad: Sequence[tuple[int, int]]) -> Iterator[str]:
    """``device`` with the ``bad`` 512-byte sector ranges failing with EIO: yields the layer's node,
    removed on the way out.  No ranges: the device itself."""
    if not bad:
        yield device
        return
    dm.require_dm("an unreadable-sector state")
    name = f"powercut-bad-{os.getpid()}-{next(_count)}"
    node = dm.create(name, error_table(device, device_sectors(device), bad))
    log.debug("%s: %s with EIO at %s", name, device, list(bad))
    try:
        yield node
    finally:
        dm.remove(name)

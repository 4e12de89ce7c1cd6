"""Block devices by what they are (guest): find a disk by its serial, its size in sectors."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from powercut.errors import PowercutError

log = logging.getLogger("powercut.guest")


def find_disk(serial: str) -> str:
    """/dev/<name> of the disk whose serial is ``serial`` (virtio: /sys/block/X/serial; ATA: VPD 0x80)."""
    for blk in sorted(Path("/sys/block").iterdir()):
        for candidate in (blk / "serial", blk / "device" / "serial", blk / "device" / "vpd_pg80"):
            try:
                raw = candidate.read_bytes()
            except OSError:
                continue
            text = raw[4:] if candidate.name == "vpd_pg80" else raw
            if text.decode(errors="replace").strip().strip("\0") == serial:
                return f"/dev/{blk.name}"
    raise PowercutError(
        f"no disk with serial {serial} in the guest ({', '.join(os.listdir('/sys/block'))})"
    )


def sectors(dev: str) -> int:
    return int(Path(f"/sys/block/{os.path.basename(dev)}/size").read_text())

"""Marks in the dm-log-writes log, through the DM_TARGET_MSG ioctl on /dev/mapper/control (no fork,
no dmsetup).  ``powercut.mark("ack:7")`` from Python; ``powercut-mark ack:7`` from any language.

The target is named by $POWERCUT_DM_NAME, which the recording job sets for the workload."""
from __future__ import annotations

import fcntl
import os
import struct
import sys

DM_CONTROL = "/dev/mapper/control"
DM_NAME_LEN = 128
DM_UUID_LEN = 129
DM_IOCTL_SIZE = 312  # sizeof(struct dm_ioctl)
DM_TARGET_MSG_CMD = 14
DM_VERSION = (4, 0, 0)
MAX_MARK = 512 - 32 - 1  # the kernel keeps at most sectorsize - sizeof(entry) - 1 bytes of a mark

_IOC_WRITE, _IOC_READ = 1, 2
DM_TARGET_MSG = ((_IOC_READ | _IOC_WRITE) << 30) | (DM_IOCTL_SIZE << 16) | (0xFD << 8) | DM_TARGET_MSG_CMD

_fd: int | None = None


class MarkError(OSError):
    pass


def _control() -> int:
    global _fd
    if _fd is None:
        try:
            _fd = os.open(DM_CONTROL, os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise MarkError(e.errno, f"cannot open {DM_CONTROL}: {e.strerror} (marks work only inside a "
                                     "powercut recording, as root)") from None
    return _fd


def message_buffer(dm_name: str, message: str) -> bytearray:
    """struct dm_ioctl + struct dm_target_msg {u64 sector; char message[]} for ``message``."""
    name = dm_name.encode()
    if not name or len(name) >= DM_NAME_LEN:
        raise ValueError(f"bad device-mapper name {dm_name!r}")
    payload = struct.pack("<Q", 0) + message.encode() + b"\0"
    size = DM_IOCTL_SIZE + len(payload)
    size += -size % 8
    buf = bytearray(size)
    struct.pack_into("<3I I I I i I I I Q", buf, 0, *DM_VERSION, size, DM_IOCTL_SIZE, 0, 0, 0, 0, 0, 0)
    buf[48:48 + len(name)] = name
    buf[DM_IOCTL_SIZE:DM_IOCTL_SIZE + len(payload)] = payload
    return buf


def mark(text: str, dm_name: str | None = None) -> None:
    """Insert ``text`` as a mark into the log.  Raises MarkError if it cannot."""
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"a mark is one word without spaces, not {text!r}")
    if len(text.encode()) > MAX_MARK:
        raise ValueError(f"a mark is at most {MAX_MARK} bytes")
    dm_name = dm_name or os.environ.get("POWERCUT_DM_NAME")
    if not dm_name:
        raise MarkError(0, "POWERCUT_DM_NAME is not set: marks work only inside a powercut recording")
    buf = message_buffer(dm_name, f"mark {text}")
    try:
        fcntl.ioctl(_control(), DM_TARGET_MSG, buf, True)
    except OSError as e:
        raise MarkError(e.errno, f"mark {text!r} on {dm_name}: {e.strerror}") from None


def ack(key: object) -> None:
    mark(f"ack:{key}")


def begin(key: object) -> None:
    mark(f"begin:{key}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: powercut-mark TEXT   (e.g. powercut-mark ack:42; needs $POWERCUT_DM_NAME)",
              file=sys.stderr if len(args) != 1 else sys.stdout)
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        mark(args[0])
    except (MarkError, ValueError) as e:
        print(f"powercut-mark: {e}", file=sys.stderr)
        return 1
    return 0

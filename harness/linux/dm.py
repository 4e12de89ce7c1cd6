"""Device-mapper by ioctl on /dev/mapper/control (struct dm_ioctl, linux/dm-ioctl.h, interface 4.x):
create, remove, status, message, list -- no dmsetup fork.  The one place that packs a dm_ioctl.

Runs in the guest (recording, dm-snapshot clones, marks) and on hosts whose kernel has
device-mapper; everything but the packing helpers needs root.  A mark runs it in the recorded
program's own process, so it imports logging and powercut's process runner only where it uses them
(~0.9 s of each Python workload's recording under TCG and strace).  The guest has no udev: ``create``
returns a device node that exists (udev's /dev/mapper/NAME, devtmpfs' /dev/dm-N, or one it makes)."""

from __future__ import annotations

import errno as _errno
import fcntl
import os
import stat
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from powercut.errors import EnvironmentNotReady, PowercutError, UsageError

if TYPE_CHECKING:
    import logging


DM_CONTROL = "/dev/mapper/control"
DM_NAME_LEN = 128
DM_UUID_LEN = 129
DM_MAX_TYPE_NAME = 16
DM_IOCTL_SIZE = 312  # sizeof(struct dm_ioctl)
SPEC_SIZE = 40  # sizeof(struct dm_target_spec)
DM_VERSION = (4, 0, 0)  # any 4.x kernel accepts it
HEADER = struct.Struct("<3I I I I i I I I Q")  # version, data_size, data_start, target_count,
#                                                open_count, flags, event_nr, padding, dev
SPEC = struct.Struct("<Q Q i I 16s")  # sector_start, length, status, next, target_type
NAME_LIST = struct.Struct("<Q I")  # dev, next (then the name)

CMDS = {
    "VERSION": 0,
    "REMOVE_ALL": 1,
    "LIST_DEVICES": 2,
    "DEV_CREATE": 3,
    "DEV_REMOVE": 4,
    "DEV_RENAME": 5,
    "DEV_SUSPEND": 6,
    "DEV_STATUS": 7,
    "DEV_WAIT": 8,
    "TABLE_LOAD": 9,
    "TABLE_CLEAR": 10,
    "TABLE_DEPS": 11,
    "TABLE_STATUS": 12,
    "LIST_VERSIONS": 13,
    "TARGET_MSG": 14,
}
READONLY_FLAG = 1 << 0
SUSPEND_FLAG = 1 << 1
STATUS_TABLE_FLAG = 1 << 4
SKIP_LOCKFS_FLAG = 1 << 10
BUFFER_FULL_FLAG = 1 << 8

Table = Sequence[
    tuple[int, int, str, str]
]  # (start sector, length in sectors, target type, params)


def ioctl_number(cmd: int) -> int:
    """_IOWR(0xfd, cmd, struct dm_ioctl)."""
    return (3 << 30) | (DM_IOCTL_SIZE << 16) | (0xFD << 8) | cmd


DM_TARGET_MSG = ioctl_number(CMDS["TARGET_MSG"])


class DmError(PowercutError):
    """A device-mapper ioctl failed; ``errno`` says why (0 when not from the kernel)."""

    def __init__(self, message: str, err: int = 0) -> None:
        super().__init__(message)
        self.errno = err


class BadDmName(UsageError, ValueError):
    """A device-mapper name that is empty or too long."""


@dataclass(frozen=True, slots=True)
class DmDevice:
    """A mapped device: its name, device number and (DM_DEV_STATUS) open count and flags."""

    name: str
    major: int
    minor: int
    open_count: int = 0
    flags: int = 0

    @property
    def rdev(self) -> int:
        return os.makedev(self.major, self.minor)

    @property
    def suspended(self) -> bool:
        return bool(self.flags & SUSPEND_FLAG)


def _log() -> "logging.Logger":
    import logging

    return logging.getLogger(__name__)


# -- packing (pure) ---------------------------------------------------------------------------------------
def _align8(n: int) -> int:
    return n + (-n % 8)


def _name(name: str) -> bytes:
    raw = name.encode()
    if not raw or len(raw) >= DM_NAME_LEN or "/" in name:
        raise BadDmName(f"bad device-mapper name {name!r}")
    return raw


def header(
    name: str | None,
    *,
    payload: int = 0,
    target_count: int = 0,
    flags: int = 0,
    size: int | None = None,
) -> bytearray:
    """A zeroed struct dm_ioctl for ``name`` (None: no name, e.g. to list devices) followed by room
    for ``payload`` bytes (or ``size`` bytes in all, for commands the kernel answers with data)."""
    total = _align8(DM_IOCTL_SIZE + payload) if size is None else max(size, DM_IOCTL_SIZE + payload)
    buf = bytearray(total)
    HEADER.pack_into(buf, 0, *DM_VERSION, total, DM_IOCTL_SIZE, target_count, 0, flags, 0, 0, 0)
    if name is not None:
        raw = _name(name)
        buf[48 : 48 + len(raw)] = raw
    return buf


def table_buffer(name: str, table: Table, *, readonly: bool = False) -> bytearray:
    """DM_TABLE_LOAD: the header, then per target a dm_target_spec, its NUL-terminated params,
    padding to 8 bytes; ``next`` = bytes from this spec to the next."""
    if not table:
        raise UsageError(f"device-mapper table for {name} is empty")
    specs = []
    for start, length, ttype, params in table:
        kind = ttype.encode()
        if not kind or len(kind) >= DM_MAX_TYPE_NAME:
            raise UsageError(f"bad device-mapper target type {ttype!r}")
        body = params.encode() + b"\0"
        size = _align8(SPEC_SIZE + len(body))
        specs.append(
            SPEC.pack(start, length, 0, size, kind) + body + bytes(size - SPEC_SIZE - len(body))
        )
    payload = b"".join(specs)
    buf = header(
        name, payload=len(payload), target_count=len(specs), flags=READONLY_FLAG if readonly else 0
    )
    buf[DM_IOCTL_SIZE : DM_IOCTL_SIZE + len(payload)] = payload
    return buf


def message_buffer(name: str, text: str, sector: int = 0) -> bytearray:
    """DM_TARGET_MSG: the header, then struct dm_target_msg {u64 sector; char message[]}."""
    payload = struct.pack("<Q", sector) + text.encode() + b"\0"
    buf = header(name, payload=len(payload))
    buf[DM_IOCTL_SIZE : DM_IOCTL_SIZE + len(payload)] = payload
    return buf


def decode_dev(dev: int) -> tuple[int, int]:
    """(major, minor) of the kernel's huge_encode_dev() value in dm_ioctl.dev."""
    return (dev & 0xFFF00) >> 8, (dev & 0xFF) | ((dev >> 12) & 0xFFF00)


def _cstr(buf: bytes | bytearray, start: int, end: int | None = None) -> str:
    stop = buf.find(b"\0", start, end)
    return bytes(buf[start : stop if stop >= 0 else end]).decode(errors="replace")


def parse_status(buf: bytes | bytearray) -> list[str]:
    """DM_TABLE_STATUS answer -> ``start length type params`` per target (``next`` counts from the
    start of the data area, not from the spec)."""
    _v0, _v1, _v2, size, start, count = HEADER.unpack_from(buf, 0)[:6]
    out, pos = [], start
    for _ in range(count):
        sector, length, _status, nxt, kind = SPEC.unpack_from(buf, pos)
        params = _cstr(buf, pos + SPEC_SIZE, size)
        out.append(f"{sector} {length} {kind.rstrip(bytes(1)).decode()} {params}".rstrip())
        pos = start + nxt
    return out


def parse_name_list(buf: bytes | bytearray) -> list[DmDevice]:
    """DM_LIST_DEVICES answer -> devices (a first record with dev 0 means none)."""
    size, pos = HEADER.unpack_from(buf, 0)[3:5]
    out: list[DmDevice] = []
    while pos + NAME_LIST.size <= size:
        dev, nxt = NAME_LIST.unpack_from(buf, pos)
        if dev == 0 and not out:
            break
        out.append(DmDevice(_cstr(buf, pos + NAME_LIST.size, size), *decode_dev(dev)))
        if nxt == 0:
            break
        pos += nxt
    return out


# -- the control device -------------------------------------------------------------------------------------
_fd: int | None = None
_lock = threading.Lock()
_made_nodes: dict[
    str, str
] = {}  # name -> a node create() made (no udev, no devtmpfs): remove() drops it


def control() -> int:
    """The (cached, close-on-exec) fd of /dev/mapper/control; made from /proc/misc if missing."""
    global _fd
    if _fd is not None:
        return _fd
    with _lock:
        if _fd is None:
            if not os.path.exists(DM_CONTROL):
                _make_control()
            _fd = _open_control()
        return _fd


def _open_control() -> int:
    try:
        return os.open(DM_CONTROL, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise DmError(f"cannot open {DM_CONTROL}: {e.strerror}", e.errno or 0) from None


def _make_control() -> None:
    """dmsetup's trick: no node but a kernel with device-mapper (misc minor in /proc/misc)."""
    minor = next(
        (int(line.split()[0]) for line in _misc().splitlines() if line.endswith(" device-mapper")),
        None,
    )
    if minor is None:
        raise DmError(f"cannot open {DM_CONTROL}: this kernel has no device-mapper", _errno.ENOENT)
    try:
        os.makedirs(os.path.dirname(DM_CONTROL), exist_ok=True)
        os.mknod(DM_CONTROL, 0o600 | stat.S_IFCHR, os.makedev(10, minor))
    except FileExistsError:
        pass
    except OSError as e:
        raise DmError(f"cannot create {DM_CONTROL}: {e.strerror}", e.errno or 0) from None


def _misc() -> str:
    try:
        with open("/proc/misc") as f:
            return f.read()
    except OSError:
        return ""


def dm_available(modules: Sequence[str] = ("dm-mod",)) -> bool:
    """The kernel has device-mapper (/proc/misc, not /dev/mapper/control: dmsetup creates that even
    when the kernel lacks it); as root, ``modprobe`` each of ``modules`` first when it is missing."""
    if "device-mapper" not in _misc() and os.geteuid() == 0:
        from powercut.linux import process

        for mod in modules:
            process.run(["modprobe", mod], timeout=60, check=False)
    return "device-mapper" in _misc()


def require_dm(what: str, modules: Sequence[str] = ("dm-mod",)) -> None:
    """EnvironmentNotReady (one line) unless device-mapper works here for ``what``."""
    if os.geteuid() != 0:
        raise EnvironmentNotReady(f"{what} needs root (device-mapper)")
    if not dm_available(modules):
        raise EnvironmentNotReady(
            f"{what} needs device-mapper, which this kernel lacks (use it inside the guest VM)"
        )


def _call(cmd: str, buf: bytearray, what: str) -> bytearray:
    try:
        fcntl.ioctl(control(), ioctl_number(CMDS[cmd]), buf, True)
    except OSError as e:
        name = _errno.errorcode.get(e.errno or 0, str(e.errno))
        raise DmError(
            f"device-mapper {cmd} on {what}: {name} ({e.strerror})", e.errno or 0
        ) from None
    return buf


def _call_out(cmd: str, name: str | None, what: str, flags: int = 0) -> bytearray:
    """A command that answers with data: grow the buffer until the kernel says it fit."""
    size = 16 << 10
    while True:
        buf = _call(cmd, header(name, flags=flags, size=size), what)
        if not HEADER.unpack_from(buf, 0)[7] & BUFFER_FULL_FLAG:  # flags
            return buf
        size *= 4


# -- operations ---------------------------------------------------------------------------------------------
def create(name: str, table: Table, *, readonly: bool = False) -> str:
    """Create device ``name`` with ``table``, load and resume it; return a usable device node."""
    buf = _call("DEV_CREATE", header(name), name)
    major, minor = decode_dev(HEADER.unpack_from(buf, 0)[10])  # dev
    try:
        _call("TABLE_LOAD", table_buffer(name, table, readonly=readonly), name)
        _call(
            "DEV_SUSPEND", header(name), name
        )  # without SUSPEND_FLAG: resume (activate the table)
        return _node(name, major, minor)
    except BaseException:
        try:
            remove(name, retries=3)
        except DmError as e:
            _log().warning("cannot remove the half-made %s: %s", name, e)
        raise


def _is_node(path: str, rdev: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISBLK(st.st_mode) and st.st_rdev == rdev


def _node(name: str, major: int, minor: int) -> str:
    """udev's /dev/mapper/NAME, else devtmpfs' /dev/dm-MINOR, else a node we make (the guest has
    no udev; /dev may not be a devtmpfs)."""
    rdev = os.makedev(major, minor)
    for path in (f"/dev/mapper/{name}", f"/dev/dm-{minor}"):
        if _is_node(path, rdev):
            return path
    path = f"/dev/mapper/{name}"
    try:
        if os.path.lexists(path):
            os.unlink(path)  # a stale node of an earlier device of that name
        os.mknod(path, 0o600 | stat.S_IFBLK, rdev)
    except OSError as e:
        raise DmError(
            f"device-mapper {name} ({major}:{minor}): cannot make {path}: {e.strerror}",
            e.errno or 0,
        ) from None
    _made_nodes[name] = path
    return path


def remove(name: str, *, retries: int = 12) -> None:
    """Remove device ``name``; EBUSY (a closing opener, a udev probe) is retried with backoff,
    ``retries`` times at most (about 4 s with the default)."""
    for attempt in range(retries + 1):
        try:
            _call("DEV_REMOVE", header(name), name)
            break
        except DmError as e:
            if e.errno != _errno.EBUSY or attempt == retries:
                raise
            _log().debug(
                "%s busy: removing it again in %.0f ms", name, 1000 * min(0.02 * 2**attempt, 0.5)
            )
            time.sleep(min(0.02 * 2**attempt, 0.5))
    made = _made_nodes.pop(name, None)
    if made is not None:
        try:
            os.unlink(made)
        except FileNotFoundError:
            pass


def suspend(name: str, *, lockfs: bool = False) -> None:
    """DM_DEV_SUSPEND: block new I/O and wait for every bio in flight to complete; without
    ``lockfs`` the filesystem on it is not frozen (nothing is written back)."""
    _call(
        "DEV_SUSPEND", header(name, flags=SUSPEND_FLAG | (0 if lockfs else SKIP_LOCKFS_FLAG)), name
    )


def resume(name: str) -> None:
    """DM_DEV_SUSPEND without SUSPEND_FLAG: let I/O flow again (the live table stays)."""
    _call("DEV_SUSPEND", header(name), name)


def reload(name: str, table: Table) -> None:
    """Swap the live table of ``name`` (a mounted filesystem's device included): load it as the
    inactive table, suspend without freezing the filesystem (bios in flight complete under the old
    table), resume (the new table goes live) -- ``dmsetup suspend --nolockfs; load; resume``."""
    _call("TABLE_LOAD", table_buffer(name, table), name)
    suspend(name)
    resume(name)


def quiesce(name: str) -> None:
    """Wait until every bio in flight on ``name`` has completed, then let I/O flow again."""
    suspend(name)
    resume(name)


def info(name: str) -> DmDevice:
    """DM_DEV_STATUS: the device number, open count and flags of ``name``."""
    h = HEADER.unpack_from(_call("DEV_STATUS", header(name), name), 0)
    return DmDevice(name, *decode_dev(h[10]), open_count=h[6], flags=h[7])  # dev, open_count, flags


def status(name: str, *, table: bool = False) -> list[str]:
    """DM_TABLE_STATUS: ``start length type status`` per target (``table``: the loaded table)."""
    return parse_status(_call_out("TABLE_STATUS", name, name, STATUS_TABLE_FLAG if table else 0))


def message(name: str, text: str, sector: int = 0) -> None:
    """DM_TARGET_MSG: send ``text`` to the target of ``name`` at ``sector`` (e.g. ``mark X``)."""
    _call("TARGET_MSG", message_buffer(name, text, sector), name)


def devices() -> list[DmDevice]:
    """DM_LIST_DEVICES: every mapped device (name and number)."""
    return parse_name_list(_call_out("LIST_DEVICES", None, "the device list"))

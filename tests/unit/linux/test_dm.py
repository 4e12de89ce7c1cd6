"""Device-mapper by ioctl: struct packing and parsing everywhere; real devices (linear, snapshot,
log-writes messages, errors) where there is root and device-mapper.  This host's kernel may lack
device-mapper: tests/vm/test_replay_real.py::test_dm_snapshot_provider_in_guest runs this module in
a guest VM, where the device tests must pass, not skip."""

from __future__ import annotations

import errno
import mmap
import os
import stat
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from powercut.errors import PowercutError, UsageError
from powercut.linux import dm
from powercut.linux.loopdev import LoopDevice


def _dm_missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not dm.dm_available(("dm-snapshot",)):
        return (
            "this kernel has no device-mapper (tests/vm/test_replay_real.py runs these in a guest)"
        )
    return None


DM_MISSING = _dm_missing()
needs_dm = pytest.mark.skipif(DM_MISSING is not None, reason=str(DM_MISSING))


# -- packing (pure) -----------------------------------------------------------------------------------------
def test_ioctl_numbers_match_linux_header() -> None:
    # _IOWR(0xfd, nr, struct dm_ioctl), sizeof(struct dm_ioctl) == 312
    assert dm.DM_TARGET_MSG == 0xC138FD0E
    assert dm.ioctl_number(dm.CMDS["DEV_CREATE"]) == 0xC138FD03
    assert dm.ioctl_number(dm.CMDS["TABLE_STATUS"]) == 0xC138FD0C
    assert dm.HEADER.size == 48 and dm.SPEC.size == dm.SPEC_SIZE == 40


def test_header_fields() -> None:
    buf = dm.header("pc-x", flags=dm.READONLY_FLAG, size=4096)
    version = struct.unpack_from("<3I", buf, 0)
    data_size, data_start, count, open_count, flags, event_nr, _pad, dev = struct.unpack_from(
        "<IIIiIIIQ", buf, 12
    )
    assert version == (4, 0, 0) and data_size == len(buf) == 4096 and data_start == 312
    assert (count, open_count, flags, event_nr, dev) == (0, 0, dm.READONLY_FLAG, 0, 0)
    assert bytes(buf[48:53]) == b"pc-x\0" and bytes(buf[176:312]) == bytes(136)  # uuid + data: zero
    assert len(dm.header("y")) == 312


def test_table_layout_is_8_byte_aligned() -> None:
    table = [
        (0, 100, "linear", "/dev/loop0 0"),
        (100, 28, "error", ""),
        (128, 8, "snapshot", "7:1 7:2 N 8"),
    ]
    buf = dm.table_buffer("pc-t", table, readonly=True)
    data_size, data_start, count, _oc, flags = struct.unpack_from("<IIIiI", buf, 12)
    assert data_size == len(buf) and data_size % 8 == 0 and (data_start, count) == (312, 3)
    assert flags == dm.READONLY_FLAG
    pos, seen = 312, []
    for start, length, kind, params in table:
        s, n, status, nxt, ttype = dm.SPEC.unpack_from(buf, pos)
        assert (s, n, status, ttype.rstrip(b"\0").decode()) == (start, length, 0, kind)
        body = pos + 40
        assert bytes(buf[body : body + len(params) + 1]) == params.encode() + b"\0"
        assert nxt % 8 == 0 and nxt >= 40 + len(params) + 1 and nxt - (40 + len(params) + 1) < 8
        seen.append(nxt)
        pos += nxt
    assert pos == len(buf)


def test_target_msg_layout() -> None:
    buf = dm.message_buffer("powercut-rec", "mark ack:7", sector=9)
    data_size, data_start = struct.unpack_from("<II", buf, 12)
    assert data_size == len(buf) and data_size % 8 == 0 and data_start == 312
    assert bytes(buf[48:61]) == b"powercut-rec\0"
    assert struct.unpack_from("<Q", buf, 312) == (9,)
    assert bytes(buf[320:331]) == b"mark ack:7\0"


def test_bad_names_and_tables() -> None:
    for name in ("", "x" * 128, "a/b"):
        with pytest.raises(dm.BadDmName):
            dm.header(name)
    assert issubclass(dm.BadDmName, ValueError) and issubclass(dm.BadDmName, UsageError)
    with pytest.raises(UsageError, match="empty"):
        dm.table_buffer("pc", [])
    with pytest.raises(UsageError, match="target type"):
        dm.table_buffer("pc", [(0, 8, "x" * 16, "")])


def _answer(data: bytes, count: int = 0, flags: int = 0) -> bytearray:
    buf = dm.header("pc", size=312 + len(data))
    struct.pack_into("<I", buf, 20, count)
    struct.pack_into("<I", buf, 28, flags)
    buf[312:] = data
    return buf


def test_parse_status_follows_next_from_the_data_start() -> None:
    one = dm.SPEC.pack(0, 64, 0, 56, b"snapshot") + b"16/128 16\0".ljust(16, b"\0")
    two = dm.SPEC.pack(64, 64, 0, 0, b"linear") + b"\0" + bytes(7)
    assert (
        len(one) == 56
    )  # the kernel's next for the 2nd spec: 56 from the data start (= from spec 1)
    buf = _answer(one + two, count=2)
    assert dm.parse_status(buf) == ["0 64 snapshot 16/128 16", "64 64 linear"]


def test_parse_name_list() -> None:
    a = struct.pack("<QI", (253 << 8) | 1, 24) + b"pc-a\0".ljust(
        12, b"\0"
    )  # next: from this record
    b = struct.pack("<QI", (253 << 8) | 2, 0) + b"pc-b\0"
    got = dm.parse_name_list(_answer(a + b))
    assert [(d.name, d.major, d.minor) for d in got] == [("pc-a", 253, 1), ("pc-b", 253, 2)]
    assert dm.parse_name_list(_answer(struct.pack("<QI", 0, 0) + bytes(4))) == []


def test_decode_dev() -> None:
    def encode(major: int, minor: int) -> int:  # the kernel's new_encode_dev
        return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)

    for major, minor in ((253, 0), (253, 300), (7, 70000), (4095, 0xFFFFF)):
        assert dm.decode_dev(encode(major, minor)) == (major, minor)


def test_ioctl_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    fd = os.open("/dev/null", os.O_RDWR)
    try:
        monkeypatch.setattr(dm, "_fd", fd)
        with pytest.raises(dm.DmError) as ei:
            dm.status("pc-nowhere")
        assert ei.value.errno == errno.ENOTTY and isinstance(ei.value, PowercutError)
        assert str(ei.value) == ei.value.one_line()
        assert "pc-nowhere" in str(ei.value) and "ENOTTY" in str(ei.value)
    finally:
        os.close(fd)


# -- real devices -----------------------------------------------------------------------------------------------
def _image(path: Path, nbytes: int, fill: bytes = b"\0") -> Path:
    path.write_bytes(fill * nbytes)
    return path


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[LoopDevice]:
    """A 1 MiB loop device full of b"o"."""
    lo = LoopDevice(_image(tmp_path / "data.img", 1 << 20, b"o"))
    try:
        yield lo
    finally:
        lo.close()


def _name(what: str) -> str:
    return f"powercut-test-{os.getpid()}-{what}"


def _read(node: str, off: int, n: int) -> bytes:
    """O_DIRECT: past the page cache, which a dm device and the device under it do not share."""
    fd = os.open(node, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, n)
        assert os.preadv(fd, [buf], off) == n
        return bytes(buf)
    finally:
        os.close(fd)


def _majmin(dev: str) -> str:
    rdev = os.stat(dev).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _write(node: str, off: int, data: bytes) -> None:
    fd = os.open(node, os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
        os.fsync(fd)
    finally:
        os.close(fd)


@needs_dm
def test_linear_create_io_status_remove(loop: LoopDevice, tmp_path: Path) -> None:
    name = _name("linear")
    node = dm.create(name, [(0, 1024, "linear", f"{loop.path} 512")])  # the second half of the loop
    try:
        st = os.stat(node)
        dev = dm.info(name)
        assert stat.S_ISBLK(st.st_mode) and st.st_rdev == dev.rdev and not dev.suspended
        assert name in [d.name for d in dm.devices()]
        _write(node, 4096, b"L" * 4096)
        assert _read(loop.path, 512 * 512 + 4096, 4096) == b"L" * 4096
        assert _read(node, 0, 4096) == b"o" * 4096
        assert dm.status(name, table=True) == [f"0 1024 linear {_majmin(loop.path)} 512"]
        assert dm.status(name) == ["0 1024 linear"]
        with pytest.raises(dm.DmError, match=f"TARGET_MSG on {name}: EINVAL"):
            dm.message(name, "hello")  # linear takes no messages
        with open(node, "rb"), pytest.raises(dm.DmError, match=f"DEV_REMOVE on {name}: EBUSY"):
            dm.remove(name, retries=1)
    finally:
        dm.remove(name)
    assert name not in [d.name for d in dm.devices()]
    with pytest.raises(dm.DmError, match="ENXIO"):
        dm.info(name)


@needs_dm
def test_create_errors_leave_nothing(loop: LoopDevice, tmp_path: Path) -> None:
    name = _name("bad")
    with pytest.raises(dm.DmError, match=f"TABLE_LOAD on {name}: E"):
        dm.create(name, [(0, 8, "linear", "/dev/nonexistent-powercut 0")])
    assert name not in [d.name for d in dm.devices()]
    dm.create(name, [(0, 8, "linear", f"{loop.path} 0")])
    try:
        with pytest.raises(dm.DmError, match=f"DEV_CREATE on {name}: E") as ei:
            dm.create(name, [(0, 8, "linear", f"{loop.path} 0")])
        assert ei.value.errno in (errno.EBUSY, errno.EEXIST)
        assert dm.status(name, table=True) == [
            f"0 8 linear {_majmin(loop.path)} 0"
        ]  # the first one is intact
    finally:
        dm.remove(name)


@needs_dm
def test_node_made_without_udev_or_devtmpfs(
    loop: LoopDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither /dev/mapper/NAME nor /dev/dm-N usable: create makes /dev/mapper/NAME, remove drops it."""
    monkeypatch.setattr(dm, "_is_node", lambda path, rdev: False)
    name = _name("mknod")
    node = dm.create(name, [(0, 8, "linear", f"{loop.path} 0")])
    try:
        assert node == f"/dev/mapper/{name}" and os.stat(node).st_rdev == dm.info(name).rdev
        assert _read(node, 0, 512) == b"o" * 512
    finally:
        dm.remove(name)
    assert not os.path.lexists(node)


@needs_dm
def test_snapshot_target(tmp_path: Path) -> None:
    """Writes through a snapshot land in its COW; the origin keeps its bytes."""
    origin = LoopDevice(_image(tmp_path / "origin.img", 1 << 20, b"O"))
    cow = LoopDevice(_image(tmp_path / "cow.img", 1 << 20))
    name = _name("snap")
    try:
        node = dm.create(name, [(0, 2048, "snapshot", f"{origin.path} {cow.path} N 8")])
        try:
            _write(node, 8192, b"S" * 4096)
            assert _read(node, 8192, 4096) == b"S" * 4096 and _read(node, 0, 4096) == b"O" * 4096
            assert _read(origin.path, 8192, 4096) == b"O" * 4096
            (line,) = dm.status(name)
            start, length, kind, used = line.split()[:4]
            assert (start, length, kind) == ("0", "2048", "snapshot") and int(
                used.split("/")[0]
            ) > 0
        finally:
            dm.remove(name)
    finally:
        cow.close()
        origin.close()


@needs_dm
def test_message_marks_a_log_writes_target(tmp_path: Path) -> None:
    if not Path("/sys/module/dm_log_writes").exists():
        pytest.skip("the dm-log-writes module is not loaded")
    data = LoopDevice(_image(tmp_path / "d.img", 1 << 20))
    logdev = LoopDevice(_image(tmp_path / "l.img", 1 << 20))
    name = _name("lw")
    try:
        dm.create(name, [(0, 2048, "log-writes", f"{data.path} {logdev.path}")])
        try:
            before = int(dm.status(name)[0].split()[3])
            dm.message(name, "mark powercut-test")
            # the target's kthread writes the mark (and counts it) asynchronously: wait for it
            deadline = time.monotonic() + 10
            while int(dm.status(name)[0].split()[3]) == before and time.monotonic() < deadline:
                time.sleep(0.05)
            assert int(dm.status(name)[0].split()[3]) == before + 1
        finally:
            dm.remove(name)
    finally:
        logdev.close()
        data.close()

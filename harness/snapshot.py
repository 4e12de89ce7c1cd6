"""Snapshot providers: cheap clones of the pristine image that incremental replay advances.

One interface (``Provider``): ``pristine(size, initial)`` makes the image the walk writes into,
``clone(src, dst) -> Path`` makes an independent copy of it as of now (a file, or a block device for
dm-snapshot), ``release(path)`` drops a clone, ``close()`` tears everything down.

* ``reflink``   -- FICLONE (shares every extent; copy-on-write on both sides).  Needs a workspace
  filesystem with reflink (XFS with reflink=1, btrfs, bcachefs...).
* ``xfs``       -- reflink inside an XFS image (sparse file, ``mkfs.xfs -m reflink=1``, loop
  mount) made in the workspace: for workspaces without reflink, as root.  Removed on close.
* ``copy``      -- sparse copy: SEEK_DATA/SEEK_HOLE + copy_file_range, holes preserved.  Works
  anywhere; cost grows with the pristine's allocated bytes (not with the log).
* ``dm-snapshot`` -- the pristine is a loop device over a file; each clone is a dm ``snapshot``
  target with a non-persistent COW (a zram device if the kernel can hot-add one, else a loop device
  over a sparse file).  Root and device-mapper (e.g. inside the guest VM).  While a clone exists the
  pristine must not be written (materialize never does: it releases a clone before advancing).
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import itertools
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Self

from . import process
from .errors import CommandFailed, EnvironmentNotReady, PowercutError, UsageError

log = logging.getLogger(__name__)

FICLONE = 0x40049409
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
PROVIDERS = ("reflink", "xfs", "copy", "dm-snapshot")
CHUNK = 1 << 20
ZEROS = bytes(CHUNK)

_libc = ctypes.CDLL(None, use_errno=True)
_fallocate = _libc.fallocate
_fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_fallocate.restype = ctypes.c_int
_sync_file_range = _libc.sync_file_range
_sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
_sync_file_range.restype = ctypes.c_int
SYNC_FILE_RANGE_ALL = 1 | 2 | 4  # WAIT_BEFORE | WRITE | WAIT_AFTER: write back, no disk cache flush


# -- low-level helpers ------------------------------------------------------------------------------
def pwrite_all(fd: int, data: memoryview | bytes, offset: int) -> None:
    """pwrite until done (a regular file or block device may take less than asked)."""
    n = os.pwrite(fd, data, offset)
    if n == len(data):
        return
    view = memoryview(data)
    while n < len(view):
        if n == 0:
            raise OSError(errno.EIO, "pwrite wrote nothing")
        view, offset = view[n:], offset + n
        n = os.pwrite(fd, view, offset)


def write_zeros(fd: int, offset: int, length: int) -> None:
    while length > 0:
        n = min(length, CHUNK)
        pwrite_all(fd, memoryview(ZEROS)[:n], offset)
        offset += n
        length -= n


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Deallocate a range, keeping the size (reads as zeros).  False if the file cannot."""
    if _fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.ENODEV):
        return False
    raise OSError(err, os.strerror(err))


def zero_range(fd: int, offset: int, length: int, block: bool) -> None:
    """Make a range read as zeros: a hole in a file where possible, else written zeros."""
    if block or not punch_hole(fd, offset, length):
        write_zeros(fd, offset, length)


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    end = offset + length
    while offset < end:
        try:
            n = os.copy_file_range(src, dst, end - offset, offset, offset)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
                raise
            n = 0
        if n == 0:  # not supported here (or a racing truncate): plain copy
            while offset < end:
                buf = os.pread(src, min(CHUNK, end - offset), offset)
                if not buf:
                    raise OSError(errno.EIO, "short read while copying")
                pwrite_all(dst, buf, offset)
                offset += len(buf)
            return
        offset += n


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """(offset, length) of the data regions of a file below ``size`` (SEEK_DATA/SEEK_HOLE)."""
    out: list[tuple[int, int]] = []
    off = 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                break
            if e.errno in (errno.EINVAL, errno.EOPNOTSUPP):  # no SEEK_DATA here: all data
                return [(off, size - off)]
            raise
        if start >= size:
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        out.append((start, end - start))
        off = end
    return out


def sparse_copy_fd(src: int, dst: int, size: int) -> int:
    """Copy the first ``size`` bytes of src to dst (a fresh file), keeping holes.  Returns the
    number of data bytes copied."""
    os.ftruncate(dst, size)
    copied = 0
    for off, length in data_extents(src, size):
        _copy_range(src, dst, off, length)
        copied += length
    return copied


def reflink_fd(src: int, dst: int) -> None:
    fcntl.ioctl(dst, FICLONE, src)


def probe_reflink(directory: Path) -> str | None:
    """None if FICLONE works in ``directory``, else why not."""
    try:
        fd_a, a = tempfile.mkstemp(prefix=".powercut-probe-", dir=directory)
    except OSError as e:
        return f"cannot create files in {directory}: {e.strerror}"
    b = a + ".clone"
    try:
        os.pwrite(fd_a, b"x" * 4096, 0)
        fd_b = os.open(b, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            reflink_fd(fd_a, fd_b)
            return None
        except OSError as e:
            return f"FICLONE fails in {directory}: {e.strerror}"
        finally:
            os.close(fd_b)
    finally:
        os.close(fd_a)
        for p in (a, b):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def fs_type(path: Path) -> str:
    """Filesystem type of the mount holding ``path`` (from /proc/self/mountinfo; '?' if unknown)."""
    try:
        dev = os.stat(path).st_dev
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            major, minor = left.split()[2].split(":")
            if os.makedev(int(major), int(minor)) == dev:
                return right.split()[0]
    except (OSError, ValueError, IndexError):
        pass
    return "?"


# -- the pristine image -------------------------------------------------------------------------------
class Pristine:
    """The image the walk writes into.  ``fd`` is open read-write on ``path`` (a file, or the
    block device for dm-snapshot); ``block`` says which."""

    def __init__(self, path: Path, fd: int, block: bool, backing: Path | None = None, writeback: bool = False) -> None:
        self.path, self.fd, self.block, self.backing, self.writeback = path, fd, block, backing, writeback

    def sync(self) -> None:
        """Before a clone: make the writes visible below the page cache (dm-snapshot: fsync the
        device) or write back the dirty pages that FICLONE would flush anyway (so the walk, not
        the clone, pays for them)."""
        if self.block:
            os.fsync(self.fd)
        elif self.writeback and _sync_file_range(self.fd, 0, 0, SYNC_FILE_RANGE_ALL) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _new_image(path: Path, size: int, initial: Path | None, dense: bool = False) -> int:
    """A new image file: sparse (holes for zeros) or ``dense`` (every byte written, so that it is
    a few large extents that reflink clones share in O(1))."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        if dense:
            os.ftruncate(fd, size)
            src = os.open(initial, os.O_RDONLY | os.O_CLOEXEC) if initial is not None else -1
            try:
                for off in range(0, size, 4 * CHUNK):
                    n = min(4 * CHUNK, size - off)
                    buf = os.pread(src, n, off) if src >= 0 else None
                    if buf:
                        pwrite_all(fd, buf, off)
                    else:
                        write_zeros(fd, off, n)
            finally:
                if src >= 0:
                    os.close(src)
        elif initial is None:
            os.ftruncate(fd, size)
        else:
            src = os.open(initial, os.O_RDONLY | os.O_CLOEXEC)
            try:
                try:
                    reflink_fd(src, fd)
                    os.ftruncate(fd, size)
                except OSError:
                    os.ftruncate(fd, 0)
                    sparse_copy_fd(src, fd, size)
            finally:
                os.close(src)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- providers ------------------------------------------------------------------------------------------
class Provider:
    """Base: pristine and clones are files in ``workdir`` (a private directory, removed on close)."""

    name = "?"
    block = False
    dense = False  # keep the pristine fully written (no holes): clones stay O(1) on reflink filesystems

    def __init__(self, workspace: Path, reason: str = "") -> None:
        self.reason = reason
        self.workspace = Path(workspace)
        self.workdir = self._make_workdir(self.workspace)
        self._closed = False
        self._seq = itertools.count()

    def path(self, kind: str) -> Path:
        """A fresh file name in the work directory."""
        return self.workdir / f"{kind}-{next(self._seq)}.img"

    @staticmethod
    def _make_workdir(parent: Path) -> Path:
        try:
            return Path(tempfile.mkdtemp(prefix="powercut-replay-", dir=parent))
        except OSError as e:
            raise UsageError(f"cannot use workspace {parent}: {e.strerror}") from None

    def pristine(self, size: int, initial: Path | None) -> Pristine:
        path = self.path("pristine")
        return Pristine(path, _new_image(path, size, initial, self.dense), False, path, writeback=self.dense)

    def drop_pristine(self, p: Pristine) -> None:
        p.close()
        if p.backing is not None:
            p.backing.unlink(missing_ok=True)

    def clone(self, src: Path, dst: Path) -> Path:
        raise NotImplementedError

    def release(self, path: Path) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} in {self.workdir}>"


class ReflinkProvider(Provider):
    """FICLONE clones of a dense pristine.  A clone shares the pristine's few large extents, so it
    costs O(1); a release truncates before unlinking, so the extents are unshared again at once
    (XFS frees unlinked inodes in the background) and the pristine's next writes stay in place
    instead of copy-on-write fragmenting it."""

    name = "reflink"
    dense = True

    def clone(self, src: Path, dst: Path) -> Path:
        s = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                reflink_fd(s, d)
            finally:
                os.close(d)
        finally:
            os.close(s)
        return dst

    def release(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
        os.unlink(path)


class CopyProvider(Provider):
    name = "copy"

    def clone(self, src: Path, dst: Path) -> Path:
        s = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(s).st_size
            d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                sparse_copy_fd(s, d, size)
            finally:
                os.close(d)
        finally:
            os.close(s)
        return dst


class XfsWorkspaceProvider(ReflinkProvider):
    """Reflink clones inside a loop-mounted XFS image (sparse) made in the workspace."""

    name = "xfs"

    def __init__(self, workspace: Path, reason: str = "", image_bytes: int = 1 << 30) -> None:
        if os.geteuid() != 0:
            raise EnvironmentNotReady("an XFS workspace needs root (mount -o loop)")
        mkfs = process.require("mkfs.xfs", "xfsprogs")
        self.reason = reason
        self.workspace = Path(workspace)
        self._closed = False
        self._seq = itertools.count()
        self._mounted = False
        self.outer = self._make_workdir(self.workspace)
        self.image = self.outer / "xfs.img"
        self.mnt = self.outer / "mnt"
        try:
            self.mnt.mkdir()
            with open(self.image, "wb") as f:
                f.truncate(max(image_bytes, 512 << 20))
            process.run([mkfs, "-q", "-f", "-m", "reflink=1", str(self.image)], timeout=120)
            process.run(["mount", "-t", "xfs", "-o", "loop", str(self.image), str(self.mnt)], timeout=60)
            self._mounted = True
            why = probe_reflink(self.mnt)
            if why:
                raise EnvironmentNotReady(f"the XFS workspace has no reflink: {why}")
        except CommandFailed as e:
            self.close()
            raise EnvironmentNotReady(f"cannot set up an XFS workspace in {workspace}: {e.one_line()}") from None
        except OSError as e:
            self.close()
            raise EnvironmentNotReady(f"cannot set up an XFS workspace in {workspace}: {e.strerror}") from None
        except BaseException:
            self.close()
            raise
        self.workdir = self.mnt

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._mounted:
            for attempt in range(5):
                try:
                    process.run(["umount", str(self.mnt)], timeout=60)
                    break
                except CommandFailed as e:
                    if attempt == 4:
                        log.warning("cannot unmount the XFS workspace %s: %s", self.mnt, e.one_line())
                        return  # leave the files: removing them under a mount would be worse
                    time.sleep(0.2)
        shutil.rmtree(self.outer, ignore_errors=True)


class DmSnapshotProvider(Provider):
    """Pristine = a loop device over a file; clone = a dm ``snapshot`` with a non-persistent COW."""

    name = "dm-snapshot"
    block = True
    _ids = itertools.count()

    def __init__(self, workspace: Path, reason: str = "", chunk_sectors: int = 8) -> None:
        if os.geteuid() != 0:
            raise EnvironmentNotReady("dm-snapshot needs root")
        if not dm_supported():
            raise EnvironmentNotReady("dm-snapshot needs device-mapper with the snapshot target, which this "
                                      "kernel lacks (use it inside the guest VM)")
        self.dmsetup = process.require("dmsetup", "dmsetup")
        self.losetup = process.require("losetup", "mount")
        super().__init__(workspace, reason)
        self.chunk = chunk_sectors
        self.size = 0
        self.loops: list[str] = []
        self.zrams: list[int] = []
        self.free_cows: list[str] = []
        self.live: dict[Path, tuple[str, str]] = {}  # node -> (dm name, cow device)
        self.prefix = f"powercut-{os.getpid()}-{next(self._ids)}"
        self.n = 0

    def _loop(self, backing: Path) -> str:
        dev = process.run([self.losetup, "--find", "--show", str(backing)], timeout=60).stdout.strip()
        self.loops.append(dev)
        return dev

    def pristine(self, size: int, initial: Path | None) -> Pristine:
        if size % 512:
            raise UsageError(f"dm-snapshot needs a size that is a multiple of 512, not {size}")
        if self.live:
            raise UsageError("dm-snapshot: release every clone before making a new pristine")
        self.size = size
        self._drop_cows()
        backing = self.path("pristine")
        os.close(_new_image(backing, size, initial))
        dev = self._loop(backing)
        try:
            fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            self._unloop(dev)
            raise
        return Pristine(Path(dev), fd, True, backing)

    def drop_pristine(self, p: Pristine) -> None:
        p.close()
        self._unloop(str(p.path))
        if p.backing is not None:
            p.backing.unlink(missing_ok=True)

    def _unloop(self, dev: str) -> None:
        if dev in self.loops:
            self.loops.remove(dev)
            process.run([self.losetup, "-d", dev], timeout=60)

    def _drop_cows(self) -> None:
        """COW devices are sized for one pristine size: drop the spare ones when it changes."""
        for cow in self.free_cows:
            if cow.startswith("/dev/zram"):
                n = int(cow.removeprefix("/dev/zram"))
                self.zrams.remove(n)
                _zram_remove(n)
            else:
                self._unloop(cow)
        self.free_cows.clear()
        for f in self.workdir.glob("cow-*.img"):
            f.unlink(missing_ok=True)

    def _cow(self) -> str:
        if self.free_cows:
            return self.free_cows.pop()
        dev = _zram_add(self.size)
        if dev is not None:
            self.zrams.append(int(dev.removeprefix("/dev/zram")))
            return dev
        backing = self.path("cow")
        with open(backing, "wb") as f:
            f.truncate(self.size + (1 << 20))
        return self._loop(backing)

    def clone(self, src: Path, dst: Path) -> Path:
        cow = self._cow()
        name = f"{self.prefix}-{self.n}"
        self.n += 1
        table = f"0 {self.size // 512} snapshot {src} {cow} N {self.chunk}"
        try:
            process.run([self.dmsetup, "create", name, "--noudevsync", "--table", table], timeout=60)
        except BaseException:
            self.free_cows.append(cow)
            raise
        node = self._node(name, dst)
        self.live[node] = (name, cow)
        return node

    def _node(self, name: str, dst: Path) -> Path:
        """The device node: udev's /dev/mapper/NAME, else devtmpfs' /dev/dm-N found through sysfs
        (no extra dmsetup run), else one we make from ``dmsetup info``'s major:minor."""
        mapper = Path("/dev/mapper") / name
        if mapper.exists():
            return mapper
        for entry in Path("/sys/block").glob("dm-*"):
            try:
                if (entry / "dm" / "name").read_text().strip() != name:
                    continue
                major, minor = (int(x) for x in (entry / "dev").read_text().split(":"))
            except (OSError, ValueError):
                continue
            node = Path("/dev") / entry.name
            try:
                st = os.stat(node)
                if stat.S_ISBLK(st.st_mode) and st.st_rdev == os.makedev(major, minor):
                    return node
            except OSError:
                pass
            break
        info = process.run([self.dmsetup, "info", "-c", "--noheadings", "-o", "major,minor", name], timeout=30)
        major, minor = (int(x) for x in info.stdout.strip().split(":"))
        node = dst.with_suffix(".dev")
        os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(major, minor))
        return node

    def release(self, path: Path) -> None:
        name, cow = self.live.pop(path)
        for attempt in range(10):
            try:
                process.run([self.dmsetup, "remove", "--noudevsync", name], timeout=60)
                break
            except CommandFailed:
                if attempt == 9:
                    raise
                time.sleep(0.1 * (attempt + 1))
        if path.parent == self.workdir:
            path.unlink(missing_ok=True)
        self.free_cows.append(cow)  # a non-persistent COW is never read back: reuse as is

    def close(self) -> None:
        if self._closed:
            return
        errors: list[str] = []
        for node in list(self.live):
            try:
                self.release(node)
            except PowercutError as e:
                errors.append(e.one_line())
        for dev in reversed(self.loops):
            try:
                process.run([self.losetup, "-d", dev], timeout=60)
            except PowercutError as e:
                errors.append(e.one_line())
        for n in self.zrams:
            _zram_remove(n)
        super().close()
        if errors:
            log.warning("dm-snapshot teardown: %s", "; ".join(errors))


def dm_supported() -> bool:
    """The kernel has device-mapper (/proc/misc; dmsetup creates /dev/mapper/control even when it
    does not) and can load the snapshot target."""
    def misc() -> str:
        try:
            return Path("/proc/misc").read_text()
        except OSError:
            return ""
    if "device-mapper" not in misc() and os.geteuid() == 0:
        process.run(["modprobe", "dm-snapshot"], timeout=60, check=False)
    return "device-mapper" in misc()


def _zram_add(size: int) -> str | None:
    """Hot-add a zram device of ``size`` bytes; None if the kernel cannot."""
    ctl = Path("/sys/class/zram-control/hot_add")
    try:
        n = int(ctl.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        Path(f"/sys/block/zram{n}/disksize").write_text(str(size))
    except OSError:
        _zram_remove(n)
        return None
    dev = f"/dev/zram{n}"
    for _ in range(50):  # devtmpfs creates the node asynchronously
        if os.path.exists(dev):
            return dev
        time.sleep(0.01)
    _zram_remove(n)
    return None


def _zram_remove(n: int) -> None:
    try:
        Path(f"/sys/block/zram{n}/reset").write_text("1")
        Path("/sys/class/zram-control/hot_remove").write_text(str(n))
    except OSError as e:
        log.warning("cannot remove zram%d: %s", n, e.strerror)


# -- choosing -----------------------------------------------------------------------------------------------
def choose_provider(workspace: Path, prefer: str = "auto", *, image_bytes: int = 1 << 30) -> Provider:
    """The best provider for ``workspace``: native reflink, else (root) an XFS workspace image,
    else sparse copy.  ``prefer`` forces one (EnvironmentNotReady if it cannot work here);
    dm-snapshot is only used when asked for (its clones are block devices)."""
    workspace = Path(workspace)
    if prefer not in ("auto", *PROVIDERS):
        raise UsageError(f"unknown snapshot provider {prefer!r}; choose auto, {', '.join(PROVIDERS)}")
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} is not a directory")
    fstype = fs_type(workspace)
    if prefer == "copy":
        return _chosen(CopyProvider(workspace, "asked for"))
    if prefer == "dm-snapshot":
        return _chosen(DmSnapshotProvider(workspace, "asked for"))
    why_not = probe_reflink(workspace)
    if why_not is None and prefer in ("auto", "reflink"):
        return _chosen(ReflinkProvider(workspace, f"{fstype} workspace supports FICLONE"))
    if prefer == "reflink" and why_not and os.geteuid() != 0:
        raise EnvironmentNotReady(f"no reflink: {why_not}; an XFS workspace would need root")
    if prefer in ("auto", "reflink", "xfs"):
        try:
            return _chosen(XfsWorkspaceProvider(workspace, f"{fstype} workspace has no reflink "
                                                f"({why_not or 'asked for xfs'}); loop-mounted XFS image",
                                                image_bytes=image_bytes))
        except EnvironmentNotReady as e:
            if prefer != "auto":
                raise
            why_not = f"{why_not}; {e.one_line()}"
    return _chosen(CopyProvider(workspace, f"no reflink ({why_not}): sparse copy"))


def _chosen(p: Provider) -> Provider:
    log.info("snapshot provider: %s (%s)", p.name, p.reason)
    return p

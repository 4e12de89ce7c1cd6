"""Image I/O for replay and the snapshot providers: complete pwrites, zeroed and punched ranges,
sparse copies (SEEK_DATA/SEEK_HOLE + copy_file_range), FICLONE and its probe, page-cache writeback,
and new image files (sparse or dense).  Plain file-descriptor work, no devices, no subprocesses.

Runs on the host and in the guest (wherever states are materialized)."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import tempfile
from pathlib import Path

FICLONE = 0x40049409
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
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
            if e.errno not in (
                errno.EXDEV,
                errno.EINVAL,
                errno.ENOSYS,
                errno.EOPNOTSUPP,
                errno.EBADF,
            ):
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


def sparse_copy(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    size: int | None = None,
    mode: int = 0o600,
) -> int:
    """``sparse_copy_fd`` between paths: ``dst`` made (or truncated) with ``mode``; ``size`` defaults
    to the source's.  Returns the number of data bytes copied."""
    s = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    try:
        d = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            return sparse_copy_fd(s, d, os.fstat(s).st_size if size is None else size)
        finally:
            os.close(d)
    finally:
        os.close(s)


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


def writeback(fd: int) -> None:
    """Write back (and wait for) the dirty pages of ``fd``: no fsync, no disk cache flush."""
    if _sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_ALL) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def new_image(path: Path, size: int, initial: Path | None, dense: bool = False) -> int:
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

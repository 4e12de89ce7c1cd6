"""Snapshot providers: cheap clones of the pristine image that incremental replay advances.
Runs on the host and in the guest (the checker VM uses dm-snapshot, in ``dmsnap``).

One interface (``Provider``): ``pristine(size, initial)`` makes the image the walk writes into,
``clone(src, dst) -> Path`` makes an independent copy of it as of now (a file, or a block device for
dm-snapshot), ``release(path)`` drops a clone, ``close()`` tears everything down.

* ``reflink``   -- FICLONE (shares every extent; copy-on-write on both sides).  Needs a workspace
  filesystem with reflink (XFS with reflink=1, btrfs, bcachefs...).
* ``xfs``       -- reflink inside an XFS image (sparse file, ``mkfs.xfs -m reflink=1``, loop
  mount) made in the workspace: for workspaces without reflink, as root.  Removed on close.  Its
  loop device is write-through: a flush of a state's filesystem still reaches its clone (an fsync
  of the clone inside this XFS), but not the disk under the workspace.
* ``copy``      -- sparse copy: SEEK_DATA/SEEK_HOLE + copy_file_range, holes preserved.  Works
  anywhere; cost grows with the pristine's allocated bytes (not with the log).
* ``dm-snapshot`` -- (``dmsnap.DmSnapshotProvider``) the pristine is a loop device over a file;
  each clone is a dm ``snapshot`` target with a non-persistent COW.  Root and device-mapper (e.g.
  inside the guest VM).  Only used when asked for (its clones are block devices).

This module owns the interface, the file-based providers and ``choose_provider``; image I/O is in
``imageio``, loop devices in ``loopdev``, mounts in ``mounts``.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Self

from powercut.errors import CommandFailed, EnvironmentNotReady, UsageError
from powercut.linux import mounts, process
from powercut.linux.imageio import new_image, probe_reflink, reflink_fd, sparse_copy, writeback
from powercut.linux.loopdev import LoopDevice, LoopError

log = logging.getLogger(__name__)


# -- the pristine image -------------------------------------------------------------------------------
class Pristine:
    """The image the walk writes into.  ``fd`` is open read-write on ``path`` (a file, or the
    block device for dm-snapshot); ``block`` says which."""

    def __init__(
        self, path: Path, fd: int, block: bool, backing: Path | None = None, writeback: bool = False
    ) -> None:
        self.path = path
        self.fd = fd
        self.block = block
        self.backing = backing
        self.writeback = writeback

    def sync(self) -> None:
        """Before a clone: make the writes visible below the page cache (dm-snapshot: fsync the
        device) or write back the dirty pages that FICLONE would flush anyway (so the walk, not
        the clone, pays for them)."""
        if self.block:
            os.fsync(self.fd)
        elif self.writeback:
            writeback(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- providers ------------------------------------------------------------------------------------------
class Provider:
    """Base: pristine and clones are files in ``workdir`` (a private directory, removed on close)."""

    name = "?"
    block = False
    dense = (
        False  # keep the pristine fully written (no holes): clones stay O(1) on reflink filesystems
    )

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
        return Pristine(
            path, new_image(path, size, initial, self.dense), False, path, writeback=self.dense
        )

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
        sparse_copy(src, dst)
        return dst


class XfsWorkspaceProvider(ReflinkProvider):
    """Reflink clones inside an XFS image (sparse) made in the workspace, on a loop device
    (loopdev, autoclear) mounted by mount(2) (mounts); unmounted by the one umount loop.

    The loop device is write-through (``write_cache=False``): XFS's flushes end in the block layer
    instead of an fsync of the image -- a journal commit and a cache flush of the disk below, some
    20 per crash state (every flush of a state's filesystem is an fsync of its clone, which forces
    this XFS's log).  Nothing reads this image after a host crash (the next run removes it), so
    its durability buys nothing; what each state's device holds and returns is the same."""

    name = "xfs"

    def __init__(self, workspace: Path, reason: str = "", image_bytes: int = 1 << 30) -> None:
        if os.geteuid() != 0:
            raise EnvironmentNotReady("an XFS workspace needs root (loop device, mount)")
        mkfs = process.require("mkfs.xfs", "xfsprogs")
        self.reason = reason
        self.workspace = Path(workspace)
        self._closed = False
        self._seq = itertools.count()
        self._mounted = False
        self.loop: LoopDevice | None = None
        self.outer = self._make_workdir(self.workspace)
        self.image = self.outer / "xfs.img"
        self.mnt = self.outer / "mnt"
        try:
            self.mnt.mkdir()
            with open(self.image, "wb") as f:
                f.truncate(max(image_bytes, 512 << 20))
            process.run([mkfs, "-q", "-f", "-m", "reflink=1", str(self.image)], timeout=120)
            self.loop = LoopDevice(self.image, write_cache=False)
            mounts.mount(self.loop.path, self.mnt, "xfs")
            self._mounted = True
            why = probe_reflink(self.mnt)
            if why:
                raise EnvironmentNotReady(f"the XFS workspace has no reflink: {why}")
        except (CommandFailed, mounts.MountError, LoopError) as e:
            self.close()
            raise EnvironmentNotReady(
                f"cannot set up an XFS workspace in {workspace}: {e.one_line()}"
            ) from None
        except OSError as e:
            self.close()
            raise EnvironmentNotReady(
                f"cannot set up an XFS workspace in {workspace}: {e.strerror}"
            ) from None
        except BaseException:
            self.close()
            raise
        self.workdir = self.mnt

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._mounted:
            try:
                mounts.umount(self.mnt)
            except mounts.MountError as e:
                log.warning("cannot unmount the XFS workspace: %s", e.one_line())
                return  # leave the files: removing them under a mount would be worse
        if self.loop is not None:
            try:
                self.loop.close()
            except LoopError as e:
                log.warning("XFS workspace: %s", e.one_line())
        shutil.rmtree(self.outer, ignore_errors=True)

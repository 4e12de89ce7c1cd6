"""The dm-snapshot provider: the pristine is a loop device over a file; each clone is a dm
``snapshot`` target with a non-persistent COW (a zram device if the kernel can hot-add one, else a
loop device over a sparse file).  While a clone exists the pristine must not be written
(materialize never does: it releases a clone before advancing).

Runs where there is root and device-mapper: in the guest (the checker VM), or a host whose kernel
has it.  Device-mapper through ``dm`` (ioctls, no dmsetup), loop devices through ``loopdev``."""

from __future__ import annotations

import itertools
import logging
import os
import time
from pathlib import Path

from powercut.errors import PowercutError, UsageError
from powercut.linux import dm
from powercut.linux.imageio import new_image
from powercut.linux.loopdev import LoopDevice
from powercut.replay.snapshot import Pristine, Provider

log = logging.getLogger(__name__)


class DmSnapshotProvider(Provider):
    """Pristine = a loop device over a file; clone = a dm ``snapshot`` with a non-persistent COW."""

    name = "dm-snapshot"
    block = True
    _ids = itertools.count()

    def __init__(self, workspace: Path, reason: str = "", chunk_sectors: int = 8) -> None:
        dm.require_dm("dm-snapshot", ("dm-snapshot",))
        super().__init__(workspace, reason)
        self.chunk = chunk_sectors
        self.size = 0
        self.loops: dict[str, LoopDevice] = {}  # /dev/loopN -> its LoopDevice
        self.zrams: list[int] = []
        self.free_cows: list[str] = []
        self.live: dict[Path, tuple[str, str]] = {}  # node -> (dm name, cow device)
        self.prefix = f"powercut-{os.getpid()}-{next(self._ids)}"
        self.n = 0

    def _loop(self, backing: Path) -> str:
        # write-through: a flush of a state's filesystem (or the pristine's sync before a clone) ends
        # in the block layer instead of an fsync of the file below -- under TCG, a journal commit of
        # the scratch filesystem per flush.  Nothing here must survive a crash of the machine.
        loop = LoopDevice(backing, write_cache=False)
        self.loops[loop.path] = loop
        return loop.path

    def _unloop(self, dev: str) -> None:
        loop = self.loops.pop(dev, None)
        if loop is not None:
            loop.close()

    def pristine(self, size: int, initial: Path | None) -> Pristine:
        if size % 512:
            raise UsageError(f"dm-snapshot needs a size that is a multiple of 512, not {size}")
        if self.live:
            raise UsageError("dm-snapshot: release every clone before making a new pristine")
        self.size = size
        self._drop_cows()
        backing = self.path("pristine")
        os.close(new_image(backing, size, initial))
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
        table = [(0, self.size // 512, "snapshot", f"{src} {cow} N {self.chunk}")]
        try:
            node = Path(dm.create(name, table))
        except BaseException:
            self.free_cows.append(cow)
            raise
        self.live[node] = (name, cow)
        return node

    def release(self, path: Path) -> None:
        name, cow = self.live.pop(path)
        dm.remove(name)
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
        for dev in reversed(list(self.loops)):
            try:
                self._unloop(dev)
            except PowercutError as e:
                errors.append(e.one_line())
        for n in self.zrams:
            _zram_remove(n)
        super().close()
        if errors:
            log.warning("dm-snapshot teardown: %s", "; ".join(errors))


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

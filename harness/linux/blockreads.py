"""The sectors a block device was asked to read, from the kernel's ``block:block_bio_queue``
tracepoint (tracefs, root): what the read-set rule (core/judging/readset.py) knows of a judge.
Every read submitted to the device, a loop device's or a bio-based device-mapper clone's alike
(``block_rq_issue`` never fires for the latter; on a loop device the two give the same sectors).

One ``BlockReads`` per walk worker: a tracefs instance of its own (``instances/powercut-reads-*``),
its event filtered on one device at a time (``watch``); ``take`` drains what was read since.  A
read the trace may have missed -- the instance's ring buffer overran, the pipe could not be read
-- makes ``take`` answer None (unknown), never a smaller set.  ``available()`` probes once whether
this kernel can do it (tracefs mounted or mountable, the tracepoint present); where it cannot, the
rule stays off and says why once."""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import time
from pathlib import Path

from powercut.linux import process

log = logging.getLogger(__name__)

TRACEFS = Path("/sys/kernel/tracing")
EVENT = "events/block/block_bio_queue"
BUFFER_KB = 4096  # per CPU: a judge issues thousands of requests at most
# "block_bio_queue: 7,0 RM 2048 + 8 [mount]" (with context-info: "mount-123 [001] ..... 12.3: " first)
LINE = re.compile(rb"block_bio_queue: (\d+),(\d+) (\S+) (\d+) \+ (\d+)")
OVERRUN = re.compile(rb"^overrun: (\d+)", re.M)
_count = [0]
_count_lock = threading.Lock()


@functools.cache
def available() -> str:
    """ "" where block reads can be traced here, else why not (said once in the log)."""
    why = _probe()
    if why:
        log.warning("block reads cannot be traced here (%s): every state is judged", why)
    return why


def _probe() -> str:
    if os.geteuid() != 0:
        return "not root"
    if not (TRACEFS / "instances").is_dir():
        try:
            process.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], timeout=30, check=False)
        except Exception as e:  # noqa: BLE001 -- any failure: no tracing, never the judge's end
            return f"tracefs not mounted: {e}"
    if not (TRACEFS / "instances").is_dir():
        return f"no tracefs at {TRACEFS}"
    if not (TRACEFS / EVENT).is_dir():
        return "no block:block_bio_queue tracepoint (a kernel without CONFIG_BLK_DEV_IO_TRACE?)"
    return ""


class BlockReads:
    """One tracefs instance tracing the reads issued to one device at a time."""

    def __init__(self) -> None:
        with _count_lock:
            _count[0] += 1
            n = _count[0]
        self.dir = TRACEFS / "instances" / f"powercut-reads-{os.getpid()}-{n}"
        self.dir.mkdir()
        self.pipe = -1
        self.dev = (-1, -1)
        self.spent = 0.0  # seconds in watch and take: what tracing costs its caller
        self.overruns = -1  # the ring buffer's overruns so far (-1: not read yet)
        try:
            (self.dir / "buffer_size_kb").write_text(str(BUFFER_KB))
            for option in ("context-info", "record-cmd"):  # shorter lines, less to read
                try:
                    (self.dir / "options" / option).write_text("0")
                except OSError:
                    pass
            (self.dir / EVENT / "enable").write_text("1")
            self.pipe = os.open(self.dir / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
        except BaseException:
            self.close()
            raise

    def watch(self, device: str) -> None:
        """Trace ``device`` (a block device node) from now on; what was traced before is dropped."""
        t0 = time.perf_counter()
        rdev = os.stat(device).st_rdev
        if (
            os.major(rdev),
            os.minor(rdev),
        ) != self.dev:  # a loop device is often the last one again
            self.dev = (os.major(rdev), os.minor(rdev))
            dev = (self.dev[0] << 20) | self.dev[1]
            try:  # reads only, filtered in the kernel
                (self.dir / EVENT / "filter").write_text(f'dev == {dev} && rwbs ~ "*R*"')
            except OSError:
                (self.dir / EVENT / "filter").write_text(f"dev == {dev}")
        self._drain()
        if self.overruns < 0:
            self.overruns = self._overruns()
        self.spent += time.perf_counter() - t0

    def take(self) -> list[tuple[int, int]] | None:
        """The sector spans [lo, hi) read from the watched device since ``watch`` or the last
        ``take``; None when an event may have been lost."""
        t0 = time.perf_counter()
        try:
            return self._take()
        finally:
            self.spent += time.perf_counter() - t0

    def _take(self) -> list[tuple[int, int]] | None:
        data = self._drain()
        if data is None:
            return None
        now = self._overruns()
        if now != self.overruns:
            self.overruns = now
            return None
        out = []
        for m in LINE.finditer(data):
            if (int(m.group(1)), int(m.group(2))) != self.dev or b"R" not in m.group(3):
                continue
            lo = int(m.group(4))
            out.append((lo, lo + int(m.group(5))))
        return out

    def _drain(self) -> bytes | None:
        chunks = []
        while True:
            try:
                b = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                return None
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)

    def _overruns(self) -> int:
        total = 0
        for stats in (self.dir / "per_cpu").glob("cpu*/stats"):
            try:
                m = OVERRUN.search(stats.read_bytes())
            except OSError:
                continue
            total += int(m.group(1)) if m else 0
        return total

    def close(self) -> None:
        if self.pipe >= 0:
            os.close(self.pipe)
            self.pipe = -1
        try:
            (self.dir / EVENT / "enable").write_text("0")
        except OSError:
            pass
        try:
            self.dir.rmdir()
        except OSError as e:
            log.warning("tracefs instance %s not removed: %s", self.dir, e)

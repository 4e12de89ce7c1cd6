"""append-fsync: N appends to one file, each followed by fsync and ``ack:<i>``.

Each record is self-describing so a checker can verify it: ``PCREC1 <i> <len> <crc32>\\n`` then
``len`` payload bytes derived from (seed, i).  ``ack_early=true`` acks before fsync (a deliberately
broken variant that a crash test must catch).

``ack_on_issue=true`` is the race (docs/races.md): a second thread acks record i as soon as the main
thread has *issued* its fsync -- told just before the call, the way a server's reply thread is
woken when the commit is handed to the syncer -- not when it returned.  The main thread waits for
that ack before the next record, so acks stay in order.  On an instant disk the fsync usually
returns before the ack is marked and every crash state passes; on a slow one (``--disk-latency
hdd``) the ack lands while the flush is in flight and a state after the ack lacks the record.

``fault_at=K`` (K >= 0) meets an injected I/O error (powercut.fault, core/log/faultwindows.py): the file is
preallocated beyond its end (``fallocate`` with KEEP_SIZE, so appends keep their meaning) and
fsynced first; record K's write goes to sectors that fail with EIO (``eio-range`` over the file), so
its fsync fails.  ``on_error=retry`` fsyncs again once the device is back and acks (fsyncgate: the
failed pages were marked clean, the second fsync reports success); ``stop`` exits 3 without the
ack."""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import random
import sys
import threading
import zlib
from typing import Any

import powercut
from powercut import Workload


def payload(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"{seed}:{i}").randbytes(size)


def record(seed: int, i: int, size: int) -> bytes:
    body = payload(seed, i, size)
    return b"PCREC1 %d %d %08x\n" % (i, size, zlib.crc32(body)) + body


FALLOC_FL_KEEP_SIZE = 1


def preallocate(fd: int, nbytes: int) -> None:
    """Allocate ``nbytes`` beyond the end without changing the size (unwritten extents)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
    if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, nbytes) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fallocate: {os.strerror(err)}")


def fsync_through_error(fd: int, sectors: list[tuple[int, int]], retry: bool) -> bool:
    """The fsync that meets the injected EIO; True if the record may be acked."""
    powercut.fault("eio-range", sectors)
    try:
        os.fsync(fd)
        powercut.recover()
        return True
    except OSError as e:
        if e.errno != errno.EIO:
            raise
        powercut.recover()
    if retry:
        os.fsync(fd)  # succeeds: the error was reported once and the pages are clean
        return True
    return False


class Acker:
    """The race's second thread: acks each key it is handed at once; ``wait(i)`` until it has."""

    def __init__(self) -> None:
        self.todo: queue.Queue[int | None] = queue.Queue()
        self.done = threading.Condition()
        self.acked = -1
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="acker", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (i := self.todo.get()) is not None:
            try:
                powercut.ack(i)
            except BaseException as e:  # noqa: BLE001 -- handed to the main thread
                self.error = e
            with self.done:
                self.acked = i
                self.done.notify_all()

    def wait(self, i: int) -> None:
        with self.done:
            self.done.wait_for(lambda: self.acked >= i)
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join()


def main(params: dict[str, Any]) -> int:
    path = params["file"]
    acker = Acker() if params["ack_on_issue"] else None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    fault_at = params["fault_at"]
    try:
        if fault_at >= 0:
            preallocate(fd, params["n"] * len(record(params["seed"], 0, params["size"])))
            os.fsync(fd)
        dirfd = os.open(".", os.O_RDONLY)
        os.fsync(dirfd)  # the new file's directory entry is part of the first commit
        os.close(dirfd)
        for i in range(params["n"]):
            sectors = powercut.file_sectors(path) if i == fault_at else []
            powercut.begin(i)
            os.write(fd, record(params["seed"], i, params["size"]))
            if params["ack_early"]:
                powercut.ack(i)
            if i == fault_at:
                if not fsync_through_error(fd, sectors, params["on_error"] == "retry"):
                    print(
                        f"append-fsync: fsync of record {i} failed (EIO): stopping without acking it",
                        file=sys.stderr,
                    )
                    return 3
            elif acker is not None:
                acker.todo.put(i)  # the fsync is issued: the reply thread may go (the race)
                os.fsync(fd)
                acker.wait(i)
                continue
            elif params["fsync"]:
                os.fsync(fd)
            if not params["ack_early"]:
                powercut.ack(i)
    finally:
        os.close(fd)
        if acker is not None:
            acker.close()
    return 0


WORKLOAD = Workload(
    name="append-fsync",
    description="N appends to one file, each followed by fsync and ack:<i>",
    main=main,
    defaults={
        "n": 20,
        "size": 4000,
        "seed": 0,
        "file": "append.log",
        "fsync": True,
        "ack_early": False,
        "ack_on_issue": False,
        "fault_at": -1,
        "on_error": "stop",
    },
    choices={"on_error": ("stop", "retry")},
    minimum={"n": 1, "size": 1, "fault_at": -1},
)

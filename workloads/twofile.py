"""twofile: a store of two files whose reply can race one file's sync (issue 50, docs/races.md).

Commit i writes record i into its 4 KiB block of ``store.log`` (preallocated: an overwrite, no
metadata) and its entry into ``store.idx``, then syncs both at once, each in a thread of its own
-- ``fdatasync(store.log)``, the sync that makes the commit durable, and ``fsync(store.idx)`` --
the way a server hands its files to syncer threads.  ``reply_on`` says when the reply (``ack:i``)
goes:

* ``both`` (the default, correct): once both syncs have returned;
* ``index`` (the bug): as soon as the index's sync has returned; the log's is waited for only
  before the next commit.

Why the bug hides: the index's fsync does more than the log's fdatasync (its mtime goes through a
journal commit, whose flush also makes the log's already written block durable), so it returns
last in almost every run, on an instant disk and on a uniformly slow one (``--disk-latency hdd``
slows both alike).  Only holding the log's sync alone (``--delay-sync 'store.log=200ms'``, or
``run --explore-races``, which finds that file in the trace) lets the reply overtake it: the
record is still in the page cache when the ack is given.

``log_via`` says how the record reaches ``store.log``: ``pwrite`` (the default), ``mmap`` (stored
into a shared, writable mapping of the file; its sync is ``msync(MS_SYNC)`` of the record's page
instead of fdatasync) or ``mmap-no-msync`` (the bug of a store whose sync call msyncs one mapping
and never another, issue 52: the record is stored through the mapping and never synced; only the
index is -- the cause rule ``no-msync``).

Record i (one 4 KiB block at offset i * 4096): ``PCTF`` | i u32 | length u32 | crc32 u32 | payload
(``size`` bytes from (seed, i)), zeros after.  The index is advisory (recovery rebuilds it from the
log): the checker reads only the log."""

from __future__ import annotations

import functools
import mmap
import os
import random
import struct
import threading
import zlib
from typing import Any

import powercut
from powercut import Workload

BLOCK = 4096
HEADER = struct.Struct("<4sIII")  # magic, index, payload length, crc32 of the payload
MAGIC = b"PCTF"
ENTRY = 64  # index bytes per record


def record(seed: int, i: int, size: int) -> bytes:
    body = random.Random(f"twofile:{seed}:{i}").randbytes(size)
    return (HEADER.pack(MAGIC, i, size, zlib.crc32(body)) + body).ljust(BLOCK, b"\0")


def _in_thread(call: Any, fd: int) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call(fd)
        except BaseException as e:  # noqa: BLE001 -- handed to the committing thread
            errors.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, errors


def _joined(t: threading.Thread, errors: list[BaseException]) -> None:
    t.join()
    if errors:
        raise errors[0]


def _nothing(_: int) -> None:
    """The log's "sync" of log_via=mmap-no-msync: none."""


def _msync(mapped: mmap.mmap, i: int, _: int) -> None:
    """The log's sync of log_via=mmap: msync(MS_SYNC) of record i's page of the mapping."""
    mapped.flush(i * BLOCK, BLOCK)


def main(params: dict[str, Any]) -> int:
    n = params["n"]
    size = params["size"]
    seed = params["seed"]
    via = params["log_via"]
    log = os.open("store.log", os.O_RDWR | os.O_CREAT, 0o644)
    idx = os.open("store.idx", os.O_RDWR | os.O_CREAT, 0o644)
    mapped: mmap.mmap | None = None
    try:
        os.pwrite(log, b"\0" * (BLOCK * n), 0)  # allocated before the first commit: overwrites only
        os.pwrite(idx, b"\0" * max(BLOCK, ENTRY * n), 0)
        os.fsync(log)
        os.fsync(idx)
        d = os.open(".", os.O_RDONLY)
        os.fsync(d)
        os.close(d)
        if via != "pwrite":
            mapped = mmap.mmap(log, BLOCK * n, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        for i in range(n):
            powercut.begin(i)
            if mapped is None:
                os.pwrite(log, record(seed, i, size), i * BLOCK)
                sync_log: Any = os.fdatasync
            else:
                mapped[i * BLOCK : (i + 1) * BLOCK] = record(seed, i, size)
                sync_log = functools.partial(_msync, mapped, i) if via == "mmap" else _nothing
            os.pwrite(idx, f"{i} {i * BLOCK}".encode().ljust(ENTRY, b" "), i * ENTRY)
            log_sync = _in_thread(sync_log, log)
            idx_sync = _in_thread(os.fsync, idx)
            _joined(*idx_sync)
            if params["reply_on"] == "index":
                powercut.ack(i)  # the bug: the log's sync may still be running
                _joined(*log_sync)
            else:
                _joined(*log_sync)
                powercut.ack(i)
    finally:
        if mapped is not None:
            mapped.close()
        os.close(log)
        os.close(idx)
    return 0


WORKLOAD = Workload(
    name="twofile",
    description="a log and an index synced by two threads; reply_on=index replies before the log's sync returns",
    main=main,
    defaults={"n": 12, "size": 1000, "seed": 0, "reply_on": "both", "log_via": "pwrite"},
    choices={"reply_on": ("both", "index"), "log_via": ("pwrite", "mmap", "mmap-no-msync")},
    minimum={"n": 1, "size": 1},
)

"""append-fsync: N appends to one file, each followed by fsync and ``ack:<i>``.

Each record is self-describing so a checker can verify it: ``PCREC1 <i> <len> <crc32>\\n`` then
``len`` payload bytes derived from (seed, i).  ``ack_early=true`` acks before fsync (a deliberately
broken variant that a crash test must catch)."""
from __future__ import annotations

import os
import random
import zlib
from typing import Any

import powercut
from powercut import Workload


def payload(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"{seed}:{i}").randbytes(size)


def record(seed: int, i: int, size: int) -> bytes:
    body = payload(seed, i, size)
    return b"PCREC1 %d %d %08x\n" % (i, size, zlib.crc32(body)) + body


def main(params: dict[str, Any]) -> int:
    path = params["file"]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        dirfd = os.open(".", os.O_RDONLY)
        os.fsync(dirfd)  # the new file's directory entry is part of the first commit
        os.close(dirfd)
        for i in range(params["n"]):
            powercut.begin(i)
            os.write(fd, record(params["seed"], i, params["size"]))
            if params["ack_early"]:
                powercut.ack(i)
            if params["fsync"]:
                os.fsync(fd)
            if not params["ack_early"]:
                powercut.ack(i)
    finally:
        os.close(fd)
    return 0


WORKLOAD = Workload(
    name="append-fsync",
    description="N appends to one file, each followed by fsync and ack:<i>",
    main=main,
    defaults={"n": 20, "size": 4000, "seed": 0, "file": "append.log", "fsync": True, "ack_early": False},
    minimum={"n": 1, "size": 1},
)

"""LevelDB (through plyvel, the Python binding with LevelDB built in): ``n`` puts of key ``i`` ->
``value_bytes`` bytes derived from (seed, i), each marked ``begin:i`` / ``ack:i`` around the put.

LevelDB's claims (github.com/google/leveldb, doc/index.md, "Synchronous Writes"): a write with
``sync=true`` is durable once ``Put`` returns -- the log record is fsynced first; without it "a
crash of the machine may lose the last few writes".  Every log record and every table block carry
a CRC32C; with ``paranoid_checks`` the database reports a corrupted log record or block as an
error instead of skipping it ("Checksums": "``paranoid_checks`` ... raise an error as soon as it
detects an internal corruption").

Params: ``n`` (12), ``seed`` (0), ``dir`` ("app.ldb"), ``value_bytes`` (1000), ``sync`` (true: the
durable configuration; false: a write returns once it is in the OS's page cache), ``paranoid``
(true: ``paranoid_checks``, in the workload and in its checker)."""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import powercut
from powercut import Workload

DEFAULTS: dict[str, Any] = {
    "n": 12,
    "seed": 0,
    "dir": "app.ldb",
    "value_bytes": 1000,
    "sync": True,
    "paranoid": True,
}


def key(i: int) -> bytes:
    return b"k%08d" % i


def value(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"leveldb:{seed}:{i}").randbytes(size)


def main(params: dict[str, Any]) -> int:
    import plyvel  # noqa: PLC0415 -- only this workload needs it (pip install 'powercut[apps]')

    p = {**DEFAULTS, **params}
    path = str(p["dir"])
    if os.path.exists(path):
        shutil.rmtree(path)
    db = plyvel.DB(path, create_if_missing=True, paranoid_checks=bool(p["paranoid"]))
    try:
        dirfd = os.open(".", os.O_RDONLY)
        try:
            os.fsync(dirfd)  # the database directory's entry: part of the first commit
        finally:
            os.close(dirfd)
        for i in range(1, int(p["n"]) + 1):
            powercut.begin(i)
            db.put(key(i), value(int(p["seed"]), i, int(p["value_bytes"])), sync=bool(p["sync"]))
            powercut.ack(i)
    finally:
        db.close()
    return 0


WORKLOAD = Workload(
    name="leveldb",
    description="LevelDB puts through plyvel, each acked after Put returns; sync=true|false, paranoid_checks",
    main=main,
    defaults=dict(DEFAULTS),
    minimum={"n": 1, "value_bytes": 1},
)

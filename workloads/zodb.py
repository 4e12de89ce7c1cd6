"""zodb: real ZODB (FileStorage, an IOBTree under the root) committing about ``value_bytes`` per
transaction.  Runs in the guest, with its working directory on the filesystem under test.

The seed's driver: ``t[i] = value(seed, i); transaction.commit()`` for i in 1..n, with
``begin:<i>`` before the commit and ``ack:<i>`` once ``commit()`` returned.  Each transaction's
description is ``powercut <i>`` (the setup one's ``powercut setup``), so a checker can tell the
transactions apart.  Before the first ``begin``: the database is created (ZODB commits its root
object), the tree is added to the root in one more commit, and the file and its directory are
fsynced (FileStorage does not fsync the directory of a new file).  The storage is closed at the
end (FileStorage then writes ``Data.fs.index``, a cache of the oid -> position map).

Params: ``n`` (8), ``seed`` (0), ``value_bytes`` (2048), ``file`` ("Data.fs").

ZODB's documented claim:
  FileStorage: a transaction is durable once commit() returns (tpc_finish fsyncs the data file).

Needs ZODB (``pip install 'powercut[apps]'``); without it the workload writes that one line to
stderr and exits 1, before touching the filesystem."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import powercut
from powercut import Workload

MISSING = "the zodb workload needs ZODB: pip install 'powercut[apps]'"
DEFAULTS: dict[str, Any] = {"n": 8, "seed": 0, "value_bytes": 2048, "file": "Data.fs"}
TREE = "t"


def _mark(kind: str, i: int) -> None:
    (powercut.begin if kind == "begin" else powercut.ack)(i)


# The mark hook: ("begin" | "ack", i).  Tests replace it (real marks need a dm-log-writes device).
MARK: Callable[[str, int], None] = _mark


@dataclass(frozen=True, slots=True)
class Params:
    n: int
    seed: int
    value_bytes: int
    file: str

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        p = Params(**{k: type(v)(given.get(k, v)) for k, v in DEFAULTS.items()})
        if p.n < 0 or p.value_bytes < 0:
            raise ValueError(
                f"zodb: n and value_bytes must be >= 0 (got n={p.n}, value_bytes={p.value_bytes})"
            )
        return p


def value(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"zodb:{seed}:{i}").randbytes(size)


def description(i: int) -> str:
    return f"powercut {i}"


def have_zodb() -> bool:
    try:
        import BTrees.IOBTree  # noqa: F401
        import transaction  # noqa: F401
        import ZODB.FileStorage  # noqa: F401
    except ImportError:
        return False
    return True


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run(p: Params) -> None:
    import transaction
    import ZODB
    import ZODB.FileStorage
    from BTrees.IOBTree import IOBTree

    for suffix in ("", ".index", ".lock", ".tmp"):
        if os.path.exists(p.file + suffix):
            os.unlink(p.file + suffix)
    tm = transaction.TransactionManager()
    db = ZODB.DB(ZODB.FileStorage.FileStorage(p.file))  # commits the root object
    try:
        conn = db.open(transaction_manager=tm)
        root = conn.root()
        root[TREE] = tree = IOBTree()
        tm.get().note("powercut setup")
        tm.commit()
        _fsync_path(p.file)
        _fsync_path(".")
        for i in range(1, p.n + 1):
            tree[i] = value(p.seed, i, p.value_bytes)
            tm.get().note(description(i))
            MARK("begin", i)
            tm.commit()
            MARK("ack", i)
        conn.close()
    finally:
        db.close()


def main(params: dict[str, Any]) -> int:
    p = Params.of(params)
    if not have_zodb():
        sys.stderr.write(MISSING + "\n")
        return 1
    run(p)
    return 0


WORKLOAD = Workload(
    name="zodb",
    description="ZODB FileStorage: t[i] = value of value_bytes; transaction.commit() into an IOBTree "
    "(needs powercut[apps])",
    main=main,
    defaults=dict(DEFAULTS),
    minimum={"n": 1, "value_bytes": 1},
)

"""replog: a replicated log on a cluster recording's nodes (issue 40's first cluster row).

The client sends record i to every node (one replica thread per node, each appending to ``file`` on
its own node's filesystem: the node mounts ``n0``, ``n1``, ... in its cwd) and acks it once a
majority of the nodes answered.
A node answers after its append is durable (``fsync``) -- or, the broken variant ``fsync=false``,
as soon as it has *written* it (the page cache: lost on a power cut of every node at once).
Marks: ``begin:i`` before sending, ``ack:i`` after the majority (both reach every node's log).

Record i is ``RLOG1 <i> <size> <crc32>\\n`` then ``size`` payload bytes from (seed, i), the same on
every node; the checker (checkers/replog.py) wants each acked record intact on a majority of nodes."""

from __future__ import annotations

import os
import queue
import random
import threading
import zlib
from typing import Any

import powercut
from powercut import Workload


def record(seed: int, i: int, size: int) -> bytes:
    body = random.Random(f"{seed}:{i}").randbytes(size)
    return b"RLOG1 %d %d %08x\n" % (i, size, zlib.crc32(body)) + body


class Replica(threading.Thread):
    """One node: appends what it is sent, answers on ``answers`` after the append (and its fsync)."""

    def __init__(
        self, path: str, fsync: bool, answers: queue.Queue[tuple[int, BaseException | None]]
    ) -> None:
        super().__init__(name=f"replica:{path}", daemon=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        dirfd = os.open(os.path.dirname(path), os.O_RDONLY)
        os.fsync(dirfd)  # the file's directory entry is durable before any record
        os.close(dirfd)
        self.fsync = fsync
        self.answers = answers
        self.inbox: queue.Queue[tuple[int, bytes] | None] = queue.Queue()

    def run(self) -> None:
        while (msg := self.inbox.get()) is not None:
            i, data = msg
            try:
                os.write(self.fd, data)
                if self.fsync:
                    os.fsync(self.fd)
                self.answers.put((i, None))
            except OSError as e:
                self.answers.put((i, e))
        os.close(self.fd)


def main(params: dict[str, Any]) -> int:
    # a cluster recording's cwd holds the node mounts n0, n1, ... (docs/clusters.md)
    mounts = sorted(
        (d for d in os.listdir(".") if d[:1] == "n" and d[1:].isdigit()), key=lambda d: int(d[1:])
    )
    if len(mounts) < 2:
        raise SystemExit(
            "replog: needs a cluster recording (record --nodes N: node mounts n0, n1, ... in its cwd)"
        )
    answers: queue.Queue[tuple[int, BaseException | None]] = queue.Queue()
    nodes = [Replica(os.path.join(m, params["file"]), params["fsync"], answers) for m in mounts]
    for r in nodes:
        r.start()
    majority = len(nodes) // 2 + 1
    got: dict[int, int] = {}
    try:
        for i in range(params["n"]):
            powercut.begin(i)
            data = record(params["seed"], i, params["size"])
            for r in nodes:
                r.inbox.put((i, data))
            while got.get(i, 0) < majority:
                k, err = answers.get()
                if err is not None:
                    raise err
                got[k] = got.get(k, 0) + 1
            powercut.ack(i)
    finally:
        for r in nodes:
            r.inbox.put(None)
        for r in nodes:
            r.join()
    return 0


WORKLOAD = Workload(
    "replog",
    "a replicated log: each record to every node, acked after a majority answered",
    main,
    {"n": 40, "size": 1000, "seed": 0, "file": "replog.log", "fsync": True},
    minimum={"n": 1, "size": 1},
    nodes=True,
)

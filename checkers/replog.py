"""Checker for replog (a cluster workload): every node's file must be records 0, 1, 2, ... in order,
then at most a torn tail (bytes of the next record or zeros); every acked record must be intact on
a majority of the nodes (what a majority-quorum log recovers from), and no node may hold a record
that was never sent (begun).  The mounts come in ``CheckInput.mounts``, node 0 first.

* lost-ack -- an acked record intact on fewer than a majority of nodes;
* corrupt-data -- a node holding bytes that are neither a record nor its torn tail, or a record
  never begun;
* pass -- otherwise.

A node whose file cannot be read (EIO, or ext4's EBADMSG: the filesystem noticed a bad block, as
under a lying disk) holds no record as far as the log is concerned: a quorum log recovers from the
other nodes, so it counts as holding none, and the reason says the read failed."""

from __future__ import annotations

import os
import random
import zlib

from powercut import Checker, CheckInput, CheckResult

DEFAULTS = {"size": 1000, "seed": 0, "file": "replog.log"}


def record(seed: int, i: int, size: int) -> bytes:
    body = random.Random(f"{seed}:{i}").randbytes(size)
    return b"RLOG1 %d %d %08x\n" % (i, size, zlib.crc32(body)) + body


def read_node(path: str, seed: int, size: int, limit: int) -> tuple[int, str]:
    """(records intact from 0 on, what is wrong after them or '')."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0, ""
    pos = i = 0
    while pos < len(data):
        want = record(seed, i, size)
        chunk = data[pos : pos + len(want)]
        if chunk == want:
            if i > limit:
                return i, f"record {i} is on disk but was never sent"
            pos += len(want)
            i += 1
            continue
        bad = next((k for k, b in enumerate(chunk) if b != want[k] and b != 0), None)
        rest = data[pos + len(want) :]
        if bad is not None or rest.strip(b"\0"):
            where = pos + (bad if bad is not None else len(want))
            return i, f"byte {where} is neither record {i}'s nor zero"
        break
    return i, ""


def check(inp: CheckInput) -> CheckResult:
    p = {**DEFAULTS, **inp.params}
    mounts = list(getattr(inp, "mounts", ()) or (inp.mount,))
    acked = [int(k) for k in inp.acked]
    sent = max([*acked, *(int(k) for k in inp.begun)], default=-1)
    counts, bad = [], []
    unread = []
    for n, m in enumerate(mounts):
        try:
            have, why = read_node(os.path.join(m, p["file"]), p["seed"], p["size"], sent)
        except OSError as e:  # noticed by the filesystem: this node serves nothing
            have, why = 0, ""
            unread.append(
                f"node {n}: {p['file']} cannot be read ({e.strerror or e}): counted as holding no record"
            )
        counts.append(have)
        if why:
            bad.append(f"node {n}: {why}")
    if bad:
        return CheckResult("corrupt-data", tuple(bad))
    majority = len(mounts) // 2 + 1
    lost = [k for k in acked if sum(c > k for c in counts) < majority]
    if lost:
        return CheckResult(
            "lost-ack",
            (
                f"acked record {lost[0]} is intact on {sum(c > lost[0] for c in counts)} of "
                f"{len(mounts)} nodes, a majority is {majority} (records per node: {counts})"
                + (f"; {len(lost)} acked records lost" if len(lost) > 1 else ""),
                *unread,
            ),
        )
    return CheckResult("pass", tuple(unread))


CHECKER = Checker("replog", "every acked record intact on a majority of the nodes", check)

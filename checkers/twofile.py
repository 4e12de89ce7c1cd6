"""Checker for twofile: every acked record intact in its block of ``store.log``.  Runs wherever
checks run; pure apart from reading the one file.

Record i is one 4 KiB block at offset i * 4096: ``PCTF`` | i u32 | length u32 | crc32 u32 |
payload from (seed, i), zeros after (rebuilt here from the parameters; checkers do not import
workloads -- the unit tests pin the two together).

* lost-ack -- an acked record's block is zeros, or the file is too short for it;
* corrupt-data -- an acked record's block is neither its record nor zeros; any begun record's
  block that is neither its record nor zeros (an overwrite in place is never torn inside a 4 KiB
  unit: docs/crash-models.md, torn-4k); a block past the begun records that is not zeros;
* pass -- otherwise (begun records may be there or not)."""

from __future__ import annotations

import os
import random
import struct
import zlib
from typing import Any

from powercut import Checker, CheckInput, CheckResult

BLOCK = 4096
HEADER = struct.Struct("<4sIII")
MAGIC = b"PCTF"
DEFAULTS: dict[str, Any] = {"size": 1000, "seed": 0}
ZERO = bytes(BLOCK)


def record(seed: int, i: int, size: int) -> bytes:
    body = random.Random(f"twofile:{seed}:{i}").randbytes(size)
    return (HEADER.pack(MAGIC, i, size, zlib.crc32(body)) + body).ljust(BLOCK, b"\0")


def judge(data: bytes, acked: list[int], begun: list[int], seed: int, size: int) -> CheckResult:
    lost, bad = [], []
    last = max([*acked, *begun], default=-1)
    for i in range(max(last + 1, len(data) // BLOCK)):
        block = data[i * BLOCK : (i + 1) * BLOCK].ljust(BLOCK, b"\0")
        if i > last:
            if block != ZERO:
                bad.append(f"block {i}, past the last begun record {last}, is not zeros")
            continue
        want = record(seed, i, size)
        if block == want:
            continue
        if block == ZERO:
            if i in acked:
                lost.append(i)
            continue
        bad.append(
            f"record {i}{' (acked)' if i in acked else ''}: its block is neither the record nor zeros"
        )
    if bad:
        return CheckResult("corrupt-data", tuple(bad[:8]))
    if lost:
        return CheckResult(
            "lost-ack",
            (
                f"acked record {lost[0]} is not in store.log (its block is zeros)"
                + (f"; {len(lost) - 1} more acked records lost" if len(lost) > 1 else ""),
            ),
        )
    return CheckResult("pass", (f"{len(acked)} acked records intact",))


def check(inp: CheckInput) -> CheckResult:
    p = {k: inp.params.get(k, v) for k, v in DEFAULTS.items()}
    acked = sorted(int(k) for k in inp.acked)
    begun = sorted(int(k) for k in inp.begun)
    path = os.path.join(inp.mount, "store.log")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if acked:
            return CheckResult(
                "lost-ack", (f"{path} is missing but {len(acked)} records were acked",)
            )
        return CheckResult("pass", ("no record acked, no file: fine",))
    return judge(data, acked, begun, int(p["seed"]), int(p["size"]))


CHECKER = Checker(
    name="twofile", description="every acked record intact in its block of store.log", check=check
)

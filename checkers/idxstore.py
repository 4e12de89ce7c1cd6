"""Checker for idxstore: recovery as the store does it -- read the index alone (``store.idx``; or,
where ``CURRENT`` exists, the index file it names), then each record it points to in ``store.dat``.
Pure apart from reading the files.

* lost-ack -- the index is missing, empty or not the index (the store finds no record), or an
  acked record is not in it, or its bytes in ``store.dat`` are not there (zeros, or the file ends);
* corrupt-data -- an index entry points at bytes that are neither its record nor zeros, or names
  a key never begun;
* pass -- every acked record is found through the index, intact (begun ones may be there or not).

Record i: ``PCIX`` | i u32 | length u32 | crc32 u32 | payload from (seed, i) (rebuilt here from the
parameters; checkers do not import workloads -- the unit tests pin the two together)."""

from __future__ import annotations

import json
import os
import random
import struct
import zlib
from typing import Any

from powercut import Checker, CheckInput, CheckResult

HEADER = struct.Struct("<4sIII")
MAGIC = b"PCIX"
DEFAULTS: dict[str, Any] = {"size": 300, "seed": 0}


def record(seed: int, i: int, size: int) -> bytes:
    body = random.Random(f"idxstore:{seed}:{i}").randbytes(size)
    return HEADER.pack(MAGIC, i, size, zlib.crc32(body)) + body


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def judge(
    index: bytes | None,
    data: bytes,
    acked: list[int],
    begun: list[int],
    seed: int,
    size: int,
    name: str = "store.idx",
) -> CheckResult:
    """The verdict on the index read from ``name`` (None: missing) and the data file's bytes."""
    if index is None or not index.strip(b"\0 \n"):
        what = "missing" if index is None else f"empty ({len(index)} bytes)"
        if acked:
            return CheckResult(
                "lost-ack",
                (
                    f"{name} is {what}: the store finds no record, but {len(acked)} "
                    f"were acked (first: {acked[0]})",
                ),
            )
        return CheckResult("pass", (f"{name} is {what} and nothing was acked",))
    try:
        entries = {int(k): (int(off), int(n)) for k, off, n in json.loads(index)["records"]}
    except (ValueError, KeyError, TypeError) as e:
        return CheckResult(
            "lost-ack" if acked else "pass",
            (f"{name} is not the index ({e}): the store finds no record; {len(acked)} were acked",),
        )
    bad = [
        f"{name} names record {k}, never begun"
        for k in entries
        if k not in acked and k not in begun
    ]
    lost = []
    for k in acked:
        if k not in entries:
            lost.append(f"acked record {k} is not in {name}")
            continue
        off, n = entries[k]
        got = data[off : off + n]
        if got == record(seed, k, size):
            continue
        if len(got) < n or not got.strip(b"\0"):
            lost.append(
                f"acked record {k} is not in store.dat at {off} ({'zeros' if got else 'the file ends'})"
            )
        else:
            bad.append(f"acked record {k} at {off} of store.dat is neither the record nor zeros")
    if bad:
        return CheckResult("corrupt-data", tuple(bad[:8]))
    if lost:
        return CheckResult(
            "lost-ack", (lost[0] + (f"; {len(lost) - 1} more" if len(lost) > 1 else ""),)
        )
    return CheckResult("pass", (f"{len(acked)} acked records found through {name}",))


def index_name(current: bytes | None) -> str:
    """The index file recovery reads: the one ``CURRENT`` names (its first line), else ``store.idx``."""
    if current is None:
        return "store.idx"
    name = current.split(b"\n", 1)[0].strip(b"\0 ").decode(errors="replace")
    return name if name and "/" not in name else "CURRENT's index (CURRENT names none)"


def check(inp: CheckInput) -> CheckResult:
    p = {k: inp.params.get(k, v) for k, v in DEFAULTS.items()}
    data = _read(os.path.join(inp.mount, "store.dat")) or b""
    name = index_name(_read(os.path.join(inp.mount, "CURRENT")))
    index = _read(os.path.join(inp.mount, name)) if "/" not in name and " " not in name else None
    return judge(
        index,
        data,
        sorted(int(k) for k in inp.acked),
        sorted(int(k) for k in inp.begun),
        int(p["seed"]),
        int(p["size"]),
        name,
    )


CHECKER = Checker(
    name="idxstore",
    check=check,
    description="every acked record found through the index (store.idx, or the one CURRENT names), intact",
)

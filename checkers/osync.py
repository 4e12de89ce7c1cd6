"""Checker for osync: every byte of every acked write exactly as written.  Runs wherever checks run
(host mode or the checker VM); pure apart from reading the one file.

The expected file is rebuilt from the parameters alone (``content``: byte j from (seed, j), never
0 -- reimplemented here, checkers do not import workloads; the unit tests pin the two together).
Write i covers ``[i*bs, min((i+1)*bs, total))``; an acked key i promises writes 0..i (``ack_every``
groups writes under the key of the group's last write); a begun-not-acked key i may be partly there.

* corrupt-data -- a byte of an acked or begun write that is neither the written byte nor (for a
  begun write) zero, or a non-zero byte past the end of the last begun write (garbage);
* lost-ack -- a byte of an acked write that is zero or past the end of the file (the write, or the
  size change that makes it readable, never reached the disk), or no file while something was acked;
* pass -- otherwise (a begun-not-acked write may be absent, partial -- sectors of zeros -- or whole;
  zeros after it, e.g. preallocated space, are fine).

Reasons name the first bad write index and its file offset."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

from powercut import Checker, CheckInput, CheckResult

DEFAULTS: dict[str, Any] = {"bs": 4096, "total": 64 * 1024, "seed": 0, "file": "osync.dat"}
CONTENT_BLOCK = 4096
NONZERO = bytes(x or 0xA5 for x in range(256))
CHUNK = 64 * 1024


def content(seed: int, size: int) -> bytes:
    """Bytes [0, size) of the file as the workload writes them."""
    blocks = (
        random.Random(f"osync:{seed}:{b}").randbytes(CONTENT_BLOCK)
        for b in range(-(-size // CONTENT_BLOCK))
    )
    return b"".join(blocks)[:size].translate(NONZERO)


@dataclass(frozen=True, slots=True)
class Scan:
    """Over a byte range: the first offset not holding its expected byte (zero, wrong or past the end
    of the file) and the first holding a wrong non-zero byte; -1 for none."""

    missing: int
    wrong: int


def scan(data: bytes, want: bytes, start: int, end: int) -> Scan:
    """Compare data[start:end] with want[start:end] (want is the expected file from offset 0)."""
    missing = wrong = -1
    for lo in range(start, end, CHUNK):
        hi = min(lo + CHUNK, end)
        got, exp = data[lo:hi], want[lo:hi]
        if got == exp:
            continue
        if missing < 0:
            missing = lo + next((j for j in range(len(got)) if got[j] != exp[j]), len(got))
        if got.strip(b"\0"):
            j = next((j for j in range(len(got)) if got[j] and got[j] != exp[j]), -1)
            if j >= 0:
                wrong = lo + j
                break
    return Scan(missing, wrong)


def _keys(keys: tuple[str, ...]) -> int:
    return max((int(k) for k in keys), default=-1)


def _end(bs: int, total: int, key: int) -> int:
    """End offset of writes 0..key."""
    return min((key + 1) * bs, total) if key >= 0 else 0


def _bad_byte(data: bytes, want: bytes, off: int, bs: int, what: str) -> str:
    return (
        f"{what} write {off // bs} at offset {off}: byte {data[off]:#04x}, written {want[off]:#04x}"
    )


def _lost(data: bytes, want: bytes, off: int, bs: int, last_acked: int) -> str:
    i = off // bs
    how = (
        f"the file ends at {len(data)}"
        if off >= len(data)
        else f"zero where {want[off]:#04x} was written"
    )
    return f"acked write {i} lost at offset {off}: {how} (acked through write {last_acked})"


def judge(data: bytes, acked: int, begun: int, p: dict[str, Any]) -> CheckResult:
    """The verdict on the file's bytes, writes 0..acked acked and up to begun begun."""
    bs, total = int(p["bs"]), int(p["total"])
    acked_end, begun_end = _end(bs, total, acked), _end(bs, total, max(acked, begun))
    want = content(int(p["seed"]), begun_end)
    sure, maybe = scan(data, want, 0, acked_end), scan(data, want, acked_end, begun_end)
    bad: list[str] = []
    if sure.wrong >= 0:
        bad.append(_bad_byte(data, want, sure.wrong, bs, "acked"))
    if maybe.wrong >= 0:
        bad.append(
            _bad_byte(data, want, maybe.wrong, bs, "begun (not acked)") + ", not zero either"
        )
    tail = data[begun_end:]
    if tail.strip(b"\0"):
        off = begun_end + len(tail) - len(tail.lstrip(b"\0"))
        last = (
            f"the last begun write {max(acked, begun)}"
            if max(acked, begun) >= 0
            else "the start: nothing begun"
        )
        bad.append(
            f"garbage: byte {data[off]:#04x} at offset {off}, past {last} (ends at {begun_end})"
        )
    if bad:
        if sure.missing >= 0 and sure.missing != sure.wrong:  # zeros before the first wrong byte
            bad.append(_lost(data, want, sure.missing, bs, acked))
        return CheckResult("corrupt-data", tuple(bad))
    if sure.missing >= 0:
        return CheckResult("lost-ack", (_lost(data, want, sure.missing, bs, acked),))
    ok = f"writes 0..{acked} intact ({acked_end} bytes)" if acked >= 0 else "nothing acked"
    if begun > acked:
        if maybe.missing < 0:
            have = "whole"
        elif data[acked_end:begun_end].strip(b"\0"):
            have = "partial"
        else:
            have = "absent"
        ok += f"; begun writes {acked + 1}..{begun} {have}"
    return CheckResult("pass", (ok,))


def check(inp: CheckInput) -> CheckResult:
    p = {k: inp.params.get(k, v) for k, v in DEFAULTS.items()}
    path = os.path.join(inp.mount, str(p["file"]))
    acked, begun = _keys(inp.acked), _keys(inp.begun)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if acked >= 0:
            return CheckResult("lost-ack", (f"{path} is missing but writes 0..{acked} were acked",))
        return CheckResult("pass", ("nothing acked, no file: fine",))
    return judge(data, acked, begun, p)


CHECKER = Checker(
    name="osync",
    description="every byte of every acked write as written, no garbage after the last begun write",
    check=check,
)

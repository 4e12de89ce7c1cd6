"""Checker for append-fsync: the file must be records 0, 1, 2, ... byte-exact.  Runs wherever checks
run (host mode or the checker VM); pure apart from reading the one file.

Record i is ``PCREC1 <i> <size> <crc32>\\n`` then ``size`` payload bytes from (seed, i): the checker
rebuilds it from the parameters (``record``, reimplemented here -- checkers do not import workloads;
the unit tests pin the two together), so the header fields (index, size, checksum) and every body
byte are compared with what the workload wrote, and record i's place in the file is known: the sum
of the lengths of records 0..i-1.

* corrupt-data --
  - a byte of an acked record that is neither what was written nor zero (a header naming another
    index or size, a damaged body); a record out of place is this too;
  - **ordering**: an acked record missing (zeros, cut short) while a later record is intact on disk
    (found by resyncing on the ``PCREC1 `` magic anywhere after the hole): the later append became
    durable while an earlier, acked one did not (the reason starts ``ordering:``);
  - a byte of a begun-not-acked record that is neither written nor zero;
  - non-zero bytes after the last begun (or acked) record: only a begun record's interrupted tail --
    a prefix of it, sectors possibly still zero -- may follow the acked records.
* lost-ack -- an acked record missing or partly missing (zeros, the file too short, no file) with
  nothing later intact: a plain tail loss.
* pass -- otherwise; zeros after the records (a size that grew before the data) are fine."""

from __future__ import annotations

import bisect
import functools
import os
import random
import zlib
from dataclasses import dataclass
from typing import Any

from powercut import Checker, CheckInput, CheckResult

DEFAULTS: dict[str, Any] = {"size": 4000, "seed": 0, "file": "append.log"}
MAGIC = b"PCREC1 "
HEADER_MAX = 64


def payload(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"{seed}:{i}").randbytes(size)


@functools.lru_cache(
    maxsize=8192
)  # every state rebuilds the records it expects: ~1.5 ms of a ~10 ms host state
def record(seed: int, i: int, size: int) -> bytes:
    body = payload(seed, i, size)
    return b"PCREC1 %d %d %08x\n" % (i, size, zlib.crc32(body)) + body


@dataclass(frozen=True, slots=True)
class Layout:
    """Records 0..last as the workload appended them: their bytes and where each starts."""

    seed: int
    size: int
    records: tuple[bytes, ...]
    starts: tuple[int, ...]

    @staticmethod
    def of(seed: int, size: int, last: int) -> Layout:
        recs = tuple(record(seed, i, size) for i in range(last + 1))
        starts, pos = [], 0
        for r in recs:
            starts.append(pos)
            pos += len(r)
        return Layout(seed, size, recs, tuple(starts))

    def end(self, i: int) -> int:
        """End offset of records 0..i (0 for i < 0)."""
        return self.starts[i] + len(self.records[i]) if i >= 0 else 0

    def index_at(self, off: int) -> int:
        """The record whose place holds byte ``off`` (the last one for bytes past it)."""
        return bisect.bisect_right(self.starts, off) - 1


@dataclass(frozen=True, slots=True)
class Diff:
    """Over records lo..hi: the first offset not holding its written byte (-1: none) and the first
    holding a wrong non-zero byte (-1: none)."""

    missing: int
    wrong: int


def compare(data: bytes, lay: Layout, lo: int, hi: int) -> Diff:
    missing = -1
    for i in range(lo, hi + 1):
        start, want = lay.starts[i], lay.records[i]
        got = data[start : start + len(want)]
        if got == want:
            continue
        if missing < 0:
            missing = start + next((j for j in range(len(got)) if got[j] != want[j]), len(got))
        j = next((j for j in range(len(got)) if got[j] and got[j] != want[j]), -1)
        if j >= 0:
            return Diff(missing, start + j)
    return Diff(missing, -1)


def describe(data: bytes, lay: Layout, off: int, what: str) -> str:
    """A wrong byte at ``off``: which record, and what its header says if that is the problem."""
    i = lay.index_at(off)
    start = lay.starts[i]
    where = f"{what} record {i} at byte {start}"
    line = data[start : start + HEADER_MAX].split(b"\n", 1)[0].split()
    if off - start < len(lay.records[i]) - lay.size and len(line) == 4 and line[0] == MAGIC.strip():
        idx, size = line[1].decode(errors="replace"), line[2].decode(errors="replace")
        if idx != str(i):
            return f"{where}: a header for record {idx} where record {i} belongs"
        if size != str(lay.size):
            return f"{where}: its header says {size} bytes, not {lay.size}"
    part = "header" if off - start < len(lay.records[i]) - lay.size else "body"
    return f"{where}: {part} byte at {off} is {data[off]:#04x}, {lay.records[i][off - start]:#04x} was written"


def later_intact(data: bytes, lay: Layout, after: int, than: int) -> list[tuple[int, int]]:
    """(index, offset) of intact records with index > ``than`` found by resyncing on the magic
    anywhere from byte ``after`` on."""
    found = []
    hit = data.find(MAGIC, after)
    while hit >= 0:
        parts = data[hit : hit + HEADER_MAX].split(b"\n", 1)[0].split()
        if len(parts) == 4 and parts[1].isdigit() and int(parts[1]) > than:
            idx = int(parts[1])
            want = record(lay.seed, idx, lay.size)
            if data[hit : hit + len(want)] == want:
                found.append((idx, hit))
        hit = data.find(MAGIC, hit + 1)
    return found


def lost(data: bytes, lay: Layout, off: int, acked: list[int]) -> tuple[str, str]:
    """(verdict, reason) for acked bytes missing from ``off``: ordering or a plain tail loss."""
    k = lay.index_at(off)
    gone = [i for i in acked if i >= k and data[lay.starts[i] : lay.end(i)] != lay.records[i]]
    how = f"the file ends at byte {len(data)}" if off >= len(data) else "zeros"
    what = f"acked record(s) {gone[:10]} missing (record {k} from byte {off}: {how})"
    later = later_intact(data, lay, lay.starts[k], k)
    if later:
        shown = ", ".join(f"record {i} at byte {at}" for i, at in later[:5])
        return "corrupt-data", f"ordering: {what}, yet later {shown} intact on disk"
    return "lost-ack", what


def judge(data: bytes, acked: list[int], begun: list[int], seed: int, size: int) -> CheckResult:
    last_acked = max(acked, default=-1)
    last = max([last_acked, *begun])
    lay = Layout.of(seed, size, last)
    sure, maybe = compare(data, lay, 0, last_acked), compare(data, lay, last_acked + 1, last)
    bad: list[str] = []
    if sure.wrong >= 0:
        bad.append(describe(data, lay, sure.wrong, "acked"))
    if maybe.wrong >= 0:
        bad.append(
            describe(data, lay, maybe.wrong, "begun (not acked)") + " (not an interrupted append)"
        )
    end = lay.end(last)
    tail = data[end:]
    if tail.strip(b"\0"):
        off = end + len(tail) - len(tail.lstrip(b"\0"))
        after = f"record {last}, the last begun" if last >= 0 else "the start: no record begun"
        header = later_intact(data, lay, off, last)
        seen = (
            f" (record {header[0][0]} intact there: never begun)"
            if header and header[0][1] == off
            else ""
        )
        bad.append(
            f"non-zero bytes at byte {off}, after {after}{seen}: not a begun record's interrupted tail"
        )
    if sure.missing >= 0 and sure.missing != sure.wrong:  # missing bytes before any wrong one
        verdict, why = lost(data, lay, sure.missing, acked)
        if verdict != "lost-ack" or not bad:
            return CheckResult(verdict, (why, *bad))
        bad.append(why)
    if bad:
        return CheckResult("corrupt-data", tuple(bad))
    ok = f"records 0..{last_acked} intact" if last_acked >= 0 else "no record acked"
    if last > last_acked:
        if maybe.missing < 0:
            have = "whole"
        elif data[lay.end(last_acked) : end].strip(b"\0"):
            have = "partial"
        else:
            have = "absent"
        ok += f"; begun record(s) {last_acked + 1}..{last} {have} (an interrupted, unacked append)"
    return CheckResult("pass", (ok,))


def check(inp: CheckInput) -> CheckResult:
    p = {k: inp.params.get(k, v) for k, v in DEFAULTS.items()}
    path = os.path.join(inp.mount, str(p["file"]))
    acked = sorted(int(k) for k in inp.acked)
    begun = sorted(int(k) for k in inp.begun)
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
    name="append-fsync",
    description="records 0..n-1 in order, each byte-exact; no garbage after "
    "the last begun one; a later record durable before an acked "
    "one is an ordering failure",
    check=check,
)

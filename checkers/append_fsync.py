"""Checker for append-fsync: the file must start with records 0, 1, 2, ... each intact.

Every acked record must be present and intact (else lost-ack, or corrupt-data when it is there but
damaged).  A begun-not-acked record may be missing, or present and intact; a damaged or partial
record is allowed only as the very tail (an interrupted append), never before an acked one.  Data
for a record that was never begun is corrupt-data."""
from __future__ import annotations

import os
import zlib

from powercut import CheckInput, CheckResult, Checker

HEADER_MAX = 64


def parse(data: bytes) -> tuple[list[int], int, str, bool]:
    """(indices of the intact records in order, byte offset where parsing stopped, why it stopped,
    whether what follows is damaged data rather than a clean or cut-short end)."""
    good: list[int] = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos, pos + HEADER_MAX)
        if nl < 0:
            rest = data[pos:pos + HEADER_MAX]
            short = b"PCREC1".startswith(rest[:6]) and len(data) - pos < HEADER_MAX
            return good, pos, "a partial record header", not short and rest.strip(b"\0") != b""
        parts = data[pos:nl].split()
        if len(parts) != 4 or parts[0] != b"PCREC1":
            return good, pos, "bytes that are not a record header", data[pos:nl].strip(b"\0") != b""
        try:
            idx, size, crc = int(parts[1]), int(parts[2]), int(parts[3], 16)
        except ValueError:
            return good, pos, "a malformed record header", True
        body = data[nl + 1:nl + 1 + size]
        if len(body) < size:
            return good, pos, f"record {idx} cut short ({len(body)} of {size} bytes)", False
        if zlib.crc32(body) != crc:
            # zeros where data should be = the data blocks never reached the disk; anything else is damage
            return good, pos, f"record {idx} with a bad checksum", body.strip(b"\0") != b""
        good.append(idx)
        pos = nl + 1 + size
    return good, pos, "", False


def check(inp: CheckInput) -> CheckResult:
    path = os.path.join(inp.mount, str(inp.params.get("file", "append.log")))
    acked = [int(k) for k in inp.acked]
    begun = {int(k) for k in inp.begun}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if acked:
            return CheckResult("lost-ack", (f"{path} is missing but {len(acked)} commits were acked",))
        return CheckResult("pass", ("no commit acked, no file: fine",))
    good, stop, why, damaged = parse(data)
    reasons: list[str] = []
    if good != list(range(len(good))):
        return CheckResult("corrupt-data", (f"records out of order: {good[:10]}",))
    present = set(good)
    lost = [k for k in acked if k not in present]
    never_begun = [k for k in good if k not in begun and k not in set(acked)]
    if never_begun:
        return CheckResult("corrupt-data", (f"records {never_begun[:5]} were never begun",))
    if lost:
        # an acked record whose bytes are there but wrong is corruption; one that is absent, cut
        # short or still zeros never reached the disk: the ack was lost
        verdict = "corrupt-data" if damaged and lost[0] == len(good) else "lost-ack"
        reasons.append(f"acked record(s) {lost[:10]} missing" + (f" (parsing stopped at byte {stop}: {why})"
                                                                   if why else ""))
        return CheckResult(verdict, tuple(reasons))
    if why:
        reasons.append(f"tail after record {len(good) - 1}: {why} at byte {stop} (an interrupted, unacked append)")
    return CheckResult("pass", tuple(reasons) or (f"{len(acked)} acked records intact",))


CHECKER = Checker(name="append-fsync", description="records 0..n-1 in order, every acked one intact", check=check)

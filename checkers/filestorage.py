"""Checker for filestorage: FileStorage's own recovery, then every acked transaction intact.  Runs
wherever checks run (host mode or the checker VM); pure apart from reading the one file.

``recover`` is what FileStorage does on open (``read_index``): scan forward from the 4-byte header
and stop -- FileStorage truncates there -- at an incomplete transaction header, a length that runs
past the end of the file, or a status ``c`` (voted, never finished).  A header of zeros ends the
log (preallocated space; FileStorage reaches the same end through its rule for a bad header at the
end of the file).  A trailing length that disagrees, or data records that do not add up, also end
the scan, but as damage: FileStorage refuses to open such a file (it panics), because the record
claims to be whole and is not.  The file is not modified; the recovered log is ``data[:end]``.

Verdicts (the expected bytes are rebuilt from the parameters and the tid, independently of the
workload's writer; the unit tests pin the two together):

* corrupt-data -- a recovered transaction whose bytes differ from what was written (its data, or a
  status other than ``' '``), one that was never begun, a damaged record at the end of the scan
  (status ``' '`` with the rest not on disk: the status byte reached the disk before the data, which
  is what ``fsync=2`` prevents), or a file header that is neither ``FS21`` nor unwritten;
* lost-ack -- an acked transaction outside the recovered prefix;
* pass -- otherwise: a begun-not-acked transaction is either recovered byte-exact or absent."""

from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass
from typing import Any

from powercut import Checker, CheckInput, CheckResult

MAGIC = b"FS21"
TXN_HDR = struct.Struct(">QQcHHH")  # tid, tl (record length - 8), status, ulen, dlen, elen
DATA_HDR = struct.Struct(">QQQQHQ")  # oid, tid, prev, tloc, vlen, plen
U64 = struct.Struct(">Q")
USER = b"powercut"
EXTENSION = b""
DEFAULTS: dict[str, Any] = {"txn_bytes": 2048, "records": 4, "seed": 0, "file": "Data.fs"}


@dataclass(frozen=True, slots=True)
class Txn:
    pos: int
    tid: int
    length: int  # tl: the record is length + 8 bytes
    status: bytes

    @property
    def end(self) -> int:
        return self.pos + self.length + 8


@dataclass(frozen=True, slots=True)
class Stop:
    """Where and why the scan stopped.  kind: ``end`` (end of file or zeros), ``truncated`` (an
    incomplete transaction FileStorage drops) or ``damaged`` (a record FileStorage refuses)."""

    pos: int
    kind: str
    why: str
    tid: int | None = None  # the header found there, if one could be read
    status: bytes = b""

    def describe(self) -> str:
        where = f"txn {self.tid} at byte {self.pos}" if self.tid is not None else f"byte {self.pos}"
        return f"{where}: {self.why}"


@dataclass(frozen=True, slots=True)
class Recovery:
    txns: tuple[Txn, ...]
    stop: Stop

    @property
    def end(self) -> int:
        return self.stop.pos


def recover(data: bytes) -> Recovery:
    """FileStorage's scan on open over the file's bytes."""
    if not data:
        return Recovery((), Stop(0, "end", "empty file (a new database)"))
    if data[: len(MAGIC)] != MAGIC:
        head = data[: len(MAGIC)]
        unwritten = len(data) < len(MAGIC) and MAGIC.startswith(head) or not head.strip(b"\0")
        return Recovery(
            (),
            Stop(
                0, "truncated" if unwritten else "damaged", f"file header {head!r}, not {MAGIC!r}"
            ),
        )
    txns: list[Txn] = []
    pos = len(MAGIC)
    while True:
        found = read_txn(data, pos)
        if isinstance(found, Stop):
            return Recovery(tuple(txns), found)
        txns.append(found)
        pos = found.end


def read_txn(data: bytes, pos: int) -> Txn | Stop:
    head = data[pos : pos + TXN_HDR.size]
    if not head:
        return Stop(pos, "end", "end of file")
    if len(head) < TXN_HDR.size:
        return Stop(
            pos,
            "truncated",
            f"an incomplete transaction header ({len(head)} of {TXN_HDR.size} bytes)",
        )
    if not head.strip(b"\0"):
        return Stop(
            pos,
            "end",
            "zeros where the next transaction header would be (unused preallocated space)",
        )
    tid, tl, status, ulen, dlen, elen = TXN_HDR.unpack(head)

    def stop(kind: str, why: str) -> Stop:
        return Stop(pos, kind, why, tid, status)

    if pos + tl + 8 > len(data):
        return stop(
            "truncated", f"its length {tl} runs past the end of the file ({len(data)} bytes)"
        )
    if status == b"c":
        return stop("truncated", "status 'c': voted, never finished")
    hlen = TXN_HDR.size + ulen + dlen + elen
    if tl < hlen:
        return _bad_header(data, pos, tl, hlen, stop)
    trailer = U64.unpack_from(data, pos + tl)[0]
    if trailer != tl:
        return stop("damaged", f"trailing length {trailer} disagrees with the header's {tl}")
    bad = _records_problem(data, pos, pos + hlen, pos + tl)
    if bad:
        return stop("damaged", bad)
    return Txn(pos, tid, tl, status)


def _bad_header(data: bytes, pos: int, tl: int, hlen: int, stop: Any) -> Stop:
    """FileStorage's rule for a header shorter than its own fields: junk at the end of the file
    (the file's last 8 bytes are no plausible trailing length) is truncated, else it panics."""
    rtl = U64.unpack_from(data, len(data) - 8)[0]
    why = f"invalid header: length {tl} < its header's {hlen} bytes"
    if len(data) - rtl < pos or rtl < TXN_HDR.size:
        return stop("truncated", why + " (junk at the end of the file)")
    return stop("damaged", why)


def _records_problem(data: bytes, tpos: int, pos: int, tend: int) -> str:
    """Why the data records between pos and tend are not those of the transaction at tpos ('' if
    they are)."""
    while pos < tend:
        if pos + DATA_HDR.size > tend:
            return f"a data record header at byte {pos} runs past the transaction's end ({tend})"
        oid, _tid, _prev, tloc, vlen, plen = DATA_HDR.unpack_from(data, pos)
        if vlen:
            return f"the data record at byte {pos} (oid {oid}) has a version length {vlen}"
        size = DATA_HDR.size + (plen or 8)
        if tloc != tpos:
            return f"the data record at byte {pos} (oid {oid}) points to a transaction at {tloc}, not {tpos}"
        if pos + size > tend:
            return (
                f"the data record at byte {pos} (oid {oid}, {plen} bytes) exceeds its transaction"
            )
        pos += size
    return ""


# -- what was written: rebuilt from the parameters ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Layout:
    txn_bytes: int
    records: int
    seed: int

    def pos(self, tid: int) -> int:
        return len(MAGIC) + (tid - 1) * self.txn_bytes

    def sizes(self, tid: int) -> list[int]:
        fixed = (
            TXN_HDR.size
            + len(USER)
            + len(_descr(tid))
            + len(EXTENSION)
            + self.records * DATA_HDR.size
            + 8
        )
        base, extra = divmod(self.txn_bytes - fixed, self.records)
        if base < 1:
            raise ValueError(f"txn_bytes={self.txn_bytes} is too small for {self.records} records")
        return [base + (j < extra) for j in range(self.records)]

    def oid(self, tid: int, j: int) -> int:
        return 1 + ((tid - 1) * self.records + j) % (2 * self.records)

    def record_pos(self, tid: int, j: int) -> int:
        start = self.pos(tid) + TXN_HDR.size + len(USER) + len(_descr(tid)) + len(EXTENSION)
        return start + sum(DATA_HDR.size + s for s in self.sizes(tid)[:j])

    def prev(self, tid: int, j: int) -> int:
        k = (tid - 1) * self.records + j - 2 * self.records  # the same object's previous revision
        return 0 if k < 0 else self.record_pos(k // self.records + 1, k % self.records)

    def transaction(self, tid: int) -> bytes:
        """Transaction ``tid`` as committed (status ' ')."""
        tl = self.txn_bytes - 8
        descr = _descr(tid)
        out = bytearray(
            TXN_HDR.pack(tid, tl, b" ", len(USER), len(descr), len(EXTENSION))
            + USER
            + descr
            + EXTENSION
        )
        for j, size in enumerate(self.sizes(tid)):
            out += DATA_HDR.pack(self.oid(tid, j), tid, self.prev(tid, j), self.pos(tid), 0, size)
            out += random.Random(f"{self.seed}:{tid}:{j}").randbytes(size)
        return bytes(out + U64.pack(tl))


def _descr(tid: int) -> bytes:
    return b"filestorage txn %d" % tid


def layout(params: dict[str, Any]) -> Layout:
    return Layout(*(int(params.get(k, DEFAULTS[k])) for k in ("txn_bytes", "records", "seed")))


def difference(got: bytes, lay: Layout, tid: int) -> str:
    """Where ``got`` differs from what was written for ``tid`` ('' if it does not)."""
    want = lay.transaction(tid)
    if got == want:
        return ""
    if len(got) != len(want):
        return f"{len(got)} bytes, {len(want)} written"
    at = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
    if at == 16:
        return f"status {got[16:17]!r}, not ' '"
    if at < TXN_HDR.size:
        return f"its header differs at byte {at}"
    if at >= len(want) - 8:
        return "its trailing length differs"
    base = lay.pos(tid)
    for j in reversed(range(lay.records)):
        rpos = lay.record_pos(tid, j) - base
        if at >= rpos:
            part = "header" if at < rpos + DATA_HDR.size else "data"
            body = got[rpos + DATA_HDR.size : rpos + DATA_HDR.size + lay.sizes(tid)[j]]
            zeros = "" if body.strip(b"\0") else " (zeros)"
            return f"data record {j} (oid {lay.oid(tid, j)}): its {part} differs from byte {at - rpos}{zeros}"
    return f"its user/description/extension differ at byte {at}"


# -- the verdict -------------------------------------------------------------------------------


def corruption(
    data: bytes, rec: Recovery, lay: Layout, acked: set[int], begun: set[int]
) -> list[str]:
    out: list[str] = []
    for k, txn in enumerate(rec.txns):
        tid = k + 1
        if txn.tid != tid:
            out.append(f"the transaction at byte {txn.pos} has tid {txn.tid}, expected {tid}")
            break
        if tid in acked:
            state = "acked"
        elif tid in begun:
            state = "begun, not acked"
        else:
            state = "never begun"
        if state == "never begun":
            out.append(
                f"txn {tid} is committed on disk (status {txn.status.decode('latin-1')!r}) but was never begun"
            )
            continue
        diff = difference(data[txn.pos : txn.end], lay, tid)
        if diff:
            out.append(f"txn {tid} ({state}) recovered as committed but not as written: {diff}")
    s = rec.stop
    if s.kind == "damaged":
        if s.status == b" ":
            out.append(
                f"txn {s.tid} has status ' ' (committed) on disk but {s.why} (byte {s.pos}): the status "
                "byte reached the disk before the rest of the record; FileStorage refuses to open this file"
            )
        else:
            out.append(f"damaged log at {s.describe()}; FileStorage refuses to open this file")
    return out


def check(inp: CheckInput) -> CheckResult:
    path = os.path.join(inp.mount, str(inp.params.get("file", DEFAULTS["file"])))
    acked, begun = {int(k) for k in inp.acked}, {int(k) for k in inp.begun}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        if acked:
            return CheckResult(
                "lost-ack", (f"{path} is missing but txn(s) {_tids(acked)} were acked",)
            )
        return CheckResult("pass", ("no commit acked, no file: fine",))
    rec = recover(data)
    bad = corruption(data, rec, layout(inp.params), acked, begun)
    if bad:
        return CheckResult("corrupt-data", tuple(bad))
    present = {t.tid for t in rec.txns}
    lost = acked - present
    kept = f"recovery keeps {len(rec.txns)} transaction(s) and stops at {rec.stop.describe()}"
    if lost:
        return CheckResult("lost-ack", (f"acked txn(s) {_tids(lost)} lost: {kept}",))
    dropped = sorted(begun - present)
    note = f"; begun, not acked, absent: {_tids(set(dropped))}" if dropped else ""
    return CheckResult("pass", (f"{len(acked)} acked txn(s) intact; {kept}{note}",))


def _tids(tids: set[int]) -> str:
    return ", ".join(map(str, sorted(tids)[:10])) + (" ..." if len(tids) > 10 else "")


CHECKER = Checker(
    name="filestorage",
    description="FileStorage's recovery, then every acked transaction byte-exact, "
    "begun ones all or nothing",
    check=check,
)

"""Checker for wal: the WAL's own recovery, then every acked txn visible and nothing torn visible.
Runs wherever checks run (host mode or the checker VM); reads the files under the workload's
``dir`` and modifies nothing.  The format is the workload's (see ``powercut.workloads.wal``),
rebuilt here independently; the unit tests pin the two together.

Recovery, as the database does it on open: read wal.ctl (magic, CRC), load data.db, then redo from
the checkpoint (ckpt_lsn in segment ckpt_seg): records in LSN order, following SWITCH records into
the next segment (whose header must name that segment and the LSN the SWITCH ends at), and stop at
the first bad record: an incomplete or zero header (segments are preallocated: zeros end the log),
an unknown type, a wrong LSN or length, a record past the end of the segment, an unreadable (EIO)
block, a CRC mismatch (all variants but ``no-crc``), a PAGE or COMMIT for another txn, a COMMIT
whose record count or txn CRC (``correct``, ``no-fsync``, ``no-dir-fsync``, ``checkpoint-early``)
disagrees.  A txn's page images are applied at its COMMIT; txns without one are discarded.
``commit-before-data`` trusts wal.ctl instead: redo goes exactly to committed_lsn, and a log that
cannot be read that far means the database cannot open (corrupt-data).  A wal.ctl or data.db that
cannot be read is corrupt-data too, unless no txn has begun (initialisation need not be durable
yet); a missing directory or wal.ctl is "nothing here": lost-ack if anything was acked, else pass.

Verdict on the recovered pages: each page must hold zeros or exactly one txn's image.  With m the
newest txn visible, the state must be the one after txns 1..m, with max(acked) <= m <= max(begun
or acked).  corrupt-data: a page holding unknown bytes, a torn image (named: whose image, up to
which bytes hold zeros or another txn's), the image of a txn never begun, or a txn that is not
acked missing from some page while a later one is visible (torn, or out of order).  lost-ack: an
acked txn after m, or one whose update a page lacks (named with what the page holds instead).

Under a lying-disk model (``CheckInput.noticed``, docs/lying-disks.md) the program notices -- the
verdict is ``detected`` -- when it refuses to open (wal.ctl fails its CRC, or says more is committed
than the log holds) or its recovery meets an I/O error.  Redo stopping at a record that fails its
CRC is *not* noticing: that is how this WAL (like SQLite's and PostgreSQL's) finds the end of its
log after a crash, so acked txns behind a damaged record are dropped without a word -- ``lost-ack``.
The CRC's worth shows against ``no-crc``, which has no such check and replays a damaged record as
data: ``corrupt-data``, read as ``silent-corruption`` under a lying disk."""

from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass
from typing import Any

from powercut import Checker, CheckInput, CheckResult

DEFAULTS: dict[str, Any] = {
    "variant": "correct",
    "n": 12,
    "group": 1,
    "page_bytes": 4096,
    "npages": 8,
    "segment_bytes": 16384,
    "checkpoint_every": 5,
    "seed": 0,
    "dir": "wal",
    "fault_at": 0,
    "on_error": "stop",
}
BLOCK = 4096
REC = struct.Struct("<IQII")  # length, lsn, type, crc32c
PAGE = struct.Struct("<QII")  # txn, page, 0 (then the image)
COMMIT = struct.Struct("<QII")  # txn, records, txn crc32c
SWITCH = struct.Struct("<II")  # next segno, 0
SEG = struct.Struct("<8sIQI")  # magic, segno, start lsn, crc32c
CTL = struct.Struct(
    "<8sQQQQII"
)  # magic, ckpt lsn, ckpt txn, committed lsn, committed txn, ckpt seg, crc
IMG = struct.Struct("<4sIQ")  # b"WALP", page, txn
T_PAGE = 1
T_COMMIT = 2
T_FILL = 3
T_SWITCH = 4
NAMES = {T_PAGE: "PAGE", T_COMMIT: "COMMIT", T_FILL: "FILL", T_SWITCH: "SWITCH"}
VARIANTS = (
    "correct",
    "no-fsync",
    "no-crc",
    "commit-before-data",
    "no-dir-fsync",
    "checkpoint-early",
)


def _table() -> tuple[int, ...]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return tuple(out)


CRC_TABLE = _table()


_MEMO: dict[tuple[bytes, int], int] = {}
MEMO_MAX = 4096


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C of ``data`` (remembered: a checker VM judges hundreds of states of one log, and each
    state's recovery reads the same records again; byte by byte in Python, a 4 KiB record costs
    ~0.3 ms natively and ~10 ms under TCG)."""
    key = (bytes(data), crc)
    got = _MEMO.get(key)
    if got is None:
        if len(_MEMO) >= MEMO_MAX:
            _MEMO.clear()
        got = _MEMO[key] = _crc32c(key[0], crc)
    return got


def _crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C (Castagnoli, reflected poly 0x82F63B78), table-driven."""
    table = CRC_TABLE
    crc = crc ^ 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class CannotOpen(Exception):
    """The database refuses to open (what a real one does on a damaged control file or log)."""


class Absent(Exception):
    """No database here."""


@dataclass(frozen=True, slots=True)
class Layout:
    variant: str
    page_bytes: int
    npages: int
    seed: int
    dir: str

    @staticmethod
    def of(params: dict[str, Any]) -> Layout:
        v = {
            k: params.get(k, DEFAULTS[k])
            for k in ("variant", "page_bytes", "npages", "seed", "dir")
        }
        lay = Layout(
            str(v["variant"]), int(v["page_bytes"]), int(v["npages"]), int(v["seed"]), str(v["dir"])
        )
        if lay.variant not in VARIANTS:
            raise ValueError(
                f"wal: variant must be one of {', '.join(VARIANTS)}, not {lay.variant!r}"
            )
        return lay

    @property
    def crc(self) -> bool:
        return self.variant != "no-crc"

    @property
    def txn_crc(self) -> bool:
        return self.variant not in ("no-crc", "commit-before-data")

    def pages(self, t: int) -> list[int]:
        first, second = (t - 1) % self.npages, (t - 1 + self.npages // 2) % self.npages
        return [first, second] if t % 3 == 0 and second != first else [first]

    def image(self, t: int, page: int) -> bytes:
        body = random.Random(f"{self.seed}:{t}:{page}").randbytes(self.page_bytes - IMG.size)
        return IMG.pack(b"WALP", page, t) + body

    def previous(self, t: int, page: int) -> int:
        """The last txn before t that wrote ``page`` (0: none, the page was zeros)."""
        return next(
            (s for s in range(t - 1, max(0, t - self.npages - 1), -1) if page in self.pages(s)), 0
        )


@dataclass(frozen=True, slots=True)
class Control:
    ckpt_lsn: int
    ckpt_txn: int
    committed_lsn: int
    committed_txn: int
    ckpt_seg: int


@dataclass(frozen=True, slots=True)
class Segment:
    segno: int
    start: int
    data: bytes  # readable contents (up to the first unreadable block)
    unreadable: int | None  # file offset of the first unreadable block


@dataclass(frozen=True, slots=True)
class Rec:
    rtype: int
    payload: bytes
    raw: bytes  # the whole record with its padding
    end: int  # file offset after it


@dataclass(frozen=True, slots=True)
class Recovery:
    pages: tuple[bytes | None, ...]
    ctl: Control
    last: int  # the last txn redone (ckpt_txn if none)
    stop: str  # where and why redo stopped

    def summary(self) -> str:
        c = self.ctl
        redone = (
            f"redid txns {c.ckpt_txn + 1}..{self.last}"
            if self.last > c.ckpt_txn
            else "redid nothing"
        )
        return (
            f"recovery: checkpoint after txn {c.ckpt_txn} (LSN {c.ckpt_lsn}, segment {c.ckpt_seg}), "
            f"{redone}, stopped: {self.stop}"
        )


def read_units(path: str, unit: int) -> list[bytes | None]:
    """The file in ``unit``-sized pieces; None for a piece that cannot be read (EIO)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        out: list[bytes | None] = []
        for off in range(0, os.fstat(fd).st_size, unit):
            try:
                out.append(os.pread(fd, unit, off))
            except OSError:
                out.append(None)
        return out
    finally:
        os.close(fd)


def read_ctl(root: str) -> Control:
    path = os.path.join(root, "wal.ctl")
    if not os.path.exists(path):
        raise Absent(f"{path} is missing")
    raw = (read_units(path, CTL.size) or [b""])[0]
    if raw is None or len(raw) < CTL.size:
        raise CannotOpen(
            f"wal.ctl is {'unreadable' if raw is None else f'{len(raw)} bytes, not {CTL.size}'}"
        )
    magic, *fields, crc = CTL.unpack(raw)
    if magic != b"PCWALCTL" or crc != crc32c(raw[:-4]):
        raise CannotOpen(
            f"wal.ctl is damaged ({'magic ' + repr(magic) if magic != b'PCWALCTL' else 'CRC mismatch'})"
        )
    return Control(*fields)


def read_data(root: str, lay: Layout) -> list[bytes | None]:
    path = os.path.join(root, "data.db")
    if not os.path.exists(path):
        raise CannotOpen("data.db is missing")
    pages = read_units(path, lay.page_bytes)
    if len(pages) != lay.npages or any(p is not None and len(p) != lay.page_bytes for p in pages):
        raise CannotOpen(
            f"data.db is {os.path.getsize(path)} bytes, not {lay.npages * lay.page_bytes}"
        )
    return pages


def open_segment(root: str, segno: int, start: int | None) -> Segment | str:
    """Segment ``segno`` (expected to start at LSN ``start``), or why redo cannot enter it."""
    path = os.path.join(root, f"{segno:08d}.seg")
    if not os.path.exists(path):
        return f"segment {segno} is missing"
    units = read_units(path, BLOCK)
    bad = next((i for i, u in enumerate(units) if u is None), None)
    data = b"".join(u for u in units[:bad] if u is not None)
    if len(data) < SEG.size:
        return f"segment {segno} has no complete header ({len(data)} bytes readable)"
    magic, no, st, crc = SEG.unpack_from(data)
    if magic != b"PCWALSEG" or crc != crc32c(data[: SEG.size - 4]):
        return f"segment {segno} has a damaged header"
    if no != segno or start is not None and st != start:
        return f"segment {segno}'s header names segment {no} at LSN {st} (expected LSN {start})"
    return Segment(segno, st, data, None if bad is None else bad * BLOCK)


def parse(seg: Segment, off: int, lay: Layout) -> Rec | str:
    """The record at file offset ``off``, or why it is not a good one."""
    data = seg.data
    where = f"segment {seg.segno} offset {off} (LSN {seg.start + off})"
    io = "" if seg.unreadable is None else f", unreadable (I/O error) from offset {seg.unreadable}"
    if off + REC.size > len(data):
        return (
            f"end of the log at {where}"
            + (f" ({len(data) - off} stray bytes)" if off < len(data) else "")
            + io
        )
    length, lsn, rtype, crc = REC.unpack_from(data, off)
    if not data[off : off + REC.size].strip(b"\0"):
        return f"zeros at {where} (end of the log)"
    if rtype not in NAMES:
        return f"unknown record type {rtype} at {where}"
    name = NAMES[rtype]
    want = {T_PAGE: PAGE.size + lay.page_bytes, T_COMMIT: COMMIT.size, T_SWITCH: SWITCH.size}.get(
        rtype
    )
    if lsn != seg.start + off or length != (want if want is not None else min(length, BLOCK)):
        return f"{name} record at {where} has LSN {lsn} and length {length}: not the record expected there"
    if off + REC.size + length > len(data):
        return f"{name} record at {where} runs past the end of the readable segment ({len(data)} bytes){io}"
    payload = data[off + REC.size : off + REC.size + length]
    if lay.crc and crc != crc32c(REC.pack(length, lsn, rtype, 0) + payload):
        return f"{name} record at {where} fails its CRC"
    end = off + -(-(REC.size + length) // 8) * 8
    return Rec(rtype, payload, data[off:end], end)


def redo(root: str, lay: Layout, ctl: Control, pages: list[bytes | None]) -> tuple[int, str]:
    """Redo into ``pages`` from the checkpoint; the last txn applied and why redo stopped."""
    seg = open_segment(root, ctl.ckpt_seg, None)
    if isinstance(seg, str):
        return ctl.ckpt_txn, seg
    off = ctl.ckpt_lsn - seg.start
    last = ctl.ckpt_txn
    pending = []
    if off < SEG.size:
        return (
            last,
            f"checkpoint LSN {ctl.ckpt_lsn} is not inside segment {seg.segno} (it starts at LSN {seg.start})",
        )
    limit = ctl.committed_lsn if lay.variant == "commit-before-data" else None
    while True:
        if limit is not None and seg.start + off >= limit:
            return last, f"wal.ctl's committed LSN {limit}" + (
                " (inside a record)" if seg.start + off > limit else ""
            )
        if BLOCK - off % BLOCK < REC.size:
            off += BLOCK - off % BLOCK
        rec = parse(seg, off, lay)
        if isinstance(rec, str):
            return last, rec
        where = f"segment {seg.segno} offset {off}"
        off = rec.end
        if rec.rtype == T_SWITCH:
            nxt = open_segment(root, seg.segno + 1, seg.start + off)
            if isinstance(nxt, str):
                return last, nxt
            seg, off = nxt, SEG.size
        elif rec.rtype == T_PAGE:
            txn, page, _ = PAGE.unpack_from(rec.payload)
            if txn != last + 1 or page >= lay.npages:
                return (
                    last,
                    f"a PAGE record for txn {txn} page {page} at {where}, expected txn {last + 1}",
                )
            pending.append((page, rec.payload[PAGE.size :], rec.raw))
        elif rec.rtype == T_COMMIT:
            txn, count, tcrc = COMMIT.unpack(rec.payload)
            if txn != last + 1 or count != len(pending):
                return last, (
                    f"a COMMIT for txn {txn} of {count} record(s) at {where}, expected txn {last + 1} "
                    f"of {len(pending)}"
                )
            if lay.txn_crc and tcrc != crc32c(b"".join(raw for _p, _i, raw in pending)):
                return (
                    last,
                    f"txn {txn}'s COMMIT at {where}: the txn CRC does not match its records",
                )
            for page, img, _raw in pending:
                pages[page] = img
            last, pending = txn, []


def recover(root: str, lay: Layout) -> Recovery:
    if not os.path.isdir(root):
        raise Absent(f"{root} is missing")
    ctl = read_ctl(root)
    pages = read_data(root, lay)
    last, stop = redo(root, lay, ctl, pages)
    if lay.variant == "commit-before-data" and last != ctl.committed_txn:
        raise CannotOpen(
            f"wal.ctl says txns through {ctl.committed_txn} are committed (LSN {ctl.committed_lsn}) "
            f"but the log yields txns only through {last}: {stop}"
        )
    return Recovery(tuple(pages), ctl, last, stop)


# -- the verdict -------------------------------------------------------------------------------


def identify(lay: Layout, page: int, content: bytes | None) -> tuple[int | None, str]:
    """(txn whose image ``page`` holds, 0 for zeros, None for anything else; what it holds)."""
    if content is None:
        return None, "unreadable bytes (I/O error)"
    if not content.strip(b"\0"):
        return 0, "zeros"
    magic, pg, t = IMG.unpack_from(content)
    if magic != b"WALP" or pg != page or t < 1 or page not in lay.pages(t):
        zero = len(content) - len(content.lstrip(b"\0"))
        return None, "unknown bytes" + (f" (zeros up to byte {zero})" if zero else "")
    want = lay.image(t, page)
    if content == want:
        return t, f"txn {t}'s image"
    lo = next(i for i, (a, b) in enumerate(zip(content, want)) if a != b)
    hi = len(want) - next(
        i for i, (a, b) in enumerate(zip(reversed(content), reversed(want))) if a != b
    )
    prev = lay.previous(t, page)
    part = content[lo:hi]
    if not part.strip(b"\0"):
        kind = "zeros"
    elif prev and part == lay.image(prev, page)[lo:hi]:
        kind = f"txn {prev}'s image"
    else:
        kind = "other bytes"
    return None, f"txn {t}'s image except bytes {lo}..{hi - 1}, which hold {kind}"


def judge(rec: Recovery, lay: Layout, acked: set[int], begun: set[int]) -> CheckResult:
    hi, top = max(acked | begun, default=0), max(acked, default=0)
    holders: list[int] = []
    what: list[str] = []
    bad: list[str] = []
    for page, content in enumerate(rec.pages):
        h, desc = identify(lay, page, content)
        what.append(desc)
        holders.append(h or 0)
        if h is None:
            bad.append(f"page {page} holds {desc}")
        elif h > hi:
            bad.append(f"page {page} holds txn {h}'s image, but txn {h} never began")
    if bad:
        return CheckResult("corrupt-data", tuple(bad) + (rec.summary(),))
    m = max(holders, default=0)
    newest = holders.index(m) if m else 0
    missing: dict[int, list[int]] = {}  # txn <= m -> the pages lacking its update
    for page, h in enumerate(holders):
        for t in range(h + 1, m + 1):
            if page in lay.pages(t):
                missing.setdefault(t, []).append(page)
    torn = sorted(t for t in missing if t not in acked)
    if torn:
        out = [
            _hole(
                lay,
                t,
                missing[t],
                what,
                m,
                newest,
                "begun, not acked" if t in begun else "never begun",
            )
            for t in torn[:5]
        ]
        return CheckResult("corrupt-data", tuple(out) + (rec.summary(),))
    lost = sorted(t for t in acked if t > m or t in missing)
    if lost:
        out = [
            f"acked txn {t}'s page {p} lost: the page holds {what[p]}"
            for t in lost
            if t in missing
            for p in missing[t]
        ][:5]
        after = [t for t in lost if t > m]
        if after:
            out.append(
                f"acked txn(s) {_txns(after)} lost: "
                + (f"the newest txn visible is {m}" if m else "no txn is visible")
            )
        return CheckResult("lost-ack", tuple(out) + (rec.summary(),))
    gone = sorted(t for t in begun if t > m)
    note = f"; begun, not acked, absent: {_txns(gone)}" if gone else ""
    return CheckResult(
        "pass", (f"the state after txn {m}: acked txns through {top} visible{note}", rec.summary())
    )


def _hole(
    lay: Layout, t: int, pages: list[int], what: list[str], m: int, newest: int, state: str
) -> str:
    seen = [p for p in lay.pages(t) if p not in pages]
    lacks = ", ".join(f"page {p} holds {what[p]}" for p in pages)
    if seen:
        return f"txn {t} ({state}) is torn: page {seen[0]} has its update but {lacks}"
    return f"txn {t} ({state}) is absent ({lacks}) while later txn {m} is visible (page {newest})"


def _txns(txns: list[int]) -> str:
    return ", ".join(map(str, txns[:10])) + (" ..." if len(txns) > 10 else "")


def check(inp: CheckInput) -> CheckResult:
    lay = Layout.of(inp.params)
    acked, begun = {int(k) for k in inp.acked}, {int(k) for k in inp.begun}
    root = os.path.join(inp.mount, lay.dir)
    try:
        rec = recover(root, lay)
    except Absent as e:
        if acked:
            return CheckResult("lost-ack", (f"{e} but txn(s) {_txns(sorted(acked))} were acked",))
        return CheckResult("pass", (f"{e}; nothing acked",))
    except CannotOpen as e:
        if not acked and not begun:
            return CheckResult(
                "pass", (f"{e}, but no txn has begun: initialisation need not be durable yet",)
            )
        return CheckResult(inp.noticed, (f"the database cannot open: {e}",))
    got = judge(rec, lay, acked, begun)
    if (
        inp.lying_disk
        and got.verdict != "pass"
        and any(w in " ".join(got.reasons) for w in NOTICES)
    ):
        return CheckResult(
            "detected", (f"the WAL's recovery noticed the damage: {rec.stop}", *got.reasons)
        )
    return got


# what the recovery reports as an error rather than taking as the end of the log: an I/O error
NOTICES = ("I/O error",)


CHECKER = Checker(
    name="wal",
    description="the WAL's recovery (redo from the checkpoint, stop at the first bad "
    "record), then every acked txn visible and no torn txn",
    check=check,
)

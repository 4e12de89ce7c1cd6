"""filestorage: an append-only transaction log shaped like ZODB's FileStorage.  Runs in the guest,
with its working directory on the filesystem under test.

The file (every number big-endian, as in FileStorage's ``format.py``)::

    file header   b"FS21"                                                          4 bytes
    transaction   tid u64 | tl u64 | status 1 byte | ulen u16 | dlen u16 | elen u16   23 bytes
                  user | description | extension                   ulen + dlen + elen bytes
                  data records, each:
                    oid u64 | tid u64 | prev u64 | tloc u64 | vlen u16 (0) | plen u64  42 bytes
                    data                                                        plen bytes
                  tl u64 (the redundant trailing length)                           8 bytes

``tl`` is the record's length minus its trailing 8 bytes, so the next transaction starts at
``pos + tl + 8``.  ``prev`` is the back-pointer to the previous revision of the same object (0 for
its first), ``tloc`` points back to the transaction header.  Transaction ``tid`` (1, 2, ..., n) is
exactly ``txn_bytes`` long and sits at ``4 + (tid - 1) * txn_bytes``; it stores ``records``
objects, oids cycling over ``2 * records`` so that revisions chain through ``prev``; its payloads
come from (seed, tid, record) alone, so a checker can rebuild every byte.

A commit is FileStorage's two-phase commit: ``begin:<tid>``; the vote writes the whole record with
status ``c`` (checkpoint: voted, not finished); ``fsync=2`` adds an fsync here; the finish
overwrites that one status byte with ``' '`` in place; ``fsync>=1`` fsyncs; then ``ack:<tid>``.
``fsync=0`` acks without any fsync (a deliberately weak variant: it loses acked commits).
``prealloc=true`` first fills the file with zeros (made durable) and then overwrites in place, as a
database that preallocates does, instead of appending.  Creating the file (header, preallocation,
directory entry) is made durable before the first commit whatever the policy."""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import powercut
from powercut import Workload

MAGIC = b"FS21"
TXN_HDR = struct.Struct(">QQcHHH")  # tid, tl, status, ulen, dlen, elen
DATA_HDR = struct.Struct(">QQQQHQ")  # oid, tid, prev, tloc, vlen, plen
U64 = struct.Struct(">Q")
STATUS_AT = 16  # the status byte's offset in a transaction header
USER = b"powercut"
EXTENSION = b""
PREALLOC_CHUNK = 64 * 1024

DEFAULTS: dict[str, Any] = {
    "n": 8,
    "txn_bytes": 2048,
    "records": 4,
    "fsync": 1,
    "prealloc": False,
    "seed": 0,
    "file": "Data.fs",
}


def _mark(kind: str, tid: int) -> None:
    (powercut.begin if kind == "begin" else powercut.ack)(tid)


# The mark hook: ("begin" | "ack", tid).  Tests replace it (real marks need a dm-log-writes device).
MARK: Callable[[str, int], None] = _mark


@dataclass(frozen=True, slots=True)
class Params:
    n: int
    txn_bytes: int
    records: int
    fsync: int
    prealloc: bool
    seed: int
    file: str

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        p = Params(**{k: given.get(k, v) for k, v in DEFAULTS.items()})
        if p.fsync not in (0, 1, 2):
            raise ValueError(f"filestorage: fsync must be 0, 1 or 2, not {p.fsync!r}")
        if p.n < 0 or p.records < 1:
            raise ValueError(
                f"filestorage: n >= 0 and records >= 1 (got n={p.n}, records={p.records})"
            )
        payload_sizes(p, p.n or 1)  # txn_bytes large enough
        return p


def description(tid: int) -> bytes:
    return b"filestorage txn %d" % tid


def txn_pos(p: Params, tid: int) -> int:
    return len(MAGIC) + (tid - 1) * p.txn_bytes


def oid_of(p: Params, tid: int, j: int) -> int:
    return 1 + ((tid - 1) * p.records + j) % (2 * p.records)


def payload_sizes(p: Params, tid: int) -> list[int]:
    """Data lengths of ``tid``'s records: what is left of ``txn_bytes`` after the fixed parts."""
    fixed = (
        TXN_HDR.size
        + len(USER)
        + len(description(tid))
        + len(EXTENSION)
        + p.records * DATA_HDR.size
        + 8
    )
    room = p.txn_bytes - fixed
    if room < p.records:
        raise ValueError(
            f"filestorage: txn_bytes={p.txn_bytes} is too small for {p.records} records "
            f"(at least {fixed + p.records})"
        )
    base, extra = divmod(room, p.records)
    return [base + (j < extra) for j in range(p.records)]


def payload(p: Params, tid: int, j: int, size: int) -> bytes:
    return random.Random(f"{p.seed}:{tid}:{j}").randbytes(size)


def record_positions(p: Params, tid: int) -> list[int]:
    pos = txn_pos(p, tid) + TXN_HDR.size + len(USER) + len(description(tid)) + len(EXTENSION)
    out = []
    for size in payload_sizes(p, tid):
        out.append(pos)
        pos += DATA_HDR.size + size
    return out


def prev_pointer(p: Params, tid: int, j: int) -> int:
    """File position of the previous revision of record j's object (0: its first revision)."""
    k = (tid - 1) * p.records + j - 2 * p.records
    return 0 if k < 0 else record_positions(p, k // p.records + 1)[k % p.records]


def transaction(p: Params, tid: int, status: bytes) -> bytes:
    """Transaction ``tid``'s whole record with the given status byte."""
    tpos = txn_pos(p, tid)
    descr = description(tid)
    tl = p.txn_bytes - 8
    parts = [
        TXN_HDR.pack(tid, tl, status, len(USER), len(descr), len(EXTENSION)),
        USER,
        descr,
        EXTENSION,
    ]
    for j, size in enumerate(payload_sizes(p, tid)):
        parts.append(DATA_HDR.pack(oid_of(p, tid, j), tid, prev_pointer(p, tid, j), tpos, 0, size))
        parts.append(payload(p, tid, j, size))
    parts.append(U64.pack(tl))
    out = b"".join(parts)
    assert len(out) == p.txn_bytes
    return out


def preallocated_size(p: Params) -> int:
    """Room for n transactions and one zero header after them, in whole chunks."""
    need = txn_pos(p, p.n + 1) + TXN_HDR.size
    return -(-need // PREALLOC_CHUNK) * PREALLOC_CHUNK


def _pwrite_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, pos)
        view, pos = view[done:], pos + done


def create(fd: int, p: Params) -> None:
    """The file header (and with prealloc the zero-filled space), durable with its directory entry."""
    _pwrite_all(fd, MAGIC, 0)
    if p.prealloc:
        size = preallocated_size(p)
        for off in range(len(MAGIC), size, PREALLOC_CHUNK):
            _pwrite_all(fd, bytes(min(PREALLOC_CHUNK, size - off)), off)
    os.fsync(fd)
    dirfd = os.open(".", os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


def commit(fd: int, p: Params, tid: int) -> None:
    """One transaction, as FileStorage's tpc_vote + tpc_finish write it."""
    pos = txn_pos(p, tid)
    MARK("begin", tid)
    _pwrite_all(fd, transaction(p, tid, b"c"), pos)  # vote: the whole record, checkpoint flag set
    if p.fsync == 2:
        os.fsync(fd)
    _pwrite_all(fd, b" ", pos + STATUS_AT)  # finish: clear the checkpoint flag in place
    if p.fsync >= 1:
        os.fsync(fd)
    MARK("ack", tid)


def main(params: dict[str, Any]) -> int:
    p = Params.of(params)
    fd = os.open(p.file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        create(fd, p)
        for tid in range(1, p.n + 1):
            commit(fd, p, tid)
    finally:
        os.close(fd)
    return 0


WORKLOAD = Workload(
    name="filestorage",
    description="a ZODB FileStorage-shaped transaction log: vote writes the record with status 'c', finish "
    "sets it to ' ' in place; fsync=0|1|2, prealloc",
    main=main,
    defaults=dict(DEFAULTS),
    choices={"fsync": (0, 1, 2)},
    minimum={"n": 1, "txn_bytes": 1, "records": 1},
)

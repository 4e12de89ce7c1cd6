"""idxstore: a store of a data file and an index file that recovery reads alone (issue 52's
"replaced in place" bug, docs/checking.md).

Commit i appends record i to ``store.dat`` and writes the whole index -- every record's key, offset
and length, as JSON -- to ``store.idx``; recovery reads ``store.idx`` and nothing else, so an
acked record whose index entry is gone is lost.  ``replace`` says how the new index replaces the
old one:

* ``tmp-rename`` (the default, correct): write ``store.idx.tmp``, fsync it, fsync the data file,
  rename it over ``store.idx``, fsync the directory, then ack;
* ``rename-away`` (the bug): rename ``store.idx`` away to ``store.bak``, write a new ``store.idx``,
  fsync the data file, then the new index, then the directory, then ack -- the data file's fsync
  commits the journal with the rename and the new, still empty index before its contents, so a
  crash between the two fsyncs leaves an empty index although every earlier commit was acked;
* ``truncate`` (the same bug by truncation): open ``store.idx`` with O_TRUNC and rewrite it, fsync
  the data file, then the index;
* ``current`` (correct, LevelDB's way): write the new index to a file of its own, ``index-<i>``,
  fsync it and the data file, then write ``CURRENT.tmp`` naming it, fsync that, rename it over
  ``CURRENT`` and fsync the directory, then ack -- recovery reads ``CURRENT``, then the index it names;
* ``current-first`` (the bug, *pointer before data*): the same, but the new index is fsynced only
  after ``CURRENT`` names it and the directory's fsync made that durable -- a crash between leaves
  ``CURRENT`` naming an index whose contents never reached the disk.

Record i: ``PCIX`` | i u32 | length u32 | crc32 u32 | ``size`` payload bytes from (seed, i)."""

from __future__ import annotations

import json
import os
import random
import struct
import zlib
from typing import Any

import powercut
from powercut import Workload

HEADER = struct.Struct("<4sIII")  # magic, key, payload length, crc32 of the payload
MAGIC = b"PCIX"


def record(seed: int, i: int, size: int) -> bytes:
    body = random.Random(f"idxstore:{seed}:{i}").randbytes(size)
    return HEADER.pack(MAGIC, i, size, zlib.crc32(body)) + body


def _write_all(path: str, data: bytes, flags: int) -> int:
    fd = os.open(path, os.O_WRONLY | flags, 0o644)
    os.write(fd, data)
    return fd


def _fsync_dir() -> None:
    d = os.open(".", os.O_RDONLY)
    try:
        os.fsync(d)
    finally:
        os.close(d)


def _publish(name: str, index: bytes, dat: int, data_first: bool) -> None:
    """The index written to ``name`` and ``CURRENT`` made to name it (renamed into place, the directory
    fsynced); the index fsynced before that (``data_first``) or only after (the bug)."""
    fd = _write_all(name, index, os.O_CREAT | os.O_TRUNC)
    os.fsync(dat)
    if data_first:
        os.fsync(fd)
    cur = _write_all("CURRENT.tmp", f"{name}\n".encode(), os.O_CREAT | os.O_TRUNC)
    os.fsync(cur)
    os.close(cur)
    os.rename("CURRENT.tmp", "CURRENT")
    _fsync_dir()
    if not data_first:
        os.fsync(fd)
    os.close(fd)


def main(params: dict[str, Any]) -> int:
    n = params["n"]
    size = params["size"]
    seed = params["seed"]
    how = params["replace"]
    dat = os.open("store.dat", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    entries: list[list[int]] = []
    offset = 0
    try:
        _fsync_dir()
        for i in range(n):
            powercut.begin(i)
            rec = record(seed, i, size)
            os.write(dat, rec)
            entries.append([i, offset, len(rec)])
            offset += len(rec)
            index = json.dumps({"records": entries}).encode()
            if how in ("current", "current-first"):
                _publish(f"index-{i:06d}", index, dat, data_first=how == "current")
                powercut.ack(i)
                continue
            if how == "tmp-rename":
                fd = _write_all("store.idx.tmp", index, os.O_CREAT | os.O_TRUNC)
                os.fsync(fd)
                os.fsync(dat)
                os.rename("store.idx.tmp", "store.idx")
            else:
                if how == "rename-away" and os.path.exists("store.idx"):
                    os.rename("store.idx", "store.bak")
                fd = _write_all("store.idx", index, os.O_CREAT | os.O_TRUNC)
                os.fsync(dat)  # the bug: this commits the journal with the new, still empty index
                os.fsync(fd)
            os.close(fd)
            _fsync_dir()
            powercut.ack(i)
    finally:
        os.close(dat)
    return 0


WORKLOAD = Workload(
    name="idxstore",
    description="a data file and an index recovery reads alone; replace=rename-away|truncate rewrites the index "
    "in place, a sync of the data file first; replace=current-first names a new index in CURRENT "
    "before the index is synced",
    main=main,
    defaults={"n": 8, "size": 300, "seed": 0, "replace": "tmp-rename"},
    choices={"replace": ("tmp-rename", "rename-away", "truncate", "current", "current-first")},
    minimum={"n": 1, "size": 1},
)

"""sqlite: small SQLite transactions through Python's ``sqlite3`` (the stdlib binding of the system's
libsqlite3).  Runs in the guest, with its working directory on the filesystem under test.

One table of rows and one summary row.  Transaction ``i`` (1..n) is ``BEGIN IMMEDIATE``; an INSERT
of row ``i`` whose payload comes from (seed, i) alone; an UPDATE of the summary row to (count=i,
last=i, digest=sha256(payload)); ``COMMIT``.  ``begin:<i>`` before it, ``ack:<i>`` once ``COMMIT``
returned.  The schema and the summary row are created under ``synchronous=FULL`` and made durable,
with the directory, before the first ``begin``; then the ``synchronous`` under test is set.  Closing
the connection at the end checkpoints the WAL into the database (after the last ack: those states
are judged too).

Params: ``journal_mode`` DELETE | TRUNCATE | WAL (default WAL), ``synchronous`` OFF | NORMAL | FULL |
EXTRA (default FULL), ``n`` (12), ``seed`` (0), ``file`` ("app.db"), ``fault_at`` (0: none).

``fault_at=K`` (rollback-journal modes): the database file is preallocated beyond its end
(``fallocate`` KEEP_SIZE, fsynced) so its sectors are known, and they fail with EIO (``eio-range``,
core/log/faultwindows.py) during txn K's COMMIT: the journal is written and synced, the database's own sync
fails, COMMIT raises.  SQLite documents that an I/O error may roll the transaction back
(sqlite.org/lang_transaction.html: SQLITE_IOERR is among the errors that "can cause an automatic
rollback"; the hot journal rolls it back at the next open).  The workload then lets the device
recover, opens the database again, prints what it holds, and exits 3 without acking K: the crash
states (acks 1..K-1) and that line show whether the claim held.

SQLite's documented claims per configuration (sqlite.org/pragma.html#pragma_synchronous, wal.html):
  WAL + NORMAL: may lose the most recent commits after a power loss, but stays consistent.
  WAL + FULL or EXTRA: a commit is durable once COMMIT returns.
  DELETE + FULL: durable, but a commit closely followed by a power loss may roll back (unlink not synced).
  DELETE + EXTRA, TRUNCATE + FULL or EXTRA: a commit is durable once COMMIT returns.
  DELETE or TRUNCATE + NORMAL: consistent on modern filesystems (tiny corruption risk on old ones).
  OFF, any journal mode: may lose commits and may corrupt the database after a power loss."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import powercut
from powercut import Workload
from powercut.workloads.append_fsync import preallocate

JOURNAL_MODES = ("DELETE", "TRUNCATE", "WAL")
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
PAYLOAD_BYTES = 1000
DEFAULTS: dict[str, Any] = {
    "journal_mode": "WAL",
    "synchronous": "FULL",
    "n": 12,
    "seed": 0,
    "file": "app.db",
    "fault_at": 0,
}
PREALLOC_BYTES = 4 << 20
SCHEMA = (
    "CREATE TABLE rows (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)",
    "CREATE TABLE summary (id INTEGER PRIMARY KEY CHECK (id = 1), count INTEGER NOT NULL, "
    "last INTEGER NOT NULL, digest BLOB NOT NULL)",
    "INSERT INTO summary VALUES (1, 0, 0, x'')",
)


def _mark(kind: str, i: int) -> None:
    (powercut.begin if kind == "begin" else powercut.ack)(i)


# The mark hook: ("begin" | "ack", i).  Tests replace it (real marks need a dm-log-writes device).
MARK: Callable[[str, int], None] = _mark


@dataclass(frozen=True, slots=True)
class Params:
    journal_mode: str
    synchronous: str
    n: int
    seed: int
    file: str
    fault_at: int = 0

    @staticmethod
    def of(given: dict[str, Any]) -> Params:
        p = Params(**{k: given.get(k, v) for k, v in DEFAULTS.items()})
        p = Params(
            str(p.journal_mode).upper(),
            str(p.synchronous).upper(),
            int(p.n),
            int(p.seed),
            str(p.file),
            int(p.fault_at),
        )
        if p.fault_at and p.journal_mode == "WAL":
            raise ValueError(
                "sqlite: fault_at needs a rollback-journal mode (DELETE or TRUNCATE): a WAL commit "
                "appends to the -wal file, whose sectors are not known before the write"
            )
        if p.journal_mode not in JOURNAL_MODES:
            raise ValueError(
                f"sqlite: journal_mode must be one of {', '.join(JOURNAL_MODES)}, not {p.journal_mode!r}"
            )
        if p.synchronous not in SYNCHRONOUS:
            raise ValueError(
                f"sqlite: synchronous must be one of {', '.join(SYNCHRONOUS)}, not {p.synchronous!r}"
            )
        if p.n < 0:
            raise ValueError(f"sqlite: n must be >= 0, not {p.n}")
        return p


def payload(seed: int, i: int) -> bytes:
    return random.Random(f"sqlite:{seed}:{i}").randbytes(PAYLOAD_BYTES)


def summary(seed: int, i: int) -> tuple[int, int, bytes]:
    """The summary row (count, last, digest) once transaction ``i`` committed (0: none did)."""
    return (i, i, hashlib.sha256(payload(seed, i)).digest() if i else b"")


def connect(p: Params) -> sqlite3.Connection:
    """A connection in autocommit mode (explicit BEGIN/COMMIT) with the journal mode set."""
    con = sqlite3.connect(p.file, isolation_level=None)
    mode = con.execute(f"PRAGMA journal_mode = {p.journal_mode}").fetchone()[0]
    if str(mode).upper() != p.journal_mode:
        con.close()
        raise RuntimeError(f"sqlite: PRAGMA journal_mode = {p.journal_mode} answered {mode!r}")
    return con


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create(con: sqlite3.Connection, p: Params) -> None:
    """The schema and the summary row, durable with the directory; then the synchronous under test."""
    con.execute("PRAGMA synchronous = FULL")
    con.execute("BEGIN IMMEDIATE")
    for sql in SCHEMA:
        con.execute(sql)
    con.execute("COMMIT")
    _fsync_path(p.file)
    _fsync_path(
        "."
    )  # the database's (and journal's or WAL's) directory entries, a journal's unlink
    con.execute(f"PRAGMA synchronous = {p.synchronous}")


def commit(con: sqlite3.Connection, p: Params, i: int) -> None:
    data = payload(p.seed, i)
    count, last, digest = summary(p.seed, i)
    MARK("begin", i)
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO rows (id, payload) VALUES (?, ?)", (i, data))
    con.execute(
        "UPDATE summary SET count = ?, last = ?, digest = ? WHERE id = 1", (count, last, digest)
    )
    con.execute("COMMIT")
    MARK("ack", i)


def commit_through_error(con: sqlite3.Connection, p: Params, i: int) -> int:
    """Txn ``i`` with the database's sectors failing during its COMMIT; what the database holds once
    the device is back, printed; the exit status (3: stopped without the ack)."""
    sectors = powercut.file_sectors(p.file)
    MARK("begin", i)
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO rows (id, payload) VALUES (?, ?)", (i, payload(p.seed, i)))
    count, last, digest = summary(p.seed, i)
    con.execute(
        "UPDATE summary SET count = ?, last = ?, digest = ? WHERE id = 1", (count, last, digest)
    )
    powercut.fault("eio-range", sectors)
    try:
        con.execute("COMMIT")
        error = ""
    except sqlite3.Error as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        powercut.recover()
    if not error:
        print(
            f"sqlite: COMMIT of txn {i} succeeded although the database's sectors failed",
            file=sys.stderr,
        )
        MARK("ack", i)
        return 0
    con.close()
    after = sqlite3.connect(p.file, isolation_level=None)
    try:
        seen = after.execute("SELECT count FROM summary").fetchone()[0]
        rows = after.execute("SELECT count(*) FROM rows WHERE id = ?", (i,)).fetchone()[0]
        integrity = after.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        after.close()
    outcome = (
        "rolled back"
        if seen == i - 1 and rows == 0
        else f"NOT rolled back (summary count {seen}, row {i}: {rows})"
    )
    print(
        f"sqlite: COMMIT of txn {i} failed ({error}); reopened after the device came back: {outcome}; "
        f"integrity_check: {integrity}; stopping without acking it",
        file=sys.stderr,
    )
    return 3


def main(params: dict[str, Any]) -> int:
    p = Params.of(params)
    for suffix in ("", "-journal", "-wal", "-shm"):
        if os.path.exists(p.file + suffix):
            os.unlink(p.file + suffix)
    con = connect(p)
    try:
        create(con, p)
        if p.fault_at:
            fd = os.open(p.file, os.O_WRONLY)
            try:
                preallocate(fd, PREALLOC_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
        for i in range(1, p.n + 1):
            if i == p.fault_at:
                return commit_through_error(con, p, i)
            commit(con, p, i)
    finally:
        con.close()
    return 0


WORKLOAD = Workload(
    name="sqlite",
    description="SQLite transactions (INSERT a row + UPDATE a summary row) through Python's sqlite3; "
    "journal_mode=DELETE|TRUNCATE|WAL, synchronous=OFF|NORMAL|FULL|EXTRA",
    main=main,
    defaults=dict(DEFAULTS),
    choices={"journal_mode": JOURNAL_MODES, "synchronous": SYNCHRONOUS},
    minimum={"n": 1},
)

"""Checker for sqlite: SQLite's own recovery, then every acked transaction whole and byte-exact.
Runs wherever checks run (host mode or the checker VM), on the recovered, writable mount.

The database is opened read-write with ``sqlite3`` (``mode=rw``: never created), so its own
recovery runs on the first read -- a hot rollback journal is played back, a WAL is scanned up to
its last valid commit frame and the wal-index rebuilt.  Closing the connection may checkpoint the
WAL into the database: the mount is a disposable snapshot.

What was written is rebuilt from the parameters alone (the unit tests pin it to the workload):
transaction ``i`` inserts row ``i`` (1000 bytes from (seed, i)) and sets the summary row to
(count=i, last=i, digest=sha256(row i's payload)).

* corrupt-data -- the file is not a database or is malformed (sqlite's message), ``PRAGMA
  integrity_check`` is not "ok" (its first lines), the schema is half there, a row or the summary is
  not what was written, a row never begun, or a transaction half there: a row the summary does not
  count (an INSERT without its UPDATE) or a summary that counts a missing row (the UPDATE without
  its INSERT);
  under a lying-disk model (``CheckInput.noticed``) sqlite's own error or integrity_check is
  ``detected`` instead: it noticed; wrong rows it served without a word stay corrupt-data (the
  harness calls that silent-corruption there);
* lost-ack -- an acked transaction absent (row and summary update both), or no database, or no
  schema, while something was acked;
* pass -- otherwise: the database holds transactions 1..last, each whole; a begun-not-acked one is
  there whole or absent whole."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import urllib.parse
from typing import Any

from powercut import Checker, CheckInput, CheckResult
from powercut.checkers.keystate import key_state

PAYLOAD_BYTES = 1000
DEFAULTS: dict[str, Any] = {"seed": 0, "file": "app.db"}
TABLES = {"rows", "summary"}


def payload(seed: int, i: int) -> bytes:
    return random.Random(f"sqlite:{seed}:{i}").randbytes(PAYLOAD_BYTES)


def summary(seed: int, i: int) -> tuple[int, int, bytes]:
    """The summary row (count, last, digest) once transaction ``i`` committed (0: none did)."""
    return (i, i, hashlib.sha256(payload(seed, i)).digest() if i else b"")


def _keys(keys: set[int]) -> str:
    return ", ".join(map(str, sorted(keys)[:10])) + (" ..." if len(keys) > 10 else "")


def _first_difference(got: object, want: bytes) -> str:
    if not isinstance(got, bytes):
        return f"a {type(got).__name__}, not a blob"
    if len(got) != len(want):
        return f"{len(got)} bytes, {len(want)} written"
    at = next(k for k, (a, b) in enumerate(zip(got, want)) if a != b)
    return f"differs from byte {at}" + ("" if got.strip(b"\0") else " (zeros)")


class Judge:
    """One open database against what the marks promise."""

    def __init__(
        self,
        con: sqlite3.Connection,
        seed: int,
        acked: set[int],
        begun: set[int],
        noticed: str = "corrupt-data",
    ) -> None:
        self.con = con
        self.seed = seed
        self.acked = acked
        self.begun = begun
        self.noticed = noticed
        self.corrupt: list[str] = []

    def state(self, i: int) -> str:
        return key_state(i, self.acked, self.begun)

    def run(self) -> CheckResult:
        lines = [str(r[0]) for r in self.con.execute("PRAGMA integrity_check")]
        if lines != ["ok"]:
            more = f" (+{len(lines) - 3} more)" if len(lines) > 3 else ""
            return CheckResult(
                self.noticed, (f"PRAGMA integrity_check: {'; '.join(lines[:3])}{more}",)
            )
        tables = {
            r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables & TABLES:
            if self.acked:
                return CheckResult(
                    "lost-ack",
                    (
                        f"no schema (tables: {sorted(tables)}) but txn(s) "
                        f"{_keys(self.acked)} were acked",
                    ),
                )
            return CheckResult("pass", ("no schema yet and nothing acked",))
        if not TABLES <= tables:
            return CheckResult(
                "corrupt-data", (f"half a schema: tables {sorted(tables)}, created together",)
            )
        rows = {int(i): data for i, data in self.con.execute("SELECT id, payload FROM rows")}
        found = self.con.execute("SELECT count, last, digest FROM summary WHERE id = 1").fetchall()
        if len(found) != 1:
            return CheckResult(
                "corrupt-data", ("the summary row (created with the schema) is missing",)
            )
        last = self.check_summary(tuple(found[0]))
        self.check_rows(rows)
        if last is not None:
            self.check_pairs(set(rows), last)
        lost = self.acked - set(rows)
        if last is None:
            held = f"rows {_keys(set(rows))}"
        elif last:
            held = f"txns 1..{last}"
        else:
            held = "no txn"
        lost_line = f"acked txn(s) {_keys(lost)} lost: the database holds {held}" if lost else ""
        if self.corrupt:
            return CheckResult(
                "corrupt-data", tuple(self.corrupt + ([lost_line] if lost_line else []))
            )
        if lost:
            return CheckResult("lost-ack", (lost_line,))
        absent = self.begun - set(rows)
        note = f"; begun, not acked, absent: {_keys(absent)}" if absent else ""
        return CheckResult(
            "pass",
            (
                f"{len(self.acked)} acked txn(s) intact; integrity_check ok; "
                f"the database holds {held}{note}",
            ),
        )

    def check_summary(self, got: tuple[Any, ...]) -> int | None:
        """The summary row against what its writer wrote; the ``last`` it names (None: not a txn)."""
        last = got[1]
        if not isinstance(last, int) or last < 0 or last and self.state(last) == "never begun":
            self.corrupt.append(f"the summary row names txn {last!r}, which was never begun")
            return None
        if got != summary(self.seed, last):
            self.corrupt.append(
                f"the summary row (count={got[0]!r}, last={got[1]!r}) is not what txn {last} "
                "wrote" + (" (its digest differs)" if got[:2] == (last, last) else "")
            )
        return last

    def check_rows(self, rows: dict[int, Any]) -> None:
        for i, data in sorted(rows.items()):
            state = self.state(i)
            if state == "never begun":
                self.corrupt.append(f"row {i} is committed but was never begun")
            elif data != payload(self.seed, i):
                self.corrupt.append(
                    f"row {i} ({state}): its payload {_first_difference(data, payload(self.seed, i))}"
                )

    def check_pairs(self, ids: set[int], last: int) -> None:
        """Each transaction all or nothing: rows 1..last exactly, as the summary counts them."""
        extra = {i for i in ids if not 1 <= i <= last}
        missing = set(range(1, last + 1)) - ids
        if extra:
            self.corrupt.append(
                f"row(s) {_keys(extra)} present but the summary stops at txn {last}: an INSERT "
                "without its UPDATE"
            )
        if missing:
            self.corrupt.append(
                f"the summary counts txns 1..{last} but row(s) {_keys(missing)} are missing: "
                "an UPDATE without its INSERT"
            )


def check(inp: CheckInput) -> CheckResult:
    name = str(inp.params.get("file", DEFAULTS["file"]))
    path = os.path.join(inp.mount, name)
    acked, begun = {int(k) for k in inp.acked}, {int(k) for k in inp.begun}
    if not os.path.exists(path):
        if acked:
            return CheckResult(
                "lost-ack", (f"{name} is missing but txn(s) {_keys(acked)} were acked",)
            )
        return CheckResult("pass", ("no database and nothing acked",))
    try:
        con = sqlite3.connect(
            f"file:{urllib.parse.quote(path)}?mode=rw", uri=True, isolation_level=None
        )
        try:
            return Judge(
                con, int(inp.params.get("seed", DEFAULTS["seed"])), acked, begun, inp.noticed
            ).run()
        finally:
            con.close()
    except (
        sqlite3.DatabaseError
    ) as e:  # "file is not a database", "database disk image is malformed", "disk I/O error"
        return CheckResult(inp.noticed, (f"{name}: sqlite: {e}",))


CHECKER = Checker(
    name="sqlite",
    description="SQLite's recovery, integrity_check, every acked transaction "
    "whole and byte-exact, begun ones all or nothing",
    check=check,
)

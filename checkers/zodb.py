"""Checker for zodb: FileStorage's own recovery, the checks ZODB ships, then every acked key with
exactly its value.  Runs wherever checks run (host mode or the checker VM), on the recovered,
writable mount (a disposable snapshot: recovery truncates the file in place).

Steps, each a verdict of its own:

1. ``Data.fs.index`` is deleted first.  It is a cache of the oid -> position map that FileStorage
   writes on open and close only; after a crash it describes some other moment of the file.
   FileStorage's sanity check on it is partial (the last few records), so it is never trusted
   here: the index is rebuilt from the data by a full scan, which is the recovery under test.
2. ``FileStorage(path, read_only=False)``: its scan truncates an incomplete last transaction (one
   whose length runs past the end of the file, or whose status is still ``c``, voted but never
   finished; the cut-off bytes go to ``Data.fs.tr<k>``) and panics on a record that claims to be
   whole and is not.  A refusal to open is corrupt-data with FileStorage's message; what it
   logged while recovering ends up in the reasons.
3. ``ZODB.scripts.fstest.check`` on the recovered file (a ``FormatError`` is corrupt-data).
4. Read-only: every transaction and data record iterated, every pickle parsed for its references;
   every object reachable from the root loaded (a dangling reference or an unreadable pickle is
   corrupt-data); the tree checked with ``BTrees.check.check`` and ``_check``.
5. The tree against the marks: a key never begun, or a value not byte-exact, is corrupt-data; the
   transactions described ``powercut <i>`` must be exactly the tree's keys (all or nothing), and
   the tree as of each of them (``db.open(at=tid)``) must hold exactly the keys committed so far,
   byte-exact -- history is data too.  An acked key missing is lost-ack.

Needs ZODB.  Without it ``check`` raises ``RuntimeError`` with one line, which the harness turns
into a ``checker-crashed`` verdict for each state naming it: a missing dependency is no finding."""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any

from powercut import Checker, CheckInput, CheckResult
from powercut.checkers.keystate import key_state

MISSING = "the zodb workload needs ZODB: pip install 'powercut[apps]'"
DEFAULTS: dict[str, Any] = {"seed": 0, "value_bytes": 2048, "file": "Data.fs"}
TREE = "t"
PREFIX = "powercut "
SETUP = "powercut setup"
Z64 = b"\0" * 8


def value(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"zodb:{seed}:{i}").randbytes(size)


def _keys(keys: set[int]) -> str:
    return ", ".join(map(str, sorted(keys)[:10])) + (" ..." if len(keys) > 10 else "")


def _err(e: BaseException, path: str = "") -> str:
    """One line for an exception, the mount's path shortened to the file's name."""
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return (text.replace(path, os.path.basename(path)) if path else text)[:300]


class Corrupt(Exception):
    """The storage is not what was written (the message says how)."""


class _Capture(logging.Handler):
    def __init__(self, path: str) -> None:
        super().__init__(logging.WARNING)
        self.path = path
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(
            record.getMessage()
            .splitlines()[0]
            .replace(self.path, os.path.basename(self.path))[:200]
        )


@dataclass(slots=True)
class Expect:
    seed: int
    size: int
    acked: set[int]
    begun: set[int]
    notes: list[str] = field(default_factory=list)

    def state(self, i: int) -> str:
        return key_state(i, self.acked, self.begun)

    def value(self, i: int) -> bytes:
        return value(self.seed, i, self.size)


def _zodb() -> Any:
    try:
        import BTrees.check  # noqa: F401  (its presence: the checker runs BTrees.check.check)
        import ZODB
        import ZODB.FileStorage
        import ZODB.POSException
        import ZODB.scripts.fstest
        import ZODB.serialize
        import ZODB.utils
    except ImportError:
        raise RuntimeError(MISSING) from None
    return ZODB


def recover(zodb: Any, path: str) -> list[str]:
    """FileStorage's recovery on open (read-write), then closed; what it logged."""
    capture = _Capture(path)
    logger = logging.getLogger("ZODB.FileStorage")
    logger.addHandler(capture)
    try:
        zodb.FileStorage.FileStorage(path, read_only=False).close()
    except Exception as e:
        raise Corrupt(
            f"FileStorage refuses to open {os.path.basename(path)}: {_err(e, path)}"
        ) from None
    finally:
        logger.removeHandler(capture)
    return [f"FileStorage: {line}" for line in capture.lines]


def transactions(zodb: Any, storage: Any) -> list[tuple[bytes, str]]:
    """(tid, description) of every transaction; every record's pickle parsed for references."""
    out = []
    try:
        for txn in storage.iterator():
            descr = txn.description.decode("utf-8", "replace")
            for rec in txn:
                if rec.data:
                    try:
                        zodb.serialize.referencesf(rec.data)
                    except Exception as e:
                        raise Corrupt(
                            f"transaction {descr!r}: the record of oid {zodb.utils.u64(rec.oid)} does "
                            f"not unpickle: {_err(e)}"
                        ) from None
            out.append((txn.tid, descr))
    except Corrupt:
        raise
    except Exception as e:
        raise Corrupt(f"iterating the transactions: {_err(e)}") from None
    return out


def walk(zodb: Any, storage: Any, conn: Any) -> int:
    """Load every object reachable from the root; how many there are."""
    u64 = zodb.utils.u64
    seen, stack = {Z64}, [(Z64, Z64)]
    while stack:
        oid, parent = stack.pop()
        try:
            data, _serial = storage.load(oid)
            refs = zodb.serialize.referencesf(data)
            conn.get(oid)._p_activate()
        except zodb.POSException.POSKeyError:
            raise Corrupt(
                f"oid {u64(oid)}, referenced by oid {u64(parent)}, is missing (a dangling "
                "reference)"
            ) from None
        except Exception as e:
            raise Corrupt(f"oid {u64(oid)} does not load: {_err(e)}") from None
        for ref in refs:
            if ref not in seen:
                seen.add(ref)
                stack.append((ref, oid))
    return len(seen)


def tree_items(tree: Any, where: str) -> dict[Any, Any]:
    import BTrees.check

    try:
        tree._check()
        BTrees.check.check(tree)
        return dict(tree.items())
    except Exception as e:
        raise Corrupt(f"the tree {where} fails its consistency check: {_err(e)}") from None


def keyed(txns: list[tuple[bytes, str]], exp: Expect) -> list[tuple[bytes, int]]:
    """The workload's transactions, (tid, key), in file order."""
    out: list[tuple[bytes, int]] = []
    for tid, descr in txns:
        if not descr.startswith(PREFIX) or descr == SETUP:
            continue
        try:
            i = int(descr[len(PREFIX) :])
        except ValueError:
            raise Corrupt(
                f"a transaction described {descr!r}, which the workload never writes"
            ) from None
        if out and i <= out[-1][1]:
            raise Corrupt(f"transaction {i!r} comes after transaction {out[-1][1]} in the file")
        out.append((tid, i))
    return out


def compare(items: dict[Any, Any], want: set[int], exp: Expect, where: str) -> None:
    """The tree's items are exactly ``want``, each byte-exact."""
    for i in sorted(set(items) - want, key=repr):
        state = exp.state(i) if isinstance(i, int) else "never begun"
        if state == "never begun":
            raise Corrupt(f"key {i!r} is in the tree {where} but was never begun")
        raise Corrupt(
            f"key {i} ({state}) is in the tree {where} without its transaction 'powercut {i}': "
            "half a commit"
        )
    for i in sorted(want):
        if i not in items:
            raise Corrupt(
                f"transaction 'powercut {i}' is in the file but key {i} is not in the tree {where}: "
                "half a commit"
            )
        got = items[i]
        if got != exp.value(i):
            if isinstance(got, bytes) and len(got) != exp.size:
                what = f"{len(got)} bytes, {exp.size} written"
            elif not isinstance(got, bytes):
                what = f"a {type(got).__name__}"
            else:
                what = f"differs from byte {next(k for k, (a, b) in enumerate(zip(got, exp.value(i))) if a != b)}"
            raise Corrupt(f"key {i} ({exp.state(i)}) {where}: its value {what}")


def judge(zodb: Any, storage: Any, exp: Expect) -> CheckResult:
    """Steps 4 and 5 on the recovered, read-only storage."""
    txns = transactions(zodb, storage)
    try:
        storage.load(Z64)
    except zodb.POSException.POSKeyError:
        return _nothing(exp, "no root object")
    db = zodb.DB(storage)
    try:
        conn = db.open()
        count = walk(zodb, storage, conn)
        tree = conn.root().get(TREE)
        if tree is None:
            return _nothing(exp, "no tree under the root")
        items = tree_items(tree, "now")
        keys = keyed(txns, exp)
        for i in sorted(k for _, k in keys):
            if exp.state(i) == "never begun":
                raise Corrupt(f"transaction 'powercut {i}' is committed but was never begun")
        compare(items, {k for _, k in keys}, exp, "now")
        for n, (tid, i) in enumerate(keys):
            then = db.open(at=tid)
            try:
                compare(
                    tree_items(then.root()[TREE], f"as of txn {i}"),
                    {k for _, k in keys[: n + 1]},
                    exp,
                    f"as of txn {i}",
                )
            finally:
                then.close()
        conn.close()
    finally:
        db.close()
    present = set(items)
    lost = exp.acked - present
    if lost:
        return CheckResult(
            "lost-ack",
            (
                f"acked key(s) {_keys(lost)} lost: the tree holds {_keys(present) or 'none'}",
                *exp.notes,
            ),
        )
    absent = exp.begun - present
    note = f"; begun, not acked, absent: {_keys(absent)}" if absent else ""
    return CheckResult(
        "pass",
        (
            f"{len(exp.acked)} acked key(s) intact; {len(txns)} transactions, {count} "
            f"objects, fstest ok{note}",
            *exp.notes,
        ),
    )


def _nothing(exp: Expect, what: str) -> CheckResult:
    if exp.acked:
        return CheckResult(
            "lost-ack", (f"{what} but key(s) {_keys(exp.acked)} were acked", *exp.notes)
        )
    return CheckResult("pass", (f"{what} and nothing acked", *exp.notes))


def check(inp: CheckInput) -> CheckResult:
    zodb = _zodb()
    name = str(inp.params.get("file", DEFAULTS["file"]))
    path = os.path.join(inp.mount, name)
    exp = Expect(
        int(inp.params.get("seed", DEFAULTS["seed"])),
        int(inp.params.get("value_bytes", DEFAULTS["value_bytes"])),
        {int(k) for k in inp.acked},
        {int(k) for k in inp.begun},
    )
    if not os.path.exists(path):
        return _nothing(exp, f"{name} is missing")
    try:
        os.unlink(path + ".index")
    except FileNotFoundError:
        pass
    try:
        exp.notes.extend(recover(zodb, path))
        try:
            zodb.scripts.fstest.check(path)
        except zodb.scripts.fstest.FormatError as e:
            raise Corrupt(f"fstest after recovery: {_err(e, path)}") from None
        storage = zodb.FileStorage.FileStorage(path, read_only=True)
        try:
            return judge(zodb, storage, exp)
        finally:
            storage.close()
    except Corrupt as e:
        return CheckResult("corrupt-data", (str(e), *exp.notes))


CHECKER = Checker(
    name="zodb",
    description="FileStorage's recovery, fstest, every object loaded, every acked key "
    "byte-exact (now and in history), begun ones all or nothing",
    check=check,
)

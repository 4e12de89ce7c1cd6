"""``pointer-before-data``: the commit in flight at the cut made a file durable -- fsynced it, or
renamed it into place -- whose contents name another file whose own data was written and not yet
synced: a crash after the pointer is durable leaves it naming a file with its data missing (a
LevelDB-style CURRENT naming a MANIFEST that was never fsynced).  "Names" is what the trace shows:
a write to the pointer (under its final name or the name it was renamed from) whose bytes, as
strace printed them, hold the other file's name.  Its counterfactual: the named file's data, with
the metadata, up to its next sync after the pointer was made durable (the end of the log when none
came) -- the state passes, the order is why."""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import ClassVar

from powercut.core import syscalls as sc
from powercut.core.rules.base import Plan, PlanInput, Rule
from powercut.core.syscalls import Op
from powercut.core.tracefacts import InFlight, rel

ID = "pointer-before-data"
MIN_NAME = 3   # a file name shorter than this is not looked for in the pointer's bytes
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')   # a buffer as strace prints it (the fd's <path> is not one)


@dataclass(frozen=True, slots=True)
class PointerBeforeData:
    """``publish`` (an fsync of ``pointer``, or the rename that put it in place) made ``pointer``
    durable while its write ``names`` held the name of ``subject``, whose ``writes`` (its data since
    its last sync) were not synced; ``ack``: the ack that would have closed the commit in flight."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op | None
    pointer: str
    publish: Op
    names: Op
    writes: tuple[Op, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.writes[-2:], self.names, self.publish)


def _naming(path: str, content: dict[str, list[Op]], unsynced: dict[str, list[Op]]) -> tuple[str, Op] | None:
    """(the first unsynced file, other than ``path``, whose name one of ``path``'s writes holds; that
    write), or None."""
    for target in unsynced:
        name = posixpath.basename(target)
        if target == path or len(name) < MIN_NAME:
            continue
        hit = next((w for w in content.get(path, ()) if any(name in b for b in _QUOTED.findall(w.text))), None)
        if hit is not None:
            return target, hit
    return None


def check(window: InFlight, torn: tuple[int, ...] = ()) -> PointerBeforeData | None:
    """The first file the commit in flight made durable (an fsync, then a rename into place if one
    followed) while a write to it named a file with unsynced data; None when every file a pointer
    named was synced first."""
    unsynced: dict[str, list[Op]] = {}   # file -> its data writes since its last sync
    content: dict[str, list[Op]] = {}    # file -> its writes since it was emptied (they move with a rename)
    start = window.calls[0].seq if window.calls else -1
    found: PointerBeforeData | None = None
    for o in (*window.earlier, *window.calls):
        if not o.ok:
            continue
        here = start >= 0 and o.seq >= start
        k = o.kind
        if k in (sc.SYNC, sc.SYNCFS):
            unsynced.clear()
        elif k == sc.OPEN and "O_TRUNC" in o.flags:
            content[o.path] = []
        elif k == sc.WRITE:
            unsynced.setdefault(o.path, []).append(o)
            content.setdefault(o.path, []).append(o)
        elif k in (sc.TRUNCATE, sc.ALLOCATE):
            unsynced.setdefault(o.path, []).append(o)
        elif k in (sc.FSYNC, sc.FDATASYNC) or (k == sc.MSYNC and "MS_SYNC" in o.flags):
            hit = _naming(o.path, content, unsynced) if here and found is None else None
            if hit is not None:
                target, names = hit
                found = PointerBeforeData(rel(target, window.root), window.ack, rel(o.path, window.root), o, names,
                                          tuple(unsynced[target]))
            unsynced.pop(o.path, None)
        elif k == sc.RENAME:
            if o.path in content:
                content[o.path2] = content.pop(o.path)
            if o.path in unsynced:
                unsynced[o.path2] = unsynced.pop(o.path)
            if found is not None and rel(o.path, window.root) == found.pointer:
                found = PointerBeforeData(found.subject, found.ack, rel(o.path2, window.root), o, found.names,
                                          found.writes)
        elif k == sc.UNLINK:
            content.pop(o.path, None)
            unsynced.pop(o.path, None)
    return found


def sentence(f: PointerBeforeData) -> str:
    nbytes = sum(o.nbytes for o in f.writes if o.kind == sc.WRITE)
    how = f"renamed it into place (trace line {f.publish.line})" if f.publish.kind == sc.RENAME \
        else f"its {f.publish.kind} (trace line {f.publish.line})"
    key = f" ({f.ack.text})" if f.ack is not None else ""
    return (f"the commit in flight at the crash{key} made {f.pointer} durable -- {how} -- while it names "
            f"{f.subject} (written at trace line {f.names.line}), whose own data ({len(f.writes)} "
            f"change{'s' if len(f.writes) != 1 else ''}, {nbytes} bytes) was not yet synced: a crash then "
            f"leaves {f.pointer} pointing at {f.subject} with its data missing; fsync {f.subject} before "
            "publishing the name that points to it")


def plan(f: PointerBeforeData, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.publish)


RULE = Rule(ID, "cut", PointerBeforeData, check, sentence, plan,
            advice="fsync a file before publishing the name that points to it (before the pointer's fsync or "
                   "its rename into place)")

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

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import InFlight, rel

ID = "pointer-before-data"
MIN_NAME = 3  # a file name shorter than this is not looked for in the pointer's bytes
_QUOTED = re.compile(
    r'"((?:[^"\\]|\\.)*)"'
)  # a buffer as strace prints it (the fd's <path> is not one)


@dataclass(frozen=True, slots=True)
class PointerBeforeData:
    """``publish`` (an fsync of ``pointer``, or the rename that put it in place) made ``pointer``
    durable while it named ``subject``, whose ``writes`` (its data since its last sync) were not
    synced: its write ``names`` held the name, or (None) recovery read ``pointer`` and then
    ``subject`` (a name no printed byte shows: a file number); ``ack``: the ack that would have
    closed the commit in flight."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op | None
    pointer: str
    publish: Op
    names: Op | None
    writes: tuple[Op, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.writes[-2:], *((self.names,) if self.names is not None else ()), self.publish)


@dataclass(slots=True)
class _Published:
    """A file made durable in the commit in flight while other files had unsynced data."""

    path: str
    op: Op
    unsynced: dict[str, tuple[Op, ...]]
    content: tuple[Op, ...]


def _named(p: _Published) -> tuple[str, Op] | None:
    """(the first unsynced file whose name one of the pointer's writes holds; that write), or None."""
    for target in p.unsynced:
        name = posixpath.basename(target)
        if len(name) < MIN_NAME:
            continue
        hit = next((w for w in p.content if any(name in b for b in _QUOTED.findall(w.text))), None)
        if hit is not None:
            return target, hit
    return None


def _followed(p: _Published, root: str, read: tuple[str, ...]) -> str | None:
    """The first unsynced file recovery read after reading the pointer, or None."""
    name = rel(p.path, root).lstrip("/")
    if name not in read:
        return None
    after = read[read.index(name) + 1 :]
    return next((t for t in p.unsynced if rel(t, root).lstrip("/") in after), None)


def check(window: InFlight, torn: tuple[int, ...] = ()) -> PointerBeforeData | None:
    """The first file the commit in flight made durable (an fsync, then a rename into place if one
    followed) while it named a file with unsynced data -- by a write holding its name, else (when
    what recovery read is known) by recovery reading it and then that file; None when every file a
    pointer named was synced first."""
    unsynced: dict[str, list[Op]] = {}  # file -> its data writes since its last sync
    content: dict[
        str, list[Op]
    ] = {}  # file -> its writes since it was emptied (they move with a rename)
    start = window.calls[0].seq if window.calls else -1
    published: list[_Published] = []
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
            others = {t: tuple(ws) for t, ws in unsynced.items() if t != o.path}
            if here and others:
                published.append(_Published(o.path, o, others, tuple(content.get(o.path, ()))))
            unsynced.pop(o.path, None)
        elif k == sc.RENAME:
            if o.path in content:
                content[o.path2] = content.pop(o.path)
            if o.path in unsynced:
                unsynced[o.path2] = unsynced.pop(o.path)
            for p in published:
                if p.path == o.path:  # put in place under its new name: that is its publication
                    p.path, p.op = o.path2, o
        elif k == sc.UNLINK:
            content.pop(o.path, None)
            unsynced.pop(o.path, None)
    for p in published:
        named = _named(p)
        target = named[0] if named else _followed(p, window.root, window.read)
        if target is not None:
            return PointerBeforeData(
                rel(target, window.root),
                window.ack,
                rel(p.path, window.root),
                p.op,
                named[1] if named else None,
                p.unsynced[target],
            )
    return None


def sentence(f: PointerBeforeData) -> str:
    nbytes = sum(o.nbytes for o in f.writes if o.kind == sc.WRITE)
    how = (
        f"renamed it into place (trace line {f.publish.line})"
        if f.publish.kind == sc.RENAME
        else f"its {f.publish.kind} (trace line {f.publish.line})"
    )
    key = f" ({f.ack.text})" if f.ack is not None else ""
    named = (
        f"while it names {f.subject} (written at trace line {f.names.line})"
        if f.names is not None
        else f"while recovery goes from it to {f.subject} (it read {f.pointer}, then {f.subject})"
    )
    changes = f"{len(f.writes)} change{'s' if len(f.writes) != 1 else ''}, {nbytes} bytes"
    return (
        f"the commit in flight at the crash{key} made {f.pointer} durable -- {how} -- {named}, whose own data "
        f"({changes}) was not yet synced: a crash then "
        f"leaves {f.pointer} pointing at {f.subject} with its data missing; fsync {f.subject} before "
        "publishing the name that points to it"
    )


def plan(f: PointerBeforeData, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.publish)


RULE = Rule(
    ID,
    "cut",
    PointerBeforeData,
    check,
    sentence,
    plan,
    advice="fsync a file before publishing the name that points to it (before the pointer's fsync or "
    "its rename into place)",
)

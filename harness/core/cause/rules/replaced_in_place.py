"""``replaced-in-place``: the commit in flight at the cut emptied a file in place (renamed it away,
or truncated it) and wrote a new one under its name, and a sync of something else came before the
new file's own: the new, still empty file can be durable before its contents.  Its counterfactual:
the new file's data, with the metadata, up to its own fsync after the sync that came first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from powercut.core.trace.tracefacts import BARRIERS, InFlight, rel

ID = "replaced-in-place"


@dataclass(frozen=True, slots=True)
class ReplacedInPlace:
    """The commit in flight emptied ``subject`` (``away``: the rename that moved it away, or the
    truncation), wrote a new one under its name (``writes``), and ``barrier`` -- a sync of something
    else -- came before the new file's own; ``ack``: the ack that would have closed it."""

    rule: ClassVar[str] = ID
    subject: str
    ack: Op | None
    away: Op
    writes: tuple[Op, ...]
    barrier: Op
    moved_to: str = ""  # where the rename moved the old file ("" for a truncation)
    synced: str = ""  # the file the barrier synced ("" for sync/syncfs)

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.away, *self.writes[-2:], self.barrier)


def _existing(calls: tuple[Op, ...]) -> set[str]:
    """The files the calls show to exist after them: opened, written, renamed or linked to, and not
    removed or renamed away since."""
    out: set[str] = set()
    for o in calls:
        if not o.ok:
            continue
        if o.kind in (sc.OPEN, sc.WRITE, sc.TRUNCATE):
            out.add(o.path)
        elif o.kind in (sc.RENAME, sc.LINK):
            if o.kind == sc.RENAME:
                out.discard(o.path)
            out.add(o.path2)
        elif o.kind == sc.UNLINK:
            out.discard(o.path)
    return out


def check(window: InFlight, torn: tuple[int, ...] = ()) -> ReplacedInPlace | None:
    """The first file of the commit in flight that was emptied in place -- renamed away, opened with
    O_TRUNC or truncated to 0 while it existed -- and written anew under its name, with a sync of
    another file (or a sync/syncfs) before the new file's own fsync; None when every such file was
    synced first.  A file the trace first shows created with O_CREAT|O_TRUNC is new, not emptied."""
    away: dict[str, Op] = {}
    writes: dict[str, list[Op]] = {}
    exists = _existing(window.earlier)
    for o in window.calls:
        if not o.ok:
            continue
        emptied = (
            o.kind == sc.OPEN and "O_TRUNC" in o.flags or o.kind == sc.TRUNCATE and o.nbytes == 0
        )
        if o.kind == sc.RENAME:
            away[o.path] = o
            writes.pop(o.path, None)
        elif (
            emptied and o.path in exists and o.path not in away
        ):  # a new file after a rename away is its
            away[o.path] = o  # replacement's
            writes.pop(o.path, None)
        elif o.kind == sc.WRITE and o.path in away:
            writes.setdefault(o.path, []).append(o)
        elif o.kind in BARRIERS:
            if o.kind in (sc.FSYNC, sc.FDATASYNC) and o.path in away:
                away.pop(o.path)
                writes.pop(o.path, None)
                continue
            hit = next((p for p in away if writes.get(p)), None)
            if hit is not None:
                a = away[hit]
                return ReplacedInPlace(
                    rel(hit, window.root),
                    window.ack,
                    a,
                    tuple(writes[hit]),
                    o,
                    rel(a.path2, window.root) if a.kind == sc.RENAME else "",
                    rel(o.path, window.root) if o.path else "",
                )
        exists |= _existing((o,))
    return None


def sentence(f: ReplacedInPlace) -> str:
    how = (
        f"renamed it away to {f.moved_to} (trace line {f.away.line})"
        if f.moved_to
        else f"truncated it (trace line {f.away.line})"
    )
    other = f"the {f.barrier.kind} of {f.synced}" if f.synced else "a sync"
    return (
        f"the commit in flight at the crash{' (' + f.ack.text + ')' if f.ack else ''} replaced {f.subject} in "
        f"place -- {how} and wrote a new one -- and {other} (trace line {f.barrier.line}) came before the new "
        f"file's own fsync: it can make the new, still empty {f.subject} durable before its contents, and a "
        "crash then leaves it empty though earlier commits were acked; write the new file under a temporary "
        "name, fsync it, then rename it over the old one"
    )


def plan(f: ReplacedInPlace, inp: PlanInput) -> Plan | None:
    return inp.up_to_next_sync(ID, f.subject, f.barrier)


RULE = Rule(
    ID,
    "cut",
    ReplacedInPlace,
    check,
    sentence,
    plan,
    advice="write the new file under a temporary name, fsync it, then rename it over the old one",
)

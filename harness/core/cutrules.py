"""The rules about the commit in flight at the cut, in the order they are tried -- ``CUT_RULES``;
each a ``CutRule``: its id and its check, a pure function over that commit's calls (core/tracefacts.
InFlight) and the log entries the state tore, that returns what it found as facts
(``CutFinding``), never as words (core/causewords.py says them):

- ``replaced-in-place``: it emptied a file in place (renamed it away, or truncated it) and wrote a
  new one under its name, and a sync of something else came before the new file's own: the new,
  still empty file can be durable before its contents;
- ``unordered-writes``: it made two or more writes durable with one barrier;
- ``unchecked-tear``: the state tore one of its writes.

The rules an ack can break are core/ackrules.py's; the vocabulary of causes is core/causerules.py's.
Pure: no I/O."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from powercut.core import syscalls as sc
from powercut.core.syscalls import Op
from powercut.core.tracefacts import BARRIERS, InFlight, rel

__all__ = ["CUT_RULES", "REPLACED", "TORN", "UNORDERED", "CutFinding", "CutRule", "ReplacedInPlace", "Tear",
           "UnorderedWrites", "replaced_in_place", "unchecked_tear", "unordered_writes"]

UNORDERED = "unordered-writes"
REPLACED = "replaced-in-place"
TORN = "unchecked-tear"


# -- what the rules find: ``subject`` (the file, or the files comma-separated) and ``evidence`` -----

@dataclass(frozen=True, slots=True)
class ReplacedInPlace:
    """replaced-in-place: the commit in flight emptied ``subject`` (``away``: the rename that moved it
    away, or the truncation), wrote a new one under its name (``writes``), and ``barrier`` -- a sync
    of something else -- came before the new file's own; ``ack``: the ack that would have closed it."""

    rule: ClassVar[str] = REPLACED
    subject: str
    ack: Op | None
    away: Op
    writes: tuple[Op, ...]
    barrier: Op
    moved_to: str = ""     # where the rename moved the old file ("" for a truncation)
    synced: str = ""       # the file the barrier synced ("" for sync/syncfs)

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.away, *self.writes[-2:], self.barrier)


@dataclass(frozen=True, slots=True)
class UnorderedWrites:
    """unordered-writes: the commit in flight made ``writes`` (to the files ``subject``) durable with
    the one ``barrier``; ``ack``: the ack that would have closed it (None: none followed)."""

    rule: ClassVar[str] = UNORDERED
    subject: str
    ack: Op | None
    writes: tuple[Op, ...]
    barrier: Op

    @property
    def shown(self) -> tuple[Op, ...]:
        """The writes the evidence shows: the last four."""
        return self.writes[-4:]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (*self.shown, self.barrier)


@dataclass(frozen=True, slots=True)
class Tear:
    """unchecked-tear: the state tore the writes at the log entries ``entries``; the commit in
    flight wrote ``writes`` (to the files ``subject``, "its writes" when the trace shows none) and
    ``ack`` would have closed it (None: none followed)."""

    rule: ClassVar[str] = TORN
    subject: str
    ack: Op | None
    writes: tuple[Op, ...]
    entries: tuple[int, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return self.writes[-4:]


CutFinding = ReplacedInPlace | UnorderedWrites | Tear   # a rule the commit in flight at the cut broke


# -- the rules about the commit in flight at the cut ------------------------------------------------

def _files(writes: Sequence[Op], root: str) -> str:
    return ", ".join(dict.fromkeys(rel(w.path, root) for w in writes))


def replaced_in_place(window: InFlight, torn: tuple[int, ...] = ()) -> CutFinding | None:
    """The first file of the commit in flight that was emptied in place -- renamed away, opened with
    O_TRUNC or truncated to 0 -- and written anew under its name, with a sync of another file (or a
    sync/syncfs) before the new file's own fsync; None when every such file was synced first."""
    away: dict[str, Op] = {}
    writes: dict[str, list[Op]] = {}
    for o in window.calls:
        if not o.ok:
            continue
        if o.kind == sc.RENAME:
            away[o.path] = o
            writes.pop(o.path, None)
        elif (o.kind == sc.OPEN and "O_TRUNC" in o.flags or o.kind == sc.TRUNCATE and o.nbytes == 0) \
                and o.path not in away:   # a new file made after a rename away is that replacement's
            away[o.path] = o
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
                return ReplacedInPlace(rel(hit, window.root), window.ack, a, tuple(writes[hit]), o,
                                       rel(a.path2, window.root) if a.kind == sc.RENAME else "",
                                       rel(o.path, window.root) if o.path else "")
    return None


def unordered_writes(window: InFlight, torn: tuple[int, ...] = ()) -> CutFinding | None:
    """The first barrier of the commit in flight that made two or more successful writes durable at
    once (with no barrier between them); None when each barrier covered at most one.  (``torn``: the
    signature of every cut rule; a tear is not this rule's concern.)"""
    writes: list[Op] = []
    for o in window.calls:
        if o.kind == sc.WRITE and o.ok:
            writes.append(o)
        elif o.kind in BARRIERS and o.ok:
            if len(writes) >= 2:
                return UnorderedWrites(_files(writes, window.root), window.ack, tuple(writes), o)
            writes.clear()
    return None


def unchecked_tear(window: InFlight, torn: tuple[int, ...] = ()) -> CutFinding | None:
    """The tear of the state that tore the writes at the log entries ``torn`` (None: it tore none),
    with the successful writes of the commit in flight."""
    if not torn:
        return None
    writes = tuple(o for o in window.calls if o.kind == sc.WRITE and o.ok)
    return Tear(_files(writes, window.root) or "its writes", window.ack, writes, torn)


@dataclass(frozen=True, slots=True)
class CutRule:
    """A rule about the commit in flight at the cut: its id and its check (over that commit's calls
    and the log entries the state tore; None when kept)."""

    id: str
    check: Callable[[InFlight, tuple[int, ...]], CutFinding | None]


CUT_RULES = (CutRule(REPLACED, replaced_in_place), CutRule(UNORDERED, unordered_writes), CutRule(TORN, unchecked_tear))

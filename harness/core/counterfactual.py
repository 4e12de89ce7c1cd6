"""A cause proven, not only true (pure; issue 52): the counterfactual state of a cause rule -- the
failing state with the writes the rule says were missing made durable, and nothing else of the
program's -- as a what-if state (core/crashmodels/whatif.py) to judge.  debug/verify.py judges it:
passes, the rule is why the state failed; still fails, the rule is true but not why.

What each rule says was missing (``plan``):

- ``no-fsync``, ``ack-before-sync-returned``, ``no-msync``, ``rename-before-fsync``: the file's
  data (the rename's: the file at its new name), with the filesystem's metadata (journal, inodes,
  directories: every write that is no file's data), as the log holds them up to the file's next
  sync after the ack (its fsync, fdatasync, msync, or a sync/syncfs; the end of the log when none
  came) -- what an fsync before the ack would have made durable, at the latest;
- ``no-dir-fsync``: the filesystem's metadata up to the directory's next fsync, no file's data;
- ``replaced-in-place``: the new file's data, with the metadata, up to its own fsync after the sync
  that came first;
- ``unordered-writes``: every write up to the barrier that made them durable at once, in log
  order -- the commit in flight's writes all kept;
- ``unchecked-tear``: every write the state lost or tore before its cut, kept whole;
- ``acked-after-error``: none (the failed write's data is not in the log: nothing to make durable).

Which file a data write belongs to comes from the recording's file map (each file's sectors at the
end of the recording, guest/filemap.py); a write of no mapped file is metadata.  A file whose
blocks were freed before the end (deleted, truncated) is not mapped: its writes count as metadata,
which may make a counterfactual pass that should not -- said in docs/checking.md."""
from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from powercut.core import syscalls as sc
from powercut.core.causerules import (
    EARLY,
    NO_DIR_FSYNC,
    NO_FSYNC,
    NO_MSYNC,
    RENAME,
    AckFinding,
    CutFinding,
    RenameBeforeSync,
    ReplacedInPlace,
    SyncStillRunning,
    Tear,
    UnorderedWrites,
    Unsynced,
    UnsyncedMapping,
    UnsyncedNames,
)
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.crashmodels.whatif import WHAT_IF
from powercut.core.crashstate import CrashState
from powercut.core.dmlog import Entry
from powercut.core.syscalls import Op, Trace

__all__ = ["Plan", "owners", "plan", "what_if"]

FILE_RULES = (NO_FSYNC, EARLY, NO_MSYNC, RENAME)   # what they say was missing: a file's data


def owners(entries: Sequence[Entry], files: Mapping[str, Sequence[Sequence[int]]], log_sector: int,
           map_sector: int = 512) -> tuple[str | None, ...]:
    """Per log entry, the file (its path in the map, relative to the mount, no leading slash) whose
    sectors a data write touches; None for an entry that writes no mapped file's sectors (metadata)
    or writes nothing.  ``files``: the file map's ``files`` (sector ranges in ``map_sector`` bytes)."""
    spans = sorted((int(a) * map_sector, (int(a) + int(n)) * map_sector, path)
                   for path, extents in files.items() for a, n in extents if int(n) > 0)
    starts = [s for s, _, _ in spans]
    longest = max((e - s for s, e, _ in spans), default=0)
    out: list[str | None] = []
    for e in entries:
        if not e.changes_device:
            out.append(None)
            continue
        lo, hi = e.sector * log_sector, (e.sector + e.nr_sectors) * log_sector
        first = bisect.bisect_left(starts, lo - longest)
        hit = next((path for s, end, path in spans[first:bisect.bisect_left(starts, hi)] if s < hi and end > lo), None)
        out.append(hit)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a rule's counterfactual makes durable: the data of ``files`` (None: every write the
    state lost before its cut) and the metadata, as logged before entry ``until``; ``sync``: the
    call whose completion bounds it (None: the end of the log, or the state's own cut)."""

    rule: str
    subject: str
    files: frozenset[str] | None
    until: int
    sync: Op | None = None

    def words(self) -> str:
        """What was made durable, as the cause's proof says it."""
        if self.files is None and self.sync is not None:
            return (f"every write of the commit in flight up to its {self.sync.kind} (trace line {self.sync.line}, "
                    f"log entry #{self.until})")
        if self.files is None:
            return "every write the state lost or tore before its cut kept whole"
        data = (f"{', '.join('/' + f for f in sorted(self.files))}'s data and the filesystem's metadata"
                if self.files else "the filesystem's metadata (no file's data)")
        if self.sync is None:
            return f"{data} as logged to the end of the recording"
        what = "sync" if self.sync.kind in (sc.SYNC, sc.SYNCFS) else self.sync.kind
        which = f"the {what} still running at the ack" if self.rule == EARLY else f"its next {what}"
        return f"{data} as logged up to {which} (trace line {self.sync.line}, log entry #{self.until})"


def _next_sync(trace: Trace, after: Op, path: str, directory: bool) -> Op | None:
    """The first successful call after ``after`` that makes ``path``'s changes durable."""
    for o in trace.ops[after.seq + 1:]:
        if not o.ok:
            continue
        if o.kind in (sc.SYNC, sc.SYNCFS):
            return o
        if o.path != path:
            continue
        if o.kind in (sc.FSYNC, sc.FDATASYNC) or (not directory and o.kind == sc.MSYNC and "MS_SYNC" in o.flags):
            return o
    return None


def _entry_after(trace: Trace, aligned: Mapping[int, int], op: Op, n: int) -> int:
    """The log entry of the first mark after ``op`` in the trace (the log holds what ``op`` wrote
    before it); ``n`` (the end of the log) when no mark follows."""
    return next((aligned[o.seq] for o in trace.ops[op.seq + 1:] if o.kind == sc.MARK and o.seq in aligned), n)


def plan(f: AckFinding | CutFinding, trace: Trace, aligned: Mapping[int, int], root: str, cut: int,
         n: int) -> Plan | None:
    """The counterfactual of finding ``f`` about a state cut at ``cut`` of a log of ``n`` entries;
    None for a rule with nothing to make durable (acked-after-error)."""
    if isinstance(f, Tear):
        return Plan(f.rule, f.subject, None, cut)
    if isinstance(f, UnorderedWrites):   # the barrier's writes all durable: every write up to it, in log order
        return Plan(f.rule, f.subject, None, max(_entry_after(trace, aligned, f.barrier, n), cut), f.barrier)
    path = root.rstrip("/") + f.subject if f.subject.startswith("/") else f.subject
    if isinstance(f, ReplacedInPlace):   # the new file's contents, durable with its name: up to its own fsync
        sync = _next_sync(trace, f.barrier, path, False)
    elif isinstance(f, SyncStillRunning):
        sync = f.sync
    elif f.rule in (*FILE_RULES, NO_DIR_FSYNC) and isinstance(f, (Unsynced, UnsyncedNames, UnsyncedMapping,
                                                                RenameBeforeSync)):
        sync = _next_sync(trace, f.ack, path, f.rule == NO_DIR_FSYNC)
    else:
        return None   # acked-after-error: nothing to make durable
    until = _entry_after(trace, aligned, sync, n) if sync is not None else n
    files = frozenset() if f.rule == NO_DIR_FSYNC else frozenset({f.subject.lstrip("/")})
    return Plan(f.rule, f.subject, files, max(until, cut), sync)


def what_if(sp: SpaceTables, failing: CrashState, owned: Sequence[str | None], p: Plan) -> CrashState | None:
    """The failing state with ``p``'s writes made durable, as a what-if state judged against the
    failing state's keys; None when it adds no write (the counterfactual is the failing state)."""
    torn = {i for i, _ in failing.torn}
    gone = set(failing.dropped) | torn
    data = sp.is_data
    kept = {i for i in range(failing.cut) if data[i] and i not in gone}
    add = [i for i in range(p.until) if data[i] and i not in kept
           and (p.files is None or owned[i] is None or owned[i] in p.files)]
    if not add:
        return None
    made = kept | set(add)
    return WHAT_IF.make(sp, p.until, failing.cut, [i for i in range(p.until) if data[i] and i not in made])

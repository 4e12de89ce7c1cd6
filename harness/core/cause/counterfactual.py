"""A cause proven, not only true (pure; issue 52): the counterfactual state of a cause rule -- the
failing state with the writes the rule says were missing made durable, and nothing else of the
program's -- as a what-if state (core/crashmodels/whatif.py) to judge.  debug/verify.py judges it:
passes, the rule is why the state failed; still fails, the rule is true but not why.

What each rule says was missing is its own ``plan`` (core/cause/rules/: a file's data and the metadata up
to the file's next sync, the metadata up to a directory's fsync, the writes of the commit in
flight); here it is made a state: ``what_if`` adds exactly the plan's writes to the failing state.
``kill_equivalent`` is the one counterfactual no rule plans: every write the program made before
the cut durable, nothing after -- what a process kill at that point leaves.

Which file a data write belongs to, as of the state's cut: the recording's file map (each file's
sectors at the end of the recording, guest/filemap.py) named as the files were named at the cut
(``as_of``: the renames the trace shows after it undone), and the writes the diagnosis blamed as
blame mapped them on the image of the cut (``as_blamed``); a write of no mapped file is metadata.
A file removed or truncated after the cut has no blocks in the map, so its writes count as
metadata and may be made durable by another file's counterfactual: ``removed_after`` names such
files, ``mixed_in`` those a plan's what-if may keep while they still exist in it, and
debug/verify.py credits no what-if that passes while one of them is a file recovery read (or may
have read) -- said in docs/checking.md."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from powercut.core.cause.rules.base import Plan
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.crashmodels.whatif import WHAT_IF
from powercut.core.log.dmlog import FUA, Entry
from powercut.core.log.marknames import END_MARK, ORDER_BEGIN, ORDER_END
from powercut.core.states.crashstate import CrashState
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op, Trace
from powercut.core.trace.tracefacts import Pending

__all__ = [
    "Kill",
    "as_blamed",
    "as_of",
    "changed_after",
    "kill_equivalent",
    "kill_point",
    "mixed_in",
    "owners",
    "removed_after",
    "to_commit",
    "unlogged",
    "what_if",
    "written_back",
]


def owners(
    entries: Sequence[Entry],
    files: Mapping[str, Sequence[Sequence[int]]],
    log_sector: int,
    map_sector: int = 512,
) -> tuple[str | None, ...]:
    """Per log entry, the file (its path in the map, relative to the mount, no leading slash) whose
    sectors a data write touches; None for an entry that writes no mapped file's sectors (metadata)
    or writes nothing.  ``files``: the file map's ``files`` (sector ranges in ``map_sector`` bytes)."""
    spans = sorted(
        (int(a) * map_sector, (int(a) + int(n)) * map_sector, path)
        for path, extents in files.items()
        for a, n in extents
        if int(n) > 0
    )
    starts = [s for s, _, _ in spans]
    longest = max((e - s for s, e, _ in spans), default=0)
    out: list[str | None] = []
    for e in entries:
        if not e.changes_device:
            out.append(None)
            continue
        lo, hi = e.sector * log_sector, (e.sector + e.nr_sectors) * log_sector
        first = bisect.bisect_left(starts, lo - longest)
        hit = next(
            (
                path
                for s, end, path in spans[first : bisect.bisect_left(starts, hi)]
                if s < hi and end > lo
            ),
            None,
        )
        out.append(hit)
    return tuple(out)


def what_if(
    sp: SpaceTables, failing: CrashState, owned: Sequence[str | None], p: Plan
) -> CrashState | None:
    """The failing state with ``p``'s writes made durable, as a what-if state judged against the
    failing state's keys; None when it adds no write (the counterfactual is the failing state)."""
    torn = {i for i, _ in failing.torn}
    gone = set(failing.dropped) | torn
    data = sp.is_data
    kept = {i for i in range(failing.cut) if data[i] and i not in gone}
    add = [
        i
        for i in range(p.until)
        if data[i]
        and i not in kept
        and (p.files is None or owned[i] is None or owned[i] in p.files)
    ]
    if not add:
        return None
    made = kept | set(add)
    return WHAT_IF.make(
        sp, p.until, failing.cut, [i for i in range(p.until) if data[i] and i not in made]
    )


def as_blamed(
    owned: Sequence[str | None], culprits: Sequence[Mapping[str, object]]
) -> tuple[str | None, ...]:
    """``owned`` (``owners``: the file map at the end of the recording) with the writes the
    diagnosis blamed (debug/blame.py: each write mapped on the image of the state's cut) owned as
    blame found them then: a data block of one file is that file's -- a file deleted, truncated or
    renamed away after the cut keeps its writes --, a directory block or the journal no file's.
    A write blame could not map, or mapped to several files, keeps its owner from the map."""
    out = list(owned)
    for c in culprits:
        entry = c.get("entry")
        what = str(c.get("what", ""))
        path = str(c.get("path", ""))
        if not isinstance(entry, int) or not 0 <= entry < len(out):
            continue
        if what == "data block" and path.startswith("/") and "," not in path:
            out[entry] = path.lstrip("/")
        elif what in ("directory block", "journal", "inode table"):
            out[entry] = None
    return tuple(out)


def after_cut(trace: Trace, aligned: Mapping[int, int], cut: int) -> int:
    """The trace position from which calls may have come after log entry ``cut``: just after the last
    mark aligned with an entry before the cut (0 when none is)."""
    before = [seq for seq, entry in aligned.items() if entry < cut]
    return max(before) + 1 if before else 0


def as_of(
    owned: Sequence[str | None], trace: Trace, aligned: Mapping[int, int], root: str, cut: int
) -> tuple[str | None, ...]:
    """``owned`` (``owners``: files named as at the end of the recording) with each file named as it
    was at log entry ``cut``: every rename under ``root`` the trace shows after the cut (``after_cut``)
    undone, the last first -- a file renamed into place after the cut keeps its writes under the
    name the rules use for it then (a directory renamed: every file under it)."""
    renames = [
        o for o in trace.ops[after_cut(trace, aligned, cut) :] if o.kind == sc.RENAME and o.ok
    ]
    if not renames:
        return tuple(owned)
    return tuple(None if o is None else _undo(o, renames, root) for o in owned)


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` with no leading slash; None when it is not under ``root`` or is it."""
    base = root.rstrip("/") + "/"
    if not root or not path.startswith(base):
        return None
    return path[len(base) :] or None


def _undo(path: str, renames: Sequence[Op], root: str) -> str:
    """``path`` (relative, no leading slash) as it was named before ``renames`` (in trace order)."""
    for o in reversed(renames):
        src = _under(o.path, root)
        dst = _under(o.path2, root)
        if src is None or dst is None:
            continue  # a name outside the filesystem under test
        if path == dst:
            path = src
        elif path.startswith(dst + "/"):
            path = src + path[len(dst) :]
    return path


def removed_after(trace: Trace, aligned: Mapping[int, int], root: str, cut: int) -> dict[str, int]:
    """The files under ``root`` (relative, as named when removed) that the trace shows removed or
    truncated after log entry ``cut`` (``after_cut``) -- unlinked, replaced by a rename over them,
    truncated, or opened with O_TRUNC while they existed (a name the trace never created before,
    nor renamed into place, did not: the recording starts on an empty filesystem) --, each with the
    trace position of its last such call.  Their blocks are not theirs in the file map at the end,
    so their writes count as metadata (``owners``) and a counterfactual may make them durable."""
    start = after_cut(trace, aligned, cut)
    pending = Pending(root)
    out: dict[str, int] = {}
    for o in trace.ops:
        path = _removes(o, pending.exists)
        pending.step(o)
        if o.seq < start or path is None:
            continue
        name = _under(path, root)
        if name is not None:
            out[name] = o.seq
    return out


def _removes(o: Op, exists: set[str]) -> str | None:
    """The path whose file ``o`` removes or truncates (``exists``: the names there before it); None."""
    if not o.ok:
        return None
    if o.kind in (sc.UNLINK, sc.TRUNCATE):
        return o.path
    if o.kind == sc.RENAME and o.path2 in exists:
        return o.path2
    if o.kind == sc.OPEN and "O_TRUNC" in o.flags and o.path in exists:
        return o.path
    return None


def to_commit(p: Plan, owned: Sequence[str | None], sp: SpaceTables, cut: int) -> Plan:
    """``p``, a plan to the end of the log (no sync of its files came), bounded instead by the commit
    that made its files' last logged write durable: the first FUA write after the last entry
    ``owned`` by its files (a journal's commit record, written after the flush that precedes it),
    else the first barrier flush, included -- the metadata that
    makes those writes reachable is committed with them or before, and the program's later renames
    and removals stay out; never before the state's ``cut``.  ``p`` itself when its files own no
    entry or no commit follows."""
    n = len(owned)
    if p.sync is not None or not p.files or p.until < n:
        return p
    last = max((i for i, o in enumerate(owned) if o in p.files), default=-1)
    if last < 0:
        return p
    entries = sp.entries
    after = range(last + 1, n)
    fua = next((i for i in after if entries[i].flags & FUA and entries[i].changes_device), None)
    commit = fua if fua is not None else next((i for i in after if sp.is_barrier(i)), None)
    if commit is None or commit + 1 >= n:
        return p
    return replace(p, until=max(commit + 1, cut), commit=commit)


def mixed_in(
    p: Plan,
    removed: Mapping[str, int],
    trace: Trace,
    aligned: Mapping[int, int],
    root: str,
    cut: int,
) -> frozenset[str]:
    """The files removed after the cut (``removed_after``) whose writes ``p``'s what-if may have made
    durable with its own: removed only after the sync that bounds the plan, so still there in the
    what-if (a removal before that sync is made durable with it: the file is gone there), and with
    data the log may hold between the cut and that sync -- unsynced changes or a shared writable
    mapping at the cut, or changed after it (``changed_after``).  A plan to the end of the log (no
    sync bounds it) makes every later name change durable: then the files removed, truncated or
    renamed away after the cut -- the what-if's world is not the cut's there.  None for a plan of
    every lost write (nothing is left out)."""
    if p.files is None:
        return frozenset()
    if p.sync is None and p.commit < 0:
        moved = {
            n
            for o in trace.ops[after_cut(trace, aligned, cut) :]
            if o.kind == sc.RENAME and o.ok
            if (n := _under(o.path, root)) is not None
        }
        return frozenset((set(removed) | moved) - p.files)
    # the bound's place in the trace: its sync, or (a commit) the calls after the last mark before it
    at = p.sync.seq if p.sync is not None else after_cut(trace, aligned, p.until) - 1
    late = {f for f, seq in removed.items() if seq > at and f not in p.files}
    if not late:
        return frozenset()
    return frozenset(late & changed_after(trace, aligned, root, cut, at))


def changed_after(
    trace: Trace, aligned: Mapping[int, int], root: str, cut: int, until: int
) -> set[str]:
    """The files under ``root`` (relative) whose data the log may hold between log entry ``cut`` and
    the call at trace position ``until``: unsynced changes or a shared writable mapping at the cut
    (core/trace/tracefacts.Pending), or written, truncated, allocated or mapped after it up to it."""
    start = after_cut(trace, aligned, cut)
    pending = Pending(root)
    for o in trace.ops[:start]:
        pending.step(o)
    paths = set(pending.dirty) | set(pending.mapped)
    for o in trace.ops[start : until + 1]:
        if o.ok and (
            o.kind in (sc.WRITE, sc.TRUNCATE, sc.ALLOCATE, sc.MMAP_SHARED)
            or (o.kind == sc.OPEN and "O_TRUNC" in o.flags)
        ):
            paths.add(o.path)
    return {n for path in paths if (n := _under(path, root)) is not None}


def unlogged(owned: Sequence[str | None], p: Plan) -> frozenset[str]:
    """The files of ``p`` that no log entry writes (``owned``: ``owners``): the file map at the end of
    the recording has no blocks of them, so what the rule says was missing cannot be found in the
    log -- e.g. stores through a mapping whose pages the program dropped (it truncated or removed the
    file) before they were written back: they never reached the disk.  A what-if state of such a
    file that still fails proves nothing of the rule."""
    if not p.files:
        return frozenset()
    return p.files - {o for o in owned if o is not None}


def written_back(entries: Sequence[Entry]) -> bool:
    """Whether the log ends with the recording's teardown mark: the filesystem was unmounted before
    it (guest/record.py), so the page cache's last writeback -- what the program left unsynced, a
    mapping's stores among it -- is in the log after the last mark of the program.  A log that
    filled up, or was cut short, has no such end."""
    return bool(entries) and entries[-1].mark == END_MARK


@dataclass(frozen=True, slots=True)
class Kill:
    """The kill-equivalent of a state cut at ``cut``: the log to entry ``until`` with every write
    durable -- at the mark ``at``, the first at or after the cut where the program had synced all it
    wrote, or (None) at the end of a recording that logged the page cache's writeback after the
    workload exited."""

    cut: int
    until: int
    at: Op | None

    def words(self) -> str:
        """Where the kill is, as the cause says it."""
        if self.at is None:
            return (
                "every write durable at the end of the recording (the program changed nothing after its last "
                "mark; the page cache written back)"
            )
        return (
            f"every write durable at mark {self.at.text} (trace line {self.at.line}, log entry #{self.until - 1}), "
            "the first point at or after the cut where the program had synced everything it wrote"
        )


def kill_point(
    trace: Trace, aligned: Mapping[int, int], root: str, cut: int, n: int, *, written_back: bool
) -> Kill | None:
    """Where a process kill leaves exactly what the disk holds, at or after log entry ``cut``: the
    first mark (of those aligned with the log) at or after it where no file under ``root`` has
    unsynced changes or a shared writable mapping not synced since, and no directory has unsynced
    names (core/trace/tracefacts.Pending walked through the trace); else the end of the log, when the
    recording ``written_back`` the page cache after the workload and the program changed nothing
    under ``root`` after its last mark (a kill right after that mark); else None -- no state of the
    log is known to be what a kill leaves, as when a write or sync of the program failed before
    that point (an injected I/O error: what it wrote is not on the disk, and a kill would keep
    it).  The harness's own ordering marks (``powercut-order-*``) are no point of the program's."""
    pending = Pending(root)
    last = -1
    for o in trace.ops:
        if o.kind != sc.MARK:
            pending.step(o)
            continue
        entry = aligned.get(o.seq)
        if entry is None or o.text in (ORDER_BEGIN, ORDER_END):
            continue
        last = o.seq
        if pending.failed:
            return None  # a write or sync failed: the disk lacks what the program wrote, and a kill would not
        if entry >= cut and not pending.dirty and not pending.mapped and not pending.entries:
            return Kill(cut, min(entry + 1, n), o)
    after = [o for o in trace.ops[last + 1 :] if o.ok and pending.mine(o.path) and _changes(o)]
    return Kill(cut, n, None) if written_back and not after and not pending.failed else None


def _changes(o: Op) -> bool:
    """Whether a call changes a file or a name (not a read, an open of an existing file, a sync)."""
    if o.kind == sc.OPEN:
        return "O_TRUNC" in o.flags or "O_CREAT" in o.flags
    return o.kind in (
        sc.WRITE,
        sc.TRUNCATE,
        sc.ALLOCATE,
        sc.RENAME,
        sc.LINK,
        sc.UNLINK,
        sc.RMDIR,
        sc.MKDIR,
        sc.MMAP_SHARED,
    )


def kill_equivalent(sp: SpaceTables, failing: CrashState, k: Kill) -> CrashState:
    """The kill-equivalent state: the log to ``k.until`` with every write durable, judged against the
    failing state's keys (every key begun or acked after its cut counts as begun)."""
    return WHAT_IF.make(sp, k.until, failing.cut, ())

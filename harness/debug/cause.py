"""The cause of each failure group in the program's terms (host): the recording's system-call trace
(core/syscalls.py) read once, the durability rule each group's state broke (core/causes.py),
checked against the group's block-level blame; and the recording's commit anatomy
(core/anatomy.py) for the summary."""
from __future__ import annotations

import gzip
import logging
import re
import zlib
from typing import TYPE_CHECKING, Any

from powercut.core import anatomy, causes, syscalls
from powercut.core.dmlog import LogIndex
from powercut.core.markorder import ordering_flushes
from powercut.core.models import space
from powercut.core.stateid import LIE_MODELS
from powercut.errors import PowercutError
from powercut.vm.guestjob import GUEST_MNT

if TYPE_CHECKING:
    from powercut.debug.triage import Group
    from powercut.record.recording import Recording

log = logging.getLogger(__name__)

ROOT = GUEST_MNT    # where the recording mounted the filesystem under test (trace paths start here)
_cache: dict[tuple[str, float], syscalls.Trace] = {}


def load_trace(rec: Recording) -> syscalls.Trace | None:
    """The recording's trace, or None when it has none (recorded with --no-trace, before traces
    existed, or strace was missing: the manifest's [trace] says which) or it cannot be read."""
    path = rec.trace_path
    if path is None:
        return None
    key = (str(path), path.stat().st_mtime)
    if key not in _cache:
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape") as fh:
                _cache.clear()
                _cache[key] = syscalls.parse(fh, ROOT)
        except (OSError, EOFError, zlib.error, UnicodeError) as e:
            log.warning("the trace %s cannot be read (%s): causes are given in blocks only", path, e)
            return None
    return _cache[key]


def explain_groups(rec: Recording, index: LogIndex, groups: list[Group]) -> None:
    """Set each group's ``why`` (a causes.Cause as JSON) from its minimized state, else its first."""
    trace = load_trace(rec)
    sp = space(index)
    marks = index.marks()
    for g in groups:
        d = g.diagnosis or {}
        sid = d.get("minimized") or g.first.state
        reasons = d.get("minimized_reasons") or g.first.reasons
        try:
            st = sp.state_from_id(sid)
        except PowercutError as e:
            log.warning("no cause for %s: %s", sid, e.one_line())
            continue
        torn = [i for i, _ in st.torn]
        if st.model in LIE_MODELS:   # no rule broken: whether the program noticed (needs no trace)
            g.why = lie_cause_of(st, index, g.verdict, list(reasons)).to_json()
            continue
        if trace is None:
            continue
        cause = causes.explain(trace, marks, st.cut, ROOT, reasons=list(reasons),
                               verdict=g.verdict, torn=torn)
        cause = causes.with_blame(cause, d.get("culprits") or [], ROOT)
        g.why = cause.to_json()
        g.why["excerpt"] = excerpt(trace, index, g.why)


def lie_cause_of(st: Any, index: LogIndex, verdict: str, reasons: list[str]) -> causes.Cause:
    """A lying-disk state's cause (causes.lie_cause): its write, sector and what the disk did."""
    lie = st.lie
    ss = index.sectorsize
    if lie is not None:
        e = index.entries[lie.entry]
        return causes.lie_cause(st.model, lie.entry, e.sector, dest=lie.sector * lie.sectorsize // ss,
                                bits=len(lie.bits), verdict=verdict, reasons=reasons)
    if st.dropped:   # lost-write (one entry) or flush-ignored (several)
        e = index.entries[st.dropped[0]]
        return causes.lie_cause(st.model, st.dropped[0], e.sector, dropped=st.dropped, verdict=verdict,
                                reasons=reasons)
    return causes.lie_cause(st.model, -1, -1, verdict=verdict, reasons=reasons)


def excerpt(trace: syscalls.Trace, index: LogIndex, why: dict[str, Any], margin: int = 3,
            limit: int = 40) -> list[dict[str, Any]]:
    """The trace around a cause for report.html: the program's calls on the filesystem under test
    and its marks from a few calls before the first evidence line to a few after the last, each
    mark followed by what the block log holds until the next mark (writes, FLUSHes, FUAs)."""
    wanted = {int(m.group(1)) for e in why.get("evidence", ()) if (m := re.match(r"line (\d+),", e))}
    if not wanted:
        return []
    prefix = ROOT + "/"
    ops = [o for o in trace.ops if (o.kind == syscalls.MARK and not o.text.startswith("powercut-order-"))
           or o.path.startswith(prefix) or o.kind == syscalls.SYNC]
    at = [k for k, o in enumerate(ops) if o.line in wanted]
    window = ops[max(0, at[0] - margin):at[-1] + margin + 1][:limit]
    aligned = syscalls.align(trace, index.marks())
    ordering = ordering_flushes(index.entries)[0]
    starts = sorted(aligned.values())
    rows: list[dict[str, Any]] = []
    for o in window:
        kind = ("mark" if o.kind == syscalls.MARK else
                "sync" if o.kind in (syscalls.FSYNC, syscalls.FDATASYNC, syscalls.SYNC, syscalls.SYNCFS, syscalls.MSYNC)
                else "call")
        rows.append({"kind": kind, "line": o.line, "pid": o.pid, "evidence": o.line in wanted,
                     "text": f"mark {o.text}" if kind == "mark" else o.text.replace(prefix, "/")})
        if o.seq in aligned:
            e = aligned[o.seq]
            nxt = next((x for x in starts if x > e), len(index.entries))
            span = index.entries[e + 1:nxt]
            w = sum(1 for x in span if x.changes_device)
            f = sum(1 for x in span if x.is_flush and x.index not in ordering)
            u = sum(1 for x in span if x.is_fua and x.changes_device)
            rows.append({"kind": "log", "line": e, "pid": 0, "evidence": False,
                         "text": (f"log #{e + 1}..#{nxt - 1} until the next mark: {w} block writes, {f} FLUSH, {u} FUA"
                                  if nxt - 1 > e else "log: nothing before the next mark")})
    return rows


def anatomy_of(rec: Recording, index: LogIndex) -> dict[str, Any]:
    """The recording's commit anatomy as JSON (medians and the first commits)."""
    costs = anatomy.commit_costs(index.entries, index.sectorsize, load_trace(rec), ROOT)
    return anatomy.summarize(costs).to_json()


def group_lines(label: str, g: dict[str, Any], evidence: int = 4) -> list[str]:
    """A failure group's head for a console or a test failure: with a trace, the cause sentence
    (its rule named), a few of its calls, then the block-level cause; without, the block-level cause."""
    blocks = (g.get("cause") or "").removeprefix(f"{g['verdict']}: ") or g.get("reason_class", "")
    head = f"{label}: {g['verdict']} x {g['count']}"
    why = g.get("why")
    if not why:
        return [f"{head}: {blocks}"]
    c = causes.Cause.from_json(why)
    out = [f"{head}: {c.sentence} [{c.rule}]"]
    out += [f"  | {e}" for e in c.evidence[-evidence:]]
    out += [f"  also: {o}" for o in c.others[:2]]
    out.append(f"  blocks: {blocks}" + (f"; {c.blame}" if c.blame else ""))
    out += [f"  not seen by the trace: {b}" for b in c.blind]
    return out


def trace_note(rec: Recording) -> str:
    """Why a recording has no cause in the program's terms ("" when it has a trace)."""
    tr = rec.manifest.get("trace")
    if rec.trace_path is not None:
        return ""
    if not tr:
        return "recorded without a system-call trace: causes are given in blocks only"
    return f"no system-call trace ({tr.get('error', 'missing')}): causes are given in blocks only"

"""The cause of each failure group in the program's terms (host): the recording's system-call trace
(core/trace/syscalls.py) read once, the durability rule each group's state broke (core/cause/causes.py),
checked against the group's block-level blame; and the recording's commit anatomy
(core/trace/anatomy.py) for the summary."""

from __future__ import annotations

import gzip
import logging
import re
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from powercut.core.cause import causes, nodetrace
from powercut.core.cause.causewords import held_suffix
from powercut.core.log.dmlog import LogIndex
from powercut.core.log.markorder import ordering_flushes
from powercut.core.recording import races
from powercut.core.recording.syncdelay import Hold, held_note, holds
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import space
from powercut.core.states.nodes import Nodes
from powercut.core.states.stateid import LIE_MODELS
from powercut.core.trace import anatomy, syscalls
from powercut.debug.diagnosis import culprits_of
from powercut.errors import PowercutError
from powercut.vm.guestjob import GUEST_MNT

if TYPE_CHECKING:
    from powercut.debug.triage import Group
    from powercut.record.recording import Recording

log = logging.getLogger(__name__)

ROOT = GUEST_MNT  # where the recording mounted the filesystem under test (trace paths start here)
_cache: dict[tuple[str, float, str, float], syscalls.Trace] = {}


def load_trace(rec: Recording) -> syscalls.Trace | None:
    """The recording's trace, or None when it has none (recorded with --no-trace, before traces
    existed, or strace was missing: the manifest's [trace] says which) or it cannot be read."""
    path = rec.trace_path
    if path is None:
        return None
    held = rec.delay_log
    key = (str(path), path.stat().st_mtime, str(held), held.stat().st_mtime if held else 0.0)
    if key not in _cache:
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape") as fh:
                _cache.clear()
                _cache[key] = races.with_holds(syscalls.parse(fh, ROOT), _holds(rec))
        except (OSError, EOFError, zlib.error, UnicodeError) as e:
            log.warning(
                "the trace %s cannot be read (%s): causes are given in blocks only", path, e
            )
            return None
    return _cache[key]


def _holds(rec: Recording) -> list[Hold]:
    """The syncs --delay-sync held, where the program called them ([] without the hold's log)."""
    path = rec.delay_log
    if path is None:
        return []
    try:
        return holds(path.read_text(errors="replace"))
    except OSError as e:
        log.warning(
            "the --delay-sync log %s cannot be read (%s): held syncs are placed where they entered "
            "the kernel",
            path,
            e,
        )
        return []


def _shim_blind(rec: Recording, trace: syscalls.Trace | None) -> bool:
    """Whether held syncs may be missing where the program called them: a recording made with the
    LD_PRELOAD shim (before issue 60) whose trace could not be placed (with_holds).  The supervisor
    holds a call after strace saw it enter: its trace shows every held call where it was made."""
    if (rec.manifest.get("result", {}).get("delay_sync") or {}).get("by") == "seccomp":
        return False
    return trace is None or not any(o.held > 0 for o in trace.ops)


def explain_groups(
    rec: Recording, logs: LogIndex | Sequence[LogIndex], groups: list[Group]
) -> None:
    """Set each group's ``why`` (a causes.Cause as JSON) from its minimized state, else its first.
    ``logs``: the recording's log, or a cluster's node logs (node 0 first): a cluster's cause is
    node by node (``node_why``), naming the node; one log is the case N = 1, unchanged."""
    indexes = [logs] if isinstance(logs, LogIndex) else list(logs)
    trace = load_trace(rec)
    states = _node_states(indexes)
    for g in groups:
        d = g.diagnosis or {}
        sid = d.get("minimized") or g.first.state
        reasons = list(d.get("minimized_reasons") or g.first.reasons)
        try:
            st = states(sid)
        except PowercutError as e:
            log.warning("no cause for %s: %s", sid, e.one_line())
            continue
        if len(indexes) == 1:
            g.why = state_why(trace, indexes[0], st[0], ROOT, g.verdict, reasons, culprits_of(d))
        else:
            g.why = node_why(
                trace,
                indexes,
                st,
                g.verdict,
                reasons,
                [culprits_of(d, i) for i in range(len(indexes))],
            )
        held = tuple(rec.workload.get("delay_sync") or ())
        if not held or not _shim_blind(rec, trace) or not isinstance(g.why, dict):
            continue
        note = held_note(held, str(g.why.get("subject", "")))
        if note:
            g.why["blind"] = [
                *g.why.get("blind", []),
                note,
            ]  # what the trace cannot see of a held sync


def _node_states(indexes: Sequence[LogIndex]) -> Callable[[str], tuple[CrashState, ...]]:
    """A state id -> each node's crash state (one disk: its own state, as its crash space reads it)."""
    if len(indexes) == 1:
        sp = space(indexes[0])
        return lambda sid: (sp.state_from_id(sid),)
    disks = Nodes(indexes)
    return lambda sid: disks.state_from_id(sid).nodes


def state_why(
    trace: syscalls.Trace | None,
    index: LogIndex,
    st: CrashState,
    root: str,
    verdict: str,
    reasons: list[str],
    culprits: list[dict[str, Any]],
    keys_of: Callable[[Iterable[str], Iterable[str]], list[str]] = causes.lost_keys,
) -> dict[str, Any] | None:
    """One disk's state's cause as JSON (with its excerpt), or None without a trace: ``root``: where
    its filesystem was mounted; ``culprits``: its block-level blame."""
    if st.model in LIE_MODELS:  # no rule broken: whether the program noticed (needs no trace)
        return lie_cause_of(st, index, verdict, reasons).to_json()
    if trace is None:
        return None
    cause = causes.explain(
        trace,
        index.marks(),
        st.cut,
        root,
        reasons=reasons,
        verdict=verdict,
        torn=[i for i, _ in st.torn],
        keys_of=keys_of,
    )
    why = causes.with_blame(cause, culprits, root).to_json()
    why["excerpt"] = excerpt(trace, index, why)
    return why


def node_why(
    trace: syscalls.Trace | None,
    indexes: Sequence[LogIndex],
    states: Sequence[CrashState],
    verdict: str,
    reasons: list[str],
    culprits: list[list[dict[str, Any]]],
) -> dict[str, Any] | None:
    """A cluster state's cause: each node it is about (core/cause/nodetrace.cause_nodes) judged alone --
    its part of the trace against its own log, its cut, its blame -- the first that broke a rule
    leading (``node i: ...``), the others' sentences after it; a node chosen by blame alone keeps
    a broken rule only when the blame is about the rule's file (else it says nothing).  None when
    no node can be told, or none has a cause."""
    lying = [n for n, st in enumerate(states) if st.model in LIE_MODELS]
    culprits = culprits + [[] for _ in range(len(indexes) - len(culprits))]
    chosen, how = nodetrace.cause_nodes(lying, reasons, culprits, len(indexes))
    found: list[tuple[int, dict[str, Any]]] = []
    for n in chosen:
        view = None if trace is None else nodetrace.node_trace(trace, n, ROOT)
        why = state_why(
            view,
            indexes[n],
            states[n],
            nodetrace.node_root(ROOT, n),
            verdict,
            reasons,
            culprits[n],
            keys_of=nodetrace.node_keys,
        )
        if (
            why is not None
            and how == nodetrace.BLAME
            and why["rule"] not in (causes.BEYOND, causes.UNSEEN)
            and not why["blame"].startswith("blame agrees")
        ):
            why = (
                None  # a rule about files the node's missing writes are not of: not shown to be why
            )
        if why is not None:
            found.append((n, why))
    if not found:
        return None
    lead = next(
        ((n, w) for n, w in found if w["rule"] not in (causes.BEYOND, causes.UNSEEN)), found[0]
    )
    n, why = lead
    why = dict(why, node=n, nodes_by=how, sentence=f"node {n}: {why['sentence']}")
    why["others"] = [f"node {m}: {w['sentence']}" for m, w in found if m != n] + list(why["others"])
    return why


def lie_cause_of(st: Any, index: LogIndex, verdict: str, reasons: list[str]) -> causes.Cause:
    """A lying-disk state's cause (causes.lie_cause): its write, sector and what the disk did."""
    lie = st.lie
    ss = index.sectorsize
    if lie is not None:
        e = index.entries[lie.entry]
        return causes.lie_cause(
            st.model,
            lie.entry,
            e.sector,
            dest=lie.sector * lie.sectorsize // ss,
            bits=len(lie.bits),
            verdict=verdict,
            reasons=reasons,
        )
    if st.dropped:  # lost-write (one entry) or flush-ignored (several)
        e = index.entries[st.dropped[0]]
        return causes.lie_cause(
            st.model, st.dropped[0], e.sector, dropped=st.dropped, verdict=verdict, reasons=reasons
        )
    return causes.lie_cause(st.model, -1, -1, verdict=verdict, reasons=reasons)


def excerpt(
    trace: syscalls.Trace, index: LogIndex, why: dict[str, Any], margin: int = 3, limit: int = 40
) -> list[dict[str, Any]]:
    """The trace around a cause for report.html: the program's calls on the filesystem under test
    and its marks from a few calls before the first evidence line to a few after the last, each
    mark followed by what the block log holds until the next mark (writes, FLUSHes, FUAs)."""
    wanted = {
        int(m.group(1)) for e in why.get("evidence", ()) if (m := re.match(r"line (\d+),", e))
    }
    if not wanted:
        return []
    prefix = ROOT + "/"
    ops = [
        o
        for o in trace.ops
        if (o.kind == syscalls.MARK and not o.text.startswith("powercut-order-"))
        or o.path.startswith(prefix)
        or o.kind == syscalls.SYNC
    ]
    at = [k for k, o in enumerate(ops) if o.line in wanted]
    window = ops[max(0, at[0] - margin) : at[-1] + margin + 1][:limit]
    aligned = syscalls.align(trace, index.marks())
    ordering = ordering_flushes(index.entries)[0]
    starts = sorted(aligned.values())
    rows: list[dict[str, Any]] = []
    for o in window:
        if o.kind == syscalls.MARK:
            kind = "mark"
        elif o.kind in (
            syscalls.FSYNC,
            syscalls.FDATASYNC,
            syscalls.SYNC,
            syscalls.SYNCFS,
            syscalls.MSYNC,
        ):
            kind = "sync"
        else:
            kind = "call"
        rows.append(
            {
                "kind": kind,
                "line": o.line,
                "pid": o.pid,
                "evidence": o.line in wanted,
                "text": f"mark {o.text}"
                if kind == "mark"
                else o.text.replace(prefix, "/") + held_suffix(o),
            }
        )
        if o.seq in aligned:
            e = aligned[o.seq]
            nxt = next((x for x in starts if x > e), len(index.entries))
            span = index.entries[e + 1 : nxt]
            w = sum(1 for x in span if x.changes_device)
            f = sum(1 for x in span if x.is_flush and x.index not in ordering)
            u = sum(1 for x in span if x.is_fua and x.changes_device)
            rows.append(
                {
                    "kind": "log",
                    "line": e,
                    "pid": 0,
                    "evidence": False,
                    "text": (
                        f"log #{e + 1}..#{nxt - 1} until the next mark: {w} block writes, {f} FLUSH, {u} FUA"
                        if nxt - 1 > e
                        else "log: nothing before the next mark"
                    ),
                }
            )
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
    unproven = ", not proven" if why.get("proven") is False else ""
    out = [f"{head}: {c.sentence} [{c.rule}{unproven}]"]
    out += [f"  | {e}" for e in c.evidence[-evidence:]]
    out += [f"  {c.read}"] if c.read else []
    out += [f"  proof: {c.proof}"] if c.proof else []
    out += [f"  not why: {r}" for r in c.refuted[:2]]
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

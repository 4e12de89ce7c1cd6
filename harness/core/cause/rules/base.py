"""What a cause rule is (pure): ``Rule``, the one object each rule module declares and
core/cause/rules/registry.py lists once, in rank order -- its id, where it looks (at an ack, or at the
commit the cut fell in), the finding it returns, its check, its sentence, its counterfactual and
its advice.  ``Plan``: what a rule's counterfactual makes durable; ``PlanInput``: what a plan is
built from; ``next_sync`` and ``entry_after``: the bounds plans share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op, Trace

Where = Literal["ack", "cut"]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a rule's counterfactual makes durable: the data of ``files`` (None: every write the
    state lost before its cut) and the metadata, as logged before entry ``until``; ``sync``: the
    call whose completion bounds it (None: the end of the log, or the state's own cut); ``bound``:
    what ``sync`` is to the file, said in the proof ("its next fsync"); ``commit``: with no sync,
    the log entry of the commit that made the files' last write durable, which bounds it instead
    of the end of the log (core/cause/counterfactual.to_commit; -1: none)."""

    rule: str
    subject: str
    files: frozenset[str] | None
    until: int
    sync: Op | None = None
    bound: str = ""
    commit: int = -1

    def words(self) -> str:
        """What was made durable, as the cause's proof says it."""
        if self.files is None and self.sync is not None:
            return (
                f"every write of the commit in flight up to its {self.sync.kind} (trace line {self.sync.line}, "
                f"log entry #{self.until})"
            )
        if self.files is None:
            return "every write the state lost or tore before its cut kept whole"
        data = (
            f"{', '.join('/' + f for f in sorted(self.files))}'s data and the filesystem's metadata"
            if self.files
            else "the filesystem's metadata (no file's data)"
        )
        if self.sync is None and self.commit >= 0:
            return (
                f"{data} as logged up to the commit that made its last write durable (log entry "
                f"#{self.commit})"
            )
        if self.sync is None:
            return f"{data} as logged to the end of the recording"
        what = "sync" if self.sync.kind in (sc.SYNC, sc.SYNCFS) else self.sync.kind
        which = self.bound.format(what=what) if self.bound else f"its next {what}"
        return (
            f"{data} as logged up to {which} (trace line {self.sync.line}, log entry #{self.until})"
        )


@dataclass(frozen=True, slots=True)
class PlanInput:
    """What a counterfactual is planned from: the trace, its marks' log entries (``aligned``), the
    filesystem's root in the trace, the failing state's cut and the log's length."""

    trace: Trace
    aligned: Mapping[int, int]
    root: str
    cut: int
    n: int

    def path(self, subject: str) -> str:
        """A rule's subject (``/wal``) as the trace's absolute path."""
        return self.root.rstrip("/") + subject if subject.startswith("/") else subject

    def file_plan(
        self, rule: str, subject: str, sync: Op | None, *, data: bool = True, bound: str = ""
    ) -> Plan:
        """The plan of a rule about one file: its data (``data``; else no file's) and the metadata up
        to the mark after ``sync`` (the end of the log without one), never before the cut."""
        until = entry_after(self.trace, self.aligned, sync, self.n) if sync is not None else self.n
        files = frozenset({subject.lstrip("/")}) if data else frozenset()
        return Plan(rule, subject, files, max(until, self.cut), sync, bound)

    def up_to_next_sync(
        self, rule: str, subject: str, after: Op, *, directory: bool = False
    ) -> Plan:
        """The plan of a rule about one file (a ``directory``: its names, no file's data) whose
        missing writes its next sync after the call ``after`` made durable (the end of the log when
        none came): what a sync in time would have made durable, at the latest."""
        sync = next_sync(self.trace, after, self.path(subject), directory)
        return self.file_plan(rule, subject, sync, data=not directory)


def next_sync(trace: Trace, after: Op, path: str, directory: bool) -> Op | None:
    """The first successful call after ``after`` that makes ``path``'s changes durable."""
    for o in trace.ops[after.seq + 1 :]:
        if not o.ok:
            continue
        if o.kind in (sc.SYNC, sc.SYNCFS):
            return o
        if o.path != path:
            continue
        if o.kind in (sc.FSYNC, sc.FDATASYNC) or (
            not directory and o.kind == sc.MSYNC and "MS_SYNC" in o.flags
        ):
            return o
    return None


def entry_after(trace: Trace, aligned: Mapping[int, int], op: Op, n: int) -> int:
    """The log entry of the first mark after ``op`` in the trace (the log holds what ``op`` wrote
    before it); ``n`` (the end of the log) when no mark follows."""
    return next(
        (aligned[o.seq] for o in trace.ops[op.seq + 1 :] if o.kind == sc.MARK and o.seq in aligned),
        n,
    )


def nothing_to_note(_: Any) -> str:
    return ""


@dataclass(frozen=True)
class Rule:
    """One durability rule.  ``where``: ``ack`` -- its check takes the facts at one ack
    (core/trace/tracefacts.AtAck) and returns every finding there; ``cut`` -- its check takes the commit
    the cut fell in (core/trace/tracefacts.InFlight) and the log entries the state tore, and returns its
    first finding or None.  ``finding``: the class of what it finds (facts, never words);
    ``sentence``: the finding said in one sentence; ``plan``: its counterfactual (None: nothing to
    make durable); ``advice``: what the program should do instead; ``note``: what qualifies a
    finding, said after its sentence."""

    id: str
    where: Where
    finding: type
    check: Callable[..., Any]
    sentence: Callable[[Any], str]
    plan: Callable[[Any, PlanInput], Plan | None]
    advice: str
    note: Callable[[Any], str] = nothing_to_note

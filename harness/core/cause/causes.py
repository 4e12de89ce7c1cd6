"""Why a state failed, in the program's own terms: the durability rules its system calls broke
before an acknowledgement the crash then lost, or in the commit the crash cut through, with the
calls as evidence (the trace of core/trace/syscalls.py, aligned with the block log at its marks).

The rules are POSIX's, as ALICE states them -- what a program must do for an ack to survive a power
cut on any filesystem and any disk with a write cache -- one module each in core/cause/rules/ (its check,
sentence and counterfactual), listed strongest first in core/cause/rules/registry.py; the causes that are
no broken rule (recovery-bug, disk-lied, unseen-writes, beyond-rules) are core/cause/rules/outcomes.py's.

This module is the entry point: ``explain`` picks the rule for one failing state -- the acks given
before its cut (those of the keys the checker names as lost, when its reasons name them), the first
whose commit broke a rule; else a failed sync before any of them; else a rule about the commit in
flight at the cut; else beyond the rules.  ``candidates`` lists every rule that may be why, for
debug/verify.py to prove by counterfactual.  The facts a trace gives are core/trace/tracefacts.py's.
Pure: no I/O."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.cause.causewords import EVIDENCE_LINES, alike, evidence_line, evidence_lines
from powercut.core.cause.rules import (
    acked_after_error,
    no_dir_fsync,
    no_fsync,
    no_msync,
    pointer_before_data,
    registry,
    rename_before_fsync,
    replaced_in_place,
    sync_still_running,
    unchecked_tear,
    unordered_writes,
)
from powercut.core.cause.rules.outcomes import (
    BEYOND,
    LIED,
    RECOVERY,
    UNSEEN,
    DiskLie,
    NoAckBefore,
    RulesKept,
    RulesKeptUnseen,
)
from powercut.core.cause.rules.registry import RANK, broken, sentence
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op, Trace
from powercut.core.trace.tracefacts import (
    AtAck,
    Pending,
    in_flight,
    rel,
    running_syncs,
    split_syncs,
)

__all__ = [
    "BEYOND",
    "EARLY",
    "ERROR",
    "EVIDENCE_LINES",
    "LIED",
    "MAX_CANDIDATES",
    "NOT_PROVEN",
    "NO_DIR_FSYNC",
    "NO_FSYNC",
    "NO_MSYNC",
    "POINTER",
    "RANK",
    "RECOVERY",
    "RENAME",
    "REPLACED",
    "RULES",
    "TORN",
    "UNORDERED",
    "UNSEEN",
    "Cause",
    "Commit",
    "Finding",
    "Violation",
    "candidates",
    "cause_of",
    "commits",
    "evidence_line",
    "explain",
    "lie_cause",
    "lost_keys",
    "rel",
    "unseen_writes",
    "with_blame",
]

# the rules' ids, for the code that names one (each rule's own module declares it)
ERROR = acked_after_error.ID
RENAME = rename_before_fsync.ID
EARLY = sync_still_running.ID
NO_FSYNC = no_fsync.ID
NO_DIR_FSYNC = no_dir_fsync.ID
NO_MSYNC = no_msync.ID
REPLACED = replaced_in_place.ID
POINTER = pointer_before_data.ID
UNORDERED = unordered_writes.ID
TORN = unchecked_tear.ID
NOT_PROVEN = "cause not proven"  # how an unproven cause's sentence starts (debug/verify.unproven)
RULES = (
    registry.IDS
)  # every cause's id: the rules strongest first, then the causes that are no broken rule
Finding = (
    Any  # a rule's finding (core/cause/rules/), or an outcome's (core/cause/rules/outcomes.py)
)


@dataclass(frozen=True, slots=True)
class Violation:
    """One rule broken before one ack: the rule's finding (core/causerules.py), and its sentence."""

    finding: Finding

    @property
    def rule(self) -> str:
        return self.finding.rule

    @property
    def subject(self) -> str:
        """The file or directory the rule is about, relative to the filesystem's root."""
        return self.finding.subject

    @property
    def ack(self) -> Op:
        return self.finding.ack

    @property
    def evidence(self) -> tuple[Op, ...]:
        """The calls that show it, in trace order (the ack last, or just before a sync still running)."""
        return self.finding.evidence

    @property
    def note(self) -> str:
        return registry.note(self.finding)

    def sentence(self) -> str:
        return sentence(self.finding)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subject": self.subject,
            "ack": self.ack.text,
            "sentence": self.sentence(),
            "note": self.note,
            "evidence": [evidence_line(o) for o in self.evidence],
        }


@dataclass(frozen=True, slots=True)
class Cause:
    """The cause of one failing state: the first rule broken, the others seen, and how the block
    level agrees."""

    rule: str
    sentence: str
    evidence: tuple[str, ...]
    others: tuple[str, ...] = ()  # the other broken rules' sentences (at most a few)
    blame: str = ""  # how the block-level blame agrees or disagrees
    blind: tuple[str, ...] = ()  # what the trace could not see
    subject: str = ""  # the file(s) or directory the rule is about, comma-separated
    proof: str = ""  # how its counterfactual was judged (debug/verify.py; "" not tried)
    refuted: tuple[str, ...] = ()  # the rules whose counterfactual still failed: true, not why
    read: str = (
        ""  # what recovery read in the state (core/judging/recoveryread.words; "" not traced)
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "sentence": self.sentence,
            "evidence": list(self.evidence),
            "others": list(self.others),
            "blame": self.blame,
            "blind": list(self.blind),
            "subject": self.subject,
            **({"proof": self.proof} if self.proof else {}),
            **({"refuted": list(self.refuted)} if self.refuted else {}),
            **({"read": self.read} if self.read else {}),
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Cause":
        return Cause(
            str(d.get("rule", "")),
            str(d.get("sentence", "")),
            tuple(d.get("evidence", ())),
            tuple(d.get("others", ())),
            str(d.get("blame", "")),
            tuple(d.get("blind", ())),
            str(d.get("subject", "")),
            str(d.get("proof", "")),
            tuple(d.get("refuted", ())),
            str(d.get("read", "")),
        )

    def head(self) -> str:
        """The cause's first line: ``cause (RULE): SENTENCE``; an unproven one's sentence says so
        itself ("cause not proven; ...", debug/verify.unproven), its rule after it."""
        if self.sentence.startswith(NOT_PROVEN):
            return f"{self.sentence} [{self.rule}, not proven]"
        return f"cause ({self.rule}): {self.sentence}"

    def lines(self) -> list[str]:
        """The cause as text: its sentence, its evidence, the blame, the other rules, the blind spots."""
        out = [self.head()]
        out += [f"  | {e}" for e in self.evidence]
        if self.read:
            out.append(f"  {self.read}")
        if self.proof:
            out.append(f"  proof: {self.proof}")
        out += [f"  not why: {r}" for r in self.refuted]
        if self.blame:
            out.append(f"  blocks: {self.blame}")
        out += [f"  also: {o}" for o in self.others]
        out += [f"  not seen by the trace: {b}" for b in self.blind]
        return out


# -- the rules, ack by ack --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Commit:
    """One ack in the trace: its op, where its commit began (its begin mark, else the previous ack),
    what it left not durable, and the log entry of its mark."""

    key: str
    ack: Op
    since: int
    entry: int | None
    violations: tuple[Violation, ...]


def commits(trace: Trace, root: str, aligned: dict[int, int] | None = None) -> list[Commit]:
    """Walk the trace once: every ack with the rules it broke (strongest first).  ``aligned``: trace
    mark position -> log entry (``syscalls.align``)."""
    pending = Pending(root)
    aligned = aligned or {}
    out: list[Commit] = []
    begun: dict[str, int] = {}
    last_ack = -1
    splits, seqs = split_syncs(trace)
    for o in trace.ops:
        if o.kind != sc.MARK:
            pending.step(o)
        elif o.text.startswith("begin:"):
            begun[o.text[len("begin:") :]] = o.seq
        elif o.text.startswith("ack:"):
            key = o.text[len("ack:") :]
            since = begun.pop(key, last_ack)
            at = AtAck(o, since, pending, running_syncs(splits, seqs, o))
            out.append(
                Commit(key, o, since, aligned.get(o.seq), tuple(Violation(f) for f in broken(at)))
            )
            last_ack = o.seq
    return out


# -- one failing state ------------------------------------------------------------------------------

_KEYISH = re.compile(r"(?:ack:|key |txn |tid |record |['\"#])([\w.:-]+)")


def lost_keys(reasons: Iterable[str], keys: Iterable[str], *, words: bool = True) -> list[str]:
    """The acked keys a checker's reasons name (``ack:K``, ``'K'``, ``key K``, ``#K`` ...), in ack order;
    with ``words``, also any word of the reasons that is a key (a count may then be read as one)."""
    text = " ".join(reasons)
    named = {m.group(1).strip(".:") for m in _KEYISH.finditer(text)}
    if words:
        named |= {w.strip(".,;:()[]'\"") for w in text.split()}
    return [k for k in keys if k in named or f"ack:{k}" in text]


def lie_cause(
    model: str,
    entry: int,
    sector: int,
    *,
    dest: int = -1,
    bits: int = 0,
    dropped: Sequence[int] = (),
    verdict: str = "",
    reasons: Sequence[str] = (),
) -> Cause:
    """Why a lying-disk state failed: what the disk did (``model`` to the write at log entry
    ``entry``, its ``sector``), and that the program did not notice; its reasons are the evidence."""
    lie = DiskLie(model, entry, sector, dest, bits, tuple(dropped), verdict)
    return Cause(LIED, sentence(lie), tuple(reasons[:3]))


def _cause(
    f: Finding, blind: tuple[str, ...], *, suffix: str = "", others: tuple[str, ...] = ()
) -> Cause:
    """The cause a rule's finding gives: its sentence (and ``suffix``), its last calls as evidence."""
    return Cause(
        f.rule,
        sentence(f) + suffix,
        evidence_lines(f.evidence),
        others,
        blind=blind,
        subject=f.subject,
    )


MAX_CANDIDATES = (
    4  # the rules a failing state's cause is checked against, at most (debug/verify.py)
)


def candidates(
    trace: Trace,
    log_marks: Sequence[tuple[int, str]],
    cut: int,
    root: str,
    *,
    reasons: Sequence[str] = (),
    torn: Sequence[int] = (),
    keys_of: Callable[[Iterable[str], Iterable[str]], list[str]] = lost_keys,
    limit: int | None = MAX_CANDIDATES,
    read: Sequence[str] = (),
) -> list[Finding]:
    """What the cause of a state cut at ``cut`` may be, in the order ``explain`` would pick it: the
    rules broken at the acks before the cut (the acks whose keys the reasons name, first ack first,
    each ack's rules strongest first), then the rule the commit in flight broke; each (rule, file)
    once, at most ``limit`` (None: every one); ``read``: the files recovery read in the state, in
    order (relative to ``root``), when known -- a rule about the commit in flight may use them.  A
    cause is proven by judging each one's counterfactual in turn."""
    aligned = sc.align(trace, log_marks)
    before = [c for c in commits(trace, root, aligned) if c.entry is not None and c.entry < cut]
    named = set(keys_of(reasons, [c.key for c in before]))
    pool = [c for c in before if c.key in named] or before
    found: dict[tuple[str, str], Finding] = {}
    for c in pool:
        for v in c.violations:
            found.setdefault((v.rule, v.finding.subject), v.finding)
    for f in registry.at_cut(in_flight(trace, aligned, cut, root, tuple(read)), tuple(torn)):
        found.setdefault((f.rule, f.subject), f)
    return list(found.values())[:limit] if limit is not None else list(found.values())


def cause_of(trace: Trace, f: Finding, others: Sequence[str] = ()) -> Cause:
    """The cause one finding gives (its sentence, its evidence, the trace's blind spots)."""
    return _cause(f, tuple(trace.blind), others=tuple(others))


def explain(
    trace: Trace,
    log_marks: Sequence[tuple[int, str]],
    cut: int,
    root: str,
    *,
    reasons: Sequence[str] = (),
    verdict: str = "",
    torn: Sequence[int] = (),
    keys_of: Callable[[Iterable[str], Iterable[str]], list[str]] = lost_keys,
) -> Cause:
    """The cause of a state cut at log entry ``cut`` (that tore the writes at the entries ``torn``)
    which failed with ``reasons`` (``verdict``: kept for the record; every rule here applies to any
    failing verdict); ``keys_of``: the acked keys the reasons name (a cluster's: core/cause/nodetrace.py)."""
    aligned = sc.align(trace, log_marks)
    before = [c for c in commits(trace, root, aligned) if c.entry is not None and c.entry < cut]
    named = set(keys_of(reasons, [c.key for c in before]))
    pool = [c for c in before if c.key in named] or before
    blind = tuple(trace.blind)
    # the first ack looked at that broke a rule: its strongest rule, the others it broke, how many
    # other acks looked at broke the same rule first
    for c in pool:
        if c.violations:
            top, *rest = c.violations
            others = tuple(
                dict.fromkeys(v.sentence() for v in rest if v.sentence() != top.sentence())
            )[:3]
            n = sum(
                1 for d in pool if d is not c and d.violations and d.violations[0].rule == top.rule
            )
            return _cause(top.finding, blind, suffix=alike(n), others=others)
    # a failed sync before any ack before the cut: its pages may be gone for good
    for c in before:
        err = next((v for v in c.violations if v.rule == ERROR), None)
        if err is not None:
            return _cause(err.finding, blind)
    for found in registry.at_cut(in_flight(trace, aligned, cut, root), tuple(torn)):
        return _cause(found, blind)
    if not before:
        return Cause(BEYOND, sentence(NoAckBefore()), (), blind=blind)
    unseen = unseen_writes(trace, root)
    kept = RulesKeptUnseen(pool[-1].ack, unseen) if unseen else RulesKept(pool[-1].ack)
    return Cause(
        UNSEEN if unseen else BEYOND, sentence(kept), evidence_lines(kept.evidence), blind=blind
    )


def unseen_writes(trace: Trace, root: str) -> tuple[str, ...]:
    """Where the program wrote that the trace cannot see: its shared, writable mappings of files
    under ``root`` (stores through them), io_uring (its writes are no system calls).  () when the
    trace saw every write: only then may a cause say "beyond the rules"."""
    under = root.rstrip("/") + "/"
    mapped = dict.fromkeys(
        rel(o.path, root)
        for o in trace.ops
        if o.kind == sc.MMAP_SHARED and (o.path == root or o.path.startswith(under))
    )
    out = [f"stores through its shared mapping of {p}" for p in mapped]
    if any(o.kind == sc.IO_URING for o in trace.ops):
        out.append("io_uring writes")
    return tuple(out)


# -- the cause against the block-level blame --------------------------------------------------------


def with_blame(cause: Cause, culprits: Sequence[dict[str, Any]], root: str = "") -> Cause:
    """The cause checked against the block-level blame: do the writes blame found lost or not yet
    durable belong to the file or directory the rule names?  Says both when they disagree."""
    if not culprits:
        return cause
    subjects = {s.strip() for s in cause.subject.split(",") if s.strip()}
    texts = [str(c.get("text", "")) for c in culprits]
    hit = [t for c, t in zip(culprits, texts) if subjects and _touches(c, subjects)]
    if cause.rule == BEYOND or not subjects:
        note = "blame: " + "; ".join(texts[:2])
    elif hit:
        note = "blame agrees: " + "; ".join(hit[:2])
    else:
        note = (
            "blame names other blocks than the rule's: its writes may not have reached the disk before the cut "
            "at all (still in the page cache), which is what the rule says"
        )
    return Cause(
        cause.rule, cause.sentence, cause.evidence, cause.others, note, cause.blind, cause.subject
    )


def _touches(culprit: dict[str, Any], subjects: set[str]) -> bool:
    """Whether a blame culprit is about one of the cause's subjects: one of its paths is one, or it
    is a directory's block and a subject sits in that directory."""
    paths = {p.strip() for p in str(culprit.get("path", "")).split(",") if p.strip()}
    return bool(paths & subjects) or any(
        posixpath.dirname(s) in paths
        for s in subjects
        if "directory" in str(culprit.get("what", ""))
    )

"""A cause proven by its counterfactual (host; issue 52).

For each failure group of one disk (the first ``MAX_GROUPS``): the rules its (minimized, else first)
state's trace says the program broke, in the order a cause is picked (core/cause/causes.candidates); each
one's what-if state -- the failing state with the writes that rule says were missing made durable,
and nothing else of the program's (the rule's plan, core/cause/rules/; made a state by
core/cause/counterfactual.py) -- and the group's kill-equivalent state (every write durable at the first
point at or after the cut where the program had synced all it wrote: what a process kill there
leaves, core/cause/counterfactual.kill_point), all judged in one batch where the check runs, with the
group's state itself judged again traced -- what recovery read (``prepare``: the targets;
``plan``; the campaign judges the targets and ``states`` with ``CheckContext.trace_reads``;
``traced``, ``record``; ``plan`` again adds what the reads reveal, judged in a second batch only
then).  What recovery read orders the rules (``in_read_order``) and is said under the cause.  After the causes are written
(debug/cause.explain_groups) ``apply`` rewrites each group's:

- the first rule whose counterfactual passes is the cause, with its proof ("verified: with /wal's
  data ... made durable this state passes (what-if@...)"); the rules before it whose counterfactual
  still failed are listed as true but not why -- the cause changes to that rule when it was not the
  first; a kill-equivalent state that failed too is said after it;
- no rule's counterfactual passes and the kill-equivalent state fails: ``recovery-bug`` -- the
  program's recovery fails on a state it made itself, proven by that state (never ``beyond-rules``);
- neither: the cause is not proven, and its sentence starts by saying so, then the candidates, then
  what the trace shows first.  A counterfactual is only as exact as its parts: which file a write
  belongs to comes from the file map at the end of the recording named as at the cut, and a sync's
  writes are bounded by the next mark after it, not by the sync -- so a failing counterfactual
  shows that this construction did not pass, not that the rule is false, and the words say no more
  than that; a passing one that may have made a file removed after the cut durable too (its
  writes count as metadata) proves nothing when recovery read that file (``mixed``);
- not tried (no file map: only the kill-equivalent is judged; a cluster; a judge that failed): said
  in the proof, and the cause is not proven.  A lying disk's state needs no proof (what the disk
  did is the cause, by construction).

``Stats`` says what it cost (states judged, seconds) and what it changed (verified, replaced,
recovery, unproven), per campaign (summary.json ``cause_proofs``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from powercut.core.cause import causes
from powercut.core.cause import counterfactual as cf
from powercut.core.cause.rules import registry
from powercut.core.cause.rules.base import Plan, PlanInput
from powercut.core.cause.rules.outcomes import LIED, RECOVERY, RecoveryFails
from powercut.core.judging.recoveryread import (
    ReadFile,
    complete,
    rank_paths,
    read_paths,
    words,
)
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import space
from powercut.core.states.stateid import LIE_MODELS
from powercut.core.trace import syscalls
from powercut.core.trace.tracefacts import written_by
from powercut.debug.cause import ROOT, excerpt, load_trace
from powercut.debug.diagnosis import culprits_of

if TYPE_CHECKING:
    from powercut.debug.triage import Group
    from powercut.record.recording import Recording

log = logging.getLogger(__name__)

ERROR_VERDICT = "acked-after-error"  # the judge's verdict (check/judge.after_error): its own counterfactual passed
COSTLY = ("timeout", "kernel-panic")  # verdicts whose states are not judged again to prove a cause
MAX_PLANNED = (
    8  # the rules of a state whose counterfactuals are judged before what recovery read is known
)
MAX_GROUPS = 8  # the groups whose causes are proven, first first (each costs a few states judged)


@dataclass(slots=True)
class Tried:
    """One rule of one group's state: its finding, its counterfactual, how that was judged."""

    finding: causes.Finding
    plan: Plan | None
    state: CrashState | None
    verdict: Verdict | None = None
    unlogged: frozenset[str] = (
        frozenset()
    )  # the plan's files no log entry writes (counterfactual.unlogged)
    unread: bool = False  # its file is one recovery never read (traced)
    by_judge: bool = False  # proven by the judge's own counterfactual (acked-after-error)
    mixed: frozenset[str] = (
        frozenset()
    )  # files removed after the cut whose writes it may have added too

    @property
    def judged(self) -> bool:
        return self.verdict is not None and self.verdict.verdict not in ("error", "flaky")

    @property
    def label(self) -> str:
        unread = ", which recovery never read" if self.unread else ""
        return f"{self.finding.rule} ({self.finding.subject}{unread})"

    def outcome(self) -> str:
        """pass | fail | untried (nothing to make durable, or not judged)."""
        if self.by_judge:
            return "pass"
        if self.plan is None:
            return "untried"
        if (
            self.state is None
        ):  # its writes are all durable in the failing state already: it fails as it is
            return "untried" if self.unlogged else "fail"
        if self.verdict is None or not self.judged:
            return "untried"
        if self.verdict.verdict == "pass":
            return "untried" if self.mixed else "pass"  # it may have made another file durable too
        return (
            "untried" if self.unlogged else "fail"
        )  # its data is not in the log: the failure proves nothing

    def words(self) -> str:
        """What judging it showed, after the rule's name."""
        if self.by_judge:
            return (
                "with only the acks given before the I/O error, this state passes (the judge's own "
                "counterfactual: every ack after the error left out)"
            )
        if self.plan is None:
            return "nothing to make durable (the failed call's data is not in the log)"
        if self.unlogged and self.outcome() == "untried" and (self.state is None or self.judged):
            names = ", ".join("/" + f for f in sorted(self.unlogged))
            return (
                f"not provable from this recording: no write in the log is {names}'s (the file map at the end "
                "has no blocks of it: the program truncated, removed or renamed it; stores through a mapping "
                "dropped that way never reach the disk), so no what-if state can make its data durable"
            )
        if self.state is None:
            return f"{self.plan.words()} are all durable in this state already, and it fails"
        made = f"with {self.plan.words()} made durable ({self.state.id})"
        if (
            self.mixed
            and self.verdict is not None
            and self.verdict.verdict == "pass"
            and self.plan.sync is None
        ):
            names = ", ".join("/" + f for f in sorted(self.mixed))
            return (
                f"{made} this state passes, but that is not proof of this rule alone: the metadata to the end "
                f"of the recording also removed, truncated or renamed {names} (after the cut; recovery read it, "
                "or what recovery read is not known in whole), so the state judged is not the cut's world with "
                "the rule kept"
            )
        if self.mixed and self.verdict is not None and self.verdict.verdict == "pass":
            names = ", ".join("/" + f for f in sorted(self.mixed))
            return (
                f"{made} this state passes, but that is not proof of this rule alone: {names} (removed or "
                "truncated after that sync, so still there in this state; recovery read it, or what recovery "
                "read is not known in whole) owns no block in the file map at the end, so its writes cannot be "
                "told from the filesystem's metadata and may have been made durable too"
            )
        if self.outcome() == "untried":
            return f"its counterfactual {self.state.id} was not judged ({self.verdict.verdict if self.verdict else 'no verdict'})"
        if self.outcome() == "pass":
            return f"{made} this state passes"
        first = self.verdict.reasons[0] if self.verdict and self.verdict.reasons else ""
        return f"{made} this state still fails ({self.verdict.verdict if self.verdict else '?'}: {first})"


@dataclass(slots=True)
class Killed:
    """One group's kill-equivalent state (core/cause/counterfactual.kill_point): where, the state, its verdict."""

    kill: cf.Kill
    state: CrashState
    verdict: Verdict | None = None

    def outcome(self) -> str:
        """pass | fail | untried (not judged, or judged as an error)."""
        if self.verdict is None or self.verdict.verdict in ("error", "flaky"):
            return "untried"
        return "pass" if self.verdict.verdict == "pass" else "fail"

    def words(self) -> str:
        """What judging it showed."""
        if self.outcome() == "untried":
            return f"the kill-equivalent state {self.state.id} was not judged"
        if self.outcome() == "pass":
            return f"a process kill passes ({self.kill.words()}: {self.state.id})"
        return f"a process kill fails too ({self.kill.words()}: {self.state.id}, {_first(self.verdict)})"


def _first(v: Verdict | None) -> str:
    """A verdict and its first reason, as a proof quotes them."""
    if v is None:
        return "no verdict"
    return f"{v.verdict}: {v.reasons[0]}" if v.reasons else v.verdict


@dataclass(slots=True)
class Stats:
    groups: int = 0  # groups whose cause was checked
    states: int = 0  # what-if states judged
    seconds: float = 0.0
    verified: int = 0  # the first rule's counterfactual passed
    replaced: int = 0  # a later rule's passed: the cause changed to it
    recovery: int = 0  # no rule's passed and the kill-equivalent state failed: a recovery bug
    unproven: int = 0  # none passed, or some could not be judged: not proven, said first
    untried: int = 0  # could not be checked at all (no file map, a cluster: said in the proof)

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "states": self.states,
            "seconds": round(self.seconds, 3),
            "verified": self.verified,
            "replaced": self.replaced,
            "recovery": self.recovery,
            "unproven": self.unproven,
            "untried": self.untried,
        }


@dataclass(slots=True)
class Verification:
    """The counterfactuals of a campaign's failure groups, by the id of the state each explains."""

    targets: dict[str, CrashState] = field(
        default_factory=dict
    )  # the groups' states, judged again traced
    reads: dict[str, tuple[ReadFile, ...]] = field(
        default_factory=dict
    )  # what recovery read in each
    tried: dict[str, list[Tried]] = field(default_factory=dict)
    kills: dict[str, Killed] = field(default_factory=dict)
    # state id -> its candidates' (rule, subject) in the order a cause is picked, as last planned (with
    # what recovery was seen to read: a pointer it followed ranks as its rule does, though found late)
    order: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    skipped: dict[str, str] = field(
        default_factory=dict
    )  # state id -> why its cause is not checked
    judged: dict[str, Verdict] = field(
        default_factory=dict
    )  # counterfactual state id -> its verdict
    stats: Stats = field(default_factory=Stats)

    @property
    def checked(self) -> bool:
        """Whether any group's cause was put to a proof, or said why not."""
        return bool(self.tried or self.kills or self.skipped)

    def traced(self, verdicts: dict[str, Verdict]) -> None:
        """What recovery read in each group's state, from its judge traced (CheckContext.trace_reads)."""
        for sid in self.targets:
            v = verdicts.get(sid)
            if v is not None and v.read:
                self.reads[sid] = v.read

    @property
    def counterfactuals(self) -> list[CrashState]:
        """Every counterfactual state planned, once each: the rules' what-if states, the kill-equivalents."""
        out: dict[str, CrashState] = {}
        for ts in self.tried.values():
            out.update((t.state.id, t.state) for t in ts if t.state is not None)
        out.update((k.state.id, k.state) for k in self.kills.values())
        return list(out.values())

    @property
    def states(self) -> list[CrashState]:
        """Every counterfactual state not judged yet, once each."""
        judged = {
            t.state.id
            for ts in self.tried.values()
            for t in ts
            if t.state is not None and t.verdict is not None
        }
        judged |= {k.state.id for k in self.kills.values() if k.verdict is not None}
        return [s for s in self.counterfactuals if s.id not in judged]

    def record(self, verdicts: dict[str, Verdict], seconds: float) -> None:
        """The verdicts of the counterfactual states judged (by state id); the others stay unjudged.
        A rule planned later whose what-if is a state judged before (two rules, one state) gets its
        verdict too."""
        planned = {s.id for s in self.counterfactuals}
        fresh = {sid: v for sid, v in verdicts.items() if sid in planned}
        self.judged.update(fresh)
        for ts in self.tried.values():
            for t in ts:
                if t.state is not None and t.state.id in self.judged:
                    t.verdict = self.judged[t.state.id]
        for k in self.kills.values():
            if k.state.id in self.judged:
                k.verdict = self.judged[k.state.id]
        self.stats.states += len(fresh)
        self.stats.seconds += seconds

    def apply(self, rec: Recording, index: LogIndex, groups: Sequence[Group]) -> None:
        """Each group's cause rewritten by what its counterfactuals showed (the module's doc)."""
        trace = load_trace(rec)
        for g in groups:
            sid = _state_of(g)
            if not isinstance(g.why, dict) or g.why.get("rule") == LIED:
                continue
            if sid in self.skipped:
                g.why = unproven(g.why, f"not proven: {self.skipped[sid]}")
                self.stats.untried += 1
                continue
            ts = self.tried.get(sid)
            if (not ts and sid not in self.kills) or trace is None:
                continue
            self.stats.groups += 1
            culprits = culprits_of(g.diagnosis)
            reads = self.reads.get(sid, ())
            ts = in_order(ts or [], self.order.get(sid, []))
            ts = self.tried[sid] = in_read_order(ts, rank_paths(reads) if complete(reads) else ())
            for t in ts:  # the judge passed the state with the acks before the error alone
                t.by_judge = g.verdict == ERROR_VERDICT and t.finding.rule == causes.ERROR
                t.mixed = mixed(t, reads)
            g.why = _proven(g.why, ts, self.kills.get(sid), trace, index, self.stats, culprits)
            if reads and sid in self.targets:
                g.why["read"] = read_words(reads, trace, index, self.targets[sid].cut)


def mixed(t: Tried, reads: Sequence[ReadFile]) -> frozenset[str]:
    """The files removed after the cut whose writes ``t``'s what-if may have made durable with its own
    (``t.mixed`` as planned) that recovery read -- or, when what recovery read is not known in whole,
    all of them: a file recovery never opened cannot be why its what-if passed."""
    if not reads or not complete(reads):
        return t.mixed
    return t.mixed & frozenset(read_paths(reads))


def read_words(reads: Sequence[ReadFile], trace: syscalls.Trace, index: LogIndex, cut: int) -> str:
    """What recovery read in a state cut at ``cut``, with the bytes the program had written to each
    file it found empty or missing (core/trace/tracefacts.written_by) -- "0 of 41 bytes present"."""
    wrote = written_by(trace, syscalls.align(trace, index.marks()), cut, ROOT)
    empty = {r.path: wrote[r.path] for r in reads if r.size <= 0 and wrote.get(r.path, 0) > 0}
    partial = (
        ""
        if complete(reads)
        else " (as Python's audit events show it: a C library's own opens are not seen)"
    )
    return words(reads, empty) + partial


def unproven(why: dict[str, Any], proof: str, candidates: Sequence[str] = ()) -> dict[str, Any]:
    """A cause no counterfactual proved: its sentence says so first, then the ``candidates`` tried,
    then what the trace shows -- never an unproven rule standing as the cause."""
    listed = f"; candidates: {', '.join(candidates)}" if candidates else ""
    return {
        **why,
        "proven": False,
        "proof": proof,
        "sentence": f"{causes.NOT_PROVEN}{listed}; the trace shows: {why.get('sentence', '')}",
    }


def _state_of(g: Group) -> str:
    """The state a group's cause is about: its minimized state, else its first."""
    return str((g.diagnosis or {}).get("minimized") or g.first.state)


def file_owners(rec: Recording, index: LogIndex) -> tuple[str | None, ...] | None:
    """Which file each log entry wrote, from the recording's file map (None: no map to read)."""
    path = rec.file_map
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
        return cf.owners(
            index.entries, doc["files"], index.sectorsize, int(doc.get("sector_bytes", 512))
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("%s: the file map cannot be read (%s): causes are not proven", path, e)
        return None


def prepare(rec: Recording, logs: Sequence[LogIndex], groups: Sequence[Group]) -> Verification:
    """The groups' states whose causes are to be proven (``targets``: each judged once more with
    what recovery read traced, then ``traced``, then ``plan``); the others' reasons (``skipped``)."""
    ver = Verification()
    if not groups:
        return ver
    if len(logs) > 1:
        for g in groups:
            ver.skipped[_state_of(g)] = (
                "a cluster's causes are not checked by counterfactual yet (one disk's are)"
            )
        return ver
    if load_trace(rec) is None:
        return ver
    sp = space(logs[0])
    for g in groups:
        sid = _state_of(g)
        try:
            st = sp.state_from_id(sid)
        except Exception as e:  # noqa: BLE001 -- a state that does not rebuild keeps its unproven cause
            ver.skipped[sid] = f"its state does not rebuild ({e})"
            continue
        if g.verdict in COSTLY:
            ver.skipped[sid] = (
                f"a state whose judge ended in {g.verdict} is not judged again to prove a cause (each "
                "judge of it costs its whole timeout or a checker VM)"
            )
        elif (
            st.model not in LIE_MODELS
        ):  # a lying disk's: what the disk did is the cause, nothing to prove
            ver.targets[sid] = st
    return ver


def plan(
    ver: Verification, rec: Recording, logs: Sequence[LogIndex], groups: Sequence[Group]
) -> None:
    """Each target's counterfactuals (``states`` to judge): its kill-equivalent state, and the
    what-if state of the rules its trace says it broke -- up to ``MAX_PLANNED`` before what recovery
    read is known (they are judged with it, in one batch); called again once it is known, it adds
    the rules about files recovery read that are not planned yet, and the ones its reads reveal (a
    pointer recovery followed).  A rule planned once is not planned again."""
    trace = load_trace(rec)
    if trace is None or not ver.targets:
        return
    index = logs[0]
    owned = file_owners(rec, index)
    sp = space(index)
    aligned = syscalls.align(trace, index.marks())
    back = cf.written_back(index.entries)
    for g in groups:
        sid = _state_of(g)
        st = ver.targets.get(sid)
        if st is None:
            continue
        k = cf.kill_point(trace, aligned, ROOT, st.cut, len(index.entries), written_back=back)
        if k is not None and sid not in ver.kills:
            ver.kills[sid] = Killed(k, cf.kill_equivalent(sp, st, k))
        if owned is None:
            continue  # no rule's writes can be told from other files': only the kill-equivalent is judged
        reasons = list((g.diagnosis or {}).get("minimized_reasons") or g.first.reasons)
        reads = ver.reads.get(sid, ())
        seen = read_paths(
            reads
        )  # a pointer recovery was seen to follow is one, even in a partial trace
        read = (
            rank_paths(reads) if complete(reads) else ()
        )  # but only a whole trace can rank by what was not read
        found = causes.candidates(
            trace,
            index.marks(),
            st.cut,
            ROOT,
            reasons=reasons,
            torn=[i for i, _ in st.torn],
            limit=None,
            read=seen,
        )
        ver.order[sid] = [(f.rule, f.subject) for f in found]
        at_cut = cf.as_of(owned, trace, aligned, ROOT, st.cut)  # named as at the cut
        mine = cf.as_blamed(at_cut, culprits_of(g.diagnosis))  # as of the cut, where blamed
        removed = cf.removed_after(trace, aligned, ROOT, st.cut)
        inp = PlanInput(trace, aligned, ROOT, st.cut, len(index.entries))
        tried = ver.tried.setdefault(sid, [])
        planned = {(t.finding.rule, t.finding.subject) for t in tried}
        for f in ranked(found, read, causes.MAX_CANDIDATES if read else MAX_PLANNED):
            if (f.rule, f.subject) in planned:
                continue
            p = registry.plan(f, inp)
            if p is None:
                tried.append(Tried(f, p, None))
                continue
            p = cf.to_commit(
                p, mine, sp, st.cut
            )  # a file never synced: up to its last write's commit
            state = cf.what_if(sp, st, mine, p)
            tried.append(
                Tried(
                    f,
                    p,
                    state,
                    unlogged=cf.unlogged(mine, p),
                    mixed=cf.mixed_in(p, removed, trace, aligned, ROOT, st.cut),
                    verdict=None if state is None else ver.judged.get(state.id),
                )
            )


def in_order(ts: Sequence[Tried], order: Sequence[tuple[str, str]]) -> list[Tried]:
    """The tried rules in the candidates' ``order`` (those it does not name last, as they were)."""
    at = {k: i for i, k in enumerate(order)}
    return sorted(ts, key=lambda t: at.get((t.finding.rule, t.finding.subject), len(at)))


def in_read_order(ts: Sequence[Tried], read: Sequence[str]) -> list[Tried]:
    """The tried rules in the order a cause is picked from them (``ranked``, every one kept), each
    about a file recovery never read said so."""
    by = {id(t.finding): t for t in ts}
    out = [by[id(f)] for f in ranked([t.finding for t in ts], read, len(ts))]
    for t in out:
        t.unread = (
            bool(read) and is_file(t.finding.subject) and t.finding.subject.lstrip("/") not in read
        )
    return out


def is_file(subject: str) -> bool:
    """Whether a rule's subject is one file (not a directory's ``/...`` of names, nor a list of files)."""
    return subject.startswith("/") and subject != "/" and "," not in subject


def ranked(
    found: Sequence[causes.Finding], read: Sequence[str], limit: int
) -> list[causes.Finding]:
    """The candidates in the order they are tried: every rule about a file recovery read (``read``:
    its files, relative to the mount, in the order it first opened them), then the others in the
    order the trace gives them (a rule about a directory or several files before one about a file
    recovery never read), up to ``limit`` in all -- but never fewer than the rules recovery read."""
    if not read:
        return list(found)[:limit]
    order = {p: i for i, p in enumerate(read)}
    of_read = sorted(
        (f for f in found if is_file(f.subject) and f.subject.lstrip("/") in order),
        key=lambda f: order[f.subject.lstrip("/")],
    )
    rest = [f for f in found if f not in of_read]
    rest.sort(
        key=lambda f: is_file(f.subject)
    )  # stable: directories and lists first, unread files last
    return of_read + rest[: max(0, limit - len(of_read))]


NO_MAP = "the recording has no file map (btrfs, or recorded before maps): a rule's writes cannot be told from other files'"


def _proven(
    why: dict[str, Any],
    ts: list[Tried],
    killed: Killed | None,
    trace: syscalls.Trace,
    index: LogIndex,
    stats: Stats,
    culprits: list[dict[str, Any]],
) -> dict[str, Any]:
    """The cause ``why`` as its counterfactuals and its kill-equivalent state showed it."""
    won = next((t for t in ts if t.outcome() == "pass"), None)
    refuted = [
        f"{t.label}: {t.words()}"
        for t in ts
        if t.outcome() == "fail" and t is not won and (won is None or ts.index(t) < ts.index(won))
    ]
    kill_failed = killed is not None and killed.outcome() == "fail"
    if won is not None:
        top = (why.get("rule"), why.get("subject"))
        if top != (won.finding.rule, won.finding.subject):
            stats.replaced += 1
            others = [t.label for t in ts if t is not won]
            new = causes.with_blame(
                causes.cause_of(trace, won.finding, others=others), culprits, ROOT
            ).to_json()
            new["excerpt"] = excerpt(trace, index, new)
            why = {**why, **new}
        else:
            stats.verified += 1
        skipped = [
            f"{t.label} could not be tried: {t.words()}"
            for t in ts[: ts.index(won)]
            if t.outcome() == "untried"
        ]
        also = (
            [f"{killed.words()}: the program's recovery also fails on a state it made itself"]
            if killed is not None and kill_failed
            else []
        )
        return {
            **why,
            "proven": True,
            "proof": f"verified: {won.words()}" + "".join(f"; {x}" for x in skipped),
            "refuted": refuted,
            "others": [*also, *why.get("others", [])],
        }
    if kill_failed and killed is not None and killed.verdict is not None:
        stats.recovery += 1
        v = killed.verdict
        found = RecoveryFails(
            killed.state.id, v.verdict, v.reasons[0] if v.reasons else "", killed.kill.words()
        )
        shown = [f"{why.get('rule')}: {why.get('sentence')}"] if why.get("rule") else []
        return {
            **why,
            "rule": RECOVERY,
            "subject": "",
            "sentence": registry.sentence(found),
            "proven": True,
            "proof": f"verified: {killed.words()}",
            "refuted": refuted,
            "others": [*shown, *why.get("others", [])][:4],
        }
    stats.unproven += 1
    if ts and (why.get("rule"), why.get("subject")) != (ts[0].finding.rule, ts[0].finding.subject):
        # none proven: what the trace shows is said of the rule ranked first (by what recovery
        # read), not of the one the trace alone put first
        first = causes.with_blame(
            causes.cause_of(trace, ts[0].finding, others=[t.label for t in ts[1:]]), culprits, ROOT
        ).to_json()
        first["excerpt"] = excerpt(trace, index, first)
        why = {**why, **first}
    proof = "; ".join(f"{t.label}: {t.words()}" for t in ts) if ts else NO_MAP
    if killed is not None:
        proof += f"; {killed.words()}"
    return unproven(why, f"not proven: {proof}", [t.label for t in ts])

"""A cause proven by its counterfactual (host; issue 52).

For each failure group of one disk (the first ``MAX_GROUPS``): the rules its (minimized, else first)
state's trace says the program broke, in the order a cause is picked (core/causes.candidates); each
one's what-if state -- the failing state with the writes that rule says were missing made durable,
and nothing else of the program's (core/counterfactual.py) -- all judged in one batch where the check runs (``prepare``,
then the campaign judges ``states``, then ``record``).  After the causes are written
(debug/cause.explain_groups) ``apply`` rewrites each group's:

- the first rule whose counterfactual passes is the cause, with its proof ("verified: with /wal's
  data ... made durable this state passes (what-if@...)"); the rules before it whose counterfactual
  still failed are listed as true but not why -- the cause changes to that rule when it was not the
  first;
- no rule's counterfactual passes: the cause stays the first rule the trace shows, "not proven",
  with what each counterfactual showed.  A counterfactual is only as exact as its parts: which file
  a write belongs to comes from the file map at the end of the recording, and a sync's writes are
  bounded by the next mark after it, not by the sync -- so a failing counterfactual shows that this
  construction did not pass, not that the rule is false, and the words say no more than that;
- not tried (no file map, a cluster, a lying disk's state, a judge that failed): said in the proof.

``Stats`` says what it cost (states judged, seconds) and what it changed (verified, replaced,
unproven), per campaign (summary.json ``cause_proofs``)."""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from powercut.core import causes, syscalls
from powercut.core import counterfactual as cf
from powercut.core.causerules import AckFinding, CutFinding
from powercut.core.crashstate import CrashState
from powercut.core.dmlog import LogIndex
from powercut.core.models import space
from powercut.core.stateid import LIE_MODELS
from powercut.core.verdict import Verdict
from powercut.debug.cause import ROOT, excerpt, load_trace

if TYPE_CHECKING:
    from powercut.debug.triage import Group
    from powercut.record.recording import Recording

log = logging.getLogger(__name__)

MAX_GROUPS = 8   # the groups whose causes are proven, first first (each costs a few states judged)


@dataclass(slots=True)
class Tried:
    """One rule of one group's state: its finding, its counterfactual, how that was judged."""

    finding: AckFinding | CutFinding
    plan: cf.Plan | None
    state: CrashState | None
    verdict: Verdict | None = None

    @property
    def label(self) -> str:
        return f"{self.finding.rule} ({self.finding.subject})"

    def outcome(self) -> str:
        """pass | fail | untried (nothing to make durable, or not judged)."""
        if self.plan is None:
            return "untried"
        if self.state is None:
            return "fail"      # its writes are all durable in the failing state already: it fails as it is
        if self.verdict is None or self.verdict.verdict in ("error", "flaky"):
            return "untried"
        return "pass" if self.verdict.verdict == "pass" else "fail"

    def words(self) -> str:
        """What judging it showed, after the rule's name."""
        if self.plan is None:
            return "nothing to make durable (the failed call's data is not in the log)"
        if self.state is None:
            return f"{self.plan.words()} are all durable in this state already, and it fails"
        if self.outcome() == "untried":
            return f"its counterfactual {self.state.id} was not judged ({self.verdict.verdict if self.verdict else 'no verdict'})"
        made = f"with {self.plan.words()} made durable ({self.state.id})"
        if self.outcome() == "pass":
            return f"{made} this state passes"
        first = self.verdict.reasons[0] if self.verdict and self.verdict.reasons else ""
        return f"{made} this state still fails ({self.verdict.verdict if self.verdict else '?'}: {first})"


@dataclass(slots=True)
class Stats:
    groups: int = 0          # groups whose cause was checked
    states: int = 0          # what-if states judged
    seconds: float = 0.0
    verified: int = 0        # the first rule's counterfactual passed
    replaced: int = 0        # a later rule's passed: the cause changed to it
    unproven: int = 0        # none passed, or some could not be judged: the cause stays, not proven
    untried: int = 0         # could not be checked at all (no file map, a cluster: said in the proof)

    def to_json(self) -> dict[str, Any]:
        return {"groups": self.groups, "states": self.states, "seconds": round(self.seconds, 3),
                "verified": self.verified, "replaced": self.replaced, "unproven": self.unproven,
                "untried": self.untried}


@dataclass(slots=True)
class Verification:
    """The counterfactuals of a campaign's failure groups, by the id of the state each explains."""

    tried: dict[str, list[Tried]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)   # state id -> why its cause is not checked
    stats: Stats = field(default_factory=Stats)

    @property
    def states(self) -> list[CrashState]:
        """Every what-if state to judge, once each."""
        out: dict[str, CrashState] = {}
        for ts in self.tried.values():
            out.update((t.state.id, t.state) for t in ts if t.state is not None)
        return list(out.values())

    def record(self, verdicts: dict[str, Verdict], seconds: float) -> None:
        for ts in self.tried.values():
            for t in ts:
                if t.state is not None:
                    t.verdict = verdicts.get(t.state.id)
        self.stats.states += len(self.states)
        self.stats.seconds += seconds

    def apply(self, rec: Recording, index: LogIndex, groups: Sequence[Group]) -> None:
        """Each group's cause rewritten by what its counterfactuals showed (the module's doc)."""
        trace = load_trace(rec)
        for g in groups:
            sid = _state_of(g)
            if not isinstance(g.why, dict):
                continue
            if sid in self.skipped:
                g.why["proof"] = f"not proven: {self.skipped[sid]}"
                self.stats.untried += 1
                continue
            ts = self.tried.get(sid)
            if not ts or trace is None:
                continue
            self.stats.groups += 1
            g.why = _proven(g.why, ts, trace, index, self.stats, (g.diagnosis or {}).get("culprits") or [])


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
        return cf.owners(index.entries, doc["files"], index.sectorsize, int(doc.get("sector_bytes", 512)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        log.warning("%s: the file map cannot be read (%s): causes are not proven", path, e)
        return None


def prepare(rec: Recording, logs: Sequence[LogIndex], groups: Sequence[Group]) -> Verification:
    """The counterfactual of every rule each group's state broke (``states`` to judge)."""
    ver = Verification()
    if not groups:
        return ver
    if len(logs) > 1:
        for g in groups:
            ver.skipped[_state_of(g)] = "a cluster's causes are not checked by counterfactual yet (one disk's are)"
        return ver
    trace = load_trace(rec)
    owned = file_owners(rec, logs[0]) if trace is not None else None
    if trace is None:
        return ver
    if owned is None:
        for g in groups:
            ver.skipped[_state_of(g)] = ("the recording has no file map (btrfs, or recorded before maps): a rule's "
                                              "writes cannot be told from other files'")
        return ver
    index = logs[0]
    sp = space(index)
    aligned = syscalls.align(trace, index.marks())
    for g in groups:
        sid = _state_of(g)
        try:
            st = sp.state_from_id(sid)
        except Exception as e:  # noqa: BLE001 -- a state that does not rebuild keeps its unproven cause
            ver.skipped[sid] = f"its state does not rebuild ({e})"
            continue
        if st.model in LIE_MODELS:
            continue   # what the disk did is the cause: nothing of the program's to prove
        reasons = list((g.diagnosis or {}).get("minimized_reasons") or g.first.reasons)
        found = causes.candidates(trace, index.marks(), st.cut, ROOT, reasons=reasons, torn=[i for i, _ in st.torn])
        tried = []
        for f in found:
            p = cf.plan(f, trace, aligned, ROOT, st.cut, len(index.entries))
            tried.append(Tried(f, p, cf.what_if(sp, st, owned, p) if p is not None else None))
        if tried:
            ver.tried[sid] = tried
    return ver


def _proven(why: dict[str, Any], ts: list[Tried], trace: syscalls.Trace, index: LogIndex, stats: Stats,
            culprits: list[dict[str, Any]]) -> dict[str, Any]:
    """The cause ``why`` as its counterfactuals showed it."""
    won = next((t for t in ts if t.outcome() == "pass"), None)
    refuted = [f"{t.label}: {t.words()}" for t in ts if t.outcome() == "fail" and t is not won
               and (won is None or ts.index(t) < ts.index(won))]
    if won is not None:
        top = (why.get("rule"), why.get("subject"))
        if top != (won.finding.rule, won.finding.subject):
            stats.replaced += 1
            others = [t.label for t in ts if t is not won]
            new = causes.with_blame(causes.cause_of(trace, won.finding, others=others), culprits, ROOT).to_json()
            new["excerpt"] = excerpt(trace, index, new)
            why = {**why, **new}
        else:
            stats.verified += 1
        skipped = [f"{t.label} could not be tried: {t.words()}" for t in ts[:ts.index(won)] if t.outcome() == "untried"]
        return {**why, "proof": f"verified: {won.words()}" + "".join(f"; {x}" for x in skipped), "refuted": refuted}
    stats.unproven += 1
    return {**why, "proof": "not proven: " + "; ".join(f"{t.label}: {t.words()}" for t in ts)}

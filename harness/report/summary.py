"""Campaign outputs from the verdict journal (host): a summary (per model: generated / distinct /
judged states and the verdicts), JSON summary, JUnit XML (one test case per judged state), the
console table, and a repro line for every failure.  Confirmed failures and flaky states are
counted apart: a flaky state is a harness problem, not a finding.

A campaign that did not complete (interrupted, or stopped by an error) is never green: its verdict
is ``incomplete`` unless a finding is worse, and JUnit carries an error test case that says how to
go on (``--resume``).  A recording that acknowledged nothing proves nothing: its verdict is
``no-acks``, a JUnit error too, unless the caller allowed it."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from powercut.core.cause.causes import Cause
from powercut.core.judging.confirm import group_key
from powercut.core.judging.verdict import SEVERITY, Verdict, worst
from powercut.core.log.markorder import UnorderedAck, possibly_false
from powercut.core.states.coverage import ALL, Coverage, requirement


@dataclass(frozen=True, slots=True)
class Summary:
    recording: str
    fstype: str
    workload: str
    check_in: str
    by_model: dict[str, dict[str, int]]  # model -> verdict -> judged states
    failures: list[Verdict]  # findings (confirmed unless confirmation was off)
    flaky: list[Verdict]
    total: int  # judged states
    seconds: float
    counts: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # model -> generated/distinct/judged/left_out
    status: str = "complete"  # complete | interrupted | error
    confirm_s: float = 0.0
    rejudged: int = 0
    groups: list[dict[str, Any]] = field(
        default_factory=list
    )  # failures grouped by how they fail (debug/triage.py)
    triage_s: float = 0.0
    acks: int = -1  # ack marks in the log (-1: not known)
    planned: int = 0  # distinct states selected to judge
    allow_no_acks: bool = False
    shard: str = ""  # "i/n" for one shard of a campaign ("" the whole)
    missing_shards: tuple[str, ...] = ()  # a merge without them is not complete
    covered: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # model -> verdict -> its distinct
    #   states judged, directly or as the alias of an earlier model's state with the same image
    confirm_mode: str = "group"  # group | all | off (core/judging/confirm.py)
    confirm_sample: int = 0  # states judged alone per large group
    escalated: int = 0  # groups confirmed state by state after their sample disagreed
    coverage: Coverage | None = (
        None  # what was covered (core/states/coverage); None: not recorded (old output)
    )
    require_exhaustive: str = ""  # "commits": a pass whose commit windows are not exhaustive is not
    #                                           ok (--require-exhaustive); "all": nor one short of exhaustive anywhere
    anatomy: dict[str, Any] = field(
        default_factory=dict
    )  # commit anatomy (core/trace/anatomy.py), {} if unknown
    trace_note: str = ""  # why there is no cause in the program's terms ("" with a trace)
    disk_latency: str = (
        ""  # the recording's data-disk latency (core/recording/latency.py; "" unknown)
    )
    nodes: int = 1  # disks judged together (> 1: a cluster recording's nodes)
    disks: dict[str, Any] = field(
        default_factory=dict
    )  # N > 1: the instants and each disk's distinct states
    delay_sync: tuple[
        str, ...
    ] = ()  # the recording's --delay-sync rules (core/recording/syncdelay.py; () none)
    proofs: dict[str, Any] = field(
        default_factory=dict
    )  # the causes' counterfactuals (debug/verify.Stats)
    doubtful: dict[str, str] = field(
        default_factory=dict
    )  # failing state -> why it is possibly a false alarm
    #   (its cut lies after an ack the log cannot order: core/log/markorder.unordered_acks); still a failure
    start: dict[str, Any] = field(
        default_factory=dict
    )  # the recording's [from]: the crash state it started from (record --from; {} none)
    proven: dict[str, int] = field(
        default_factory=dict
    )  # model -> states proven by the read-set rule, not judged (check/proving.py)
    readset_mismatch: str = (
        ""  # the read-set rule disproved by its confirmation: every state judged after all
    )
    readset_stopped: str = (
        ""  # the read-set rule stopped tracing: it did not pay (check/proving.py)
    )

    @property
    def judged(self) -> int:
        """States judged for real (``total`` less those proven equal to a judged one)."""
        return self.total - sum(self.proven.values())

    def proofs_line(self) -> str:
        """What the read-set rule did, in one line ("" when it proved nothing and failed nothing)."""
        if self.readset_mismatch:
            return f"read-set rule disproved: {self.readset_mismatch}"
        n = sum(self.proven.values())
        stop = f"; {self.readset_stopped}" if self.readset_stopped else ""
        if not n:
            return stop[2:]
        per = ", ".join(f"{m} {k}" for m, k in self.proven.items())
        return (
            f"{self.judged} judged, {n} proven equal to a judged state on every sector its judge "
            f"read ({per}; --judge-all judges them too){stop}"
        )

    @property
    def no_acks(self) -> bool:
        return self.acks == 0 and not self.allow_no_acks

    @property
    def exhaustive(self) -> bool:
        return self.coverage is not None and self.coverage.exhaustive

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and not self.flaky
            and self.status == "complete"
            and not self.no_acks
            and self.meets_requirement
        )

    @property
    def meets_requirement(self) -> bool:
        """Its coverage is what --require-exhaustive asks for (anything when it was not given)."""
        if not self.require_exhaustive:
            return True
        return self.coverage is not None and self.coverage.meets(
            requirement(self.require_exhaustive)
        )

    def coverage_phrase(self) -> str:
        """What the verdict stands on, in the words every output uses (core/states/coverage.Coverage.phrase)."""
        if self.coverage is None:
            return "coverage not recorded"
        return (
            self.coverage.phrase()
            or f"exhaustive: all {self.coverage.judged} distinct states judged"
        )

    def headline(self) -> str:
        """The first line of every output: the verdict and its coverage, e.g. ``pass (capped: 3 of 60
        distinct states judged)`` or ``lost-ack: 2 of 60 states fail (exhaustive: ...)``."""
        if self.failures:
            doubt = sum(f.state in self.doubtful for f in self.failures)
            apart = (
                f", {doubt} of them possibly false alarms (cut after an ack the log cannot order against "
                "the writes logged after it)"
                if doubt
                else ""
            )
            return (
                f"{self.verdict}: {len(self.failures)} of {self.total} judged states fail{apart} "
                f"({self.coverage_phrase()})"
            )
        return f"{self.verdict} ({self.coverage_phrase()})"

    @property
    def verdict(self) -> str:
        if self.failures:
            return worst([f.verdict for f in self.failures])
        if self.flaky:  # no finding, but not a pass: the harness gave two verdicts for a state
            return "flaky"
        if self.status != "complete":
            return "incomplete"
        return "no-acks" if self.no_acks else "pass"

    def notes(self) -> list[str]:
        """What makes a result without failures not a pass, in words."""
        out = []
        if self.missing_shards:
            out.append(
                f"shard{'s' if len(self.missing_shards) > 1 else ''} {', '.join(self.missing_shards)} "
                f"{'are' if len(self.missing_shards) > 1 else 'is'} missing from the merge: not a pass; merge "
                "every shard's output"
            )
        elif self.status != "complete":
            out.append(
                f"the check is {self.status} ({self.total} of {self.planned or '?'} states judged): not a "
                "pass; run the same command with --resume to finish it"
            )
        if self.no_acks:
            out.append(
                "the workload acknowledged no commit (no ack: mark in the log): every state passes and "
                "proves nothing; make the workload call powercut.ack, or --allow-no-acks"
            )
        if not self.meets_requirement and not self.failures:
            if requirement(self.require_exhaustive) == ALL:
                out.append(
                    f"not exhaustive ({self.coverage_phrase()}): --require-exhaustive=all asks for every "
                    "distinct state of every model judged, nothing sampled, capped or weakened"
                )
            else:
                out.append(
                    f"not exhaustive ({self.coverage_phrase()}): --require-exhaustive asks for every commit "
                    "window's distinct states judged, nothing sampled, capped or weakened there "
                    "(--require-exhaustive=all: the set-up windows too)"
                )
        return out

    @property
    def confirmed(self) -> int:
        """Findings judged again alone with the same verdict."""
        return sum(f.confirmed for f in self.failures)

    @property
    def by_group(self) -> int:
        """Findings standing on their group's confirmation (its sample kept its verdict)."""
        return sum(f.by_group and not f.confirmed for f in self.failures)

    def confirmation_line(self) -> str:
        """What confirmation did, in one line ("" when it judged nothing)."""
        if not self.rejudged:
            return (
                ""
                if self.confirm_mode != "off" or not self.failures
                else "confirmation off: no failing state was judged again alone"
            )
        how = {
            "group": f"by failure group (a sample of up to {self.confirm_sample} per group)",
            "all": "every failing state",
        }.get(self.confirm_mode, self.confirm_mode)
        esc = (
            f"; {self.escalated} group{'s' if self.escalated != 1 else ''} confirmed state by state after "
            "a disagreement"
            if self.escalated
            else ""
        )
        return (
            f"confirmation {how}: {self.rejudged} states judged again alone in {self.confirm_s:.1f} s: "
            f"{self.confirmed} confirmed, {self.by_group} confirmed by their group, {len(self.flaky)} flaky{esc}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "recording": self.recording,
            "fstype": self.fstype,
            "workload": self.workload,
            "check_in": self.check_in,
            "status": self.status,
            "total": self.total,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "states": self.counts,
            "by_model": self.by_model,
            "covered": self.covered,
            "verdict": self.verdict,
            "headline": self.headline(),
            "disk_latency": self.disk_latency,
            "delay_sync": list(self.delay_sync),
            **({"from": self.start} if self.start else {}),
            "proven": self.proven,
            **({"readset_mismatch": self.readset_mismatch} if self.readset_mismatch else {}),
            **({"readset_stopped": self.readset_stopped} if self.readset_stopped else {}),
            "cause_proofs": self.proofs,
            "coverage": self.coverage.to_json() if self.coverage is not None else None,
            "require_exhaustive": self.require_exhaustive,
            "notes": self.notes(),
            "acks": self.acks,
            "planned": self.planned,
            "allow_no_acks": self.allow_no_acks,
            "shard": self.shard,
            "missing_shards": list(self.missing_shards),
            "confirmed_failures": self.confirmed,
            "confirmed_by_group": self.by_group,
            "flaky": len(self.flaky),
            "confirmation": {
                "mode": self.confirm_mode,
                "sample": self.confirm_sample,
                "rejudged": self.rejudged,
                "seconds": round(self.confirm_s, 3),
                "escalated_groups": self.escalated,
            },
            "groups": self.groups,
            "triage_seconds": round(self.triage_s, 3),
            "anatomy": self.anatomy,
            "trace_note": self.trace_note,
            "failures": [
                dict(
                    f.to_json(),
                    repro=repro(self.recording, f),
                    **(
                        {"possibly_false_alarm": self.doubtful[f.state]}
                        if f.state in self.doubtful
                        else {}
                    ),
                )
                for f in self.failures
            ],
            "flaky_states": [f.to_json() for f in self.flaky],
            "nodes": self.nodes,
            "disks": self.disks,
        }


def summarize(
    verdicts: list[Verdict],
    *,
    recording: str,
    fstype: str,
    workload: str,
    check_in: str,
    seconds: float,
    selection: Any = None,
    status: str = "complete",
    confirm_s: float = 0.0,
    rejudged: int = 0,
    groups: list[dict[str, Any]] | None = None,
    triage_s: float = 0.0,
    acks: int = -1,
    allow_no_acks: bool = False,
    shard: str = "",
    missing_shards: tuple[str, ...] = (),
    confirm_mode: str = "group",
    confirm_sample: int = 0,
    escalated: int = 0,
    coverage: Coverage | None = None,
    require_exhaustive: str | bool = "",
    anatomy: dict[str, Any] | None = None,
    trace_note: str = "",
    disk_latency: str = "",
    nodes: int = 1,
    disks: dict[str, Any] | None = None,
    delay_sync: Sequence[str] = (),
    proofs: dict[str, Any] | None = None,
    doubts: Sequence[UnorderedAck] = (),
    start: dict[str, Any] | None = None,
    readset_mismatch: str = "",
    readset_stopped: str = "",
) -> Summary:
    by_model: dict[str, Counter[str]] = defaultdict(Counter)
    covered: dict[str, Counter[str]] = defaultdict(Counter)
    proven: Counter[str] = Counter()
    for v in verdicts:
        by_model[v.model][v.verdict] += 1
        if v.proof:
            proven[v.model] += 1
        for m in models_of(v):
            covered[m][v.verdict] += 1
    failures = sorted(
        (v for v in verdicts if v.finding),
        key=lambda v: (-SEVERITY.index(v.verdict), v.model, v.cut, v.state),
    )
    flaky = sorted(
        (v for v in verdicts if v.verdict == "flaky"), key=lambda v: (v.model, v.cut, v.state)
    )
    counts = {
        m: (c.to_json() if hasattr(c, "to_json") else dict(c))
        for m, c in (selection.counts.items() if selection is not None else ())
    }
    if disks is not None:
        per_disk = disks
    elif nodes > 1:
        per_disk = _disks_of(selection)
    else:
        per_disk = {}
    return Summary(
        recording,
        fstype,
        workload,
        check_in,
        {m: dict(c) for m, c in sorted(by_model.items())},
        failures,
        flaky,
        len(verdicts),
        seconds,
        counts,
        status,
        confirm_s,
        rejudged,
        list(groups or []),
        triage_s,
        acks,
        len(getattr(selection, "states", ())),
        allow_no_acks,
        shard,
        tuple(missing_shards),
        {m: dict(c) for m, c in sorted(covered.items())},
        confirm_mode,
        confirm_sample,
        escalated,
        coverage,
        requirement(require_exhaustive),
        dict(anatomy or {}),
        trace_note,
        disk_latency,
        nodes,
        dict(per_disk),
        tuple(delay_sync),
        dict(proofs or {}),
        {
            f.state: d.sentence()
            for f in failures
            if (d := possibly_false(doubts, f.cut)) is not None
        },
        start=dict(start or {}),
        proven=dict(sorted(proven.items())),
        readset_mismatch=readset_mismatch,
        readset_stopped=readset_stopped,
    )


def _disks_of(selection: Any) -> dict[str, Any]:
    """What a selection of N > 1 disks' states says per disk (core/states/selection.NodesSelection): the
    instants and each disk's distinct states per model."""
    return {
        "instants": int(getattr(selection, "instants", 0)),
        "node_states": [dict(n) for n in getattr(selection, "node_states", ())],
    }


def models_of(v: Verdict) -> list[str]:
    """The models a verdict speaks for: its state's, and each alias's (an alias id starts with its model:
    ``MODEL@...`` for one disk, ``MODEL~...`` for a cluster state)."""
    return list(
        dict.fromkeys([v.model, *(a.partition("@")[0].partition("~")[0] for a in v.aliases)])
    )


def repro(recording: str, v: Verdict) -> str:
    """The one line that rebuilds the failing state and judges it again in a checker VM."""
    return f"powercut repro {shlex.quote(recording)} --state {shlex.quote(v.state)}"


def group_confirmation(g: dict[str, Any]) -> str:
    """How a failure group (triage.Group.to_json) was confirmed, in words ("" for an old summary)."""
    if "confirmed_alone" not in g:
        return ""
    n = g["count"]
    alone = g["confirmed_alone"]
    by = g["confirmed_by_group"]
    if not alone and not by:
        return "unconfirmed: confirmation was off"
    text = f"{alone} of {n} judged again alone with the same verdict"
    if by:
        text += f"; the other {by} stand on that sample (confirmed-by-group)"
    if g.get("unconfirmed"):
        text += f"; {g['unconfirmed']} unconfirmed"
    if g.get("escalated"):
        text += "; its sample disagreed somewhere, so the group was confirmed state by state"
    if "minimized_confirmed" in g:
        text += (
            "; the minimized state judged alone fails the same way"
            if g["minimized_confirmed"]
            else f"; the minimized state judged alone gave {g.get('minimized_alone', '?')}: not the same"
        )
    return text


CONFIRMATION = {
    "confirmed": "confirmed (judged again alone: the same verdict)",
    "confirmed-by-group": "confirmed-by-group (not judged again itself: every sampled state of its "
    "failure group kept its verdict alone)",
    "unconfirmed": "unconfirmed (not judged again: confirmation was off or did not finish)",
}


def cause_lines(group: dict[str, Any]) -> tuple[str, ...]:
    """A failure group's cause in the program's terms, as JUnit's failure text says it (its head,
    what recovery read, its proof), or () without one."""
    why = group.get("why")
    if not isinstance(why, dict) or not why.get("rule"):
        return ()
    c = Cause.from_json(why)
    return (c.head(), *((c.read,) if c.read else ()), *((f"proof: {c.proof}",) if c.proof else ()))


def write_junit(summary: Summary, verdicts: list[Verdict], path: Path) -> None:
    notes = summary.notes()
    suites = ET.Element(
        "testsuites",
        name="powercut",
        tests=str(summary.total + bool(notes)),
        failures=str(len(summary.failures)),
        errors=str(len(summary.flaky) + bool(notes)),
        time=f"{summary.seconds:.3f}",
    )
    props = ET.SubElement(suites, "properties")
    ET.SubElement(props, "property", name="verdict", value=summary.headline())
    ET.SubElement(
        props,
        "property",
        name="coverage",
        value=summary.coverage.overall if summary.coverage else "unknown",
    )
    if summary.coverage is not None and summary.coverage.seed is not None:
        ET.SubElement(props, "property", name="seed", value=str(summary.coverage.seed))
    if summary.disk_latency:
        ET.SubElement(props, "property", name="disk_latency", value=summary.disk_latency)
    if summary.delay_sync:
        ET.SubElement(props, "property", name="delay_sync", value=", ".join(summary.delay_sync))
    if (
        not summary.exhaustive and not notes
    ):  # a pass short of exhaustive is never plain green: skipped
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{summary.workload}.{summary.fstype}.coverage",
            tests="1",
            failures="0",
            errors="0",
            skipped="1",
            time="0.000",
        )
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{summary.workload}.{summary.fstype}.coverage",
            name="coverage",
            time="0.000",
        )
        ET.SubElement(
            case, "skipped", message=summary.coverage_phrase()
        ).text = f"{summary.headline()}\nnot every crash state was judged; --require-exhaustive makes this an error\n"
        suites.set("tests", str(int(suites.get("tests", "0")) + 1))
        suites.set("skipped", "1")
    if notes:  # an incomplete campaign or one without acks is never green
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{summary.workload}.{summary.fstype}.campaign",
            tests="1",
            failures="0",
            errors="1",
            time="0.000",
        )
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{summary.workload}.{summary.fstype}.campaign",
            name=summary.verdict,
            time="0.000",
        )
        err = ET.SubElement(case, "error", type=summary.verdict, message=notes[0])
        err.text = "\n".join(notes) + "\n"
    causes_of = {(g.get("verdict"), g.get("reason_class")): cause_lines(g) for g in summary.groups}
    for model in summary.by_model:
        mine = [v for v in verdicts if v.model == model]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=f"{summary.workload}.{summary.fstype}.{model}",
            tests=str(len(mine)),
            failures=str(sum(v.finding for v in mine)),
            errors=str(sum(v.verdict == "flaky" for v in mine)),
            time=f"{sum(v.seconds for v in mine):.3f}",
        )
        for v in sorted(mine, key=lambda v: (v.cut, v.state)):
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{summary.workload}.{summary.fstype}.{model}",
                name=v.state,
                time=f"{v.seconds:.3f}",
            )
            if (
                not v.failed
            ):  # a pass, or detected under a lying disk (core/judging/verdict.is_pass)
                if v.verdict != "pass":
                    ET.SubElement(case, "system-out").text = (
                        f"{v.verdict}: " + "; ".join(v.reasons[:3]) + "\n"
                    )
                continue
            tag = "error" if v.verdict == "flaky" else "failure"
            fail = ET.SubElement(
                case,
                tag,
                type=v.verdict,
                message=f"{v.verdict}: {v.reasons[0] if v.reasons else ''}",
            )
            fail.text = "\n".join(v.reasons) + f"\nrepro: {repro(summary.recording, v)}\n"
            if v.verdict != "flaky":
                fail.text += f"confirmation: {CONFIRMATION[v.confirmation]}\n"
            if v.aliases:
                fail.text += f"also judged by this state: {', '.join(v.aliases)}\n"
            fail.text += "".join(f"{line}\n" for line in causes_of.get(group_key(v), ()))
    ET.indent(suites)
    path.write_text(ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n")


def write_outputs(summary: Summary, verdicts: list[Verdict], outdir: Path) -> dict[str, Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = {"summary": outdir / "summary.json", "junit": outdir / "junit.xml"}
    paths["summary"].write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    write_junit(summary, verdicts, paths["junit"])
    return paths


def table(summary: Summary) -> Any:
    """A rich Table: one row per model -- generated / distinct / judged states, then one column
    per verdict that occurred."""

    seen = [v for v in SEVERITY if any(v in c for c in summary.by_model.values())]
    status = "" if summary.status == "complete" else f" [{summary.status.upper()}]"
    status += f" [shard {summary.shard}]" if summary.shard else ""
    status += (
        f" [disk latency {summary.disk_latency}]"
        if summary.disk_latency not in ("", "none")
        else ""
    )
    status += f" [delay-sync {', '.join(summary.delay_sync)}]" if summary.delay_sync else ""
    if summary.start:
        status += f" [from {summary.start.get('state')} of {summary.start.get('recording')}]"
    disks = f" on {summary.nodes} nodes" if summary.nodes > 1 else ""
    n = sum(summary.proven.values())
    proven = f" ({n} of them proven equal to a judged state)" if n else ""
    t = Table(
        title=escape(
            f"{summary.workload}{disks} on {summary.fstype}: {summary.total} distinct crash states "
            f"judged{proven} in {summary.check_in} in {summary.seconds:.1f} s{status}"
        ),  # the [shard ...], [from ...] notes are words, not rich markup
        min_width=72,
    )
    t.add_column("model")
    for col in ("generated", "distinct", "judged"):
        t.add_column(col, justify="right")
    for v in seen:
        if v == "pass":
            style = "green"
        elif v == "flaky":
            style = "yellow"
        elif v == "detected":
            style = "cyan"  # detected: a pass under a lying disk only
        else:
            style = "red"
        t.add_column(v, justify="right", style=style)
    for model in dict.fromkeys([*summary.counts, *summary.by_model]):
        c = summary.counts.get(model, {})
        counts = summary.by_model.get(model, {})
        t.add_row(
            model,
            *[str(c.get(k, "")) for k in ("generated", "distinct", "judged")],
            *[str(counts.get(v, 0)) for v in seen],
        )
    return t

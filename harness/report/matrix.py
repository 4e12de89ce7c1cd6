"""The verdict matrix (host): the data file ``checkers/matrix.toml`` -- workload x variant x filesystem
and mount options x crash model -> the expected verdict and why --, choosing rows, running them
(one recording and one check campaign per row) and comparing what was seen with what was expected.
``powercut matrix`` and the tests read it; nothing here prints.

A cell's expectation is ``pass`` (every judged state passes), a verdict (at least one confirmed
failing state has it), or ``fail`` (at least one confirmed failing state, any verdict).  A flaky
state, a recording that failed or a campaign that did not complete is never as expected."""

from __future__ import annotations

import fnmatch
import logging
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rich.table import Table

from powercut.config import DEFAULT_DISK_LATENCY, disk_latency_for, fault_for
from powercut.core.cause.causes import RULES
from powercut.core.judging.confirm import group_key
from powercut.core.judging.verdict import FINDINGS
from powercut.core.recording import syncdelay
from powercut.core.states.coverage import ALL, COMMITS, Coverage, requirement
from powercut.core.states.nodes import MAX_NODES
from powercut.core.states.stateid import MODELS
from powercut.errors import PowercutError, UsageError
from powercut.report import html
from powercut.report.summary import models_of

log = logging.getLogger(__name__)

EXPECTATIONS = frozenset(
    {"pass", "fail"} | FINDINGS | {f"{v} only" for v in FINDINGS}
)  # "V only": no other


CI_PARTS = ("host", "vm", "")


@dataclass(frozen=True, slots=True)
class Row:
    """One configuration: a workload variant on one filesystem with its mount options."""

    workload: str
    variant: str
    params: dict[str, Any]
    fs: str
    expect: dict[str, str]  # model -> expectation
    why: str
    mount_opts: str = ""
    mkfs_opts: str = ""
    ci: str = ""  # "host" / "vm": in CI's part of the matrix, checked there
    notes: dict[str, str] = field(default_factory=dict)  # model -> why this cell
    claim: str = ""  # the program's documented claim for this configuration
    max_states: int = 0  # judge at most this many states of this row (0: as the run says)
    cause: dict[str, str] = field(
        default_factory=dict
    )  # model -> the rule its failures' cause names (core/cause/causes.py)
    disk_latency: str = (
        "none"  # the data disk's latency while recording (core/recording/latency.py)
    )
    lie_file: str = ""  # the lying-disk models lie about this file of the program only
    nodes: int = 1  # a cluster row: the workload runs on this many nodes (docs/clusters.md)
    fault: str = ""  # the recording's fault plan (--fault; a cluster's per node: 1=PLAN)
    delay_sync: tuple[
        str, ...
    ] = ()  # GLOB=TIME: those files' syncs held while recording (core/recording/syncdelay.py)

    @property
    def id(self) -> str:
        return (
            f"{self.workload}/{self.variant}/{self.fs}"
            + (f":{self.mount_opts}" if self.mount_opts else "")
            + (f"@{self.disk_latency}" if self.disk_latency != "none" else "")
            + (f"+hold:{','.join(self.delay_sync)}" if self.delay_sync else "")
        )

    @property
    def slug(self) -> str:
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in self.id.replace("/", "__"))

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(m for m in MODELS if m in self.expect)


def default_path() -> Path:
    return Path(str(resources.files("powercut.checkers") / "matrix.toml"))


def load(path: str | Path | None = None) -> list[Row]:
    """Every row of the matrix file (a row with a list of filesystems is one row per filesystem)."""
    p = Path(path) if path else default_path()
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as e:
        raise UsageError(f"{p}: cannot read the verdict matrix: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{p}: not a valid verdict matrix: {e}") from None
    rows: list[Row] = []
    for n, d in enumerate(doc.get("row", []), 1):
        rows.extend(_rows(d, f"{p}: row {n}"))
    ids = [r.id for r in rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise UsageError(f"{p}: the same configuration twice: {', '.join(dup)}")
    return rows


def _rows(d: dict[str, Any], where: str) -> list[Row]:
    known = {
        "workload",
        "variant",
        "params",
        "fs",
        "mount",
        "mkfs",
        "expect",
        "why",
        "ci",
        "notes",
        "claim",
        "max_states",
        "cause",
        "disk_latency",
        "lie_file",
        "nodes",
        "fault",
        "delay_sync",
    }
    unknown = set(d) - known
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}"
        )
    for key in ("workload", "variant", "fs", "expect", "why"):
        if not d.get(key):
            raise UsageError(f"{where}: needs '{key}'")
    expect = {str(m): str(v) for m, v in dict(d["expect"]).items()}
    for m, v in expect.items():
        if m not in MODELS:
            raise UsageError(f"{where}: unknown model {m!r} in expect; models: {', '.join(MODELS)}")
        if v not in EXPECTATIONS:
            raise UsageError(
                f"{where}: expect.{m} = {v!r}; expected one of {', '.join(sorted(EXPECTATIONS))}"
            )
    if d.get("ci", "") not in CI_PARTS:
        raise UsageError(f"{where}: ci must be 'host', 'vm' or absent, not {d.get('ci')!r}")
    notes = {str(m): str(v) for m, v in dict(d.get("notes", {})).items()}
    if set(notes) - set(expect):
        raise UsageError(
            f"{where}: notes for models without an expectation: {', '.join(sorted(set(notes) - set(expect)))}"
        )
    raw = d.get("cause", {})
    cause = (
        {str(m): str(raw) for m, v in expect.items() if v != "pass"}
        if isinstance(raw, str)
        else {str(m): str(v) for m, v in dict(raw).items()}
    )
    if set(cause) - set(expect):
        raise UsageError(
            f"{where}: cause for models without an expectation: {', '.join(sorted(set(cause) - set(expect)))}"
        )
    bad = sorted(set(cause.values()) - set(RULES))
    if bad:
        raise UsageError(
            f"{where}: cause {', '.join(bad)} is not a rule; rules: {', '.join(RULES)}"
        )
    fss = d["fs"] if isinstance(d["fs"], list) else [d["fs"]]
    nodes = d.get("nodes", 1)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= MAX_NODES:
        raise UsageError(
            f"{where}: nodes = {nodes!r}: a whole number from 1 (one disk) to {MAX_NODES}"
        )
    latency = str(
        disk_latency_for(
            str(d.get("disk_latency", DEFAULT_DISK_LATENCY)), nodes, f"{where}: disk_latency"
        )
    )
    fault = (
        fault_for(str(d.get("fault", "")), nodes, f"{where}: fault = ") if d.get("fault") else ""
    )
    raw_held = d.get("delay_sync", ())
    try:
        held = syncdelay.canonical([raw_held] if isinstance(raw_held, str) else list(raw_held))
    except (UsageError, TypeError) as e:
        why = e.one_line() if isinstance(e, UsageError) else "a GLOB=TIME rule or a list of them"
        raise UsageError(f"{where}: delay_sync = {raw_held!r}: {why}") from None
    return [
        Row(
            str(d["workload"]),
            str(d["variant"]),
            dict(d.get("params", {})),
            str(fs),
            expect,
            str(d["why"]),
            str(d.get("mount", "")),
            str(d.get("mkfs", "")),
            str(d.get("ci", "")),
            notes,
            " ".join(str(d.get("claim", "")).split()),
            int(d.get("max_states", 0)),
            cause,
            latency,
            str(d.get("lie_file", "")),
            nodes,
            fault,
            held,
        )
        for fs in fss
    ]


def choose(
    rows: list[Row], patterns: list[str] | tuple[str, ...] = (), ci: bool = False
) -> list[Row]:
    """The rows whose id matches any glob pattern (all without patterns); ``ci``: only CI's part."""
    out = [
        r
        for r in rows
        if (not patterns or any(fnmatch.fnmatchcase(r.id, p) for p in patterns))
        and (not ci or r.ci)
    ]
    if not out:
        raise UsageError(
            "no row of the verdict matrix matches "
            + (", ".join(patterns) or "the CI part")
            + f"; rows: {', '.join(r.id for r in rows[:8])}{' ...' if len(rows) > 8 else ''}"
        )
    return out


@dataclass(frozen=True, slots=True)
class Cell:
    """What one model saw on one row, against what was expected."""

    row: str
    model: str
    expected: str
    judged: int = 0
    failing: dict[str, int] = field(default_factory=dict)  # verdict -> confirmed failing states
    first: str = ""  # the first failing state (lowest cut)
    first_reason: str = ""
    flaky: int = 0
    error: str = ""
    tear_free: int = 0  # failing torn states that fail alike untorn
    tear_free_example: str = ""
    coverage: str = ""  # the model's coverage phrase ("" exhaustive, or unknown: see covered)
    covered: str = "exhaustive"  # the model's worst coverage word (core/states/coverage: exhaustive .. weakened)
    require_exhaustive: str | bool = (
        ""  # "commits"/True: a pass expected and seen on commit windows short of
    )
    #                                       exhaustive is not ok; "all": nor on a space short of exhaustive anywhere
    cause: str = ""  # the rule the cause of its failures names (core/cause/causes.py; "" unknown)
    cause_text: str = ""  # that cause's sentence
    expected_cause: str = ""  # the row's expectation of it ("" none)
    commits: str = ""  # the worst coverage word of its commit windows (core/states/coverage; "": as ``covered``)

    @property
    def cause_ok(self) -> bool:
        """Its failures' cause names the rule the row expects.  A cell without failures or without
        an expectation has nothing to disagree with; nor has one without a cause (a recording made
        without its system-call trace: the description says so, the CI test requires a cause)."""
        return (
            not self.expected_cause or not self.failing or self.cause in ("", self.expected_cause)
        )

    @property
    def short_coverage(self) -> str:
        """Its coverage in a few words, the commit windows first: "" (exhaustive), "commits exhaustive,
        set-up sampled", "commits sampled" (the worst word of each)."""
        if self.covered == "exhaustive":
            return ""
        if not self.commits:
            return self.covered
        return (
            f"commits exhaustive, set-up {self.covered}"
            if self.commits == "exhaustive"
            else f"commits {self.commits}"
        )

    @property
    def proven(self) -> bool:
        """An expected pass stands on every distinct state -- of its commit windows, unless
        --require-exhaustive=all asks for the set-up windows too (a failure found needs no more)."""
        if self.covered == "exhaustive" or self.failing:
            return True
        return self.commits == "exhaustive" and requirement(self.require_exhaustive) != ALL

    @property
    def mark(self) -> str:
        """What the matrix prints before the cell: ``ok``, ``ok?`` (as expected, but not every state
        was judged: the coverage says which way), or ``SURPRISE``."""
        if not self.ok:
            return "SURPRISE"
        elif self.proven:
            return "ok"
        else:
            return "ok?"

    @property
    def tear_needed(self) -> int:
        """Failing states that need their tear (all of them for a model that tears nothing)."""
        return sum(self.failing.values()) - self.tear_free

    @property
    def seen(self) -> str:
        if self.error:
            return "error"
        if self.flaky:
            return "flaky"
        if not self.failing:
            return "pass"
        if not self.tear_needed:
            return "pass (untorn)"
        return max(self.failing, key=lambda v: (self.failing[v], v))

    @property
    def ok(self) -> bool:
        """``pass`` expected: no failing state -- for a torn model, none that needs its tear (the
        tear adds nothing); a failure expected: some failing state with that verdict."""
        if (
            self.error or self.flaky or not self.judged or not self.cause_ok
        ):  # the wrong cause: a surprise too
            return False
        if self.expected == "pass":
            return not self.tear_needed and (self.proven or not self.require_exhaustive)
        if self.expected == "fail":
            return bool(self.failing)
        if self.expected.endswith(
            " only"
        ):  # that verdict and no other (e.g. "may lose, never corrupts")
            return set(self.failing) == {self.expected.removesuffix(" only")}
        return self.failing.get(self.expected, 0) > 0

    def describe(self) -> str:
        if self.error:
            return f"error: {self.error}"
        untorn = (
            f"; {self.tear_free} failing states fail the same way without their tear (write-cache losses, "
            f"e.g. {self.tear_free_example})"
            if self.tear_free
            else ""
        )
        if not self.failing:
            cov = f"; {self.coverage}" if self.coverage else ""
            return (
                f"pass ({self.judged} states{cov})"
                + (f", {self.flaky} flaky" if self.flaky else "")
                + untorn
            )
        kinds = ", ".join(f"{v} {n}" for v, n in sorted(self.failing.items()))
        why = (
            f"; cause {self.cause or 'unknown (no system-call trace)'}"
            + ("" if self.cause_ok else f", expected {self.expected_cause}")
            if self.cause or self.expected_cause
            else ""
        )
        return (
            f"{kinds} of {self.judged}; first {self.first}"
            + (f", {self.flaky} flaky" if self.flaky else "")
            + why
            + untorn
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "model": self.model,
            "expected": self.expected,
            "seen": self.seen,
            "ok": self.ok,
            "judged": self.judged,
            "failing": self.failing,
            "first_failing_state": self.first,
            "first_reason": self.first_reason,
            "flaky": self.flaky,
            "error": self.error,
            "tear_free": self.tear_free,
            "tear_free_example": self.tear_free_example,
            "coverage": self.coverage,
            "covered": self.covered,
            "require_exhaustive": self.require_exhaustive,
            "commits_covered": self.commits,
            "cause": self.cause,
            "cause_text": self.cause_text,
            "expected_cause": self.expected_cause,
            "cause_ok": self.cause_ok,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Cell":
        return Cell(
            str(d["row"]),
            str(d["model"]),
            str(d["expected"]),
            int(d.get("judged", 0)),
            {str(k): int(v) for k, v in (d.get("failing") or {}).items()},
            str(d.get("first_failing_state", "")),
            str(d.get("first_reason", "")),
            int(d.get("flaky", 0)),
            str(d.get("error", "")),
            int(d.get("tear_free", 0)),
            str(d.get("tear_free_example", "")),
            str(d.get("coverage", "")),
            str(d.get("covered", "unknown")),
            requirement(d.get("require_exhaustive", "")),
            str(d.get("cause", "")),
            str(d.get("cause_text", "")),
            str(d.get("expected_cause", "")),
            str(d.get("commits_covered", "")),
        )


def cells(
    row: Row,
    summary: Any,
    untorn: dict[str, str] | None = None,
    require_exhaustive: str | bool = "",
) -> list[Cell]:
    """Compare a campaign summary (report.Summary) with the row's expectations, model by model.
    ``untorn``: failing torn states -> the same state without its tear that fails the same way
    (those are write-cache findings: not counted as the torn model's).  The same way is the same
    verdict and the same reason kinds (debug.diagnose.fails_alike, asked where the check ran): a
    tear that adds a kind of failure -- a checksum mismatch beside write-cache lost acks -- counts."""
    out = []
    untorn = untorn or {}
    covered = getattr(summary, "covered", None) or summary.by_model
    cov = {
        m.model: m for m in (summary.coverage.models if getattr(summary, "coverage", None) else ())
    }
    for (
        m
    ) in row.models:  # a model's states judged as aliases of an earlier model's count as its own
        fails = [f for f in summary.failures if m in models_of(f)]
        free = [f.state for f in fails if untorn.get(f.state)]
        first = min(fails, key=lambda f: (f.cut, f.state)) if fails else None
        counts: dict[str, int] = {}
        for f in fails:
            counts[f.verdict] = counts.get(f.verdict, 0) + 1
        error = "" if summary.status == "complete" else f"campaign {summary.status}"
        out.append(
            Cell(
                row.id,
                m,
                row.expect[m],
                sum(covered.get(m, {}).values()),
                counts,
                _id_in(first, m) if first else "",
                (first.reasons[0] if first and first.reasons else ""),
                sum(1 for f in summary.flaky if m in models_of(f)),
                error,
                len(free),
                f"{free[0]} fails as {untorn[free[0]]}" if free else "",
                cov[m].phrase() if m in cov else "coverage not recorded",
                cov[m].words[-1] if m in cov else "unknown",
                require_exhaustive,
                *_cause(getattr(summary, "groups", []), m, first),
                row.cause.get(m, ""),
                Coverage((cov[m],)).part_words(COMMITS)[-1] if m in cov else "",
            )
        )
    return out


def _cause(groups: list[dict[str, Any]], model: str, first: Any) -> tuple[str, str]:
    """(rule, sentence) of the cause of a model's failures: that of the failure group its first
    failing state belongs to (core/judging/confirm.group_key: verdict and reason class); ("", "") when that
    group has no cause (no trace) or there is no failure."""
    if first is None:
        return "", ""
    verdict, reason_class = group_key(first)
    g = next(
        (g for g in groups if (g.get("verdict"), g.get("reason_class")) == (verdict, reason_class)),
        None,
    )
    why = (g or {}).get("why") or {}
    return str(why.get("rule", "")), str(why.get("sentence", ""))


def _id_in(v: Any, model: str) -> str:
    """The id of the verdict's state as ``model`` names it (its own, or its alias of that model)."""
    return (
        v.state
        if v.model == model
        else next((a for a in v.aliases if a.startswith((f"{model}@", f"{model}~"))), v.state)
    )


def failed_cells(row: Row, error: str) -> list[Cell]:
    return [Cell(row.id, m, row.expect[m], error=error) for m in row.models]


def one_line(e: BaseException) -> str:
    return e.one_line() if isinstance(e, PowercutError) else f"{type(e).__name__}: {e}"


def shape(rows: list[Row]) -> dict[str, list[str]]:
    """Which variants the expectations say each kind of model catches: ``only:<model>`` (caught by
    that model and passing every other one it is run under) and ``all`` (caught by every model)."""
    out: dict[str, list[str]] = {}
    for r in rows:
        caught = [m for m in r.models if r.expect[m] != "pass"]
        if len(caught) == 1 and len(r.models) > 1:
            out.setdefault(f"only:{caught[0]}", []).append(r.id)
        if caught and len(caught) == len(r.models) and len(r.models) > 1:
            out.setdefault("all", []).append(r.id)
    return out


def markdown(rows: list[Row], results: list[Cell]) -> str:
    """The matrix as it came out: one line per cell, expected vs seen, the first failing state and why."""
    by_row: dict[str, list[Cell]] = {}
    for c in results:
        by_row.setdefault(c.row, []).append(c)
    lines = [
        "| configuration | model | expected | seen | first failing state | |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        for c in by_row.get(r.id, []):
            lines.append(
                f"| {r.id} | {c.model} | {c.expected} | {c.describe()} | {c.first or '-'} | "
                f"{'**SURPRISE**' if not c.ok else c.mark} |"
            )
    lines.append("")
    for r in rows:
        lines.append(f"- **{r.id}**: {' '.join(r.why.split())}")
        if r.claim:
            seen = [c for c in by_row.get(r.id, [])]
            if seen and all(c.ok for c in seen):
                verdict = "reality agrees"
            elif seen:
                verdict = "**reality disagrees** (see the cells above)"
            else:
                verdict = "not run"
            lines.append(f'  - documented claim: "{r.claim}" -- {verdict}')
        lines.extend(f"  - {m}: {' '.join(n.split())}" for m, n in r.notes.items())
    return "\n".join(lines) + "\n"


def write_results(
    out: Path,
    rows: list[Row],
    results: list[Cell],
    infos: list[dict[str, Any]],
    *,
    shard: str = "",
    chosen: list[str] | None = None,
    file: str = "",
    missing: tuple[str, ...] = (),
) -> dict[str, Path]:
    """matrix.json, matrix.md and report.html; ``shard`` (i/n) with ``chosen`` (every row id of the unsharded
    run) and ``file`` make a shard's output self-describing for ``powercut merge``."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "matrix.json", "md": out / "matrix.md"}
    doc = {
        "cells": [c.to_json() for c in results],
        "rows": infos,
        "as_expected": sum(c.ok for c in results),
        "cells_total": len(results),
        "shard": shard,
        "chosen": list(chosen if chosen is not None else [r.id for r in rows]),
        "file": file,
        "missing_shards": list(missing),
    }
    paths["json"].write_text(json.dumps(doc, indent=1))
    paths["md"].write_text(markdown(rows, results))
    paths["html"] = html.write_matrix(out, rows, results, infos, shard=shard, missing=missing)
    return paths


def table(rows: list[Row], results: list[Cell]) -> Any:
    t = Table(title="verdict matrix: expected vs seen")
    for col in ("configuration", "model", "expected", "seen", "first failing state", ""):
        t.add_column(col)
    by_row: dict[str, list[Cell]] = {}
    for c in results:
        by_row.setdefault(c.row, []).append(c)
    for r in rows:
        for c in by_row.get(r.id, []):
            t.add_row(
                r.id,
                c.model,
                c.expected,
                c.describe(),
                c.first or "-",
                c.mark if c.ok else "[bold red]SURPRISE[/]",
            )
    return t

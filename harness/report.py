"""Campaign outputs from the verdict journal: a summary (per model and verdict), JSON summary,
JUnit XML (one test case per state), the console table, and a repro line for every failure."""
from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .check import SEVERITY, Verdict, worst


@dataclass(frozen=True, slots=True)
class Summary:
    recording: str
    fstype: str
    workload: str
    check_in: str
    by_model: dict[str, dict[str, int]]
    failures: list[Verdict]
    total: int
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        return {"recording": self.recording, "fstype": self.fstype, "workload": self.workload,
                "check_in": self.check_in, "total": self.total, "ok": self.ok, "seconds": round(self.seconds, 3),
                "by_model": self.by_model, "verdict": worst([f.verdict for f in self.failures]),
                "failures": [dict(f.to_json(), repro=repro(self.recording, f)) for f in self.failures]}


def summarize(verdicts: list[Verdict], *, recording: str, fstype: str, workload: str, check_in: str,
              seconds: float) -> Summary:
    by_model: dict[str, Counter[str]] = defaultdict(Counter)
    for v in verdicts:
        by_model[v.model][v.verdict] += 1
    failures = sorted((v for v in verdicts if v.verdict != "pass"),
                      key=lambda v: (-SEVERITY.index(v.verdict), v.model, v.cut, v.state))
    return Summary(recording, fstype, workload, check_in, {m: dict(c) for m, c in sorted(by_model.items())},
                   failures, len(verdicts), seconds)


def repro(recording: str, v: Verdict) -> str:
    """One line that rebuilds the failing state for a look of one's own."""
    return (f"powercut replay {shlex.quote(recording)} --state {shlex.quote(v.state)} -o state.img"
            f" && mount -o loop state.img /mnt")


def write_junit(summary: Summary, verdicts: list[Verdict], path: Path) -> None:
    suites = ET.Element("testsuites", name="powercut", tests=str(summary.total),
                        failures=str(len(summary.failures)), time=f"{summary.seconds:.3f}")
    for model in summary.by_model:
        mine = [v for v in verdicts if v.model == model]
        suite = ET.SubElement(suites, "testsuite", name=f"{summary.workload}.{summary.fstype}.{model}",
                              tests=str(len(mine)), failures=str(sum(v.verdict != "pass" for v in mine)),
                              time=f"{sum(v.seconds for v in mine):.3f}")
        for v in sorted(mine, key=lambda v: (v.cut, v.state)):
            case = ET.SubElement(suite, "testcase", classname=f"{summary.workload}.{summary.fstype}.{model}",
                                 name=v.state, time=f"{v.seconds:.3f}")
            if v.verdict != "pass":
                fail = ET.SubElement(case, "failure", type=v.verdict,
                                     message=f"{v.verdict}: {v.reasons[0] if v.reasons else ''}")
                fail.text = "\n".join(v.reasons) + f"\nrepro: {repro(summary.recording, v)}\n"
    ET.indent(suites)
    path.write_text(ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n")


def write_outputs(summary: Summary, verdicts: list[Verdict], outdir: Path) -> dict[str, Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = {"summary": outdir / "summary.json", "junit": outdir / "junit.xml"}
    paths["summary"].write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    write_junit(summary, verdicts, paths["junit"])
    return paths


def table(summary: Summary) -> Any:
    """A rich Table: one row per model, one column per verdict that occurred."""
    from rich.table import Table

    seen = [v for v in SEVERITY if any(v in c for c in summary.by_model.values())]
    t = Table(title=f"{summary.workload} on {summary.fstype}: {summary.total} crash states, "
                    f"checked in {summary.check_in} in {summary.seconds:.1f} s", min_width=72)
    t.add_column("model")
    for v in seen:
        t.add_column(v, justify="right", style="green" if v == "pass" else "red")
    for model, counts in summary.by_model.items():
        t.add_row(model, *[str(counts.get(v, 0)) for v in seen])
    return t

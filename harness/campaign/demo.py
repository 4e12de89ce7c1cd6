"""The main job (host; ``powercut demo``, ``bash ci/main.sh``): what the product is for, in minutes on
a fresh machine.  The three named workloads (filestorage, wal, osync), each in a durable and a broken
configuration (``checkers/showcase.toml``, in the matrix file's format), recorded and checked in
checker VMs with a bounded number of states per model; each row timed with the disk cache on and off
and the quick TLPI suite beside them in one bench VM; one ``report.html`` with the grid, the
durability-vs-cost table and the seeds' figures; one sentence per workload saying what survived and
what it costs.  Exit status (cli): 0 when every cell is as expected (a broken configuration caught
is expected), 3 when one surprised."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from powercut.bench.results import BenchResults
from powercut.campaign.matrix import MatrixRun, Timing, measure, run_rows
from powercut.check.place import Place
from powercut.config import DEFAULT_ACCEL, DEFAULT_CHECK_IN
from powercut.core.states.selection import DEMO_SELECTION, SelectionSpec
from powercut.errors import PowercutError
from powercut.report import cost, html, matrix, seeds
from powercut.report.matrix import Cell, Row

log = logging.getLogger(__name__)


def showcase_path() -> Path:
    return Path(str(resources.files("powercut.checkers") / "showcase.toml"))


@dataclass(frozen=True, slots=True)
class DemoSpec:
    out: Path
    check_in: str = DEFAULT_CHECK_IN
    jobs: int = 0
    selection: SelectionSpec = (
        DEMO_SELECTION  # per row (its max_states spread over the row's models)
    )
    accel: str = DEFAULT_ACCEL
    cost: bool = True  # time the rows and the TLPI suite (one bench VM)
    rows_file: Path | None = None


@dataclass
class DemoResult:
    rows: list[Row]
    cells: list[Cell]
    lines: list[str]  # one per workload: what survived, what it costs
    paths: dict[str, Path] = field(default_factory=dict)
    cost_error: str = ""

    @property
    def surprises(self) -> list[Cell]:
        return [c for c in self.cells if not c.ok]


def run_demo(spec: DemoSpec, on_row: Any = None) -> DemoResult:
    rows = matrix.load(spec.rows_file or showcase_path())
    how = MatrixRun(
        out=spec.out,
        check_in=spec.check_in,
        selection=spec.selection,
        place=Place(spec.check_in, spec.accel, jobs=spec.jobs),
    )
    timing = Timing(quick=True, accel=spec.accel, suites=("tlpi",))
    done = run_rows(rows, how, on_row, then=(lambda: timing.prewarm(rows)) if spec.cost else None)
    cells = [c for cs, _ in done for c in cs]
    infos = [i for _, i in done]
    paths = matrix.write_results(
        spec.out, rows, cells, infos, file=str(spec.rows_file or showcase_path())
    )
    benches: list[BenchResults] = []
    cost_error = ""
    if spec.cost:
        try:
            benches = measure(rows, spec.out / "cost", timing)
        except (PowercutError, OSError) as e:  # the verdicts stand without their price
            cost_error = matrix.one_line(e)
            log.warning("timing the rows failed: %s", cost_error)
    doc = {
        "cells": [c.to_json() for c in cells],
        "rows": infos,
    }  # the rows carry their commit anatomy
    lines = cost.join(rows, doc, benches)
    meta = cost.where(benches)
    plots = cost.plot(lines, spec.out) if benches else []
    svg = next((p for p in plots if p.suffix == ".svg"), None)
    sentences = workload_lines(rows, cells, lines)
    paths["html"] = html.write_matrix(
        spec.out,
        rows,
        cells,
        infos,
        cost=cost.view(lines, meta, svg) if benches else None,
        summary_lines=sentences + ([f"cost not measured: {cost_error}"] if cost_error else []),
        seeds=seeds.tlpi_text(benches),
        title="three workloads, durable and broken",
        kind="main job",
    )
    return DemoResult(rows, cells, sentences, paths, cost_error)


def workload_lines(rows: list[Row], cells: list[Cell], lines: list[cost.Line]) -> list[str]:
    """Per workload: which configurations survived every judged state, which did not, how and why
    (the rule their failures' cause names), and the price of each: its flushes and block writes
    per commit (core/trace/anatomy.py) and its commits/s with the cache on (and off)."""
    by_row: dict[str, list[Cell]] = {}
    for c in cells:
        by_row.setdefault(c.row, []).append(c)
    timing = {ln.row.id: ln for ln in lines}
    out = []
    for wl in dict.fromkeys(r.workload for r in rows):
        parts = []
        for r in (r for r in rows if r.workload == wl):
            cs = by_row.get(r.id, [])
            if any(c.error for c in cs):
                what = "could not be checked (" + next(c.error for c in cs if c.error) + ")"
            elif all(not c.failing for c in cs):
                what = (
                    "survived every crash state judged ("
                    + ", ".join(
                        f"{c.judged} {c.model}"
                        + (f", {c.short_coverage}" if c.short_coverage else "")
                        for c in cs
                    )
                    + ")"
                )
            else:
                what = "failed: " + ", ".join(
                    f"{' and '.join(f'{n} {v}' for v, n in sorted(c.failing.items()))} of {c.judged} {c.model} states"
                    for c in cs
                    if c.failing
                )
                causes = list(dict.fromkeys(c.cause for c in cs if c.failing and c.cause))
                if causes:
                    what += f" ({', '.join(causes)})"
            ln = timing.get(r.id)
            price = f", {ln.anatomy} per commit" if ln is not None and ln.anatomy else ""
            if ln is not None and ln.on is not None and ln.on.commits_per_s:
                price += f", {ln.on.commits_per_s:,.0f} commits/s with the cache on"
                if ln.off is not None and ln.off.commits_per_s:
                    price += f" ({ln.off.commits_per_s:,.0f} off)"
            parts.append(f"{r.variant} {what}{price}")
        out.append(f"{wl}: " + "; ".join(parts))
    return out

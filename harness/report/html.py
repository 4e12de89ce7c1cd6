"""The page a person reads (host): one self-contained ``report.html`` per check output -- the
verdict in one sentence, the states per model, the log's timeline with the failing cuts, the
failure groups (minimized state, blame, repro command to copy, the kernel's words for a mount
failure), flaky states and the environment -- rendered by Jinja2 from ``templates/report.html.j2``
with inline CSS, SVG and a few lines of script: nothing is loaded from anywhere, so the file opens
from an unzipped CI artifact.  ``check``, ``run`` and ``merge`` write it beside summary.json.

The matrix page (``write_matrix``, ``templates/matrix.html.j2``): the verdict matrix as a grid of
expected vs seen, its surprises, each row's reason, and -- from ``powercut report`` -- each
guarantee's verdicts beside its commits/s and p99 with the cache on and off, with matplotlib's SVG
plot inlined.  ``matrix``, ``merge`` (of matrix shards), ``report`` and ``demo`` write it.

The bench page (``write_bench``, ``templates/bench.html.j2``): every timed item's cost (the terminal
table's rows), the latency plot inlined, the seeds' tables beside ours, where it was measured.
``bench`` writes it beside results.json."""

from __future__ import annotations

import json
import logging
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from powercut.core.judging.verdict import SEVERITY
from powercut.core.log.dmlog import LogIndex
from powercut.core.recording.latency import recorded_phrase
from powercut.core.recording.syncdelay import held_phrase
from powercut.core.states.stateid import LIE_MODELS, MODELS
from powercut.core.trace.anatomy import short as short_anatomy
from powercut.record import recording as rec_mod
from powercut.report import bench, nodestimeline, seeds, timeline
from powercut.report.summary import Summary, group_confirmation

log = logging.getLogger(__name__)
_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("powercut.report", "templates"),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


def sentence(s: Summary) -> str:
    """The verdict in one sentence."""
    disks = (
        f" on {s.nodes} nodes" if s.nodes > 1 else ""
    )  # a cluster's states: each a state of every node
    where = (
        f"{s.workload}{disks} on {s.fstype}: {s.total} distinct crash states judged in {s.check_in}"
    )
    if s.shard:
        where += f" (shard {s.shard})"
    if s.start:
        where += (
            f", a recording that started from the crash state {s.start.get('state')} of "
            f"{s.start.get('recording')} (its {s.start.get('acked', 0)} acks must survive too)"
        )
    if s.failures:
        conf = (
            f"{s.confirmed} confirmed alone, {s.by_group} confirmed by their group's sample"
            if s.rejudged
            else "unconfirmed"
        )
        text = (
            f"{where}; {len(s.failures)} fail in {len(s.groups) or '?'} group{'s' if len(s.groups) != 1 else ''} "
            f"by cause ({', '.join(sorted({f.verdict for f in s.failures}, key=SEVERITY.index))}), "
            f"{conf}, {len(s.flaky)} flaky."
        )
    elif s.flaky:
        text = f"{where}; none fails, {len(s.flaky)} flaky (judged twice with different verdicts: a harness problem)."
    elif s.exhaustive:
        text = f"{where}; every one passes, and they are every distinct state of every model (exhaustive)."
    else:
        text = f"{where}; every one judged passes, but not every crash state was judged."
    notes = s.notes()
    return text + (" Not a pass: " + notes[0] if notes and not s.failures else "")


def _model_coverage(m: Any) -> str:
    """One model's coverage cell: exhaustive, or what was sampled and left out."""
    if m is None:
        return "not recorded"
    parts = []
    if m.sampled_windows:
        parts.append(
            f"sampled: {m.sampled_windows} of {m.windows} windows ({m.sampled_generated} states generated)"
        )
    if m.left_out:
        parts.append(f"capped: {m.judged} of {m.distinct} judged")
    if m.notes:
        parts.append(f"weakened ({len(m.notes)} note{'s' * (len(m.notes) != 1)})")
    return "; ".join(parts) or "exhaustive"


def _environment(recording: Path) -> list[tuple[str, str]]:
    try:
        m = rec_mod.load(recording).manifest
    except Exception:  # noqa: BLE001 -- the page still says what it can
        return [("recording", f"{recording} (not readable here)")]
    r = m.get("recording", {})
    vm = m.get("vm", {})
    fs = m.get("fs", {})
    return [
        ("recording", str(recording)),
        ("VM acceleration", str(r.get("accel", "?"))),
        ("guest kernel", str(r.get("kernel_release", "?"))),
        ("QEMU disk cache", str(vm.get("disk_cache", "?"))),
        ("disk bus", str(vm.get("bus", "?"))),
        ("guest write cache", "on" if vm.get("write_cache") else "off"),
        (
            "filesystem",
            f"{fs.get('fstype', '?')} {' '.join(fs.get('mkfs_opts', []))} "
            f"{fs.get('mount_opts', '')}".strip(),
        ),
        ("disk latency", _latency(m.get("latency"))),
        ("syncs held (--delay-sync)", held_phrase(m.get("result", {}).get("delay_sync"))),
        ("marks", _marks(m.get("marks"))),
        ("recorded", str(r.get("created", "?"))),
    ]


def _latency(lat: dict[str, Any] | None) -> str:
    """The data disks' latency while recording (core/recording/latency.py) and what each delay layer gave."""
    return recorded_phrase(lat)


def _marks(m: dict[str, Any] | None) -> str:
    """How the recording's key marks are ordered (core/log/markorder.py)."""
    if not m:
        return "recorded before ordered marks: an ack may precede writes that completed before it (README, blind spot (c))"
    if m.get("ordered"):
        return f"ordered: each of the {m.get('key_marks')} key marks follows every write completed before it"
    return (
        f"{m.get('ordered_key_marks')} of {m.get('key_marks')} key marks ordered"
        + (
            f", {m.get('ambiguous_windows')} ambiguous windows"
            if m.get("ambiguous_windows")
            else ""
        )
        + ": before the others the log may lack writes that had completed (README, blind spot (c))"
    )


def _groups(s: Summary, outdir: Path) -> list[dict[str, Any]]:
    out = []
    for k, g in enumerate(s.groups, 1):
        first = next((f for f in s.failures if f.state == g.get("first")), None)
        reasons = list(first.reasons) if first else []
        bundle = g.get("bundle") or ""
        out.append(
            {
                **g,
                "k": k,
                "confirmation": (group_confirmation(g) + ".").lstrip("."),
                "reasons": [r for r in reasons if not r.startswith("kernel:")][:8],
                "kernel": [r.removeprefix("kernel: ") for r in reasons if r.startswith("kernel:")],
                "repro": f"powercut repro {shlex.quote(bundle)}"
                if bundle
                else f"powercut repro {shlex.quote(s.recording)} --state {shlex.quote(str(g.get('first', '')))}",
                "bundle_rel": os.path.relpath(bundle, outdir) if bundle else "",
            }
        )
    return out


def write(
    s: Summary,
    outdir: Path,
    verdicts: list[Any],
    index: LogIndex | Sequence[LogIndex] | None = None,
    *,
    picture: Any = None,
    nodes: int = 0,
) -> Path:
    """Render ``outdir/report.html`` for the summary ``s`` of that output.  ``index``: the recording's
    log, already scanned, or every disk's (node 0 first): N > 1 disks' timeline has one band per
    node (report/nodestimeline.py; left out, with a word, if it cannot be drawn) and their failing
    states one column per node."""
    rec = Path(s.recording)
    if index is None:
        logs = []
    elif isinstance(index, LogIndex):
        logs = [index]
    else:
        logs = list(index)
    if len(logs) > 1 and picture is None:
        nodes = len(logs)
        try:
            picture = nodestimeline.of_logs(logs, s.failures)
        except Exception as e:  # noqa: BLE001 -- a report never fails for want of its picture
            log.warning("report.html without the cluster timeline: %s", e)
    nodes = nodes or (s.nodes if s.nodes > 1 else 0)
    if picture is not None or nodes:
        tl = picture
    elif logs:
        tl = timeline.of_index(logs[0], s.failures)
    elif (rec / "log.bin").is_file():
        tl = timeline.from_log(rec / "log.bin", s.failures)
    else:
        tl = None
    seen = [v for v in SEVERITY if any(v in c for c in s.by_model.values())]
    cov = {m.model: m for m in (s.coverage.models if s.coverage is not None else ())}
    models = [
        {
            "name": m,
            "counts": s.counts.get(m, {}),
            "verdicts": s.by_model.get(m, {}),
            "coverage": _model_coverage(cov.get(m)),
            "passes": ("pass", "detected") if m in LIE_MODELS else ("pass",),
        }
        for m in dict.fromkeys([*s.counts, *s.by_model])
    ]
    page = _ENV.get_template("report.html.j2").render(
        s=s,
        sentence=sentence(s),
        verdict=s.verdict,
        ok=s.ok,
        exhaustive=s.exhaustive,
        coverage=(s.coverage.phrase(notes=False) or s.coverage_phrase())
        if s.coverage is not None
        else s.coverage_phrase(),
        weakened=list(s.coverage.notes) if s.coverage is not None else [],
        seen=seen,
        models=models,
        groups=_groups(s, outdir),
        failures=s.failures[:50],
        more=max(0, len(s.failures) - 50),
        flaky=s.flaky[:50],
        timeline=tl.svg() if tl else "",
        timeline_entries=tl.entries if tl else 0,
        nodes=nodes,
        node_ids={f.state: f.state.partition("~")[2].split("+") for f in s.failures[:50]}
        if nodes
        else {},
        environment=_environment(rec),
        notes=s.notes(),
        proofs=s.proofs_line(),
        summary_json=json.dumps(s.to_json().get("states", {})),
    )
    path = outdir / "report.html"
    path.write_text(page)
    return path


# -- the matrix page: matrix, merge of matrix shards, report (with the cost view) ------------------------
def matrix_sentence(rows: list[Any], results: list[Any], missing: tuple[str, ...] = ()) -> str:
    bad = [c for c in results if not c.ok]
    text = (
        f"{len(rows)} configurations, {len(results)} cells (configuration x crash model): "
        f"{len(results) - len(bad)} as expected, {len(bad)} surprise{'s' if len(bad) != 1 else ''}"
    )
    if bad:
        text += (
            " ("
            + ", ".join(f"{c.row} {c.model}" for c in bad[:4])
            + (" ..." if len(bad) > 4 else "")
            + ")"
        )
    text += "."
    unproven = [c for c in results if c.ok and not c.proven]
    if unproven:
        text += (
            f" {len(unproven)} of the passes stand{'s' if len(unproven) == 1 else ''} on commit windows that "
            "were not exhaustive (sampled, capped or weakened: hover a cell for its coverage)."
        )
    return text + (
        f" Shards missing: {', '.join(missing)}: not a complete matrix." if missing else ""
    )


def _label(c: Any) -> str:
    """A cell's seen verdict in a word or two: failures that need no tear are the write cache's."""
    return "write-cache's only" if c.seen == "pass (untorn)" else str(c.seen)


def write_matrix(
    out: Path,
    rows: list[Any],
    results: list[Any],
    infos: list[dict[str, Any]],
    *,
    shard: str = "",
    missing: tuple[str, ...] = (),
    cost: dict[str, Any] | None = None,
    summary_lines: list[str] | None = None,
    seeds: str = "",
    title: str = "verdict matrix",
    kind: str = "verdict matrix",
    rows_dir: Path | None = None,
) -> Path:
    """Render ``out/report.html``: the matrix grid (expected vs seen), surprises, each row's why,
    optionally the durability-vs-cost view (``cost``: lines, findings, meta, svg) and the seeds.
    ``rows_dir``: where the rows' own outputs are (default ``out``), for the links to their pages."""
    by_row: dict[str, dict[str, Any]] = {}
    for c in results:
        by_row.setdefault(c.row, {})[c.model] = c
    used = [m for m in MODELS if any(m in cells for cells in by_row.values())]
    workloads: dict[str, list[dict[str, Any]]] = {}
    anatomy = {str(i.get("row")): i.get("anatomy") or {} for i in infos}
    for r in rows:
        report = (rows_dir or out) / r.slug / "check" / "report.html"
        cells = {
            m: {
                "ok": c.ok,
                "proven": c.proven,
                "seen": _label(c),
                "expected": c.expected,
                "title": f"expected {c.expected}; seen {c.describe()}"
                + (f" -- why: {c.cause_text}" if c.cause_text else "")
                + (f" -- {' '.join(r.notes[m].split())}" if m in r.notes else ""),
            }
            for m, c in by_row.get(r.id, {}).items()
        }
        workloads.setdefault(r.workload, []).append(
            {
                "id": r.id,
                "slug": r.slug,
                "cells": cells,
                "why": " ".join(r.why.split()),
                "claim": r.claim,
                "notes": {m: " ".join(n.split()) for m, n in r.notes.items()},
                "link": os.path.relpath(report, out) if report.is_file() else "",
                "anatomy": short_anatomy(anatomy.get(r.id, {})),
                "anatomy_phrase": anatomy.get(r.id, {}).get("phrase", ""),
            }
        )
    surprises = [
        {
            "row": c.row,
            "model": c.model,
            "expected": c.expected,
            "seen": c.seen,
            "describe": c.describe(),
            "first_reason": c.first_reason,
        }
        for c in results
        if not c.ok
    ]
    recs = [Path(i["recording"]) for i in infos if i.get("recording")]
    env = next((e for p in recs if len(e := _environment(p)) > 1), [])
    env = [(k, v) for k, v in env if k not in ("recording", "filesystem", "recorded", "marks")]
    env += [
        (
            "checked in",
            ", ".join(sorted({str(i["check_in"]) for i in infos if i.get("check_in")})) or "?",
        ),
        ("rows", str(len(rows))),
    ]
    ok = not surprises and not missing and bool(results)
    if ok:
        verdict = "AS EXPECTED"
    elif surprises:
        verdict = "SURPRISES"
    else:
        verdict = "INCOMPLETE"
    page = _ENV.get_template("matrix.html.j2").render(
        title=title,
        kind=kind,
        shard=shard,
        ok=ok,
        verdict=verdict,
        sentence=matrix_sentence(rows, results, missing),
        notes=[],
        models=used,
        workloads=[{"name": k, "rows": v} for k, v in workloads.items()],
        surprises=surprises,
        cost=cost,
        seeds=seeds,
        summary_lines=summary_lines or [],
        environment=env,
    )
    path = out / "report.html"
    path.write_text(page)
    return path


# -- the bench page ------------------------------------------------------------------------------------
def inline_svg(path: Path | None) -> str:
    """An SVG file's ``<svg>`` element, without the XML declaration and DOCTYPE ("" if none)."""
    if path is None or not path.is_file():
        return ""
    raw = path.read_text()
    return raw[raw.find("<svg") :]


def write_bench(results: Any, out: Path) -> Path:
    """Render ``out/report.html`` for ``powercut bench``: every item's cost, the latency plot
    (``latency.svg`` in ``out``, inlined), the seeds' tables beside ours, where it was measured."""
    rows = bench.rows(results)
    failed = sum("error" in r for r in rows)
    m = results.meta
    sentence = (
        f"{len(rows)} items timed in a {m.mode} ({m.accel}) on {m.fs}"
        + (
            ", the disk write cache on and off"
            if {e.write_cache for e in results.entries} >= {True, False}
            else ""
        )
        + (f"; {failed} failed." if failed else "; every item ran.")
    )
    page = _ENV.get_template("bench.html.j2").render(
        title=bench.title(results),
        ok=not failed,
        verdict="FAILED ITEMS" if failed else "TIMED",
        sentence=sentence,
        columns=bench.COLUMNS,
        rows=rows,
        svg=inline_svg(out / "latency.svg"),
        seeds=seeds.as_text(seeds.tables(results)),
        where=bench.describe(results),
    )
    path = out / "report.html"
    path.write_text(page)
    return path

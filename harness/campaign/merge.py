"""Merge the shards of one campaign (host): ``powercut merge SHARD_OUT... -o DIR`` rebuilds the
journal, summary, JUnit and failure groups the unsharded campaign would have written, verdict for
verdict.

Each shard's output is self-describing: ``campaign.json`` pins the recording's log hash, the models,
seed, bounds, checker and the shard ``i/n``; ``summary.json`` holds the selection's counts.  Shards
of different recordings or settings, two outputs of the same shard, or a state judged in two shards
are refused with one line.  A missing shard does not fail the merge: the result says which are
missing and is never a pass.  The failures are regrouped over all shards (debug.triage's grouping);
a group keeps the minimization, blame and repro bundle of the shard that holds its first state, when
that shard diagnosed it."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from powercut.campaign.journal import SETTINGS, read_settings
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import open_log
from powercut.core.states import coverage
from powercut.core.states.coverage import Coverage, requirement
from powercut.core.states.shard import Shard
from powercut.debug import triage
from powercut.errors import PowercutError, UsageError
from powercut.linux.jsonlines import read_lines
from powercut.record import recording
from powercut.report import html, matrix
from powercut.report.summary import Summary, summarize, write_outputs

log = logging.getLogger(__name__)

DIAGNOSED = (
    "cause",
    "minimized",
    "culprits",
    "shrink_calls",
    "one_at_a_time",
    "minimized_confirmed",
    "minimized_alone",
    "why",
    "node_shrink",
    "node_culprits",
    "shrink_exhausted",
    "blame_note",
)


@dataclass(frozen=True, slots=True)
class ShardOut:
    dir: Path
    shard: Shard
    settings: dict[str, Any]
    summary: dict[str, Any]
    verdicts: dict[str, Verdict]
    groups: list[dict[str, Any]]


def load(path: str | Path) -> ShardOut:
    d = Path(path)
    if d.is_file() and d.name == "journal.jsonl":
        d = d.parent
    if not (d / "journal.jsonl").is_file():
        raise UsageError(f"{d}: not a check output (no journal.jsonl)")
    try:
        settings = read_settings(d / SETTINGS)
        summary = json.loads((d / "summary.json").read_text())
    except FileNotFoundError as e:
        raise UsageError(
            f"{d}: no {Path(e.filename).name}: not a complete check output; check it again with "
            "--resume"
        ) from None
    except ValueError as e:
        raise UsageError(f"{d}: unreadable campaign.json or summary.json ({e})") from None
    shard = Shard.parse(str(settings.get("shard", "1/1")))
    verdicts: dict[str, Verdict] = {}
    for obj in read_lines(d / "journal.jsonl")[0]:  # the later line for a state wins, as on resume
        try:
            v = Verdict.from_json(obj)
        except (KeyError, TypeError, ValueError):
            raise UsageError(
                f"{d}/journal.jsonl: an unreadable verdict line; the shard's output is damaged"
            ) from None
        verdicts[v.state] = v
    try:
        groups = json.loads((d / "diagnoses.json").read_text()).get("groups", [])
    except (OSError, ValueError):
        groups = []
    return ShardOut(d, shard, settings, summary, verdicts, groups)


def _same_campaign(outs: list[ShardOut]) -> None:
    first = outs[0]
    want = {k: v for k, v in first.settings.items() if k != "shard"}
    for o in outs[1:]:
        have = {k: v for k, v in o.settings.items() if k != "shard"}
        diff = [k for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)]
        if diff:
            k = diff[0]
            what = (
                "recordings"
                if k == "logs_sha256"
                else f"settings ({k}: {want.get(k)!r} vs {have.get(k)!r})"
            )
            raise UsageError(
                f"{first.dir} and {o.dir} are shards of different {what}: they cannot be merged"
            )
        if o.shard.total != first.shard.total:
            raise UsageError(
                f"{first.dir} is shard {first.shard}, {o.dir} is shard {o.shard}: different shard "
                "counts cannot be merged"
            )
    seen: dict[int, Path] = {}
    for o in outs:
        if o.shard.index in seen:
            raise UsageError(
                f"{seen[o.shard.index]} and {o.dir} are both shard {o.shard}: give each shard once"
            )
        seen[o.shard.index] = o.dir


def merge(paths: list[str | Path], out: str | Path) -> tuple[Summary, dict[str, Path]]:
    if not paths:
        raise UsageError("give the shards' check outputs to merge")
    outs = sorted((load(p) for p in paths), key=lambda o: o.shard.index)
    _same_campaign(outs)
    outdir = Path(out)
    if any(outdir.resolve() == o.dir.resolve() for o in outs):
        raise UsageError(f"{outdir} is one of the shards: merge into another -o")
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / "merge.json").exists():
        raise UsageError(f"{outdir} exists and is not a merge output; choose another -o")
    verdicts: dict[str, Verdict] = {}
    where: dict[str, Path] = {}
    for o in outs:
        for sid, v in o.verdicts.items():
            if sid in verdicts and verdicts[sid] != v:
                raise UsageError(
                    f"state {sid} was judged in {where[sid]} ({verdicts[sid].verdict}) and in {o.dir} "
                    f"({v.verdict}): not shards of one campaign"
                )
            verdicts[sid], where[sid] = v, o.dir
    total = outs[0].shard.total
    missing = tuple(
        f"{i}/{total}" for i in range(1, total + 1) if i not in {o.shard.index for o in outs}
    )
    statuses = [o.summary.get("status", "complete") for o in outs]
    status = next((s for s in statuses if s != "complete"), "partial" if missing else "complete")
    base = outs[0].summary
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    judged = list(verdicts.values())
    nodes = int(base.get("nodes", 1))
    groups = _groups(judged, outs, outdir, nodes)
    selection = SimpleNamespace(
        counts=base.get("states", {}), states=range(sum(o.summary.get("planned", 0) for o in outs))
    )
    summary = summarize(
        judged,
        recording=base["recording"],
        fstype=base["fstype"],
        workload=base["workload"],
        check_in=base["check_in"],
        seconds=max(o.summary.get("seconds", 0.0) for o in outs),
        selection=selection,
        status=status,
        confirm_s=sum(o.summary.get("confirmation", {}).get("seconds", 0.0) for o in outs),
        rejudged=sum(o.summary.get("confirmation", {}).get("rejudged", 0) for o in outs),
        groups=groups,
        triage_s=sum(o.summary.get("triage_seconds", 0.0) for o in outs),
        acks=int(base.get("acks", -1)),
        allow_no_acks=bool(base.get("allow_no_acks", False)),
        missing_shards=missing,
        confirm_mode=str(base.get("confirmation", {}).get("mode", "all")),
        confirm_sample=int(base.get("confirmation", {}).get("sample", 0)),
        escalated=sum(
            int(o.summary.get("confirmation", {}).get("escalated_groups", 0)) for o in outs
        ),
        coverage=_coverage(outs),
        require_exhaustive=requirement(base.get("require_exhaustive", "")),
        anatomy=base.get("anatomy") or {},
        trace_note=str(base.get("trace_note", "")),
        disk_latency=str(base.get("disk_latency", "")),
        nodes=nodes,
        delay_sync=tuple(str(r) for r in base.get("delay_sync") or ()),
        start=dict(base.get("from") or {}),
        disks=dict(base.get("disks") or {}),
    )
    with open(outdir / "journal.jsonl", "w") as f:
        for v in sorted(judged, key=lambda v: (v.model, v.cut, v.state)):
            f.write(json.dumps(v.to_json()) + "\n")
    (outdir / SETTINGS).write_text(
        json.dumps(
            {k: v for k, v in outs[0].settings.items() if k != "shard"}, indent=1, sort_keys=True
        )
        + "\n"
    )
    (outdir / "merge.json").write_text(
        json.dumps(
            {
                "shards": [
                    {
                        "shard": str(o.shard),
                        "dir": str(o.dir),
                        "states": len(o.verdicts),
                        "status": o.summary.get("status"),
                        "seconds": o.summary.get("seconds"),
                    }
                    for o in outs
                ],
                "missing": list(missing),
                "shard_seconds_sum": round(sum(o.summary.get("seconds", 0.0) for o in outs), 3),
            },
            indent=1,
        )
        + "\n"
    )
    if groups:
        (outdir / "diagnoses.json").write_text(json.dumps({"groups": groups}, indent=1) + "\n")
    written = write_outputs(summary, judged, outdir)
    written["html"] = _html(summary, outdir, judged)
    return summary, written


def _html(summary: Summary, outdir: Path, judged: list[Verdict]) -> Path:
    """The merge's report.html: N > 1 disks' page from the recording's logs when they can be read."""
    if summary.nodes > 1:
        try:
            rec = recording.load(summary.recording)
            with contextlib.ExitStack() as stack:
                logs = [stack.enter_context(open_log(p, quiet=True)) for p in rec.node_logs]
                return html.write(summary, outdir, judged, logs)
        except (PowercutError, OSError) as e:  # the merge stands with the page of one disk's form
            log.warning("report.html of the merge without the cluster timeline: %s", e)
    return html.write(summary, outdir, judged)


def _coverage(outs: list[ShardOut]) -> Coverage | None:
    """The shards' coverages joined (their judged states added); None when a shard recorded none."""
    parts = [o.summary.get("coverage") for o in outs]
    got = [p for p in parts if isinstance(p, dict)]
    return coverage.merge([Coverage.from_json(p) for p in got]) if len(got) == len(parts) else None


def _groups(
    judged: list[Verdict], outs: list[ShardOut], outdir: Path, nodes: int
) -> list[dict[str, Any]]:
    """The failure groups over all shards; each keeps its first state's shard's diagnosis and bundle."""
    diagnosed = {g.get("first"): (o, g) for o in outs for g in o.groups}
    out = []
    for k, g in enumerate(triage.group([v for v in judged if v.finding]), 1):
        doc = {
            **g.to_json(),
            **triage.group_extras(g, None, nodes),
        }  # with N > 1: what its states say of the nodes
        doc["escalated"] = any(
            theirs.get("escalated")
            and (theirs.get("verdict"), theirs.get("reason_class")) == (g.verdict, g.reason_class)
            for o in outs
            for theirs in o.groups
        )
        found = diagnosed.get(doc["first"])
        if found:
            o, theirs = found
            doc.update({key: theirs[key] for key in DIAGNOSED if key in theirs})
            src = Path(theirs.get("bundle") or "")
            if theirs.get("bundle") and src.is_dir():
                dest = outdir / "bundles" / f"{k:02d}-{triage.slug(doc['first'])}"
                shutil.copytree(src, dest)
                doc["bundle"] = str(dest)
        out.append(doc)
    return out


def is_matrix(paths: list[str | Path]) -> bool:
    """Are these matrix outputs (matrix.json) rather than check outputs?"""
    return bool(paths) and all((Path(p) / "matrix.json").is_file() for p in paths)


def merge_matrix(
    paths: list[str | Path], out: str | Path
) -> tuple[list[matrix.Row], list[matrix.Cell], dict[str, Path], tuple[str, ...]]:
    """The matrix shards (``matrix --shard i/n``) as one matrix: rows in the unsharded order."""
    docs = []
    for p in paths:
        try:
            docs.append((Path(p), json.loads((Path(p) / "matrix.json").read_text())))
        except ValueError as e:
            raise UsageError(f"{p}/matrix.json is unreadable ({e})") from None
    first_dir, first = docs[0]
    shards: dict[int, Path] = {}
    total = 0
    for d, doc in docs:
        if doc.get("chosen") != first.get("chosen") or doc.get("file") != first.get("file"):
            raise UsageError(
                f"{first_dir} and {d} are shards of different matrix runs (other rows or matrix file): "
                "they cannot be merged"
            )
        s = Shard.parse(doc.get("shard") or "1/1")
        if total and s.total != total:
            raise UsageError(
                f"{first_dir} and {d} have different shard counts: they cannot be merged"
            )
        total = s.total
        if s.index in shards:
            raise UsageError(
                f"{shards[s.index]} and {d} are both matrix shard {s}: give each shard once"
            )
        shards[s.index] = d
    outdir = Path(out)
    if any(outdir.resolve() == d.resolve() for d, _ in docs):
        raise UsageError(f"{outdir} is one of the shards: merge into another -o")
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / "merge.json").exists():
        raise UsageError(f"{outdir} exists and is not a merge output; choose another -o")
    every = {r.id: r for r in matrix.load(first.get("file") or None)}
    unknown = [rid for rid in first.get("chosen", []) if rid not in every]
    if unknown:
        raise UsageError(
            f"the matrix file has no row {unknown[0]}: the shards ran another matrix file"
        )
    rows = [every[rid] for rid in first.get("chosen", [])]
    results = [matrix.Cell.from_json(c) for _, doc in docs for c in doc.get("cells", [])]
    order = {r.id: k for k, r in enumerate(rows)}
    results.sort(key=lambda c: order.get(c.row, len(order)))
    missing = tuple(f"{i}/{total}" for i in range(1, total + 1) if i not in shards)
    done = {c.row for c in results}
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    (outdir / "merge.json").write_text(
        json.dumps({"matrix_shards": [str(d) for d, _ in docs], "missing": list(missing)}, indent=1)
        + "\n"
    )
    paths_out = matrix.write_results(
        outdir,
        [r for r in rows if r.id in done],
        results,
        [i for _, doc in docs for i in doc.get("rows", [])],
        chosen=[r.id for r in rows],
        file=first.get("file", ""),
        missing=missing,
    )
    return rows, results, paths_out, missing

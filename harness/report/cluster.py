"""A cluster check's output as the campaign Summary every reader takes (host; issue 40): the matrix's
cells, the pytest plugin's outcome and report.html read one-disk checks through report/summary.Summary;
a cluster check (campaign/cluster.py) writes ``journal.jsonl`` (one verdict per cluster state) and
``summary.json``.  ``load(outdir)`` joins them into a Summary: the verdicts from the journal (the
ground truth), the coverage, status, groups and check place from summary.json.  A cluster state's
model is its cluster model (the id's ``MODEL~`` part), so a row's cells per model read as for one
disk."""
from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from powercut.core.coverage import Coverage
from powercut.core.dmlog import open_log
from powercut.core.verdict import Verdict
from powercut.errors import UsageError
from powercut.report import clustertimeline, html
from powercut.report.summary import Summary, summarize

log = logging.getLogger(__name__)


def is_cluster_output(outdir: str | Path) -> bool:
    """Whether ``outdir`` holds a cluster check's output (its summary.json names the nodes)."""
    try:
        return int(json.loads((Path(outdir) / "summary.json").read_text()).get("nodes", 1)) > 1
    except (OSError, ValueError, AttributeError):
        return False


def _doc(outdir: Path) -> dict[str, Any]:
    try:
        doc = json.loads((outdir / "summary.json").read_text())
    except OSError as e:
        raise UsageError(f"{outdir}: no cluster check summary ({e.strerror or e})") from None
    except ValueError as e:
        raise UsageError(f"{outdir}/summary.json: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{outdir}/summary.json: not a check summary")
    return doc


def verdicts(outdir: str | Path) -> list[Verdict]:
    """Every verdict of the journal, in the order judged; a later line for the same state (a
    confirmation, a resumed check) replaces the earlier one."""
    path = Path(outdir) / "journal.jsonl"
    out: dict[str, Verdict] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise UsageError(f"{path}: cannot read the verdict journal ({e.strerror or e})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            v = Verdict.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError) as e:
            if n == len(lines):   # a torn last line: the check was cut while writing it
                break
            raise UsageError(f"{path}: line {n} is not a verdict ({e})") from None
        out[v.state] = v
    return list(out.values())


class _Counts:
    """The selection's per-model counts as summarize() reads them (``counts``; no ``states``: the
    planned count is the judged one)."""

    def __init__(self, counts: dict[str, Any]) -> None:
        self.counts = counts
        self.states: tuple[()] = ()


def load(outdir: str | Path) -> Summary:
    """The Summary of a cluster check's output directory."""
    outdir = Path(outdir)
    doc = _doc(outdir)
    cov = doc.get("coverage")
    seconds = float(doc.get("seconds") or (doc.get("select_s") or 0) + (doc.get("judge_s") or 0))
    selection = _Counts(dict((doc.get("selection") or {}).get("models") or {}))
    conf = doc.get("confirmation") or {}   # campaign/clustertriage.py
    return summarize(verdicts(outdir), selection=selection, recording=str(doc.get("recording", "")),
                     fstype=str(doc.get("fstype", "")),
                     workload=str(doc.get("workload", "")), check_in=str(doc.get("check_in", "host")),
                     seconds=seconds, status=str(doc.get("status", "complete")),
                     groups=list(doc.get("groups") or []), coverage=Coverage.from_json(cov) if cov else None,
                     acks=int(doc.get("acks", -1)), shard=str(doc.get("shard", "")),
                     confirm_mode=str(conf.get("mode", "off")), confirm_sample=int(conf.get("sample", 0)),
                     rejudged=int(conf.get("rejudged", 0)), confirm_s=float(conf.get("seconds", 0.0)),
                     escalated=int(conf.get("escalated", 0)), triage_s=float(doc.get("triage_s", 0.0)))


def write_html(outdir: str | Path, node_logs: list[Path]) -> Path:
    """``outdir/report.html`` of a cluster check: the summary, one band per node on the timeline
    (report/clustertimeline.py; left out, with a word, if a node's log cannot be read) and one column
    per node for the failing states."""
    outdir = Path(outdir)
    s = load(outdir)
    picture = None
    try:
        with contextlib.ExitStack() as stack:
            logs = [stack.enter_context(open_log(p, quiet=True)) for p in node_logs]
            picture = clustertimeline.of_logs(logs, s.failures)
    except Exception as e:   # noqa: BLE001 -- a report never fails for want of its picture
        log.warning("report.html without the cluster timeline: %s", e)
    return html.write(s, outdir, [], picture=picture, nodes=len(node_logs))

"""A check of a cluster recording (host; issue 40): every node's log opened and verified against the
manifest, the cluster states chosen (core/cluster.py), judged in host mode (check/cluster.py), the
verdicts written as a JSON-lines journal and a summary with the figures (states per node, per
cluster state, time per cluster state) and the coverage.

Not yet per cluster: checker VMs, shards, resume, confirmation, minimization, blame, bundles."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.campaign.clustertriage import ClusterDebug, diagnose_cluster
from powercut.check.cluster import check_cluster_host
from powercut.check.context import context_for
from powercut.checker import DEFAULT_TIMEOUT_S
from powercut.core.cluster import DEFAULT_CLUSTER_BOUND, ClusterSpace, select_cluster
from powercut.core.dmlog import open_log
from powercut.core.selection import SelectionSpec
from powercut.core.verdict import Verdict
from powercut.debug.clusterdebug import host_judge
from powercut.errors import BadLog, BadRecording, UsageError
from powercut.record import recording
from powercut.report import cluster as cluster_output

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterCheck:
    selection: SelectionSpec = SelectionSpec()
    cluster_bound: int = DEFAULT_CLUSTER_BOUND
    check_in: str = "host"
    checker_command: str = ""
    force: bool = False
    checker_function: str = ""          # a Python checker, FILE::NAME (the pytest plugin's)
    checker_path: tuple[str, ...] = ()  # sys.path entries its imports need
    checker_timeout_s: float = DEFAULT_TIMEOUT_S
    debug: ClusterDebug = ClusterDebug()   # confirmation, minimization, blame, bundles (campaign/clustertriage.py)


def _verify_node(rec: recording.Recording, i: int, node: dict[str, Any]) -> None:
    """Node i's log as its manifest pinned it (recording.verify_log on a view of that node)."""
    view = dict(rec.manifest)
    view["log"] = {"file": node["log"], **{k: node[k] for k in ("entries", "used_bytes", "sha256") if k in node}}
    view["result"] = {"logged_entries": node["logged_entries"]} if "logged_entries" in node else {}
    try:
        recording.verify_log(recording.Recording(rec.dir, view))
    except BadRecording as e:
        raise BadRecording(f"node {i}: {e.one_line()}") from None


def run_cluster_check(path: str | Path, spec: ClusterCheck, out: str | Path | None = None, *,
                      on_verdict: Callable[[Verdict], None] | None = None) -> tuple[dict[str, Any], Path]:
    """Choose and judge a cluster recording's states; (summary, output directory)."""
    rec = recording.load(path).require_ok()
    if rec.nodes < 2:
        raise UsageError(f"{rec.dir} is a single-disk recording: check it with 'powercut check'")
    if spec.check_in != "host":
        raise UsageError("a cluster recording is judged with --check-in host for now (checker VMs: not yet)")
    nodes = rec.manifest["cluster"]["node"]
    for i, node in enumerate(nodes):
        _verify_node(rec, i, node)
    outdir = Path(out) if out else rec.dir / "check"
    if outdir.exists() and any(outdir.iterdir()):
        if not spec.force:
            raise UsageError(f"{outdir} holds an earlier check (use --force to replace it)")
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    ctx = context_for(rec, spec.checker_command, spec.checker_timeout_s, spec.checker_function, spec.checker_path)
    sel_spec = spec.selection.resolved()
    with contextlib.ExitStack() as stack:
        try:
            logs = [stack.enter_context(open_log(rec.dir / n["log"], quiet=True)) for n in nodes]
        except BadLog as e:
            raise BadRecording(f"{rec.dir}: {e.one_line()}") from None
        cs = ClusterSpace(logs)
        acks = sum(1 for ev in cs.events if ev[0])   # the same key marks in every node's log
        t = time.monotonic()
        sel = select_cluster(cs, sel_spec, cluster_bound=spec.cluster_bound)
        select_s = time.monotonic() - t
        verdicts: list[Verdict] = []
        with open(outdir / "journal.jsonl", "w") as journal:
            def sink(v: Verdict) -> None:
                aliases = sel.aliases.get(v.state, ())
                v = dataclasses.replace(v, aliases=aliases) if aliases else v
                verdicts.append(v)
                journal.write(json.dumps(v.to_json()) + "\n")
                journal.flush()
                if on_verdict is not None:
                    on_verdict(v)
            t = time.monotonic()
            check_cluster_host(ctx, logs, rec.data_size, sel.states, sink, outdir / "work")
            judge_s = time.monotonic() - t
        post = diagnose_cluster(rec, ctx, cs, logs, sel.states, verdicts, outdir, spec.debug, seed=sel_spec.seed,
                                judge=host_judge(ctx, logs, rec.data_size), on_host=spec.check_in == "host")
    counts = Counter(v.verdict for v in verdicts)
    failing = [v for v in verdicts if v.failed]
    cov = sel.coverage
    summary = {"recording": str(rec.dir), "nodes": rec.nodes, "workload": rec.workload_label,
               "fstype": rec.fstype, "check_in": spec.check_in, "acks": acks,
               "verdict": "fail" if failing else "pass", "coverage": cov.to_json(), "phrase": cov.phrase(),
               "verdicts": dict(counts), "judged": len(verdicts), "selection": sel.to_json(),
               "select_s": round(select_s, 3), "judge_s": round(judge_s, 3),
               "per_state_s": round(judge_s / len(verdicts), 3) if verdicts else None,
               "failures": [v.to_json() for v in failing[:20]], **post}
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    summary["html"] = str(cluster_output.write_html(outdir, [rec.dir / n["log"] for n in nodes]))
    with contextlib.suppress(OSError):
        (outdir / "work").rmdir()
    return summary, outdir

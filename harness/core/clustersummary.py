"""A cluster check's summary (pure; host): the figures and the verdict of a check of a cluster
recording (campaign/cluster.py), and the shards of one such check merged into the summary the
unsharded check would have written (``powercut merge``).

The summary is a plain JSON object: ``recording``, ``nodes``, ``workload``, ``check_in``, ``verdict``
(``fail`` on any failing state; ``incomplete`` when nothing failed but the check was interrupted or
a shard is missing -- never a pass; else ``pass``), ``coverage`` and its ``phrase`` (what this check
really judged: core/coverage.judged_only of the selection's), ``verdicts`` (counts), ``judged``,
``planned`` (the states of this check or shard), ``selection`` (the selection's figures, the same
on every shard), ``select_s``, ``judge_s``, ``per_state_s`` (this run's judging time per state it
judged, ``judged_now`` of them), ``failures`` (the first ``FAILURES`` by instant and id: the
same in a merge of shards), ``status``, ``shard`` ("" unsharded) and
``missing_shards``."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from powercut.core import coverage as coverages
from powercut.core.coverage import Coverage
from powercut.core.verdict import Verdict
from powercut.errors import UsageError

FAILURES = 20
HEAD = ("recording", "nodes", "workload", "check_in", "fstype", "acks")


def verdict_word(verdicts: Sequence[Verdict], status: str, missing: Sequence[str] = ()) -> str:
    if any(v.failed for v in verdicts):
        return "fail"
    return "incomplete" if status != "complete" or missing else "pass"


def summarize(verdicts: Sequence[Verdict], *, head: Mapping[str, Any], selection: Mapping[str, Any],
              coverage: Coverage, planned: int, select_s: float, judge_s: float, judged_now: int,
              status: str = "complete", shard: str = "", missing: Sequence[str] = ()) -> dict[str, Any]:
    """The summary of a cluster check (or shard) whose journal holds ``verdicts`` (this run's and a
    resumed run's earlier ones); ``judged_now``: how many of them this run judged (in ``judge_s``)."""
    cov = coverages.judged_only(coverage, Counter(v.model for v in verdicts))
    failing = sorted((v for v in verdicts if v.failed), key=lambda v: (v.cut, v.state))   # any shard's order
    return {**{k: head[k] for k in HEAD if k in head},
            "verdict": verdict_word(verdicts, status, missing), "coverage": cov.to_json(), "phrase": cov.phrase(),
            "verdicts": dict(Counter(v.verdict for v in verdicts)), "judged": len(verdicts), "planned": planned,
            "selection": dict(selection), "select_s": round(select_s, 3), "judge_s": round(judge_s, 3),
            "judged_now": judged_now,
            "per_state_s": round(judge_s / judged_now, 3) if judged_now else None,
            "failures": [v.to_json() for v in failing[:FAILURES]], "status": status, "shard": shard,
            "missing_shards": list(missing)}


def merge(parts: Sequence[tuple[str, Mapping[str, Any], Sequence[Verdict]]], total: int) -> tuple[dict[str, Any],
                                                                                                  list[Verdict]]:
    """The shards ``(i/n, summary, verdicts)`` of one cluster check as one summary and its verdicts
    (each state once; shards ``1..total``, those not given are missing).  UsageError (one line) for
    shards of different checks, a shard given twice, or a state judged in two shards."""
    if not parts:
        raise UsageError("give the shards' check outputs to merge")
    first = parts[0][1]
    seen: dict[str, str] = {}
    verdicts: dict[str, Verdict] = {}
    where: dict[str, str] = {}
    for shard, summary, vs in parts:
        if shard in seen:
            raise UsageError(f"shard {shard} given twice: give each shard once")
        seen[shard] = shard
        for k in ("recording", "nodes", "workload", "selection"):
            if summary.get(k) != first.get(k):
                raise UsageError(f"shards {parts[0][0]} and {shard} differ in their {k}: not shards of one check")
        for v in vs:
            if v.state in verdicts:
                raise UsageError(f"state {v.state} was judged in shard {where[v.state]} and in shard {shard}: "
                                 "not shards of one check")
            verdicts[v.state], where[v.state] = v, shard
    missing = [f"{i}/{total}" for i in range(1, total + 1) if f"{i}/{total}" not in seen]
    statuses = [str(s.get("status", "complete")) for _, s, _ in parts]
    status = next((s for s in statuses if s != "complete"), "partial" if missing else "complete")
    merged = sorted(verdicts.values(), key=lambda v: (v.cut, v.state))
    cov = coverages.merge([Coverage.from_json(s["coverage"]) for _, s, _ in parts])   # judged: summed
    judge_s = sum(float(s.get("judge_s") or 0.0) for _, s, _ in parts)
    judged_now = sum(int(s.get("judged_now", 0)) for _, s, _ in parts)
    out = summarize(merged, head={**first, "check_in": first.get("check_in", "")}, selection=first["selection"],
                    coverage=cov, planned=sum(int(s.get("planned", 0)) for _, s, _ in parts),
                    select_s=max(float(s.get("select_s") or 0.0) for _, s, _ in parts), judge_s=judge_s,
                    judged_now=judged_now, status=status, missing=missing)
    out["shards"] = sorted(seen, key=lambda s: int(s.split("/")[0]))
    return out, merged

"""After a cluster check has judged its states (host): the failures grouped by cause, each group
confirmed, minimized node by node, blamed per node, saved as a repro bundle -- what
campaign/run.py does for one disk, for a cluster recording (issue 40).

* **Groups**: by verdict and the class of the first reason (debug/triage.group, core/confirm.group_key),
  worst first; each with its count, first state and a note on the nodes its states' reasons name.
* **Minimization and blame**: the first state of the first ``shrink`` groups, node by node
  (debug/clusterdebug.py, core/clustershrink.py), ``shrink_budget`` judge calls shared by the nodes.
* **Confirmation by group** (core/confirm.py, as for one disk): a small group judged again whole, a
  large one by a sample (first, last, seeded others, ``confirm_sample`` in all), plus each minimized
  state; a state that gives a different verdict the second time is ``flaky`` (campaign/run.flaky);
  a group whose sample or minimized state disagreed is confirmed state by state.  The second
  verdicts are appended to ``journal.jsonl`` (the last line of a state is its verdict).
* **Bundles**: ``bundles/NN-<state>/`` per group (debug/clusterbundle.py); ``diagnoses.json``.

Every judgement goes through the ``judge`` callback the caller gives (debug/clusterdebug.JudgeStates):
where cluster states are judged is decided once, by the caller."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.campaign.run import flaky
from powercut.check.context import CheckContext
from powercut.config import DEFAULT_SHRINK, DEFAULT_SHRINK_BUDGET
from powercut.core import confirm as confirming
from powercut.core.clustershrink import bundle_cuts, nodes_named, nodes_note
from powercut.core.disks import Disks, DisksState
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.debug import bundle, triage
from powercut.debug.clusterdebug import ClusterDiagnosis, JudgeStates, diagnose_cluster_state, host_blame
from powercut.errors import PowercutError, UsageError
from powercut.linux import interrupt
from powercut.record.recording import Recording

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterDebug:
    """How a cluster check's failures are confirmed and minimized (the one-disk CampaignSpec's words)."""

    confirm: bool = True
    confirm_sample: int = confirming.DEFAULT_SAMPLE
    shrink: int = DEFAULT_SHRINK          # minimize + blame the first state of the first K groups (0: off)
    shrink_budget: int = DEFAULT_SHRINK_BUDGET   # judge calls per minimization, shared by the nodes

    def __post_init__(self) -> None:
        if self.shrink < 0 or self.shrink_budget < 1:
            raise UsageError(f"--shrink must be 0 (off) or more and its budget at least 1, not {self.shrink}, "
                             f"{self.shrink_budget}")
        if self.confirm_sample < confirming.MIN_SAMPLE:
            raise UsageError(f"--confirm-sample must be at least {confirming.MIN_SAMPLE} (a group's first and last "
                             f"state), not {self.confirm_sample}")


def floors_of(cs: Disks, mark: str = "mkfs") -> list[int | None]:
    return [next((e.index for e in sp.entries if e.mark == mark), None) for sp in cs.nodes]


def diagnose_cluster(rec: Recording, ctx: CheckContext, cs: Disks, logs: Sequence[LogIndex],
                     states: Sequence[DisksState], verdicts: list[Verdict], outdir: Path, how: ClusterDebug,
                     *, judge: JudgeStates, on_host: bool, seed: int = 0) -> dict[str, Any]:
    """Group, minimize + blame, confirm and bundle a judged cluster check's failures; what the
    summary gains (``groups``, and the ``verdicts``/``failures``/``verdict`` after confirmation)."""
    if interrupt.stopping() or not any(v.finding for v in verdicts):
        return {"groups": []}
    t0 = time.monotonic()
    by_id = {s.id: s for s in states}
    floors = floors_of(cs)
    final = {v.state: v for v in verdicts}
    groups = triage.group([v for v in verdicts if v.finding])
    blame = host_blame(ctx, cs, logs, rec.data_size, floors) if on_host else None
    for g in groups[:how.shrink]:
        try:
            d = diagnose_cluster_state(cs, by_id[g.first.state], g.first, judge, blame, outdir / "diagnose",
                                       budget=how.shrink_budget, floors=floors)
            g.diagnosis = d.to_json()
        except PowercutError as e:   # the verdicts stand without a diagnosis
            log.warning("diagnosis of %s failed: %s", g.first.state, e.one_line())
            g.diagnosis_error = e.one_line()
    diag_s = time.monotonic() - t0
    t1 = time.monotonic()
    rejudged, escalated = 0, 0
    if how.confirm and not interrupt.stopping():
        rejudged, escalated = _confirm(cs, by_id, final, groups, how, judge, outdir, seed)
        kept = {(g.verdict, g.reason_class): (g.diagnosis, g.diagnosis_error) for g in groups}
        groups = triage.group([v for v in final.values() if v.finding])
        for g in groups:
            g.diagnosis, g.diagnosis_error = kept.get((g.verdict, g.reason_class), (None, ""))
    confirm_s = time.monotonic() - t1
    out = [_group_json(cs, rec, ctx, g, k, outdir) for k, g in enumerate(groups, 1)]
    for phase in ("diagnose", "confirm"):
        _tidy(outdir / phase)
    (outdir / "diagnoses.json").write_text(json.dumps({"groups": out}, indent=1) + "\n")
    now = list(final.values())
    flakies = [v for v in now if v.verdict == "flaky"]
    failing = [v for v in now if v.failed and v.verdict != "flaky"]
    return {"groups": out, "verdicts": dict(Counter(v.verdict for v in now)),
            "verdict": "fail" if failing else "flaky" if flakies else "pass",
            "failures": [v.to_json() for v in failing[:20]], "flaky": [v.to_json() for v in flakies[:20]],
            "confirmation": {"mode": "group" if how.confirm else "off", "sample": how.confirm_sample,
                             "rejudged": rejudged, "confirmed": sum(v.confirmed for v in now),
                             "by_group": sum(v.by_group for v in now), "flaky": len(flakies),
                             "escalated": escalated, "seconds": round(confirm_s, 3)},
            "diagnose_s": round(diag_s, 3), "triage_s": round(time.monotonic() - t0, 3)}


def _confirm(cs: Disks, by_id: dict[str, DisksState], final: dict[str, Verdict], groups: list[triage.Group],
             how: ClusterDebug, judge: JudgeStates, outdir: Path, seed: int) -> tuple[int, int]:
    """Confirmation by group (core/confirm.py); ``final`` updated in place and every second verdict
    appended to the journal.  (states judged again, groups confirmed state by state)."""
    firsts = [v for v in final.values() if v.finding and not v.confirmed]
    named = {(g.verdict, g.reason_class): g.diagnosis["minimized"] for g in groups
             if g.diagnosis and g.diagnosis.get("minimized")}
    plans = confirming.plan(firsts, mode="group", k=how.confirm_sample, seed=seed, always=set(named.values()))
    sampled = [v for p in plans for v in p.sample]
    taken = {v.state for v in sampled}
    extra = {m: by_id.get(m) or cs.state_from_id(m) for m in named.values() if m not in taken}
    journal = open(outdir / "journal.jsonl", "a")   # noqa: SIM115 -- closed below, written from the sink
    seconds: dict[str, Verdict] = {}
    want: dict[str, Verdict] = {}

    def second(v2: Verdict) -> None:
        seconds[v2.state] = v2
        v1 = want.get(v2.state)
        if v1 is None:
            return
        v = dataclasses.replace(v1, confirmed=True, by_group=False) if confirming.agrees(v1, v2) else flaky(v1, v2)
        final[v.state] = v
        journal.write(json.dumps(v.to_json()) + "\n")

    try:
        want.update({v.state: v for v in sampled})
        judge([by_id[v.state] for v in sampled] + list(extra.values()), second, outdir / "confirm")
        if interrupt.stopping():   # the states judged again so far are journaled; the rest stay unconfirmed
            return len(seconds), 0
        disagreeing = set()
        for g in groups:
            m = named.get((g.verdict, g.reason_class))
            if m is None or g.diagnosis is None:
                continue
            v2 = seconds.get(m)
            same = v2 is not None and v2.verdict == g.verdict
            g.diagnosis = dict(g.diagnosis, minimized_confirmed=same,
                               minimized_alone=v2.verdict if v2 is not None else "not judged")
            if not same:
                disagreeing.add((g.verdict, g.reason_class))
        by_group, escalate = confirming.settle(plans, seconds, disagreeing)
        for v in by_group:
            final[v.state] = dataclasses.replace(v, by_group=True)
            journal.write(json.dumps(final[v.state].to_json()) + "\n")
        if escalate:
            want.clear()
            want.update({v.state: v for v in escalate})
            judge([by_id[v.state] for v in escalate], second, outdir / "confirm")
        _retry_disagreeing(by_id, final, judge, outdir, journal)
    finally:
        journal.close()
    return len(seconds), len({confirming.group_key(v) for v in escalate})


RETRIES = 3   # more judgments of a state whose second verdict disagreed with its first


def _retry_disagreeing(by_id: dict[str, DisksState], final: dict[str, Verdict], judge: JudgeStates, outdir: Path,
                       journal: Any) -> None:
    """A cluster's recovery can be nondeterministic on the same images (which member wins an
    election decides whether etcd panics: measured 3 of 4 on one state), so a state whose second
    verdict disagreed is judged ``RETRIES`` more times: failing again in at least one of them (two
    failing judgments in all) keeps it a confirmed finding, saying how many judgments failed; a
    failure seen once stays ``flaky``."""
    flakies = [v for v in final.values() if v.verdict == "flaky" and v.first and v.state in by_id]
    if not flakies or interrupt.stopping():
        return
    more: dict[str, list[Verdict]] = {}
    judge([by_id[v.state] for v in flakies for _ in range(RETRIES)],
          lambda v: more.setdefault(v.state, []).append(v), outdir / "confirm")
    for v in flakies:
        got = more.get(v.state, [])
        was = v.first[0]
        fails = 1 + sum(1 for x in got if x.failed)
        n = 2 + len(got)
        if fails < 2:   # seen once: not counted as a finding, and not blamed on the harness alone
            final[v.state] = dataclasses.replace(v, reasons=(
                f"failed 1 of {n} judgments of the same images ({was}), passed the others: not counted as a "
                "finding -- a harness problem or a recovery that rarely fails", *v.reasons[1:]))
            journal.write(json.dumps(final[v.state].to_json()) + "\n")
            continue
        reasons = (f"failed {fails} of {n} judgments of the same images ({was} each time it failed): the recovery "
                   "is not deterministic, and fails in some runs", *v.first[1:])
        final[v.state] = dataclasses.replace(v, verdict=was, reasons=reasons, confirmed=True, first=())
        journal.write(json.dumps(final[v.state].to_json()) + "\n")


def _group_json(cs: Disks, rec: Recording, ctx: CheckContext, g: triage.Group, k: int,
                outdir: Path) -> dict[str, Any]:
    """A group as the summary shows it (triage.Group.to_json and the cluster's words), its bundle written."""
    named: Counter[int] = Counter(n for v in g.states for n in nodes_named(v.reasons))
    d = ClusterDiagnosis.from_json(g.diagnosis) if g.diagnosis else None
    first = g.first
    dest = outdir / "bundles" / f"{k:02d}-{triage.slug(first.state)}"
    try:
        bundle.write(dest, recording=str(rec.dir), logs=rec.node_logs, cuts=bundle_cuts(cs, first.cut),
                            data_size=rec.data_size, fstype=rec.fstype, mount_opts=rec.mount_opts,
                            checker=ctx.checker, params=ctx.params, workload=dict(rec.workload), verdict=first,
                            diagnosis=d)
        g.bundle = str(dest)
    except (OSError, PowercutError) as e:
        log.warning("cannot write the repro bundle %s: %s", dest, e)
    out = g.to_json()
    out["culprits"] = []   # per node below
    out.update({"nodes": len(cs), "named_nodes": {str(n): c for n, c in sorted(named.items())},
                "nodes_note": nodes_note(dict(named), len(g.states))})
    if d is not None:
        out["node_shrink"] = [{k2: n[k2] for k2 in ("node", "original", "minimized", "calls", "cut", "lost", "torn")}
                              for n in d.nodes]
        out["node_culprits"] = [[c.get("text", "") for c in sorted(d.culprits(n), key=_first_files)]
                                for n in range(len(d.nodes))]
        out["shrink_exhausted"] = d.exhausted
        if d.blame_note:
            out["blame_note"] = d.blame_note
    return out


def _first_files(c: dict[str, Any]) -> tuple[bool, int]:
    """A node's culprits in the order a reader wants them: the program's files first, then by entry."""
    return not c.get("path") or str(c.get("what", "")) not in ("data block", "directory block"), int(c.get("entry", 0))


def _tidy(path: Path) -> None:
    """Remove the empty directories a phase left (its mount points), never anything in them."""
    for top, _, _ in sorted(os.walk(path), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(top)

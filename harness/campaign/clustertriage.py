"""The parts of a campaign's triage that are particular to N > 1 disks (host; issue 40); the phases
themselves -- grouping, confirmation by group, the journal -- are campaign/phases.py's, for any
number of disks.

* **Minimization and blame**: the first state of the first ``shrink`` groups, node by node
  (debug/clusterdebug.py, core/disksshrink.py), ``shrink_budget`` judge calls shared by the nodes;
  blame per node on the host.
* **A disagreeing second verdict** is judged ``RETRIES`` more times (``retry_disagreeing``): a
  cluster's recovery can be nondeterministic on the same images.
* **Bundles**: ``bundles/NN-<state>/`` per group (debug/bundle.py, the one format), and what a group says
  beyond one disk's (``group_extras``: the nodes its states' reasons name, the per-node
  minimization and culprits)."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from powercut.campaign.journal import Journal
from powercut.check.context import CheckContext
from powercut.core.disks import Disks, DisksState
from powercut.core.disksshrink import bundle_cuts, nodes_named, nodes_note
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.debug import bundle, triage
from powercut.debug.clusterdebug import ClusterDiagnosis, JudgeStates, diagnose_cluster_state, host_blame
from powercut.errors import PowercutError
from powercut.linux import interrupt
from powercut.record.recording import Recording

log = logging.getLogger(__name__)


def floors_of(cs: Disks, mark: str = "mkfs") -> list[int | None]:
    return [next((e.index for e in sp.entries if e.mark == mark), None) for sp in cs.nodes]


def diagnose(cs: Disks, logs: Sequence[LogIndex], ctx: CheckContext, size: int, by_id: dict[str, DisksState],
             firsts: Sequence[Verdict], judge: JudgeStates, work: Path, *, budget: int,
             on_host: bool) -> dict[str, dict[str, Any]]:
    """Each failing state of ``firsts`` minimized node by node through ``judge`` and blamed per node
    (on the host only); state id -> its ClusterDiagnosis as JSON.  A state whose diagnosis fails is
    left out, with a warning (its group stands without one)."""
    floors = floors_of(cs)
    blame = host_blame(ctx, cs, logs, size, floors) if on_host else None
    out: dict[str, dict[str, Any]] = {}
    for first in firsts:
        if interrupt.stopping():
            break
        try:
            st = by_id.get(first.state) or cs.state_from_id(first.state)
            out[first.state] = diagnose_cluster_state(cs, st, first, judge, blame, work, budget=budget,
                                                      floors=floors).to_json()
        except PowercutError as e:   # the verdicts stand without a diagnosis
            log.warning("diagnosis of %s failed: %s", first.state, e.one_line())
    _tidy(work)
    return out


RETRIES = 3   # more judgments of a state whose second verdict disagreed with its first


def retry_disagreeing(by_id: dict[str, Any], journal: Journal, judge: Callable[..., None], work: Path) -> None:
    """A cluster's recovery can be nondeterministic on the same images (which member wins an
    election decides whether etcd panics: measured 3 of 4 on one state), so a state whose second
    verdict disagreed is judged ``RETRIES`` more times (``judge(states, sink, work, jobs)``): failing
    again in at least one of them (two failing judgments in all) keeps it a confirmed finding, saying
    how many judgments failed; a failure seen once stays ``flaky``.  The verdicts go to ``journal``."""
    flakies = [v for v in journal.done.values() if v.verdict == "flaky" and v.first and v.state in by_id]
    if not flakies or interrupt.stopping():
        return
    more: dict[str, list[Verdict]] = {}
    judge([by_id[v.state] for v in flakies for _ in range(RETRIES)],
          lambda v: more.setdefault(v.state, []).append(v), work, 1)
    for v in flakies:
        got = more.get(v.state, [])
        was = v.first[0]
        fails = 1 + sum(1 for x in got if x.failed)
        n = 2 + len(got)
        if fails < 2:   # seen once: not counted as a finding, and not blamed on the harness alone
            journal.add(dataclasses.replace(v, reasons=(
                f"failed 1 of {n} judgments of the same images ({was}), passed the others: not counted as a "
                "finding -- a harness problem or a recovery that rarely fails", *v.reasons[1:])))
            continue
        reasons = (f"failed {fails} of {n} judgments of the same images ({was} each time it failed): the recovery "
                   "is not deterministic, and fails in some runs", *v.first[1:])
        journal.add(dataclasses.replace(v, verdict=was, reasons=reasons, confirmed=True, first=()))


def write_bundles(outdir: Path, groups: Sequence[triage.Group], rec: Recording, ctx: CheckContext, cs: Disks) -> None:
    """A bundle per group (its first state, with its diagnosis when it has one), and each group's
    words beyond one disk's (``group_extras``)."""
    for k, g in enumerate(groups, 1):
        d = ClusterDiagnosis.from_json(g.diagnosis) if g.diagnosis and "nodes" in g.diagnosis else None
        first = g.first
        dest = outdir / "bundles" / f"{k:02d}-{triage.slug(first.state)}"
        try:
            bundle.write(dest, recording=str(rec.dir), logs=rec.node_logs, cuts=bundle_cuts(cs, first.cut),
                         data_size=rec.data_size, fstype=rec.fstype, mount_opts=rec.mount_opts, checker=ctx.checker,
                         params=ctx.params, workload=dict(rec.workload), verdict=first, diagnosis=d,
                         trace=rec.trace_path, why=g.why)   # the cause per node travels with it
            g.bundle = str(dest)
        except (OSError, PowercutError) as e:
            log.warning("cannot write the repro bundle %s: %s", dest, e)
        g.extra = group_extras(g, d, len(cs))


def group_extras(g: triage.Group, d: ClusterDiagnosis | None, nodes: int) -> dict[str, Any]:
    """What a group of N > 1 disks' states says beyond one disk's: the nodes its states' reasons
    name, and with a diagnosis the per-node minimization and culprits (the group's ``culprits`` are
    per node here)."""
    named: Counter[int] = Counter(n for v in g.states for n in nodes_named(v.reasons))
    out: dict[str, Any] = {"culprits": [], "nodes": nodes, "named_nodes": {str(n): c for n, c in sorted(named.items())},
                           "nodes_note": nodes_note(dict(named), len(g.states))}
    if d is not None:
        out["node_shrink"] = [{k: n[k] for k in ("node", "original", "minimized", "calls", "cut", "lost", "torn")}
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

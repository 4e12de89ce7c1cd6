"""A check of a cluster recording (host; issue 40): every node's log opened and verified against the
manifest, the cluster states chosen (core/disks.py), this shard's share taken (``--shard i/n``,
core/shard.py: round-robin over the selection, the same on every shard), the states already in the
journal skipped (``--resume``; the settings pinned in ``campaign.json``, a resume with others
refused), the rest judged in checker VMs (the default, check/clustervm.py) or on the host
(``--check-in host``, check/cluster.py), the verdicts written as a JSON-lines journal and a summary
(core/clustersummary.py) with the figures and the coverage; then the failures grouped, confirmed,
minimized per node, blamed and bundled (campaign/clustertriage.py, judged where the check ran) and
report.html written (report/cluster.py).  ``merge_cluster`` joins the shards' outputs (``powercut
merge``)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.campaign import ledger
from powercut.campaign.clustertriage import ClusterDebug, diagnose_cluster
from powercut.campaign.journal import SETTINGS, Journal, pin_settings, pinned_settings
from powercut.campaign.merge import load as load_output
from powercut.campaign.outdir import check_outdir, prepare_out
from powercut.check.cluster import check_cluster_host
from powercut.check.clustervm import check_cluster_vm
from powercut.check.context import CheckContext, LogSource, context_for
from powercut.check.place import Place
from powercut.checker import DEFAULT_TIMEOUT_S
from powercut.config import DEFAULT_ACCEL, DEFAULT_CHECK_IN, STATE_TIMEOUT_S
from powercut.core import clustersummary
from powercut.core.disks import DEFAULT_CLUSTER_BOUND, Disks, DisksState
from powercut.core.dmlog import LogIndex, open_log
from powercut.core.imagekey import key_name
from powercut.core.selection import SEED_AUTO, DisksSelection, SelectionSpec, select_disks
from powercut.core.shard import Shard
from powercut.core.verdict import Verdict
from powercut.debug.clusterdebug import JudgeStates
from powercut.errors import BadLog, BadRecording, PowercutError, UsageError
from powercut.linux import runlock
from powercut.record import recording
from powercut.report import cluster as cluster_output
from powercut.report.cluster import is_cluster_output

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClusterCheck:
    """One cluster check: which states, where (``check_in`` vm -- the default -- or host, ``jobs``
    checker VMs, 0: one per core), by which checker, which shard, resumed or not."""

    selection: SelectionSpec = SelectionSpec()
    cluster_bound: int = DEFAULT_CLUSTER_BOUND
    check_in: str = DEFAULT_CHECK_IN
    checker_command: str = ""
    force: bool = False
    jobs: int = 0
    accel: str = DEFAULT_ACCEL
    state_timeout_s: float = STATE_TIMEOUT_S
    check_uris: tuple[str, ...] = ()
    shard: Shard = Shard()
    resume: bool = False
    checker_function: str = ""          # a Python checker, FILE::NAME (the pytest plugin's)
    checker_path: tuple[str, ...] = ()  # sys.path entries its imports need
    checker_timeout_s: float = DEFAULT_TIMEOUT_S
    debug: ClusterDebug = ClusterDebug()   # confirmation, minimization, blame, bundles (campaign/clustertriage.py)
    ledger: str = ""   # --ledger FILE: skip states that passed in earlier runs of these logs, add this run's

    def __post_init__(self) -> None:
        if self.selection.seed == SEED_AUTO and not self.shard.whole:
            raise UsageError(f"--seed auto with --shard {self.shard}: every shard must choose the same cluster "
                             "states; give every shard one --seed N")
        if self.selection.lie_file:
            raise UsageError(f"--lie-file {self.selection.lie_file}: a cluster recording has no file map of its "
                             "nodes yet: its lying disks lie about any block (docs/clusters.md, Known limits)")
        if self.check_uris:
            raise UsageError("a cluster recording's checker VMs boot on this machine: --check-uri is for one-disk "
                             "recordings for now")
        self.place()   # a bad --check-in or -j is one line now

    def place(self) -> Place:
        return Place(self.check_in, self.accel, state_timeout_s=self.state_timeout_s, uris=self.check_uris,
                     jobs=self.jobs)

    def settings(self, nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """What a resumed check must share with the journal's (not where or how fast it runs)."""
        return {"logs_sha256": [str(n.get("sha256", "")) for n in nodes], **self.selection.to_json(),
                "cluster_bound": self.cluster_bound, "checker": self.checker_command or self.checker_function,
                **({} if self.shard.whole else {"shard": str(self.shard)})}


def _seeded(spec: ClusterCheck, outdir: Path) -> SelectionSpec:
    """``--seed auto`` resolved: a resumed check's pinned seed, else a fresh one."""
    pinned = pinned_settings(outdir).get("seed") if spec.resume else None
    if spec.selection.seed == SEED_AUTO and isinstance(pinned, int) and pinned >= 0:
        return dataclasses.replace(spec.selection, seed=pinned)
    return spec.selection.resolved()


def judge_where(place: Place, ctx: CheckContext, rec: recording.Recording, logs: Sequence[LogIndex],
                jobs: int | None = None) -> JudgeStates:
    """Cluster states judged where the check runs: checker VMs (``jobs`` of them, default the
    place's workers) or this machine (debug/clusterdebug.JudgeStates: the judging, confirmation and
    minimization all go through it)."""
    nodes = rec.manifest["cluster"]["node"]

    def judge(states: Sequence[DisksState], sink: Callable[[Verdict], None], work: Path) -> None:
        if not states:
            return
        if place.on_host:
            check_cluster_host(ctx, logs, rec.data_size, states, sink, work)
            return
        check_cluster_vm(ctx, LogSource(rec.dir / nodes[0]["log"], rec.data_size), [n["log"] for n in nodes],
                         list(states), sink, work, place.vm(), jobs=jobs or place.workers())
    return judge


def run_cluster_check(path: str | Path, spec: ClusterCheck, out: str | Path | None = None, *,
                      on_verdict: Callable[[Verdict], None] | None = None) -> tuple[dict[str, Any], Path]:
    """Choose and judge a cluster recording's states (this shard's, those not yet in a resumed
    journal); (summary, output directory)."""
    rec = recording.load(path).require_ok()
    if rec.nodes < 2:
        raise UsageError(f"{rec.dir} is a single-disk recording: check it with 'powercut check'")
    nodes = rec.manifest["cluster"]["node"]
    recording.verify_node_logs(rec)
    place = spec.place()
    place.require()
    outdir = check_outdir(rec.dir, spec.shard, out)
    with runlock.hold(outdir, "--out"):   # no other run works in it meanwhile
        prepare_out(outdir, spec.resume, spec.force)
        spec = dataclasses.replace(spec, selection=_seeded(spec, outdir))
        pin_settings(outdir, spec.settings(nodes), spec.resume)
        ctx = context_for(rec, spec.checker_command, spec.checker_timeout_s, spec.checker_function, spec.checker_path)
        with contextlib.ExitStack() as stack:
            try:
                logs = [stack.enter_context(open_log(rec.dir / n["log"], quiet=True)) for n in nodes]
            except BadLog as e:
                raise BadRecording(f"{rec.dir}: {e.one_line()}") from None
            t = time.monotonic()
            cs = Disks(logs)
            logs_id = ledger_id(nodes)
            earlier = ledger.load(spec.ledger, logs_id) if spec.ledger else frozenset()
            sel = select_disks(cs, spec.selection, cluster_bound=spec.cluster_bound, earlier=earlier)
            select_s = time.monotonic() - t
            if not sel.states:
                raise UsageError(f"{rec.dir}: no cluster state to judge under {', '.join(spec.selection.models)}")
            states = list(spec.shard.take(sel.states))
            if not states:
                raise UsageError(f"shard {spec.shard} is empty: the check has {len(sel.states)} cluster states for "
                                 f"{spec.shard.total} shards; use fewer shards")
            journal = Journal(outdir / "journal.jsonl", resume=spec.resume)
            todo = [s for s in states if s.id not in journal.done]
            judged_now: list[Verdict] = []

            def sink(v: Verdict) -> None:
                aliases = sel.aliases.get(v.state, ())
                v = dataclasses.replace(v, aliases=aliases) if aliases else v
                journal.add(v)
                judged_now.append(v)
                if on_verdict is not None:
                    on_verdict(v)

            status, t = "error", time.monotonic()
            judge = judge_where(place, ctx, rec, logs)
            try:
                judge(todo, sink, outdir / "work")
                status = "complete" if len(judged_now) == len(todo) else "interrupted"
            except KeyboardInterrupt:
                status = "interrupted"
                raise
            finally:
                journal.close()
                if spec.ledger:   # passes only: a failing state is judged again next time
                    passed = [v for s in states if (v := journal.done.get(s.id)) is not None and not v.failed]
                    if passed:
                        ledger.add(spec.ledger, logs_id, (key_name(cs.key(cs.state_from_id(v.state))) for v in passed))
                summary = _summary(rec, spec, place, sel, states, journal, select_s, time.monotonic() - t,
                                   len(judged_now), status, acks=sum(1 for ev in cs.events if ev[0]))
                (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
                with contextlib.suppress(OSError):
                    (outdir / "work").rmdir()
            if status == "complete":   # the failures grouped, confirmed, minimized, blamed, bundled where judged
                done = journal.done
                post = diagnose_cluster(rec, ctx, cs, logs, states, [done[s.id] for s in states if s.id in done],
                                        outdir, spec.debug, seed=int(spec.selection.seed),
                                        judge=judge_where(place, ctx, rec, logs, jobs=1), on_host=place.on_host)
                summary.update(post)
                (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        summary["html"] = str(cluster_output.write_html(outdir, [rec.dir / n["log"] for n in nodes]))
        return summary, outdir


def ledger_id(nodes: Sequence[dict[str, Any]]) -> str:
    """What a ledger (campaign/ledger.py) files a cluster recording's passes under: its node logs'
    sha256, joined by ``+`` in node order (one log's is its own)."""
    return "+".join(str(n.get("sha256", "")) for n in nodes)


def _summary(rec: recording.Recording, spec: ClusterCheck, place: Place, sel: DisksSelection,
             states: list[DisksState], journal: Journal, select_s: float, judge_s: float, judged_now: int,
             status: str, *, acks: int = -1) -> dict[str, Any]:
    done = journal.done
    verdicts = [done[s.id] for s in states if s.id in done]   # in selection order
    head = {"recording": str(rec.dir), "nodes": rec.nodes, "workload": rec.workload_label,
            "check_in": place.check_in, "fstype": rec.fstype, "acks": acks}
    return clustersummary.summarize(verdicts, head=head, selection=sel.to_json(), coverage=sel.coverage,
                                    planned=len(states), select_s=select_s, judge_s=judge_s, judged_now=judged_now,
                                    status=status, shard="" if spec.shard.whole else str(spec.shard))


def merge_cluster(paths: Sequence[str | Path], out: str | Path) -> tuple[dict[str, Any], Path]:
    """``powercut merge`` of a cluster check's shards: one journal and the summary the unsharded
    check would have written (same verdict counts and coverage).  Shards of other recordings or
    settings, or one shard twice, are refused with one line; a missing shard makes it incomplete."""
    if not paths:
        raise UsageError("give the shards' check outputs to merge")
    other = next((p for p in paths if not is_cluster_output(p)), None)
    if other is not None:
        raise UsageError(f"{other} is not a cluster check's output: a cluster check's shards merge only with "
                         "each other")
    outs = [load_output(p) for p in paths]
    want = {k: v for k, v in outs[0].settings.items() if k != "shard"}
    for o in outs[1:]:
        have = {k: v for k, v in o.settings.items() if k != "shard"}
        if have != want or o.shard.total != outs[0].shard.total:
            k = next((k for k in sorted(set(want) | set(have)) if want.get(k) != have.get(k)), None)
            what = f"cluster checks ({k} differs)" if k else f"shard counts ({outs[0].shard}, {o.shard})"
            raise UsageError(f"{outs[0].dir} and {o.dir} are shards of different {what}: they cannot be merged")
    outdir = Path(out)
    if any(outdir.resolve() == o.dir.resolve() for o in outs):
        raise UsageError(f"{outdir} is one of the shards: merge into another -o")
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / "merge.json").exists():
        raise UsageError(f"{outdir} exists and is not a merge output; choose another -o")
    summary, verdicts = clustersummary.merge([(str(o.shard), o.summary, list(o.verdicts.values())) for o in outs],
                                             outs[0].shard.total)
    outdir.mkdir(parents=True, exist_ok=True)
    with open(outdir / "journal.jsonl", "w") as f:
        f.writelines(json.dumps(v.to_json()) + "\n" for v in verdicts)
    (outdir / SETTINGS).write_text(json.dumps(want, indent=1, sort_keys=True) + "\n")
    (outdir / "merge.json").write_text(json.dumps({"shards": [str(o.dir) for o in outs],
                                                   "missing": summary["missing_shards"]}, indent=1) + "\n")
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    try:
        rec = recording.load(summary["recording"])
        summary["html"] = str(cluster_output.write_html(outdir, [rec.dir / n["log"] for n in
                                                                 rec.manifest["cluster"]["node"]]))
    except (PowercutError, OSError, KeyError) as e:   # the merge stands without its page
        log.warning("no report.html for the merge: %s", e)
    return summary, outdir

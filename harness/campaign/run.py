"""A check campaign over one recording (host side): select the distinct states, judge them (checker
VMs or host), confirm the failures, journal, summarize.  ``powercut check`` and ``powercut run``
call ``run_campaign``.

Each distinct disk image is judged once (core/selection.py: states with the same durable content and
the same acked/begun keys are one; the journal lists the others as its aliases).  Failing states
are then judged a second time, alone (a fresh clone, a fresh mount point, nothing else from that
recording mounted: one host worker, or fresh checker VMs): the same verdict makes it a confirmed
finding; a different one makes it ``flaky`` -- a harness problem, reported with both verdicts, never
counted as a finding of the program under test.  By default confirmation goes by failure group
(core/confirm.py): a small group is judged again whole, a large one by a deterministic sample (its
first, its last, its minimized state, seeded others, ``confirm_sample`` in all),
and any disagreement confirms the group state by state; ``confirm_mode="all"`` judges every failing
state again."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.campaign import ledger
from powercut.campaign.journal import Journal, pin_settings, pinned_settings
from powercut.campaign.outdir import check_outdir, prepare_out
from powercut.check.context import CheckContext, LogSource, context_for, with_faults
from powercut.check.place import Place
from powercut.checker import DEFAULT_TIMEOUT_S
from powercut.config import DEFAULT_CONFIRM_MODE, DEFAULT_SHRINK, DEFAULT_SHRINK_BUDGET
from powercut.core import confirm as confirming
from powercut.core.coverage import Coverage, judged_only
from powercut.core.crashmodels.target import NO_TARGET, LieTarget
from powercut.core.crashstate import CrashState
from powercut.core.dmlog import LogIndex, open_log
from powercut.core.imagekey import state_key
from powercut.core.models import CrashSpace, space
from powercut.core.selection import SEED_AUTO, Selection, SelectionSpec, select
from powercut.core.shard import Shard
from powercut.core.stateid import LIE_MODELS
from powercut.core.verdict import Verdict
from powercut.debug import cause, triage
from powercut.errors import BadLog, BadRecording, CheckerError, PowercutError, UsageError
from powercut.linux import runlock
from powercut.record import recording
from powercut.report import html
from powercut.report.summary import Summary, summarize, write_outputs

log = logging.getLogger(__name__)

BROKEN_AFTER = 3   # a checker that crashes on each of the first states judged is broken, not a finding


@dataclass(frozen=True, slots=True)
class CampaignSpec:
    """One check campaign: which states (``selection``, config.SelectionSpec), where they are judged
    (``place``, check/place.Place), by which checker, and how failures are confirmed and minimized.
    Every default is the embedded values' or written once below."""

    selection: SelectionSpec = SelectionSpec()
    place: Place = Place()
    checker_command: str = ""     # empty: the workload's registered checker (or fsck only for --cmd)
    checker_timeout_s: float = DEFAULT_TIMEOUT_S   # per state
    resume: bool = False
    confirm: bool = True          # judge failures a second time, alone
    confirm_mode: str = DEFAULT_CONFIRM_MODE   # group: by failure group (a sample of a large group); all: every failure
    confirm_sample: int = confirming.DEFAULT_SAMPLE   # states judged alone per large group
    shrink: int = DEFAULT_SHRINK  # minimize + blame the first state of the first K failure groups (0: off)
    shrink_budget: int = DEFAULT_SHRINK_BUDGET   # checks per minimization
    allow_no_acks: bool = False   # a recording without an ack mark is not a pass unless this is set
    require_exhaustive: bool = False   # a pass short of exhaustive (sampled, capped, weakened) is not ok
    ledger: str = ""              # --ledger FILE: skip states that passed in earlier runs of the log, add this run's
    force: bool = False           # replace an earlier check in the output directory
    shard: Shard = Shard()        # judge only this shard of the distinct states (--shard i/n)
    checker_function: str = ""    # a Python checker, FILE::NAME (the pytest plugin's; powercut._pycall)
    checker_path: tuple[str, ...] = ()   # sys.path entries its imports need
    label: str = ""               # what the outputs call the workload (a crash test's id); default the recording's

    def settings(self, rec: recording.Recording) -> dict[str, Any]:
        """What a resumed campaign must share with the journal's: the log and how states are made
        and judged (not where or how fast)."""
        return {"log_sha256": rec.manifest["log"].get("sha256", ""), **self.selection.to_json(),
                "checker": self.checker_command or self.checker_function, "checker_timeout_s": self.checker_timeout_s,
                **({} if self.shard.whole else {"shard": str(self.shard)})}

    def __post_init__(self) -> None:
        if self.shrink < 0 or self.shrink_budget < 1:
            raise UsageError(f"--shrink must be 0 (off) or more and its budget at least 1, not {self.shrink}, "
                             f"{self.shrink_budget}")
        if self.checker_timeout_s <= 0:
            raise UsageError(f"the checker timeout must be more than 0 s, not {self.checker_timeout_s:g}")
        if self.selection.seed == SEED_AUTO and not self.shard.whole:
            raise UsageError(f"--seed auto with --shard {self.shard}: every shard must sample the same states; "
                             "give every shard one --seed N (e.g. the CI run's number)")
        if self.confirm_mode not in confirming.MODES:
            raise UsageError(f"--confirm must be one of {', '.join(confirming.MODES)}, not {self.confirm_mode!r}")
        if self.confirm_sample < confirming.MIN_SAMPLE:
            raise UsageError(f"--confirm-sample must be at least {confirming.MIN_SAMPLE} (a group's first and last "
                             f"state), not {self.confirm_sample}")

    @classmethod
    def of(cls, **settings: Any) -> CampaignSpec:
        """A campaign from flat words (``models=``, ``seed=``, ``check_in=``, ``jobs=``, ... and the
        fields): the selection's and the place's words go into those values, with their defaults."""
        sel, where, rest = split_settings(settings)
        return cls(selection=SelectionSpec().with_(**sel), place=Place(**where), **rest)

    @property
    def models(self) -> tuple[str, ...]:
        return self.selection.models

    def workers(self) -> int:
        return self.place.workers()


SELECTION_WORDS = ("models", "seed", "bound", "samples", "torn_samples", "max_states", "lie_file")    # -> SelectionSpec
PLACE_WORDS = {"check_in": "check_in", "accel": "accel", "jobs": "jobs", "memory_mb": "memory_mb",
               "state_timeout_s": "state_timeout_s", "check_uris": "uris"}                # word -> Place field


def split_settings(flat: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Flat settings (the pytest marker's, a script's) -> (SelectionSpec fields, Place fields, the rest)."""
    sel = {k: v for k, v in flat.items() if k in SELECTION_WORDS}
    where = {PLACE_WORDS[k]: (tuple(v) if k == "check_uris" else v) for k, v in flat.items() if k in PLACE_WORDS}
    rest = {k: v for k, v in flat.items() if k not in SELECTION_WORDS and k not in PLACE_WORDS}
    return sel, where, rest


class _Run:
    """One campaign's moving parts: the journal, the aliases, the callbacks."""

    def __init__(self, spec: CampaignSpec, rec: recording.Recording, ctx: CheckContext, outdir: Path,
                 sel: Selection, journal: Journal, on_verdict: Callable[[Verdict], None] | None) -> None:
        self.spec, self.rec, self.ctx, self.outdir = spec, rec, ctx, outdir
        self.sel, self.journal, self.on_verdict = sel, journal, on_verdict
        self.place, self.src = spec.place.with_warm_vms(), LogSource.of(rec)
        self.first: list[str] = []   # the first verdicts of this run: a checker broken on all is an error
        self.confirm_s = 0.0
        self.confirmed = 0
        self.groups: list[Any] = []
        self.triage_s = 0.0
        self.escalated: set[tuple[str, str]] = set()   # groups confirmed state by state after a disagreement

    def sink(self, v: Verdict) -> None:
        self.first.append(v.verdict)
        if len(self.first) == BROKEN_AFTER and set(self.first) == {"checker-crashed"}:
            raise CheckerError(f"the checker failed on each of the first {BROKEN_AFTER} states, e.g. {v.state}: "
                               f"{v.reasons[0] if v.reasons else 'no reason'}; fix the checker (or its timeout, "
                               "--checker-timeout) and check again with --resume")
        v = dataclasses.replace(v, aliases=tuple(self.sel.aliases.get(v.state, ())))
        self.journal.add(v)
        if self.on_verdict:
            self.on_verdict(v)

    def judge(self, index: LogIndex, states: list[CrashState], sink: Callable[[Verdict], None], work: Path,
              jobs: int) -> None:
        self.place.judge(self.ctx, self.src, index, states, sink, work, jobs=jobs)

    def triage(self, index: LogIndex) -> list[Any]:
        """Group the failures by cause; minimize and blame the first state of the first ``shrink``
        groups where the check runs; confirm by group (``confirm``); a repro bundle for every group."""
        t0 = time.monotonic()
        self.groups = self._findings()
        todo = self.groups[:self.spec.shrink]
        if todo:
            try:
                found = {d["state"]: d for d in self._diagnose(index, [g.first for g in todo])}
            except PowercutError as e:   # e.g. a state that panics the kernel panics the diagnosing VM too:
                log.warning("diagnosis failed, the groups are reported without it: %s", e.one_line())   # the
                found = {}                                                     # verdicts stand, the check goes on
                for g in todo:
                    g.diagnosis_error = e.one_line()
            for g in todo:
                g.diagnosis = found.get(g.first.state)
        self.place.close_warm()   # confirmation judges in fresh kernels
        self.triage_s = time.monotonic() - t0
        if self.spec.confirm:
            self.confirm(index)
            kept = {(g.verdict, g.reason_class): (g.diagnosis, g.diagnosis_error) for g in self.groups}
            self.groups = self._findings()   # confirmation may have made states flaky, or whole groups
            for g in self.groups:
                g.diagnosis, g.diagnosis_error = kept.get((g.verdict, g.reason_class), (None, ""))
        t1 = time.monotonic()
        if self.groups:
            try:
                cause.explain_groups(self.rec, index, self.groups)
            except Exception as e:  # noqa: BLE001 -- a cause is an explanation: the verdicts stand without it
                log.warning("no causes from the trace: %s", e)
            triage.write_bundles(self.outdir, self.groups, self.rec, self.ctx, self.rec.log_path)
            triage.save(self.outdir, self.groups)
        self.triage_s += time.monotonic() - t1
        return self.groups

    def confirm(self, index: LogIndex) -> None:
        """Judge the unconfirmed failures again, alone, by group (core/confirm.py): the whole of a
        small group, a sample of a large one, and each diagnosed group's minimized state, all in one
        lone phase; then state by state every group whose sample or minimized state disagreed."""
        by_id = {s.id: s for s in self.sel.states}
        mine = [v for sid, v in self.journal.done.items() if sid in by_id]
        firsts = [v for v in mine if v.failed and not v.confirmed and not v.by_group and v.verdict != "flaky"]
        named = {(g.verdict, g.reason_class): g.diagnosis["minimized"] for g in self.groups
                 if g.diagnosis and g.diagnosis.get("minimized")}
        minimized = {key: m for key, m in named.items() if m not in by_id}   # not a judged state: judged here
        if not firsts and not minimized:
            return
        t0 = time.monotonic()
        plans = confirming.plan(firsts, mode=self.spec.confirm_mode, k=self.spec.confirm_sample,
                                seed=self.spec.selection.seed, settled=[v for v in mine if v.verdict == "flaky" or v.confirmed],
                                always=set(named.values()))
        sampled = [v for p in plans for v in p.sample]
        extra = {key: space(index).state_from_id(m) for key, m in minimized.items()}
        seconds = self._alone(index, sampled, [by_id[v.state] for v in sampled]
                              + list({st.id: st for st in extra.values()}.values()))
        disagreeing = set()
        for g in self.groups:   # the repro the report leads with must fail the same way alone
            st = extra.get((g.verdict, g.reason_class))
            if st is None:
                continue
            v2 = seconds.get(st.id)
            same = v2 is not None and v2.verdict == g.verdict
            g.diagnosis = dict(g.diagnosis or {}, minimized_confirmed=same,
                               minimized_alone=v2.verdict if v2 is not None else "not judged")
            if not same:
                disagreeing.add((g.verdict, g.reason_class))
        by_group, escalate = confirming.settle(plans, seconds, disagreeing)
        for v in by_group:
            self.journal.add(dataclasses.replace(v, by_group=True))
        if escalate:
            self.escalated |= {confirming.group_key(v) for v in escalate}
            self._alone(index, escalate, [by_id[v.state] for v in escalate])
        self.confirm_s += time.monotonic() - t0

    def _alone(self, index: LogIndex, firsts: list[Verdict], states: list[CrashState]) -> dict[str, Verdict]:
        """Judge ``states`` again, alone; journal each of ``firsts`` as confirmed or flaky.  Every
        lone verdict comes back by state id (others, such as minimized states, are not journaled)."""
        want = {v.state: v for v in firsts}
        seconds: dict[str, Verdict] = {}

        def second(v2: Verdict) -> None:
            seconds[v2.state] = v2
            v1 = want.get(v2.state)
            if v1 is None:
                return
            self.journal.add(dataclasses.replace(v1, confirmed=True, by_group=False) if confirming.agrees(v1, v2)
                             else flaky(v1, v2))
            self.confirmed += 1

        self.judge(index, states, second, self.outdir / "confirm", self.place.alone(self.spec.workers()))
        return seconds

    def _findings(self) -> list[Any]:
        wanted = {s.id for s in self.sel.states}
        groups = triage.group([v for sid, v in self.journal.done.items() if sid in wanted and v.finding])
        for g in groups:
            g.escalated = (g.verdict, g.reason_class) in self.escalated
        return groups

    def _diagnose(self, index: LogIndex, firsts: list[Verdict]) -> list[dict[str, Any]]:
        return triage.diagnose_at(self.place, self.ctx, self.src, index, space(index), firsts,
                                  self.outdir / "diagnose", floor=self.sel.floor, budget=self.spec.shrink_budget)


def flaky(v1: Verdict, v2: Verdict) -> Verdict:
    reasons = (f"judged twice with different verdicts: {v1.verdict}, then alone {v2.verdict} -- a harness "
               "problem, not a finding", *(f"first: {r}" for r in v1.reasons), *(f"second: {r}" for r in v2.reasons))
    return dataclasses.replace(v1, verdict="flaky", reasons=reasons, first=(v1.verdict, *v1.reasons),
                               seconds=round(v1.seconds + v2.seconds, 3))


def _seeded(spec: CampaignSpec, outdir: Path) -> SelectionSpec:
    """The selection with ``--seed auto`` resolved: a resumed campaign's pinned seed, else a new one."""
    sel = spec.selection
    if sel.seed != SEED_AUTO:
        return sel
    if spec.resume:
        pinned = pinned_settings(outdir).get("seed")
        if isinstance(pinned, int) and pinned >= 0:
            return dataclasses.replace(sel, seed=pinned)
    return sel.resolved()


NO_CHECKER = ("no checker, recovery mount and fsck only: the program's data was never looked at (give --checker, "
              "or register one for the workload)")


def _anatomy(rec: Any, index: LogIndex) -> dict[str, Any]:
    """The recording's commit anatomy (debug/cause.py); empty when it cannot be made."""
    try:
        return cause.anatomy_of(rec, index)
    except Exception as e:  # noqa: BLE001 -- a price tag, never a reason for a check to fail
        log.warning("no commit anatomy: %s", e)
        return {}


def coverage_of(sel: Selection, verdicts: list[Verdict], ctx: CheckContext) -> Coverage:
    """What this run covered: the selection's coverage with what was really judged per model (a
    shard, or a run stopped early, judged less) and the checker's note."""
    cov = judged_only(sel.coverage, Counter(v.model for v in verdicts))
    c = ctx.checker
    if not (c.name or c.command or c.function):
        cov = cov.with_note(NO_CHECKER)
    return cov


def lie_target_of(rec: recording.Recording, sectorsize: int, lie_file: str = "") -> LieTarget:
    """Where the lying-disk models aim (core/crashmodels/target.LieTarget): the program's own blocks
    first where the recording mapped its files; with ``lie_file`` that file's blocks only.  An
    unreadable map only loses the preference (no target); a ``lie_file`` the map cannot give is a
    usage error.  ``sectorsize``: the log's sector size."""
    path = rec.file_map
    if path is None:
        if lie_file:
            raise UsageError(f"--lie-file {lie_file}: {rec.dir} has no file map (a recording made before it, or on "
                             "btrfs, whose extents are not the device's sectors): record again")
        return NO_TARGET
    try:
        doc = json.loads(path.read_text())
        files = doc["files"]
        chosen = files.get(lie_file.strip("/")) if lie_file else None
        if lie_file and chosen is None:
            near = sorted(files, key=lambda f: (lie_file.rsplit("/", 1)[-1] not in f, f))[:5]
            raise UsageError(f"--lie-file {lie_file}: not a file of the program at the end of the recording "
                             f"(its files include {', '.join(near) or 'none'})")
        chosen_files = [chosen] if chosen is not None else list(files.values())
        extents = [(int(a), int(n)) for ext in chosen_files for a, n in ext]
        return LieTarget.of(extents, sectorsize, int(doc.get("sector_bytes", 512)), only=bool(lie_file))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if lie_file:
            raise UsageError(f"--lie-file {lie_file}: the recording's file map {path} cannot be read ({e})") from None
        log.warning("%s: the file map cannot be read (%s): lying-disk models order targets by the log alone",
                    path, e)
        return NO_TARGET


def disk_latency_of(manifest: dict[str, Any]) -> str:
    """The recording's data-disk latency setting (core/latency.py); ``none`` for recordings made before it."""
    return str(manifest.get("latency", {}).get("setting", "none"))


def run_campaign(rec_dir: str | os.PathLike[str], spec: CampaignSpec, out: str | os.PathLike[str] | None = None,
                 on_start: Callable[[int, int], None] | None = None,
                 on_verdict: Callable[[Verdict], None] | None = None) -> tuple[Summary, dict[str, Path]]:
    rec = recording.load(rec_dir).require_ok()
    outdir = check_outdir(rec.dir, spec.shard, out)
    with _open_verified(rec) as index, runlock.hold(outdir, "--out"):   # no other run works in it meanwhile
        return _campaign(rec, index, spec, outdir, on_start, on_verdict)


def _open_verified(rec: recording.Recording) -> LogIndex:
    """The recording's log, scanned once for the whole campaign and verified against its manifest."""
    if not rec.log_path.is_file():
        recording.verify_log(rec)   # names the missing log
    try:
        index = open_log(rec.log_path, quiet=True)
    except BadLog as e:
        raise BadRecording(f"{rec.dir}: the log is not usable: {e.one_line()}") from None
    try:
        recording.verify_log(rec, index)
    except BaseException:
        index.close()
        raise
    return index


def _campaign(rec: recording.Recording, index: LogIndex, spec: CampaignSpec, outdir: Path,
              on_start: Callable[[int, int], None] | None,
              on_verdict: Callable[[Verdict], None] | None) -> tuple[Summary, dict[str, Path]]:
    ctx = context_for(rec, spec.checker_command, spec.checker_timeout_s, spec.checker_function, spec.checker_path)
    spec.place.require()
    prepare_out(outdir, spec.resume, spec.force)
    spec = dataclasses.replace(spec, selection=_seeded(spec, outdir))
    pin_settings(outdir, spec.settings(rec), spec.resume)
    t0 = time.monotonic()
    status = "complete"
    ctx = with_faults(ctx, index)
    sp = CrashSpace(index, lie_target=lie_target_of(rec, index.sectorsize, spec.selection.lie_file))
    sha = rec.manifest["log"].get("sha256", "")
    earlier = ledger.load(spec.ledger, sha) if spec.ledger else frozenset()
    sel = select(sp, spec.selection, earlier=earlier)
    if not sel.states:   # nothing judged is not a pass
        raise UsageError(f"{rec.dir}: no crash state to judge under {', '.join(spec.models)}: the log holds "
                         "no write after the mkfs mark")
    everything = len(sel.states)
    sel = dataclasses.replace(sel, states=spec.shard.take(sel.states))
    if not sel.states:
        raise UsageError(f"shard {spec.shard} is empty: the campaign has {everything} distinct states for "
                         f"{spec.shard.total} shards; use fewer shards")
    journal = Journal(outdir / "journal.jsonl", resume=spec.resume)
    run = _Run(spec, rec, ctx, outdir, sel, journal, on_verdict)
    try:
        if on_start:
            on_start(len(sel.states), sum(1 for s in sel.states if s.id in journal.done))
        todo = [s for s in sel.states if s.id not in journal.done]
        run.judge(index, todo, run.sink, outdir / "work", spec.workers())
        run.triage(index)   # groups, diagnoses, confirmation by group, bundles
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException:
        status = "error"
        raise
    finally:
        run.place.close_warm(force=status != "complete")
        journal.close()
        wanted = {s.id for s in sel.states}
        verdicts = [v for sid, v in journal.done.items() if sid in wanted]
        cov = coverage_of(sel, verdicts, ctx)
        if spec.selection.lie_file:   # a pass there speaks for that file's blocks only
            cov = cov.with_note(f"lies only about {spec.selection.lie_file} (--lie-file)", LIE_MODELS)
        if spec.ledger and verdicts:   # passes only: a failing state is judged again next time
            ledger.add(spec.ledger, sha, (state_key(sp, sp.state_from_id(v.state)) for v in verdicts
                                          if not v.failed))
        summary = summarize(verdicts, recording=str(rec.dir), fstype=rec.fstype,
                            workload=spec.label or rec.workload_label,
                            check_in=spec.place.check_in, seconds=time.monotonic() - t0, selection=sel,
                            status=status, confirm_s=run.confirm_s, rejudged=run.confirmed,
                            confirm_mode=(spec.confirm_mode if spec.confirm else "off"),
                            confirm_sample=spec.confirm_sample, escalated=len(run.escalated),
                            groups=[g.to_json() for g in run.groups], triage_s=run.triage_s,
                            acks=len(index.acks()), allow_no_acks=spec.allow_no_acks,
                            shard="" if spec.shard.whole else str(spec.shard), coverage=cov,
                            require_exhaustive=spec.require_exhaustive,
                            anatomy=_anatomy(rec, index), trace_note=cause.trace_note(rec),
                            disk_latency=disk_latency_of(rec.manifest))
        paths = write_outputs(summary, verdicts, outdir)
        paths["html"] = html.write(summary, outdir, verdicts, index)
    return summary, paths

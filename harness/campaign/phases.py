"""The phases of one campaign after its selection (host): judge the states, group the failures by
cause, minimize and blame the first state of the first groups, confirm by group, explain, bundle.
``campaign/run.py`` builds a ``CampaignRun`` over the recording's disks -- one disk or N, the same
phases -- and calls ``judge`` and ``triage``.

Every judgement goes through ``check/place.Place.judge`` (host or checker VMs, here or on
``--check-uri`` hosts); the run's checker VMs stay warm between the check and the diagnosis
(debug/triage.diagnose_at: the minimization, a disk at a time, and each disk's blame, where the
check runs), and confirmation judges in fresh kernels.  What differs with the number of disks is
only that the recovery of several disks may be nondeterministic, so a disagreeing second verdict
is judged a few more times there (campaign/retries.py).

Confirmation (core/judging/confirm.py): failing states are judged a second time, alone (a fresh clone, a
fresh mount point, nothing else from that recording mounted: one host worker, or fresh checker
VMs): the same verdict makes it a confirmed finding; a different one makes it ``flaky`` -- a
harness problem, reported with both verdicts, never counted as a finding of the program under test.
By default confirmation goes by failure group: a small group is judged again whole, a large one by a
deterministic sample (its first, its last, its minimized state, seeded others, ``confirm_sample`` in
all), and any disagreement confirms the group state by state; ``confirm_mode="all"`` judges every
failing state again."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from powercut.campaign import retries
from powercut.campaign.journal import Journal
from powercut.check.context import CheckContext, LogSource
from powercut.check.proving import Report
from powercut.core.judging import confirm as confirming
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import Nodes
from powercut.debug import cause, triage, verify
from powercut.debug.triage import Group
from powercut.errors import CheckerError, PowercutError
from powercut.linux import interrupt
from powercut.record import recording

log = logging.getLogger(__name__)

BROKEN_AFTER = (
    3  # a checker that crashes on each of the first states judged is broken, not a finding
)


class CampaignRun:
    """One campaign's moving parts: its disks (``logs``, opened; ``space``: one disk's CrashSpace or
    N disks' Nodes, each giving ``state_from_id``), the selection, the journal, the callbacks."""

    def __init__(
        self,
        spec: Any,
        rec: recording.Recording,
        ctx: CheckContext,
        outdir: Path,
        logs: Sequence[LogIndex],
        space: CrashSpace | Nodes,
        sel: Any,
        journal: Journal,
        on_verdict: Callable[[Verdict], None] | None,
    ) -> None:
        self.spec = spec
        self.rec = rec
        self.ctx = ctx
        self.outdir = outdir
        self.logs = list(logs)
        self.space = space
        self.sel = sel
        self.journal = journal
        self.on_verdict = on_verdict
        self.place = spec.place.with_warm_vms()
        self.src = LogSource.of(rec)
        self.first: list[
            str
        ] = []  # the first verdicts of this run: a checker broken on all is an error
        self.confirm_s = 0.0
        self.confirmed = 0
        self.groups: list[Group] = []
        self.triage_s = 0.0
        self.escalated: set[tuple[str, str]] = (
            set()
        )  # groups confirmed state by state after a disagreement
        self.proofs = verify.Verification()  # the causes' counterfactuals (debug/verify.py)
        self.rule: Report | None = None  # what the read-set rule did (check/proving.py)

    @property
    def disks(self) -> int:
        return len(self.logs)

    @property
    def all_nodes(self) -> Nodes:
        """The run's disks as one Nodes (one disk's CrashSpace is a Nodes of one)."""
        return self.space if isinstance(self.space, Nodes) else Nodes([self.space])

    def sink(self, v: Verdict) -> None:
        self.first.append(v.verdict)
        if len(self.first) == BROKEN_AFTER and set(self.first) == {"checker-crashed"}:
            raise CheckerError(
                f"the checker failed on each of the first {BROKEN_AFTER} states, e.g. {v.state}: "
                f"{v.reasons[0] if v.reasons else 'no reason'}; fix the checker (or its timeout, "
                "--checker-timeout) and check again with --resume"
            )
        aliases = tuple(self.sel.aliases.get(v.state, ()))
        v = dataclasses.replace(v, aliases=aliases)
        self.journal.add(v)
        if self.on_verdict:
            self.on_verdict(v)

    def judge(
        self,
        states: Sequence[Any],
        sink: Callable[[Verdict], None],
        work: Path,
        jobs: int,
        prove: bool = False,
    ) -> None:
        """Judge ``states`` where the place says; ``prove``: the read-set rule may prove some
        (the main check only: confirmation and diagnosis judge for real)."""
        found = self.place.judge(
            self.ctx, self.src, self.logs, states, sink, work, jobs=jobs, prove=prove
        )
        if found is not None:
            self.rule = found.merged(self.rule)

    def triage(self) -> list[Group]:
        """Group the failures by cause; minimize and blame the first state of the first ``shrink``
        groups where the check runs; confirm by group (``confirm``); a repro bundle for every group."""
        t0 = time.monotonic()
        self.groups = self._findings()
        todo = self.groups[: self.spec.shrink]
        if todo and not interrupt.stopping():
            try:
                found = self._diagnose(todo)
            except (
                PowercutError
            ) as e:  # e.g. a state that panics the kernel panics the diagnosing VM too:
                log.warning(
                    "diagnosis failed, the groups are reported without it: %s", e.one_line()
                )  # the
                found = {}  # verdicts stand, the check goes on
                for g in todo:
                    g.diagnosis_error = e.one_line()
            for g in todo:
                g.diagnosis = found.get(g.first.state, g.diagnosis)
        if self.groups and not interrupt.stopping():
            self._prove(self.groups[: verify.MAX_GROUPS])
        self.place = self.place.fresh()  # confirmation judges in fresh kernels
        self.triage_s = time.monotonic() - t0
        if self.spec.confirm and not interrupt.stopping():
            self.confirm()
            kept = {
                (g.verdict, g.reason_class): (g.diagnosis, g.diagnosis_error) for g in self.groups
            }
            self.groups = (
                self._findings()
            )  # confirmation may have made states flaky, or whole groups
            for g in self.groups:
                g.diagnosis, g.diagnosis_error = kept.get((g.verdict, g.reason_class), (None, ""))
        t1 = time.monotonic()
        if self.groups:
            try:  # per node for N disks: the trace's calls on that node's files, against its log
                cause.explain_groups(self.rec, self.logs, self.groups)
                self.proofs.apply(self.rec, self.logs[0], self.groups)
            except Exception as e:  # noqa: BLE001 -- a cause is an explanation: the verdicts stand without it
                log.warning("no causes from the trace: %s", e)
            triage.write_bundles(self.outdir, self.groups, self.rec, self.ctx, self.all_nodes)
            triage.save(self.outdir, self.groups)
        self.triage_s += time.monotonic() - t1
        return self.groups

    def _prove(self, groups: list[Group]) -> None:
        """Judge the counterfactual of each rule the diagnosed groups' states broke, where the check
        runs (the warm checker VMs), before they close (debug/verify.py)."""
        self.proofs = verify.prepare(self.rec, self.logs, groups)
        if not self.proofs.targets or interrupt.stopping():
            return
        t0 = time.monotonic()
        got: dict[str, Verdict] = {}
        # one batch: the groups' states with what recovery read traced, and their counterfactuals
        verify.plan(self.proofs, self.rec, self.logs, groups)
        traced = dataclasses.replace(self.ctx, trace_reads=True)
        try:
            self.place.judge(
                traced,
                self.src,
                self.logs,
                [*self.proofs.targets.values(), *self.proofs.states],
                lambda v: got.__setitem__(v.state, v),
                self.outdir / "verify",
                jobs=self.spec.workers(),
            )
            self.proofs.traced(got)
            self.proofs.record(got, 0.0)
            verify.plan(
                self.proofs, self.rec, self.logs, groups
            )  # the rules what recovery read adds
            more = self.proofs.states
            got.clear()
            if (
                more and not interrupt.stopping()
            ):  # its own directory: the first batch's VMs are parked warm
                self.place.judge(
                    self.ctx,
                    self.src,
                    self.logs,
                    more,
                    lambda v: got.__setitem__(v.state, v),
                    self.outdir / "verify-read",
                    jobs=self.spec.workers(),
                )
        except PowercutError as e:  # the causes stay as the trace gives them, said not proven
            log.warning("the causes' counterfactuals could not be judged: %s", e.one_line())
        self.proofs.record(got, time.monotonic() - t0)

    def confirm(self) -> None:
        """Judge the unconfirmed failures again, alone, by group (core/judging/confirm.py): the whole of a
        small group, a sample of a large one, and each diagnosed group's minimized state, all in one
        lone phase; then state by state every group whose sample or minimized state disagreed."""
        by_id = {s.id: s for s in self.sel.states}
        mine = [v for sid, v in self.journal.done.items() if sid in by_id]
        firsts = [
            v
            for v in mine
            if v.failed and not v.confirmed and not v.by_group and v.verdict != "flaky"
        ]
        named = {
            (g.verdict, g.reason_class): g.diagnosis["minimized"]
            for g in self.groups
            if g.diagnosis and g.diagnosis.get("minimized")
        }
        minimized = {
            key: m for key, m in named.items() if m not in by_id
        }  # not a judged state: judged here
        if not firsts and not minimized:
            return
        t0 = time.monotonic()
        plans = confirming.plan(
            firsts,
            mode=self.spec.confirm_mode,
            k=self.spec.confirm_sample,
            seed=self.spec.selection.seed,
            settled=[v for v in mine if v.verdict == "flaky" or v.confirmed],
            always=set(named.values()),
        )
        sampled = [v for p in plans for v in p.sample]
        extra = {key: self.space.state_from_id(m) for key, m in minimized.items()}
        seconds = self._alone(
            sampled,
            [by_id[v.state] for v in sampled] + list({st.id: st for st in extra.values()}.values()),
        )
        disagreeing = set()
        for g in self.groups:  # the repro the report leads with must fail the same way alone
            m = named.get((g.verdict, g.reason_class))
            if m is None or (
                m not in seconds and m in by_id
            ):  # a judged state not judged again: not in a sample
                continue
            v2 = seconds.get(m)
            same = v2 is not None and v2.verdict == g.verdict
            g.diagnosis = dict(
                g.diagnosis or {},
                minimized_confirmed=same,
                minimized_alone=v2.verdict if v2 is not None else "not judged",
            )
            if not same:
                disagreeing.add((g.verdict, g.reason_class))
        by_group, escalate = confirming.settle(plans, seconds, disagreeing)
        for v in by_group:
            self.journal.add(dataclasses.replace(v, by_group=True))
        if escalate and not interrupt.stopping():
            self.escalated |= {confirming.group_key(v) for v in escalate}
            self._alone(escalate, [by_id[v.state] for v in escalate])
        if (
            self.disks > 1 and not interrupt.stopping()
        ):  # a cluster's recovery may be nondeterministic
            retries.retry_disagreeing(by_id, self.journal, self.judge, self.outdir / "confirm")
        self.confirm_s += time.monotonic() - t0

    def _alone(self, firsts: list[Verdict], states: list[Any]) -> dict[str, Verdict]:
        """Judge ``states`` again, alone; journal each of ``firsts`` as confirmed or flaky.  Every
        lone verdict comes back by state id (others, such as minimized states, are not journaled)."""
        want = {v.state: v for v in firsts}
        seconds: dict[str, Verdict] = {}

        def second(v2: Verdict) -> None:
            seconds[v2.state] = v2
            v1 = want.get(v2.state)
            if v1 is None:
                return
            self.journal.add(
                dataclasses.replace(v1, confirmed=True, by_group=False)
                if confirming.agrees(v1, v2)
                else flaky(v1, v2)
            )
            self.confirmed += 1

        self.judge(states, second, self.outdir / "confirm", self.place.alone(self.spec.workers()))
        return seconds

    def _findings(self) -> list[Group]:
        wanted = {s.id for s in self.sel.states}
        groups = triage.group(
            [v for sid, v in self.journal.done.items() if sid in wanted and v.finding]
        )
        for g in groups:
            g.escalated = (g.verdict, g.reason_class) in self.escalated
        return groups

    def _diagnose(self, groups: list[Group]) -> dict[str, dict[str, Any]]:
        """Each group's first state minimized and blamed where the check runs (the run's checker VM
        kept warm, or the host): state id -> diagnosis."""
        found = triage.diagnose_at(
            self.place,
            self.ctx,
            self.src,
            self.logs,
            self.all_nodes,
            [g.first for g in groups],
            self.outdir / "diagnose",
            floors=self.sel.floors,
            budget=self.spec.shrink_budget,
        )
        return {d["state"]: d for d in found}


def flaky(v1: Verdict, v2: Verdict) -> Verdict:
    reasons = (
        f"judged twice with different verdicts: {v1.verdict}, then alone {v2.verdict} -- a harness "
        "problem, not a finding",
        *(f"first: {r}" for r in v1.reasons),
        *(f"second: {r}" for r in v2.reasons),
    )
    return dataclasses.replace(
        v1,
        verdict="flaky",
        reasons=reasons,
        first=(v1.verdict, *v1.reasons),
        seconds=round(v1.seconds + v2.seconds, 3),
    )

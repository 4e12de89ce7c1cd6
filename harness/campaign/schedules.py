"""Schedules, not one schedule (host): the same workload recorded under several disk latencies
(core/recording/latency.py) and, with ``repeat``, several times under each -- each repeat with its own sampling
seed (the randomness powercut controls) -- every recording judged by its own check campaign, then
one table: per setting, the recordings' verdicts and their crash states' verdicts, and what differs
from the first setting.  ``powercut run --disk-latency none,hdd --repeat N`` and the nightly
workflow use it.

A race between an ack and the flush it should wait for shows only when the flush is slow enough
for the ack to win (docs/races.md): one recording on an instant disk is one interleaving; a
schedule set explores more.  Layout: ``OUT/<setting>[-<k>]/`` is each recording (its check in
``check/``), ``OUT/schedules.json`` and ``OUT/schedules.md`` the comparison."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.core.recording.latency import NodesLatency
from powercut.core.states.selection import SEED_AUTO
from powercut.errors import PowercutError
from powercut.record.vm import RecordSpec, record

log = logging.getLogger(__name__)

ERROR = "error"  # a schedule whose recording or check did not finish


@dataclass(frozen=True, slots=True)
class Schedule:
    """One recording of the set: its disk latency, which repeat it is, its sampling seed, and the
    files whose syncs it holds (``--delay-sync`` rules, core/recording/syncdelay.py; run --explore-races)."""

    latency: NodesLatency
    repeat: int = 0
    seed: int = 0
    delay_sync: tuple[str, ...] = ()

    @property
    def setting(self) -> str:
        held = f" + delay-sync {', '.join(self.delay_sync)}" if self.delay_sync else ""
        return str(self.latency) + held

    @property
    def slug(self) -> str:
        base = "".join(
            c if c.isalnum() or c in "-." else "_"
            for c in self.setting.replace(" + delay-sync ", "+hold-")
        )
        return f"{base[:80]}-{self.repeat + 1}"


def plan(latencies: tuple[NodesLatency, ...], repeat: int = 1, seed: int = 0) -> list[Schedule]:
    """Every setting ``repeat`` times, setting by setting; repeat k samples with ``seed + k`` (auto
    stays auto: each campaign draws and prints its own)."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    return [
        Schedule(lat, k, seed if seed == SEED_AUTO else seed + k)
        for lat in latencies
        for k in range(repeat)
    ]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one schedule gave: its campaign's verdict (``error``: it did not finish) and its states'."""

    schedule: Schedule
    verdict: str
    states: dict[str, int] = field(default_factory=dict)  # state verdict -> judged states
    record_s: float = 0.0
    check_s: float = 0.0
    dir: str = ""
    error: str = ""
    ok: bool = False
    first: str = ""  # the first failure group's first state
    cause: str = ""  # and its cause from the trace (rule: sentence (verified|not proven)), if any
    total: int = 0  # distinct crash states judged

    def to_json(self) -> dict[str, Any]:
        return {
            "setting": self.schedule.setting,
            "repeat": self.schedule.repeat + 1,
            "seed": self.schedule.seed,
            "delay_sync": list(self.schedule.delay_sync),
            "verdict": self.verdict,
            "states": self.states,
            "total": self.total,
            "first": self.first,
            "cause": self.cause,
            "record_s": round(self.record_s, 3),
            "check_s": round(self.check_s, 3),
            "dir": self.dir,
            "error": self.error,
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True)
class SettingRow:
    """One line of the comparison: a setting's recordings, their verdicts, their states' verdicts."""

    setting: str
    recordings: int
    verdicts: dict[str, int]  # campaign verdict -> recordings
    states: dict[str, int]  # state verdict -> judged states, over its recordings
    record_s: float  # mean recording time
    differs: str  # what differs from the first setting ("" for the first, "same")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def counts(by_verdict: dict[str, int], n: int) -> str:
    """``lost-ack 9/10, pass 1/10``: verdicts by how many of ``n`` recordings gave them."""
    return (
        ", ".join(
            f"{v} {c}/{n}" for v, c in sorted(by_verdict.items(), key=lambda x: (-x[1], x[0]))
        )
        or "-"
    )


def compare(outcomes: list[Outcome]) -> list[SettingRow]:
    """Per setting (in the order first run), its verdict counts, and which verdicts differ from the
    first setting's: a verdict whose share of recordings is not the same."""
    order = list(dict.fromkeys(o.schedule.setting for o in outcomes))
    rows: list[SettingRow] = []
    first: tuple[dict[str, int], int] | None = None
    for s in order:
        mine = [o for o in outcomes if o.schedule.setting == s]
        n = len(mine)
        verdicts = dict(Counter(o.verdict for o in mine))
        states: Counter[str] = Counter()
        for o in mine:
            states.update(o.states)
        mean = sum(o.record_s for o in mine) / n if n else 0.0
        if first is None:
            differs, first = "", (verdicts, n)
        else:
            base, bn = first
            changed = [
                v
                for v in sorted(set(base) | set(verdicts))
                if verdicts.get(v, 0) * bn != base.get(v, 0) * n
            ]
            differs = (
                "; ".join(
                    f"{v}: {verdicts.get(v, 0)}/{n} (first: {base.get(v, 0)}/{bn})" for v in changed
                )
                or "same"
            )
        rows.append(SettingRow(s, n, verdicts, dict(states), round(mean, 3), differs))
    return rows


def failed(outcomes: list[Outcome]) -> bool:
    """Any schedule with a finding or an error: the set fails."""
    return any(not o.ok for o in outcomes)


def markdown(rows: list[SettingRow]) -> str:
    out = [
        "| disk latency | recordings | recordings' verdicts | crash states' verdicts | mean recording s | "
        "differs from the first |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.setting} | {r.recordings} | {counts(r.verdicts, r.recordings)} | "
            f"{', '.join(f'{v} {c}' for v, c in sorted(r.states.items())) or '-'} | {r.record_s:.1f} | "
            f"{r.differs or '(first)'} |"
        )
    return "\n".join(out) + "\n"


def write(out: Path, outcomes: list[Outcome]) -> dict[str, Path]:
    rows = compare(outcomes)
    paths = {"json": out / "schedules.json", "md": out / "schedules.md"}
    paths["json"].write_text(
        json.dumps(
            {
                "ok": not failed(outcomes),
                "settings": [r.to_json() for r in rows],
                "schedules": [o.to_json() for o in outcomes],
            },
            indent=1,
        )
        + "\n"
    )
    paths["md"].write_text(markdown(rows))
    return paths


def run_one(
    sched: Schedule, rspec: RecordSpec, cspec: CampaignSpec, out: Path, nodes: int = 1
) -> Outcome:
    """Record (on ``nodes`` disks) and judge one schedule into ``out/<slug>``; an error is the
    outcome, not an exception."""
    recdir = out / sched.slug
    t0 = time.monotonic()
    try:
        workload = dataclasses.replace(
            rspec.workload, delay_sync=sched.delay_sync or rspec.workload.delay_sync
        )
        rec = record(
            dataclasses.replace(rspec, latency=sched.latency, workload=workload),
            recdir,
            nodes=nodes,
            force=True,
        )
    except PowercutError as e:
        return Outcome(
            sched, ERROR, record_s=time.monotonic() - t0, dir=str(recdir), error=e.one_line()
        )
    t1 = time.monotonic()
    spec = dataclasses.replace(
        cspec, selection=dataclasses.replace(cspec.selection, seed=sched.seed), force=True
    )
    try:
        summary, _ = run_campaign(rec.dir, spec)
    except PowercutError as e:
        return Outcome(
            sched,
            ERROR,
            record_s=t1 - t0,
            check_s=time.monotonic() - t1,
            dir=str(recdir),
            error=e.one_line(),
        )
    states: Counter[str] = Counter()
    for counts in summary.by_model.values():
        states.update(counts)
    g: dict[str, Any] = summary.groups[0] if summary.groups else {}
    why: dict[str, Any] = g["why"] if isinstance(g.get("why"), dict) else {}
    return Outcome(
        sched,
        summary.verdict,
        dict(states),
        record_s=float(rec.manifest["recording"].get("wall_s", t1 - t0)),
        check_s=time.monotonic() - t1,
        dir=str(recdir),
        ok=summary.ok,
        first=str(g.get("first", "")),
        cause=(
            f"{why['rule']}: {why['sentence']}"
            + (f" ({str(why['proof']).split(':')[0]})" if why.get("proof") else "")
        )
        if why.get("rule")
        else str(g.get("cause", "")),
        total=summary.total,
    )


def run_schedules(
    schedules: list[Schedule],
    rspec: RecordSpec,
    cspec: CampaignSpec,
    out: Path,
    on_done: Callable[[Outcome], None] | None = None,
    nodes: int = 1,
) -> tuple[list[Outcome], dict[str, Path]]:
    """Each schedule recorded and judged in turn (one VM at a time); the comparison written as it grows."""
    out.mkdir(parents=True, exist_ok=True)
    outcomes: list[Outcome] = []
    paths: dict[str, Path] = {}
    for s in schedules:
        o = run_one(s, rspec, cspec, out, nodes)
        outcomes.append(o)
        paths = write(out, outcomes)
        if on_done:
            on_done(o)
    return outcomes, paths

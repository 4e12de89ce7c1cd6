"""``powercut run --explore-races`` (host; issue 50): schedules chosen from the trace.

A recording is one schedule.  A race between a reply and one file's sync shows only when that
sync is slow and the others are not (docs/races.md): a disk-wide latency slows every flush alike
and can leave the reply behind the sync it races.  So: record once with the syscall trace and
judge it; from its trace list every file the program synced before an ack (core/races.py); then
record once per such file, most synced first, with only that file's syncs held
(``--delay-sync FILE=DELAY``), and judge every recording.  ``budget`` caps the recordings; the
files left out are said, as a coverage note is.  Each schedule is an ordinary recording directory
(its manifest names the held file), so a finding's repro bundle replays the recording that
exposed it.  Layout: ``OUT/<schedule>/`` per recording, ``OUT/explore.json`` and ``.md``."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Outcome, Schedule, run_one
from powercut.core.races import SyncedFile, commit_seconds, glob_for, synced_files
from powercut.core.syncdelay import EXPLORE_BUDGET as DEFAULT_BUDGET
from powercut.core.syncdelay import EXPLORE_DELAY as DEFAULT_DELAY
from powercut.core.syncdelay import SyncDelay
from powercut.debug.cause import ROOT, load_trace
from powercut.errors import UsageError
from powercut.record import recording
from powercut.record.vm import RecordSpec


@dataclass(slots=True)
class Exploration:
    """The base schedule's outcome, the files its trace names, the schedules run per file."""

    delay: SyncDelay
    budget: int
    base: Outcome | None = None
    files: list[SyncedFile] = field(default_factory=list)
    commit_s: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    note: str = ""

    @property
    def runs(self) -> list[Outcome]:
        """Every schedule run: the base one first."""
        return ([self.base] if self.base else []) + self.outcomes

    @property
    def explored(self) -> list[str]:
        return [f.path for f in self.files[:self.budget]]

    @property
    def left_out(self) -> list[str]:
        return [f.path for f in self.files[self.budget:]]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.runs)

    def coverage(self) -> str:
        if not self.files:
            return self.note or "no file was synced before an ack: no schedule to explore"
        ratio = f" ({self.delay.seconds / self.commit_s:.0f}x a commit's median {self.commit_s * 1e3:.1f} ms)" \
            if self.commit_s > 0 else ""
        out = (f"explored {len(self.explored)} of {len(self.files)} files synced before an ack, each one's syncs "
               f"held {self.delay.seconds * 1e3:g} ms{ratio}")
        return out + (f"; not explored (--budget {self.budget}): {', '.join(self.left_out)}" if self.left_out else "")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "delay": self.delay.when, "budget": self.budget,
                "commit_median_s": round(self.commit_s, 6), "coverage": self.coverage(),
                "files": [f.to_json() for f in self.files], "explored": self.explored, "left_out": self.left_out,
                "schedules": [o.to_json() for o in self.runs]}


def delay_of(text: str) -> SyncDelay:
    """``--explore-delay TIME`` as a rule's time (UsageError, one line, for a bad one)."""
    try:
        return SyncDelay.parse(f"x={text}")
    except UsageError as e:
        raise UsageError(str(e).replace("--delay-sync x=", "--explore-delay ")) from None


def explore(base: Schedule, rspec: RecordSpec, cspec: CampaignSpec, out: Path, *, delay: str = DEFAULT_DELAY,
            budget: int = DEFAULT_BUDGET, on_done: Callable[[Outcome], None] | None = None) -> Exploration:
    """The base schedule, then one per file its trace synced before an ack (at most ``budget``)."""
    if budget < 0:
        raise UsageError(f"--budget must be 0 or more, not {budget}")
    if not rspec.workload.trace:
        raise UsageError("--explore-races reads the files to hold from the syscall trace: drop --no-trace")
    ex = Exploration(delay_of(delay), budget)
    out.mkdir(parents=True, exist_ok=True)
    ex.base = run_one(base, rspec, cspec, out)
    write(out, ex)
    if on_done:
        on_done(ex.base)
    if ex.base.error:
        ex.note = f"the base recording did not finish ({ex.base.error}): nothing to explore from"
        write(out, ex)
        return ex
    trace = load_trace(recording.load(ex.base.dir))
    if trace is None:
        ex.note = "the base recording has no syscall trace (see its manifest's [trace]): nothing to explore from"
        write(out, ex)
        return ex
    ex.files, ex.commit_s = synced_files(trace, ROOT), commit_seconds(trace)
    for f in ex.files[:budget]:
        rule = f"{glob_for(ROOT if f.path == '.' else f.path)}={ex.delay.when}"   # . : the mount itself
        sched = dataclasses.replace(base, delay_sync=(rule,))
        o = run_one(sched, rspec, cspec, out)
        ex.outcomes.append(o)
        write(out, ex)
        if on_done:
            on_done(o)
    return ex


def markdown(ex: Exploration) -> str:
    rows = ["| schedule | states | verdicts | first failure | its cause |", "|---|---|---|---|---|"]
    for o in ex.runs:
        verdicts = ", ".join(f"{v} {c}" for v, c in sorted(o.states.items())) or o.error or "-"
        rows.append(f"| {o.schedule.setting} | {o.total} | {verdicts} | {o.first or '-'} | {o.cause or '-'} |")
    return "\n".join(rows) + f"\n\n{ex.coverage()}\n"


def write(out: Path, ex: Exploration) -> dict[str, Path]:
    paths = {"json": out / "explore.json", "md": out / "explore.md"}
    paths["json"].write_text(json.dumps(ex.to_json(), indent=1) + "\n")
    paths["md"].write_text(markdown(ex))
    return paths

"""``powercut run --explore-races`` (host; issue 50): schedules chosen from the trace.

A recording is one schedule.  A race between a reply and one file's sync shows only when that
sync is slow and the others are not (docs/races.md): a disk-wide latency slows every flush alike
and can leave the reply behind the sync it races.  So: record once with the syscall trace and
judge it; from its trace list every file the program synced before an ack (core/recording/races.py); then
record once per such file, most synced first, with only that file's syncs held
(``--delay-sync FILE=DELAY``), and judge every recording.  Several --disk-latency settings are
several starting schedules: each is explored the same way on its own disk (a held file on a slow
disk is another schedule than on a fast one).  ``budget`` caps the held recordings per starting
schedule; the files left out are said, as a coverage note is.  Each schedule is an ordinary recording directory
(its manifest names the held file), so a finding's repro bundle replays the recording that
exposed it.  Layout: ``OUT/<schedule>/`` per recording, ``OUT/explore.json`` and ``.md``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Outcome, Schedule, run_one
from powercut.core.recording.races import SyncedFile, commit_seconds, glob_for, synced_files
from powercut.core.recording.syncdelay import EXPLORE_BUDGET as DEFAULT_BUDGET
from powercut.core.recording.syncdelay import (
    EXPLORE_CEILING,
    EXPLORE_COMMITS,
    EXPLORE_FLOOR,
    SyncDelay,
)
from powercut.core.recording.syncdelay import EXPLORE_DELAY as DEFAULT_DELAY
from powercut.debug.cause import ROOT, load_trace
from powercut.errors import UsageError
from powercut.record import recording
from powercut.record.vm import RecordSpec


@dataclass(slots=True)
class Leg:
    """One starting schedule (a --disk-latency setting): its outcome, the files its trace names,
    the schedules run per file on top of it."""

    base: Outcome
    budget: int
    delay: SyncDelay  # how long its schedules hold a file's syncs (auto: from its commits)
    files: list[SyncedFile] = field(default_factory=list)
    commit_s: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)
    note: str = ""  # why nothing was explored from it ("" when its files were)

    @property
    def runs(self) -> list[Outcome]:
        return [self.base, *self.outcomes]

    @property
    def explored(self) -> list[str]:
        return [f.path for f in self.files[: self.budget]]

    @property
    def left_out(self) -> list[str]:
        return [f.path for f in self.files[self.budget :]]

    def coverage(self, auto: bool = False) -> str:
        if self.note:
            return self.note
        if not self.files:
            return "no file was synced inside the commits: no schedule to explore"
        ratio = (
            f" ({self.delay.seconds / self.commit_s:.2g}x a commit's median {self.commit_s * 1e3:.1f} ms"
            f"{'; --explore-delay auto' if auto else ''})"
            if self.commit_s > 0
            else ""
        )
        out = (
            f"explored {len(self.explored)} of {len(self.files)} files synced inside the commits, each one's "
            f"syncs held {self.delay.seconds * 1e3:g} ms{ratio}"
        )
        return out + (
            f"; not explored (--budget {self.budget}): {', '.join(self.left_out)}"
            if self.left_out
            else ""
        )

    def to_json(self, auto: bool = False) -> dict[str, Any]:
        return {
            "setting": self.base.schedule.setting,
            "commit_median_s": round(self.commit_s, 6),
            "delay": self.delay.when,
            "coverage": self.coverage(auto),
            "files": [f.to_json() for f in self.files],
            "explored": self.explored,
            "left_out": self.left_out,
            "schedules": [o.to_json() for o in self.runs],
        }


@dataclass(slots=True)
class Exploration:
    """Every starting schedule's leg (one per --disk-latency setting, in the order given)."""

    delay: SyncDelay | None  # the hold asked for (None: auto, each leg's from its commits)
    budget: int
    legs: list[Leg] = field(default_factory=list)
    planned: int = 1  # starting schedules asked for (a leg not begun yet is not explored)

    @property
    def runs(self) -> list[Outcome]:
        """Every schedule run, leg by leg, each leg's base first."""
        return [o for leg in self.legs for o in leg.runs]

    @property
    def explored(self) -> list[str]:
        """The files held in some leg (in the order first held)."""
        return list(dict.fromkeys(p for leg in self.legs for p in leg.explored))

    @property
    def left_out(self) -> list[str]:
        """The files some leg synced but did not hold."""
        return list(dict.fromkeys(p for leg in self.legs for p in leg.left_out))

    @property
    def complete(self) -> bool:
        """Every starting schedule ran and had a trace to explore from."""
        return len(self.legs) == self.planned and not any(leg.note for leg in self.legs)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.runs)

    def coverage(self) -> str:
        if len(self.legs) == 1 and self.planned == 1:
            return self.legs[0].coverage(self.delay is None)
        out = "; ".join(
            f"{leg.base.schedule.setting}: {leg.coverage(self.delay is None)}" for leg in self.legs
        )
        return out + (
            f"; {self.planned - len(self.legs)} starting schedule(s) not run"
            if not self.legs or len(self.legs) < self.planned
            else ""
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "complete": self.complete,
            "delay": self.delay.when if self.delay else "auto",
            "budget": self.budget,
            "commit_median_s": round(self.legs[0].commit_s, 6) if self.legs else 0.0,
            "coverage": self.coverage(),
            "files": [f.to_json() for f in self.legs[0].files] if self.legs else [],
            "explored": self.explored,
            "left_out": self.left_out,
            "schedules": [o.to_json() for o in self.runs],
            "legs": [leg.to_json(self.delay is None) for leg in self.legs],
        }


def delay_of(text: str) -> SyncDelay | None:
    """``--explore-delay TIME`` as a rule's time, None for ``auto`` (UsageError, one line, for a bad one)."""
    if text.strip() == "auto":
        return None
    try:
        return SyncDelay.parse(f"x={text}")
    except UsageError as e:
        raise UsageError(
            str(e).replace("--delay-sync x=", "--explore-delay ") + ", or auto"
        ) from None


def auto_delay(commit_s: float) -> SyncDelay:
    """--explore-delay auto: long against one commit -- EXPLORE_COMMITS times the base recording's
    median commit, rounded up to 10 ms, at least EXPLORE_FLOOR and at most EXPLORE_CEILING."""
    floor, ceiling = (
        SyncDelay.parse(f"x={EXPLORE_FLOOR}").ns,
        SyncDelay.parse(f"x={EXPLORE_CEILING}").ns,
    )
    step = 10_000_000
    want = -(-int(commit_s * EXPLORE_COMMITS * 1e9) // step) * step
    return SyncDelay("x", min(max(want, floor), ceiling))


def explore(
    bases: Sequence[Schedule],
    rspec: RecordSpec,
    cspec: CampaignSpec,
    out: Path,
    *,
    delay: str = DEFAULT_DELAY,
    budget: int = DEFAULT_BUDGET,
    on_done: Callable[[Outcome], None] | None = None,
    nodes: int = 1,
) -> Exploration:
    """Each starting schedule (a --disk-latency setting, with its own disk latency), then one per
    file its trace synced before an ack with only that file's syncs held on top of it (at most
    ``budget`` per starting schedule); every recording on ``nodes`` disks (a cluster's files are
    named under their node's mount: ``n0/...``)."""
    if budget < 0:
        raise UsageError(f"--budget must be 0 or more, not {budget}")
    if not rspec.workload.trace:
        raise UsageError(
            "--explore-races reads the files to hold from the syscall trace: drop --no-trace"
        )
    if not bases:
        raise UsageError("--explore-races needs a schedule to start from")
    ex = Exploration(delay_of(delay), budget, planned=len(bases))
    out.mkdir(parents=True, exist_ok=True)
    for base in bases:
        leg = _leg(ex, base, rspec, cspec, out, on_done, nodes)
        for f in leg.files[:budget]:
            rule = f"{glob_for(ROOT if f.path == '.' else f.path)}={leg.delay.when}"  # . : the mount itself
            o = run_one(dataclasses.replace(base, delay_sync=(rule,)), rspec, cspec, out, nodes)
            leg.outcomes.append(o)
            write(out, ex)
            if on_done:
                on_done(o)
    return ex


def _leg(
    ex: Exploration,
    base: Schedule,
    rspec: RecordSpec,
    cspec: CampaignSpec,
    out: Path,
    on_done: Callable[[Outcome], None] | None,
    nodes: int,
) -> Leg:
    """The starting schedule run and judged, and the files its trace synced before an ack."""
    leg = Leg(run_one(base, rspec, cspec, out, nodes), ex.budget, ex.delay or auto_delay(0.0))
    ex.legs.append(leg)
    write(out, ex)
    if on_done:
        on_done(leg.base)
    if leg.base.error:
        leg.note = f"the base recording did not finish ({leg.base.error}): nothing to explore from"
    elif (trace := load_trace(recording.load(leg.base.dir))) is None:
        leg.note = "the base recording has no syscall trace (see its manifest's [trace]): nothing to explore from"
    else:
        leg.files = synced_files(trace, ROOT)
        leg.commit_s = commit_seconds(trace)
        leg.delay = ex.delay or auto_delay(leg.commit_s)
    write(out, ex)
    return leg


COLUMNS = ("schedule", "states", "verdicts", "first failure", "its cause")


def table(ex: Exploration) -> tuple[list[tuple[str, ...]], list[str]]:
    """The table's rows (COLUMNS), each short enough for one line, and the errors said below it: a
    schedule that did not finish has ``error (k)`` for verdicts, its error in full in the k-th note,
    ``(k) <schedule>: <error>``."""
    rows: list[tuple[str, ...]] = []
    notes: list[str] = []
    for o in ex.runs:
        verdicts = ", ".join(f"{v} {c}" for v, c in sorted(o.states.items()))
        if not verdicts and o.error:
            notes.append(f"({len(notes) + 1}) {o.schedule.setting}: {o.error}")
            verdicts = f"{o.verdict} ({len(notes)})"
        rows.append(
            (o.schedule.setting, str(o.total), verdicts or "-", o.first or "-", o.cause or "-")
        )
    return rows, notes


def markdown(ex: Exploration) -> str:
    rows, notes = table(ex)
    lines = [f"| {' | '.join(COLUMNS)} |", "|---" * len(COLUMNS) + "|"]
    lines += [f"| {' | '.join(r)} |" for r in rows]
    errors = "".join(f"\n\n{n}" for n in notes)
    return "\n".join(lines) + f"{errors}\n\n{ex.coverage()}\n"


def write(out: Path, ex: Exploration) -> dict[str, Path]:
    paths = {"json": out / "explore.json", "md": out / "explore.md"}
    paths["json"].write_text(json.dumps(ex.to_json(), indent=1) + "\n")
    paths["md"].write_text(markdown(ex))
    return paths

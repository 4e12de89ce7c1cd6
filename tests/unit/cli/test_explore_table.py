"""``powercut run --explore-races``'s console table without VMs: one line per schedule, an erring
schedule's error said in full below the table, not wrapped inside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from powercut.campaign import explore
from powercut.campaign.schedules import Outcome, Schedule
from powercut.cli import main
from powercut.cli import record as record_cmd
from powercut.config import disk_latency
from powercut.core.recording.races import SyncedFile

LONG = (
    "--delay-sync store.log=200ms held no sync call, and the shim saw none at all: the program syncs without libc "
    "(Go, a static binary) or not at all; see the syscall trace"
)


def fake_explore(bases: Any, rspec: Any, cspec: Any, out: Path, **kw: Any) -> explore.Exploration:
    """A base that passed, a held store.log that erred with LONG, a held store.idx that lost an ack."""
    base = Schedule(disk_latency("none"))
    runs = [
        Outcome(base, "pass", {"pass": 12}, ok=True, total=12),
        Outcome(Schedule(base.latency, delay_sync=("store.log=200ms",)), "error", error=LONG),
        Outcome(
            Schedule(base.latency, delay_sync=("store.idx=200ms",)),
            "lost-ack",
            {"lost-ack": 3, "pass": 9},
            total=12,
            first="flush@9",
            cause="ack-before-sync-returned",
        ),
    ]
    for o in runs:
        kw["on_done"](o)
    files = [SyncedFile("store.log", 6, 0.1, 0.02), SyncedFile("store.idx", 6, 0.05, 0.01)]
    ex = explore.Exploration(
        None, 8, [explore.Leg(runs[0], 8, explore.auto_delay(0.02), files, 0.02, runs[1:])]
    )
    out.mkdir(parents=True, exist_ok=True)
    explore.write(out, ex)
    return ex


def test_an_erring_schedule_is_one_table_line_and_its_error_is_below(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setattr(explore, "explore", fake_explore)
    monkeypatch.setattr(
        record_cmd, "_schedule_specs", lambda args, schedules: (None, None, tmp_path)
    )
    assert main(["run", "--explore-races", "-o", str(tmp_path)]) == 3
    lines = capsys.readouterr().out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("└"))
    body, below = lines[top + 1 : bottom], lines[bottom + 1 :]
    assert len(body) == 3  # one line per schedule
    assert [line for line in body if "none + delay-sync store.log=200ms" in line] == [body[1]]
    assert not any(word in "".join(body) for word in ("shim", "libc", "trace"))
    said = [line for line in below if LONG in line]
    assert len(said) == 1 and "none + delay-sync store.log=200ms" in said[0]

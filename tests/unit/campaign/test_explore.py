"""campaign/explore.py without VMs: each starting schedule (a --disk-latency setting) is recorded,
its trace's synced files held one at a time on top of it, ``budget`` held recordings each; a
starting schedule that fails or has no trace says why and is not explored."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from powercut.campaign import explore as ex_mod
from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Outcome, Schedule
from powercut.config import FsSpec, WorkloadSpec, disk_latency
from powercut.core.recording.races import SyncedFile
from powercut.errors import UsageError
from powercut.record.vm import RecordSpec

FILES = [
    SyncedFile("store.log", 6, 0.1, 0.02),
    SyncedFile("store.idx", 6, 0.05, 0.01),
    SyncedFile(".", 1, 0.0, 0.0),
]


@pytest.fixture
def fake(monkeypatch):
    ran: list[Schedule] = []

    def run_one(sched, rspec, cspec, out, nodes=1):
        ran.append(sched)
        bad = "store.log" in ",".join(sched.delay_sync)
        if str(sched.latency) == "broken":
            return Outcome(sched, "error", dir=str(out / sched.slug), error="the workload exited 1")
        return Outcome(
            sched,
            "lost-ack" if bad else "pass",
            {"lost-ack" if bad else "pass": 3},
            dir=sched.slug,
            ok=not bad,
            total=3,
            first="flush@9" if bad else "",
            cause="ack-before-sync-returned: x" if bad else "",
        )

    monkeypatch.setattr(ex_mod, "run_one", run_one)
    monkeypatch.setattr(ex_mod.recording, "load", lambda d: SimpleNamespace(dir=d))
    monkeypatch.setattr(
        ex_mod, "load_trace", lambda rec: None if "notrace" in str(rec.dir) else object()
    )
    monkeypatch.setattr(ex_mod, "synced_files", lambda trace, root: list(FILES))
    monkeypatch.setattr(ex_mod, "commit_seconds", lambda trace: 0.02)
    return ran


def specs() -> tuple[RecordSpec, CampaignSpec]:
    return RecordSpec(fs=FsSpec(), workload=WorkloadSpec(name="twofile")), CampaignSpec()


def test_one_starting_schedule_holds_each_file_up_to_the_budget(fake, tmp_path: Path) -> None:
    rspec, cspec = specs()
    ex = ex_mod.explore([Schedule(disk_latency("none"))], rspec, cspec, tmp_path, budget=2)
    assert [s.delay_sync for s in fake] == [(), ("store.log=200ms",), ("store.idx=200ms",)]
    assert (
        ex.explored == ["store.log", "store.idx"]
        and ex.left_out == ["."]
        and ex.complete
        and not ex.ok
    )
    assert ex.coverage() == (
        "explored 2 of 3 files synced inside the commits, each one's syncs held 200 ms (10x a "
        "commit's median 20.0 ms; --explore-delay auto); not explored (--budget 2): ."
    )
    doc = ex.to_json()
    assert [s["delay_sync"] for s in doc["schedules"]] == [
        [],
        ["store.log=200ms"],
        ["store.idx=200ms"],
    ]
    assert len(doc["legs"]) == 1 and (tmp_path / "explore.md").read_text().count("| none") == 3


def test_each_disk_latency_is_explored_on_its_own_disk(fake, tmp_path: Path) -> None:
    rspec, cspec = specs()
    bases = [Schedule(disk_latency("none")), Schedule(disk_latency("hdd"))]
    ex = ex_mod.explore(bases, rspec, cspec, tmp_path, budget=3, delay="50ms")
    assert [(str(s.latency), s.delay_sync) for s in fake] == [
        ("none", ()),
        ("none", ("store.log=50ms",)),
        ("none", ("store.idx=50ms",)),
        ("none", ("/run/powercut/mnt=50ms",)),
        ("hdd", ()),
        ("hdd", ("store.log=50ms",)),
        ("hdd", ("store.idx=50ms",)),
        ("hdd", ("/run/powercut/mnt=50ms",)),
    ]
    assert (
        ex.complete
        and ex.coverage().startswith("none: explored 3 of 3")
        and "; hdd: explored 3 of 3" in ex.coverage()
    )
    assert [leg["setting"] for leg in ex.to_json()["legs"]] == ["none", "hdd"]


def test_the_mount_itself_is_held_by_its_absolute_path(fake, tmp_path: Path) -> None:
    rspec, cspec = specs()
    ex_mod.explore([Schedule(disk_latency("none"))], rspec, cspec, tmp_path)
    assert fake[-1].delay_sync == ("/run/powercut/mnt=200ms",)


def test_a_starting_schedule_that_fails_or_has_no_trace_is_not_explored(
    fake, tmp_path: Path, monkeypatch
) -> None:
    rspec, cspec = specs()
    monkeypatch.setattr(ex_mod, "load_trace", lambda rec: None)
    ex = ex_mod.explore([Schedule(disk_latency("none"))], rspec, cspec, tmp_path)
    assert len(fake) == 1 and not ex.complete and "has no syscall trace" in ex.coverage()


def test_bad_settings_are_one_line(fake, tmp_path: Path) -> None:
    rspec, cspec = specs()
    with pytest.raises(UsageError, match="--budget must be 0 or more"):
        ex_mod.explore([Schedule(disk_latency("none"))], rspec, cspec, tmp_path, budget=-1)
    with pytest.raises(UsageError, match="drop --no-trace"):
        ex_mod.explore(
            [Schedule(disk_latency("none"))],
            RecordSpec(fs=FsSpec(), workload=WorkloadSpec(name="twofile", trace=False)),
            cspec,
            tmp_path,
        )
    with pytest.raises(UsageError, match="--explore-delay"):
        ex_mod.explore([Schedule(disk_latency("none"))], rspec, cspec, tmp_path, delay="soon")
    assert not fake


@pytest.mark.parametrize(
    "commit_s, held",
    [(0.0, "200ms"), (0.02, "200ms"), (0.5747, "1.15s"), (0.3, "600ms"), (9.0, "5s")],
)
def test_auto_holds_twice_a_commit_within_its_bounds(commit_s: float, held: str) -> None:
    assert ex_mod.auto_delay(commit_s).when == held


def test_auto_is_each_starting_schedules_own_and_a_time_is_kept(
    fake, tmp_path: Path, monkeypatch
) -> None:
    rspec, cspec = specs()
    monkeypatch.setattr(ex_mod, "commit_seconds", lambda trace: 0.5)
    ex = ex_mod.explore([Schedule(disk_latency("none"))], rspec, cspec, tmp_path, budget=1)
    assert fake[-1].delay_sync == ("store.log=1s",) and ex.to_json()["delay"] == "auto"
    assert (
        ex.to_json()["legs"][0]["delay"] == "1s"
        and "(2x a commit's median 500.0 ms; --explore-delay auto)" in ex.coverage()
    )
    ex2 = ex_mod.explore(
        [Schedule(disk_latency("none"))], rspec, cspec, tmp_path, budget=1, delay="50ms"
    )
    assert (
        fake[-1].delay_sync == ("store.log=50ms",) and "(0.1x a commit's median" in ex2.coverage()
    )


LONG = (
    "--delay-sync store.log=200ms held no sync call, and the shim saw none at all: the program syncs without libc "
    "(Go, a static binary) or not at all; see the syscall trace"
)


def erring() -> ex_mod.Exploration:
    """A leg whose base passed, whose store.log schedule erred with LONG, whose store.idx schedule erred shortly."""
    base = Schedule(disk_latency("none"))
    log = Schedule(base.latency, delay_sync=("store.log=200ms",))
    idx = Schedule(base.latency, delay_sync=("store.idx=200ms",))
    leg = ex_mod.Leg(
        Outcome(base, "pass", {"pass": 3}, ok=True, total=3),
        2,
        ex_mod.auto_delay(0.02),
        list(FILES),
        0.02,
        [Outcome(log, "error", error=LONG), Outcome(idx, "error", error="the VM did not boot")],
    )
    return ex_mod.Exploration(None, 2, [leg])


def number(text: str) -> str:
    """The first number in ``text``: an erring schedule's in its cell and in its note below the table."""
    found = re.search(r"\d+", text)
    assert found is not None
    return found.group()


def test_an_error_is_a_short_cell_and_said_in_full_below_the_table(tmp_path: Path) -> None:
    ex = erring()
    rows, notes = ex_mod.table(ex)
    assert len(rows) == 3 and all(len(cell) <= 40 for r in rows for cell in r)
    assert [n.endswith(LONG) for n in notes] == [True, False] and notes[1].endswith(
        "the VM did not boot"
    )
    for r, n in zip(
        rows[1:], notes
    ):  # the cell's number is its note's, the note names the schedule
        assert number(r[2]) == number(n) and r[0] in n
    assert number(notes[0]) != number(notes[1])
    ex_mod.write(tmp_path, ex)
    md = (tmp_path / "explore.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 3 and sum("store.log=200ms" in line for line in table) == 1
    assert not any(LONG in line for line in table) and md.count(LONG) == 1
    below = md.split(table[-1], 1)[1]
    assert LONG in below and "the VM did not boot" in below
    doc = json.loads((tmp_path / "explore.json").read_text())
    assert [s["error"] for s in doc["schedules"]] == ["", LONG, "the VM did not boot"]

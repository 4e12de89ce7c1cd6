"""--delay-sync GLOB=TIME (core/recording/syncdelay.py): the rules, their canonical text, the supervisor's
command line, and what its log says -- and one line, exit 2, for a bad rule on the command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from powercut.config import WorkloadSpec
from powercut.core.recording.syncdelay import (
    SyncDelay,
    canonical,
    held_note,
    held_summary,
    parse_all,
    supervisor_argv,
    unused_note,
)
from powercut.errors import UsageError


@pytest.mark.parametrize(
    "text, glob, seconds, canon",
    [
        ("*.wal=200ms", "*.wal", 0.2, "*.wal=200ms"),
        ("db/log.*=1s", "db/log.*", 1.0, "db/log.*=1s"),
        (
            "a=b.log=0.5s",
            "a=b.log",
            0.5,
            "a=b.log=500ms",
        ),  # the last = separates: a glob may hold one
        ("x= 800us", "x", 0.0008, "x=800us"),
        (
            "/run/powercut/mnt/n1/*=1.5s",
            "/run/powercut/mnt/n1/*",
            1.5,
            "/run/powercut/mnt/n1/*=1.5s",
        ),
    ],
)
def test_a_rule_parses_to_its_glob_and_time(
    text: str, glob: str, seconds: float, canon: str
) -> None:
    r = SyncDelay.parse(text)
    assert (r.glob, r.seconds, str(r)) == (glob, pytest.approx(seconds), canon)
    assert SyncDelay.parse(str(r)) == r


@pytest.mark.parametrize(
    "text, message",
    [
        ("*.wal", "expected GLOB=TIME"),
        ("=200ms", "expected GLOB=TIME"),
        ("*.wal=200", "TIME is a number with its unit"),
        ("*.wal=fast", "TIME is a number with its unit"),
        ("*.wal=0ms", "more than 0"),
        ("*.wal=61s", "at most 60 s"),
        ("a\tb=1s", "without tabs"),
    ],
)
def test_a_bad_rule_is_one_line_naming_it(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as e:
        SyncDelay.parse(text)
    assert "\n" not in str(e.value) and "--delay-sync" in str(e.value)


def test_a_glob_twice_is_refused_and_the_order_is_kept() -> None:
    with pytest.raises(UsageError, match="twice"):
        parse_all(["*.wal=1s", "*.wal=2s"])
    assert canonical(["b=1s", "a=200ms"]) == ("b=1s", "a=200ms")
    argv = supervisor_argv(
        "/img/powercut-holdsync", parse_all(["b=1s", "a:x=200ms"]), "/m", "/run/log"
    )
    assert argv == [
        "/img/powercut-holdsync",
        "-l",
        "/run/log",
        "-m",
        "/m",
        "-r",
        "1000000000:b",
        "-r",
        "200000000:a:x",
        "--",
    ]


def test_the_workload_carries_the_canonical_rules() -> None:
    assert WorkloadSpec(name="wal", delay_sync=("*.wal= 0.2s",)).delay_sync == ("*.wal=200ms",)
    with pytest.raises(UsageError, match="--delay-sync"):
        WorkloadSpec(name="wal", delay_sync=("*.wal",))


def test_the_hold_log_is_summed_per_file_relative_to_the_mount() -> None:
    log = (
        "# powercut-holdsync listening\nfsync\t200000000\t/run/powercut/mnt/db.wal\n"
        "fdatasync\t0\t/run/powercut/mnt/db.idx\n"
        "fsync\t0\t/dev/dm-2\nmsync\t200000000\t/run/powercut/mnt/db.wal\ngarbage line\n"
    )
    got = held_summary(log, "/run/powercut/mnt", ignore={"/dev/dm-2"})
    assert got == {
        "calls": 3,
        "held": 2,
        "files": {"db.wal": {"calls": 2, "held": 2}, "db.idx": {"calls": 1, "held": 0}},
    }


def test_rules_that_held_nothing_say_what_the_program_synced() -> None:
    rules = parse_all(["*.wal=200ms"])
    note = unused_note(
        rules, held_summary("fsync\t0\t/m/db.idx\nfsync\t0\t/m/db.idx\nfsync\t0\t/m/dir\n", "/m")
    )
    assert "held no sync call" in note and "db.idx, dir" in note and "(3 calls)" in note
    none = unused_note(rules, held_summary("# powercut-holdsync listening\n"))
    assert "made none" in none and "\n" not in none


@pytest.mark.parametrize("value", ["*.wal", "*.wal=5"])
def test_a_bad_rule_on_the_command_line_is_one_line_exit_2(value: str, tmp_path) -> None:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "record",
            "--workload",
            "append-fsync",
            "--delay-sync",
            value,
            "-o",
            str(tmp_path / "rec"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        p.returncode == 2 and "--delay-sync" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    )
    assert not (tmp_path / "rec").exists()


def test_a_cause_about_a_held_file_says_what_the_trace_cannot_see() -> None:
    note = held_note(("store.log=200ms",), "/store.log")
    assert "--delay-sync store.log=200ms" in note and "still held" in note
    assert held_note(("store.log=200ms",), "/store.idx, /other") == ""
    assert held_note(("*.log=1s", "x=1ms"), "/a/b.idx, /a/b.log").count("*.log=1s") == 1


def test_the_hold_log_says_thread_and_time_and_old_logs_still_read() -> None:
    from powercut.core.recording.syncdelay import Hold, holds

    log = "fdatasync\t200000000\t41\t1795842642.350226\t/m/a\tb\nfsync\t0\t/m/old\nfsync\tx\t1\t2\t/m/bad\n"
    assert holds(log) == [
        Hold("fdatasync", 200000000, 41, 1795842642.350226, "/m/a\tb"),
        Hold("fsync", 0, 0, -1.0, "/m/old"),
    ]
    assert held_summary(log, "/m")["files"] == {
        "a\tb": {"calls": 1, "held": 1},
        "old": {"calls": 1, "held": 0},
    }

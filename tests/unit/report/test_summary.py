"""report.py: summary (counts per model, confirmed vs flaky), JSON, JUnit, table."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

from powercut.campaign.phases import flaky
from powercut.core.judging.verdict import Verdict
from powercut.report.summary import summarize, table, write_outputs


def v(state: str, verdict: str = "pass", model: str = "flush", cut: int = 1) -> Verdict:
    return Verdict(state, model, cut, verdict, (f"reason for {state}",), 1, 0, 0.01)


def test_summary_json_and_junit(tmp_path: Path) -> None:
    lost = dataclasses.replace(
        v("flush@2", "lost-ack", cut=2), confirmed=True, aliases=("write-cache@2",)
    )
    fl = flaky(v("flush@4", "mount-failed", cut=4), v("flush@4", "pass", cut=4))
    verdicts = [v("flush@1"), lost, v("write-cache@3/d4", "pass", "write-cache", 3), fl]
    sel = SimpleNamespace(
        counts={
            "flush": {"generated": 9, "distinct": 3, "judged": 3, "left_out": 0},
            "write-cache": {"generated": 5, "distinct": 2, "judged": 1, "left_out": 1},
        }
    )
    s = summarize(
        verdicts,
        recording="/r",
        fstype="ext4",
        workload="append-fsync",
        check_in="host",
        seconds=1.5,
        selection=sel,
        rejudged=2,
        confirm_s=0.5,
    )
    assert s.by_model == {
        "flush": {"pass": 1, "lost-ack": 1, "flaky": 1},
        "write-cache": {"pass": 1},
    }
    assert (
        not s.ok
        and [f.state for f in s.failures] == ["flush@2"]
        and [f.state for f in s.flaky] == ["flush@4"]
    )
    assert s.confirmed == 1
    paths = write_outputs(s, verdicts, tmp_path)
    summary = json.loads(paths["summary"].read_text())
    assert summary["verdict"] == "lost-ack" and summary["total"] == 4 and summary["flaky"] == 1
    assert summary["confirmed_failures"] == 1 and summary["states"]["write-cache"]["left_out"] == 1
    assert summary["failures"][0]["repro"] == "powercut repro /r --state flush@2"
    assert summary["flaky_states"][0]["first"][0] == "mount-failed"
    root = ET.parse(paths["junit"]).getroot()
    assert root.get("tests") == "5" and root.get("failures") == "1" and root.get("errors") == "1"
    skipped = [
        c for c in root.findall(".//testcase") if c.find("skipped") is not None
    ]  # no coverage given
    assert [c.get("name") for c in skipped] == ["coverage"]
    assert skipped[0].find("skipped").get("message") == "coverage not recorded"
    failing = [c for c in root.findall(".//testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failing] == ["flush@2"]
    assert "write-cache@2" in failing[0].find("failure").text
    assert [c.get("name") for c in root.findall(".//testcase") if c.find("error") is not None] == [
        "flush@4"
    ]


def test_flaky_carries_both_verdicts() -> None:
    f = flaky(v("flush@4", "mount-failed", cut=4), v("flush@4", "pass", cut=4))
    assert f.verdict == "flaky" and not f.finding
    assert "mount-failed, then alone pass" in f.reasons[0]
    assert "first: reason for flush@4" in f.reasons and "second: reason for flush@4" in f.reasons


def test_table_renders(tmp_path: Path) -> None:
    from rich.console import Console

    s = summarize(
        [v("flush@1"), v("flush@2", "lost-ack")],
        recording="/r",
        fstype="xfs",
        workload="w",
        check_in="vm",
        seconds=1.0,
        status="interrupted",
    )
    console = Console(record=True, width=120)
    console.print(table(s))
    text = console.export_text()
    assert "INTERRUPTED" in text and "lost-ack" in text and not s.ok


def test_an_interrupted_or_ackless_campaign_is_never_green(tmp_path: Path) -> None:
    """#25 items 4 and 6: no failure, but interrupted (or no ack at all): the verdict is not pass,
    JUnit has an error, and the note says what to do."""
    sel = SimpleNamespace(counts={}, states=[1, 2, 3])
    s = summarize(
        [v("flush@1")],
        recording="/r",
        fstype="ext4",
        workload="w",
        check_in="vm",
        seconds=1,
        selection=sel,
        status="interrupted",
        acks=2,
    )
    assert (
        not s.ok
        and s.verdict == "incomplete"
        and "--resume" in s.notes()[0]
        and "1 of 3" in s.notes()[0]
    )
    paths = write_outputs(s, [v("flush@1")], tmp_path / "i")
    doc = json.loads(paths["summary"].read_text())
    assert doc["verdict"] == "incomplete" and doc["status"] == "interrupted" and not doc["ok"]
    root = ET.parse(paths["junit"]).getroot()
    assert root.get("errors") == "1" and "--resume" in root.find(".//error").get("message")
    none = summarize(
        [v("flush@1")],
        recording="/r",
        fstype="ext4",
        workload="w",
        check_in="vm",
        seconds=1,
        selection=sel,
        acks=0,
    )
    assert not none.ok and none.verdict == "no-acks" and "powercut.ack" in none.notes()[0]
    assert (
        ET.parse(write_outputs(none, [v("flush@1")], tmp_path / "n")["junit"])
        .getroot()
        .get("errors")
        == "1"
    )
    allowed = summarize(
        [v("flush@1")],
        recording="/r",
        fstype="ext4",
        workload="w",
        check_in="vm",
        seconds=1,
        selection=sel,
        acks=0,
        allow_no_acks=True,
    )
    assert allowed.ok and allowed.verdict == "pass" and allowed.notes() == []


def test_junit_says_each_failures_cause_as_the_console_does(tmp_path: Path) -> None:
    from powercut.core.cause.causes import Cause

    lost = v("flush@2", "lost-ack", cut=2)
    s = summarize(
        [v("flush@1"), lost],
        recording="/r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
    )
    why = Cause(
        "no-fsync",
        "cause not proven; the trace shows: ack:1 was given after changing /wal",
        (),
        proof="not proven: no-fsync (/wal): ... still fails",
        read="recovery read wal (0 bytes), then stopped",
    )
    s = dataclasses.replace(
        s,
        groups=[
            {
                "verdict": "lost-ack",
                "reason_class": "reason for flush@#",
                "why": why.to_json() | {"proven": False},
            }
        ],
    )
    text = (
        ET.parse(write_outputs(s, [v("flush@1"), lost], tmp_path)["junit"])
        .getroot()
        .find(".//failure")
        .text
    )
    assert (
        "cause not proven; the trace shows: ack:1 was given after changing /wal [no-fsync, not proven]\n"
        "recovery read wal (0 bytes), then stopped\nproof: not proven: no-fsync (/wal): ... still fails\n"
    ) in text

"""campaign/schedules.py: the plan of schedules and the comparison of their verdicts (no VM)."""

from __future__ import annotations

import json

from powercut.campaign.schedules import (
    ERROR,
    Outcome,
    Schedule,
    compare,
    failed,
    markdown,
    plan,
    write,
)
from powercut.core.recording.latency import DiskLatency, parse_schedules
from powercut.core.states.selection import SEED_AUTO

NONE, HDD = DiskLatency(), DiskLatency.parse("hdd")


def test_each_setting_repeated_with_its_own_seed():
    got = plan(parse_schedules("none,hdd"), repeat=3, seed=7)
    assert [(s.setting, s.repeat, s.seed) for s in got] == [
        ("none", 0, 7),
        ("none", 1, 8),
        ("none", 2, 9),
        ("hdd", 0, 7),
        ("hdd", 1, 8),
        ("hdd", 2, 9),
    ]
    assert [s.slug for s in got[:4]] == ["none-1", "none-2", "none-3", "hdd-1"]
    assert {s.seed for s in plan((HDD,), 2, SEED_AUTO)} == {
        SEED_AUTO
    }  # auto: each campaign draws its own
    assert Schedule(DiskLatency.parse("write=1ms,flush=8ms")).slug == "write_1ms_flush_8ms-1"


def _o(lat: DiskLatency, k: int, verdict: str, **states: int) -> Outcome:
    return Outcome(Schedule(lat, k), verdict, states, record_s=10.0 + k, ok=verdict == "pass")


def test_the_table_says_which_verdicts_differ_from_the_first_setting():
    outs = [
        _o(NONE, 0, "pass", **{"pass": 40}),
        _o(NONE, 1, "pass", **{"pass": 41}),
        _o(HDD, 0, "lost-ack", **{"pass": 30, "lost-ack": 12}),
        _o(HDD, 1, "pass", **{"pass": 44}),
    ]
    rows = compare(outs)
    assert [r.setting for r in rows] == ["none", "hdd"]
    assert (
        rows[0].differs == "" and rows[0].verdicts == {"pass": 2} and rows[0].states == {"pass": 81}
    )
    assert rows[0].record_s == 10.5
    assert rows[1].verdicts == {"lost-ack": 1, "pass": 1} and rows[1].states == {
        "pass": 74,
        "lost-ack": 12,
    }
    assert rows[1].differs == "lost-ack: 1/2 (first: 0/2); pass: 1/2 (first: 2/2)"
    assert failed(outs)
    md = markdown(rows)
    assert "| hdd | 2 | lost-ack 1/2, pass 1/2 | lost-ack 12, pass 74 | 10.5 | lost-ack: 1/2" in md


def test_the_same_shares_are_the_same_and_an_error_fails_the_set():
    same = compare([_o(NONE, 0, "pass"), _o(HDD, 0, "pass"), _o(HDD, 1, "pass")])
    assert same[1].differs == "same" and not failed([_o(NONE, 0, "pass"), _o(HDD, 0, "pass")])
    assert failed([_o(NONE, 0, "pass"), Outcome(Schedule(HDD), ERROR, error="the VM died")])


def test_written_as_json_and_markdown(tmp_path):
    paths = write(
        tmp_path, [_o(NONE, 0, "pass", **{"pass": 3}), _o(HDD, 0, "lost-ack", **{"lost-ack": 2})]
    )
    doc = json.loads(paths["json"].read_text())
    assert doc["ok"] is False and [s["setting"] for s in doc["settings"]] == ["none", "hdd"]
    assert doc["schedules"][1] == {
        "setting": "hdd",
        "repeat": 1,
        "seed": 0,
        "delay_sync": [],
        "verdict": "lost-ack",
        "states": {"lost-ack": 2},
        "total": 0,
        "first": "",
        "cause": "",
        "record_s": 10.0,
        "check_s": 0.0,
        "dir": "",
        "error": "",
        "ok": False,
    }
    assert "differs from the first" in paths["md"].read_text()

"""The recording's fault plan (``--fault``): its grammar and triggers (core/faults.FaultPlan, pure), and
its state shared by the processes that mark (faults.PlanRun, with the device switch faked)."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from powercut import faults
from powercut.campaign.crashtest import CrashTest
from powercut.config import WorkloadSpec
from powercut.core.log.faultwindows import FaultPlan, PlanState
from powercut.errors import UsageError


@pytest.mark.parametrize(
    "text, trigger",
    [
        ("eio-writes", "start"),
        ("eio-writes,mark=ack:5", "mark"),
        ("eio-range,file=db/data.db,mark=begin:*,nth=3,until=ack:*", "mark"),
        ("eio-range,sectors=2048+8;4096+16", "start"),
        ("eio-writes,p=0.25,seed=7", "p"),
        ("eio-writes,p=0.5,mark=commit-*", "p"),
        ("eio-writes,writes=200", "writes"),
        ("eio-writes,after=1.5,until=ack:9", "after"),
    ],
)
def test_plans_parse_and_print_back(text, trigger):
    plan = FaultPlan.parse(text)
    assert plan.trigger == trigger
    assert FaultPlan.parse(str(plan)) == plan


@pytest.mark.parametrize(
    "text, names",
    [
        ("eio-flush", "eio-flush"),
        ("eio-range", "file="),
        ("eio-writes,file=x", "file="),
        ("eio-range,file=x,sectors=1+2", "not both"),
        ("eio-range,file=/etc/passwd", "relative"),
        ("eio-range,file=../x", "relative"),
        ("eio-range,sectors=1+0", "sectors"),
        ("eio-writes,mark=ack:1,writes=3", "one trigger"),
        ("eio-writes,after=2,p=0.1", "one trigger"),
        ("eio-writes,nth=2", "nth"),
        ("eio-writes,seed=2", "seed"),
        ("eio-writes,p=1.5", "probability"),
        (
            "eio-writes,p=0",
            "seed",
        ),  # p=0 is no trigger, so seed= has nothing to seed... given none:
        ("eio-writes,writes=x", "writes=x"),
        ("eio-writes,mark=ack:1,mark=ack:2", "twice"),
        ("eio-writes,colour=red", "colour"),
        ("eio-writes,mark", "mark"),
        ("eio-writes,mark=powercut-order-end", "powercut-"),
    ],
)
def test_a_wrong_plan_is_one_error_naming_what_is_wrong(text, names):
    if text == "eio-writes,p=0":
        text = "eio-writes,p=0,seed=2"
    with pytest.raises(ValueError, match=names.replace("+", r"\+").replace("(", r"\(")):
        FaultPlan.parse(text)


def test_a_wrong_plan_on_the_command_line_or_in_a_crash_test_is_a_usage_error():
    with pytest.raises(UsageError, match="--fault eio-writes,nth=2: nth="):
        WorkloadSpec(cmd="true", fault="eio-writes,nth=2")
    with pytest.raises(UsageError, match="t1: fault="):
        CrashTest(name="t1", workload_cmd="true", fault="eio-writes,after=-1")
    assert (
        WorkloadSpec(cmd="true", fault=" eio-writes , mark=ack:1 ").fault == "eio-writes,mark=ack:1"
    )


def run(plan: FaultPlan, marks: list[str]) -> list[tuple[str, str]]:
    st_, out = PlanState(), []
    for m in marks:
        st_, action = plan.step(st_, m)
        if action:
            out.append((m, action))
    return out


def test_the_nth_matching_mark_switches_on_and_until_switches_off_once():
    plan = FaultPlan.parse("eio-writes,mark=ack:*,nth=2,until=ack:*")
    assert run(plan, ["begin:0", "ack:0", "begin:1", "ack:1", "ack:2", "ack:3"]) == [
        ("ack:1", "on"),
        ("ack:2", "off"),
    ]
    assert run(FaultPlan.parse("eio-writes,mark=ack:7"), ["ack:1", "ack:7", "ack:7"]) == [
        ("ack:7", "on")
    ]
    assert run(FaultPlan.parse("eio-writes,mark=ack:7"), ["ack:1", "ack:70"]) == []
    assert run(FaultPlan.parse("eio-writes,writes=5"), ["ack:1"]) == []  # not a mark trigger


def test_a_probability_draws_per_matching_mark_from_its_seed():
    marks = [f"ack:{i}" for i in range(200)] + ["begin:x"]
    plan = FaultPlan.parse("eio-writes,p=0.05,seed=3")
    first = run(plan, marks)
    assert first == run(plan, marks) and len(first) == 1  # deterministic, and fires once
    others = {run(FaultPlan.parse(f"eio-writes,p=0.05,seed={s}"), marks)[0][0] for s in range(20)}
    assert len(others) > 5  # the seed moves it
    assert run(FaultPlan.parse("eio-writes,p=1"), ["begin:1", "ack:1"]) == [("ack:1", "on")]


@given(
    st.lists(st.sampled_from(["ack:1", "ack:2", "begin:1", "x"]), max_size=30),
    st.sampled_from(
        [
            "eio-writes,mark=ack:*,nth=2,until=x",
            "eio-writes,p=0.3,seed=1,until=begin:*",
            "eio-writes,mark=x",
        ]
    ),
)
def test_a_plan_switches_on_at_most_once_and_off_only_after_on(marks, text):
    actions = [a for _, a in run(FaultPlan.parse(text), marks)]
    assert actions in ([], ["on"], ["on", "off"])


@pytest.fixture
def switches(monkeypatch, tmp_path):
    done: list[tuple] = []
    monkeypatch.setattr(
        faults,
        "fault",
        lambda kind, ranges=(), target=None: done.append(("on", kind, tuple(ranges))),
    )
    monkeypatch.setattr(faults, "recover", lambda target=None: done.append(("off",)))
    monkeypatch.setattr(
        faults, "file_sectors", lambda path: [(2048, 8)] if path.endswith("db") else []
    )
    for k, v in faults.plan_env(
        FaultPlan.parse("eio-range,file=db,mark=ack:2,until=ack:3"), str(tmp_path / "plan.json")
    ).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("POWERCUT_MOUNT", str(tmp_path))
    return done


def test_marks_move_the_plan_through_its_state_file(switches, tmp_path):
    for m in ["ack:1", "powercut-order-begin", "ack:2", "ack:2", "ack:3", "ack:4"]:
        faults.plan_mark(m)
    assert switches == [("on", "eio-range", ((2048, 8),)), ("off",)]
    assert json.loads((tmp_path / "plan.json").read_text()) == {
        "matches": 1,
        "on": True,
        "off": True,
        "error": "",
    }
    assert (tmp_path / "plan.json.done").exists()  # spent: the C powercut-mark stops calling in


def _mark_in_child(text: str) -> None:
    faults.plan_mark(text)


def test_marks_from_other_processes_share_one_state(switches, tmp_path):
    ctx = multiprocessing.get_context("fork")
    for m in ["ack:1", "ack:2"]:
        p = ctx.Process(target=_mark_in_child, args=(m,))
        p.start()
        p.join()
        assert p.exitcode == 0
    assert faults.PlanRun.from_env().state().on
    faults.plan_mark("ack:3")
    assert switches == [
        ("off",)
    ]  # the child switched on (its list is its own); this process switched off


def test_a_switch_that_cannot_be_made_is_kept_and_raised_once(monkeypatch, tmp_path):
    for k, v in faults.plan_env(
        FaultPlan.parse("eio-range,file=missing,mark=ack:*"), str(tmp_path / "p.json")
    ).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("POWERCUT_MOUNT", str(tmp_path))
    monkeypatch.setattr(faults, "fault", lambda *a, **k: pytest.fail("switched without ranges"))
    with pytest.raises(faults.FaultError, match="missing"):
        faults.plan_mark("ack:1")
    st_ = faults.PlanRun.from_env().state()
    assert "missing" in st_.error and not st_.on
    faults.plan_mark("ack:2")  # spent: later marks go through
    assert os.path.exists(str(tmp_path / "p.json.done"))


def test_the_job_side_trigger_fires_once(switches, tmp_path):
    run_ = faults.PlanRun(FaultPlan.parse("eio-writes,writes=10"), str(tmp_path / "w.json"))
    assert run_.fire() == "on" and run_.fire() == ""
    assert switches == [("on", "eio-writes", ())]

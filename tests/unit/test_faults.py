"""Fault windows in the log and the commits acked after one (core/log/faultwindows.py), the fault layer's
device-mapper tables (faults.table), and the judge's acked-after-error rule (check/judge.after_error)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.check.context import CheckContext
from powercut.check.judge import after_error
from powercut.checker import CheckInput, CheckResult
from powercut.core.log.faultwindows import FAULT_OFF, Faults, Window, on_mark, parse_on
from powercut.core.states.crashstate import CrashState
from powercut.faults import table
from powercut.linux import filesystems


def test_windows_and_the_commits_acked_after_an_error():
    marks = [
        (1, "mkfs"),
        (3, "begin:0"),
        (5, "ack:0"),
        (6, "begin:1"),
        (8, on_mark("eio-writes")),
        (9, FAULT_OFF),
        (11, "ack:1"),
        (12, "begin:2"),
        (14, "ack:2"),
    ]
    f = Faults.from_marks(marks)
    assert f.windows == (Window(8, 9, "eio-writes"),)
    assert f.after_error == ("1",)  # 1 began before the error and was acked after it
    assert "eio-writes from entry 8 to entry 9" in f.why["1"]
    assert f.trusted(("0", "1", "2")) == (
        "0",
    )  # a program that stops at its first error acks only 0
    assert f.trusted(("0",)) is None  # nothing acked after an error in this state


def test_an_unclosed_window_lasts_to_the_end_and_a_new_fault_closes_the_last():
    f = Faults.from_marks(
        [
            (2, "ack:a"),
            (4, on_mark("eio-range", ((8, 16),))),
            (6, on_mark("eio-writes")),
            (9, "ack:b"),
        ]
    )
    assert f.windows == (Window(4, 6, "eio-range", ((8, 16),)), Window(6, None, "eio-writes"))
    assert f.after_error == ("b",) and not Faults.from_marks([(2, "ack:a")])


def test_commits_without_begin_marks_span_from_the_previous_ack():
    f = Faults.from_marks(
        [(2, "ack:a"), (3, on_mark("eio-writes")), (4, FAULT_OFF), (7, "ack:b"), (9, "ack:c")]
    )
    assert f.after_error == ("b",)


@pytest.mark.parametrize(
    "text",
    [
        "powercut-fault:on:eio-flush",
        "powercut-fault:on:eio-range",
        "powercut-fault:on:eio-writes:1+2",
        "powercut-fault:on:eio-range:1+0",
        "powercut-fault:on:eio-range:x+2",
    ],
)
def test_malformed_fault_marks_are_refused(text):
    with pytest.raises(ValueError):
        parse_on(text)


def test_json_round_trip():
    f = Faults.from_marks(
        [(1, "begin:0"), (2, on_mark("eio-range", ((0, 8), (64, 8)))), (3, "ack:0")]
    )
    assert Faults.from_json(f.to_json()) == f and Faults.from_json(None) == Faults()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["ack", "begin", "on", "off", "other"]), max_size=30))
def test_trusted_acks_are_a_prefix_and_exclude_every_ack_after_an_error(kinds):
    marks, n = [], 0
    for i, k in enumerate(kinds):
        if k == "ack":
            marks.append((i, f"ack:{n}"))
            n += 1
        elif k == "begin":
            marks.append((i, f"begin:{n}"))
        elif k == "on":
            marks.append((i, on_mark("eio-writes")))
        elif k == "off":
            marks.append((i, FAULT_OFF))
        else:
            marks.append((i, "x"))
    f = Faults.from_marks(marks)
    acked = tuple(t[4:] for _, t in marks if t.startswith("ack:"))
    trusted = f.trusted(acked)
    if trusted is None:
        assert not set(acked) & set(f.after_error)
    else:
        assert acked[: len(trusted)] == trusted and not set(trusted) & set(f.after_error)
        assert acked[len(trusted)] in f.after_error
    first_on = next((e for e, t in marks if t.startswith("powercut-fault:on:")), None)
    for e, t in marks:  # an ack before any fault is never "after an error"
        if t.startswith("ack:") and (first_on is None or e < first_on):
            assert t[4:] not in f.after_error


def test_fault_tables():
    assert table("", "/dev/x", 1000) == [(0, 1000, "linear", "/dev/x 0")]
    assert table("eio-writes", "/dev/x", 1000) == [
        (0, 1000, "flakey", "/dev/x 0 0 1 1 error_writes")
    ]
    assert table("eio-range", "/dev/x", 1000, ((100, 8), (0, 8))) == [
        (0, 8, "error", ""),
        (8, 92, "linear", "/dev/x 8"),
        (100, 8, "error", ""),
        (108, 892, "linear", "/dev/x 108"),
    ]
    for bad in (((0, 8), (4, 8)), ((996, 8),), ((5, 0),)):
        with pytest.raises(ValueError):
            table("eio-range", "/dev/x", 1000, bad)
    with pytest.raises(ValueError):
        table("eio-flush", "/dev/x", 1000)


class _Checker:
    """Fails when any key in ``lost`` is acked; records what it was asked."""

    def __init__(self, lost):
        self.lost, self.calls = set(lost), []

    def run(self, inp):
        self.calls.append((inp.acked, inp.begun))
        gone = sorted(self.lost & set(inp.acked))
        return CheckResult("lost-ack", (f"acked {gone} lost",)) if gone else CheckResult("pass")


def _ctx(faults, checker, node_faults=()):
    """The judging context with these faults (one disk's, or each node's) and this checker."""
    return CheckContext(
        filesystems.get("ext4"), checker, faults=faults, node_faults=tuple(node_faults)
    )


MARKS = [
    (1, "begin:0"),
    (2, "ack:0"),
    (3, "begin:1"),
    (4, on_mark("eio-writes")),
    (5, FAULT_OFF),
    (6, "ack:1"),
    (7, "begin:2"),
    (8, "ack:2"),
]


def _state(acks):
    return CrashState(
        model="flush",
        cut=9,
        dropped=(),
        torn=(),
        acks=tuple(acks),
        begun=("0", "1", "2"),
        id="flush@9",
        epoch=0,
    )


def _given(state):
    """What the checker was given the first time (the state's mount and keys)."""
    return CheckInput("/mnt", state.acks, state.begun, {}, state.id)


def test_a_state_failing_only_through_acks_after_an_error_is_acked_after_error():
    chk = _Checker(lost={"1"})
    state = _state(["0", "1", "2"])
    got = after_error(
        _ctx(Faults.from_marks(MARKS), chk),
        state,
        _given(state),
        CheckResult("lost-ack", ("acked [1] lost",)),
    )
    assert (
        got.verdict == "acked-after-error"
        and "commit 1" in got.reasons[0]
        and "lost-ack" in got.reasons[0]
    )
    assert chk.calls == [(("0",), ("0", "1", "2"))]  # judged again with the trusted acks only


def test_a_failure_of_a_trusted_ack_keeps_its_verdict():
    chk = _Checker(lost={"0"})
    first = CheckResult("lost-ack", ("acked [0] lost",))
    state = _state(["0", "1"])
    assert after_error(_ctx(Faults.from_marks(MARKS), chk), state, _given(state), first) is first
    assert (
        after_error(_ctx(Faults(), chk), state, _given(state), first) is first
    )  # no faults: as said


def test_outside_a_recording_a_fault_is_one_clear_error_and_in_timing_mode_a_no_op(
    monkeypatch, tmp_path
):
    import powercut
    from powercut.faults import FaultError, main

    monkeypatch.delenv("POWERCUT_FAULT_DEV", raising=False)
    monkeypatch.delenv("POWERCUT_TIMING", raising=False)
    with pytest.raises(FaultError, match="only inside a powercut recording"):
        powercut.fault("eio-writes")
    assert main(["on", "eio-writes"]) == 1 and main(["sideways"]) == 2 and main(["--help"]) == 0
    monkeypatch.setenv("POWERCUT_TIMING", str(tmp_path / "t"))
    powercut.fault("eio-writes")
    powercut.recover()
    assert not (tmp_path / "t").exists()

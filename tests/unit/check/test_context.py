"""check/context.py: the fault windows of N >= 1 disks' logs are one call (``with_node_faults``),
and at N = 1 it is exactly one disk's context (``with_faults``): the same value, the same verdict
words ("the device", no node), the same error for a malformed mark."""

from __future__ import annotations

from typing import Any

import pytest

from powercut.check.context import CheckContext, with_faults, with_node_faults
from powercut.check.judge import after_error
from powercut.checker import CheckInput, CheckResult
from powercut.core.log.faultwindows import FAULT_OFF, on_mark
from powercut.core.states.crashstate import CrashState
from powercut.errors import UsageError
from powercut.linux import filesystems

KEYS = [(1, "begin:0"), (2, "ack:0"), (3, "begin:1"), (6, "ack:1"), (7, "begin:2"), (8, "ack:2")]
LOGS = {
    "no window": KEYS,
    "a window in commit 1": [*KEYS, (4, on_mark("eio-writes")), (5, FAULT_OFF)],
    "a window to the end": [*KEYS, (7, on_mark("eio-range:8+8"))],
}


class Log:
    """What with_faults reads of an opened log: its marks."""

    def __init__(self, marks: list[tuple[int, str]]) -> None:
        self._marks = sorted(marks)

    def marks(self) -> list[tuple[int, str]]:
        return self._marks


class Checker:
    """Says commit 1 is lost whenever it is acked."""

    def run(self, inp: Any) -> CheckResult:
        return (
            CheckResult("lost-ack", ("acked [1] lost",))
            if "1" in inp.acked
            else CheckResult("pass")
        )


def _after_error(ctx: CheckContext) -> tuple[str, tuple[str, ...]]:
    st = CrashState(
        model="flush",
        cut=9,
        dropped=(),
        torn=(),
        acks=("0", "1", "2"),
        begun=("0", "1", "2"),
        id="flush@9",
        epoch=0,
    )
    got = after_error(
        ctx,
        st,
        CheckInput("/mnt", st.acks, st.begun, {}, st.id),
        CheckResult("lost-ack", ("acked [1] lost",)),
    )
    return got.verdict, tuple(got.reasons)


@pytest.mark.parametrize("name", sorted(LOGS))
def test_one_disk_of_n_is_one_disks_context(name: str) -> None:
    ctx = CheckContext(filesystems.get("ext4"), Checker())  # type: ignore[arg-type]
    log = Log(LOGS[name])
    one, of_n = with_faults(ctx, log), with_node_faults(ctx, [log])  # type: ignore[arg-type,list-item]
    assert of_n == one and (of_n is ctx) == (name == "no window")
    assert _after_error(of_n) == _after_error(one)
    if name == "a window in commit 1":
        verdict, reasons = _after_error(of_n)
        assert (
            verdict == "acked-after-error"
            and "the device failed" in reasons[0]
            and "node" not in reasons[0]
        )


def test_a_malformed_mark_of_one_disk_names_no_node() -> None:
    bad = Log([*KEYS, (4, "powercut-fault:on:eio-x")])
    ctx = CheckContext(filesystems.get("ext4"))
    with pytest.raises(UsageError) as one:
        with_faults(ctx, bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as of_n:
        with_node_faults(ctx, [bad])  # type: ignore[list-item]
    assert str(of_n.value) == str(one.value) and str(one.value).startswith(
        "the log's fault marks are malformed"
    )

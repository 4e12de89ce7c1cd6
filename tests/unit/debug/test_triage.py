"""triage.py: failures grouped by how they fail (verdict + reason class), worst and largest first."""

from __future__ import annotations

from powercut.core.judging.verdict import Verdict
from powercut.debug import triage


def _v(state: str, verdict: str, reason: str, cut: int) -> Verdict:
    return Verdict(state, state.split("@")[0], cut, verdict, (reason,), 1, 0, 0.1, confirmed=True)


def test_one_bug_in_many_states_is_one_group() -> None:
    many = [
        _v(
            f"write-cache@{c}/d{c - 3}",
            "lost-ack",
            f"acked record(s) [{c}] missing (parsing stopped at byte {c * 4096})",
            c,
        )
        for c in range(100, 1100)
    ]
    other = [
        _v("flush@50", "corrupt-data", "records 3 were never begun", 50),
        _v("torn-4k@60/s0", "corrupt-data", "records 9 were never begun", 60),
    ]
    groups = triage.group(many + other)
    assert [(g.verdict, len(g.states)) for g in groups] == [("corrupt-data", 2), ("lost-ack", 1000)]
    assert groups[0].first.state == "flush@50"  # the earliest cut represents a group
    assert groups[1].reason_class == "acked record(s) [#] missing (parsing stopped at byte #)"
    j = groups[1].to_json()
    assert j["count"] == 1000 and len(j["states"]) == 20 and j["first"] == "write-cache@100/d97"
    assert triage.group([]) == []


def test_bundle_names_are_safe() -> None:
    assert triage.slug("torn-4k@162/t158:r0.1/r0.1") == "torn-4k_162_t158_r0.1_r0.1"

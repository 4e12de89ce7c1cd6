"""#52 item 3: a failing state cut after an ack mark the log cannot order (no ordering window before
it: ``dmsetup message``, or a recording made before ordered marks) and before the next barrier flush
may lack writes that completed before the ack but were logged after it: it says "possibly a false
alarm", counted apart in the headline and kept a failure.  An ambiguous window's ack is ordered (its
marker suspended the device before the mark): its states are real, never marked so."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import FLUSH, MARK, ORDER_BEGIN, ORDER_END, Entry
from powercut.core.log.markorder import mark_order, possibly_false, unordered_acks
from powercut.core.states.models import CrashSpace
from powercut.report.summary import summarize


def log(*spec: str) -> list[Entry]:
    """'w' a plain write, 'F' a flush, any other word a mark."""
    return [
        Entry(
            i,
            *({"w": (0, 8 + 8 * i, 8), "F": (FLUSH, 0, 0)}.get(s) or (MARK, 0, 0)),
            0,
            None if s in ("w", "F") else s,
        )
        for i, s in enumerate(spec)
    ]


def test_an_ack_without_a_window_is_doubtful_up_to_the_next_flush():
    es = log(
        "mkfs", "w", "ack:1", "w", "w", "F", "w", ORDER_BEGIN, "F", ORDER_END, "ack:2", "w", "F"
    )
    (d,) = unordered_acks(es)
    assert (d.ack, d.until, d.key) == (2, 5, "ack:1")
    assert [c for c in range(len(es) + 1) if possibly_false([d], c)] == [3, 4, 5]
    assert "possibly a false alarm: the log cannot order ack:1" in d.sentence()


def test_an_ambiguous_windows_ack_is_ordered():
    """A program flush inside the window (two flushes for one begin): ambiguous, yet its mark ordered."""
    es = log("mkfs", "w", ORDER_BEGIN, "F", "F", ORDER_END, "ack:1", "w", "F")
    assert mark_order(es)["ambiguous_windows"] == 1 and mark_order(es)["ordered"]
    assert unordered_acks(es) == ()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["w", "F", "ack:a", "ack:b", "begin:a", ORDER_BEGIN, ORDER_END]),
        max_size=14,
    )
)
def test_doubtful_acks_are_exactly_the_unordered_ones(spec: list[str]) -> None:
    es = log("mkfs", *spec)
    order = mark_order(es)
    acks = [e for e in es if e.ack_key is not None]
    doubts = unordered_acks(es)
    assert len(doubts) <= order["key_marks"] - order["ordered_key_marks"]
    if order["ordered"]:
        assert doubts == ()
    for d in doubts:
        assert es[d.ack] in acks and d.ack < d.until
        sp = CrashSpace(es)
        assert all(
            not sp.is_barrier(i) or i == d.until
            for i in range(d.ack + 1, min(d.until + 1, len(es)))
        )


def _v(state: str, cut: int, verdict: str = "lost-ack") -> Verdict:
    return Verdict(state, "flush", cut, verdict, ("key 1 lost",), 1, 0, 0.1, confirmed=True)


def test_the_headline_counts_them_apart_and_they_stay_failures():
    es = log(
        "mkfs", "w", "ack:1", "w", "w", "F", "w", ORDER_BEGIN, "F", ORDER_END, "ack:2", "w", "F"
    )
    vs = [_v("flush@4", 4), _v("flush@11", 11), _v("flush@1", 1, "pass")]
    s = summarize(
        vs,
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
        doubts=unordered_acks(es),
    )
    assert len(s.failures) == 2 and not s.ok and s.verdict == "lost-ack"
    assert s.headline().startswith(
        "lost-ack: 2 of 3 judged states fail, 1 of them possibly false alarms"
    )
    j = s.to_json()
    (doubt,) = [f for f in j["failures"] if "possibly_false_alarm" in f]
    assert doubt["state"] == "flush@4" and "cannot order ack:1" in doubt["possibly_false_alarm"]

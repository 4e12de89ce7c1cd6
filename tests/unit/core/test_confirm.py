"""core/judging/confirm.py: the confirmation sample of a failure group and what a sample's second verdicts
decide -- pure, every branch."""

from __future__ import annotations

import dataclasses
import random

import pytest

from powercut.core.judging import confirm
from powercut.core.judging.verdict import Verdict


def v(state: str, cut: int, verdict: str = "lost-ack", reason: str = "key 3 lost") -> Verdict:
    return Verdict(state, state.partition("@")[0], cut, verdict, (reason,), 1, 0, 0.01)


def group(
    n: int, verdict: str = "lost-ack", reason: str = "key {} lost", model: str = "flush"
) -> list[Verdict]:
    return [v(f"{model}@{100 + i}", 100 + i, verdict, reason.format(i)) for i in range(n)]


def test_a_small_group_is_judged_whole() -> None:
    members = group(5)
    [p] = confirm.plan(random.Random(1).sample(members, 5), k=8)
    assert p.whole and [m.state for m in p.sample] == [m.state for m in members] and p.rest() == ()


@pytest.mark.parametrize("n,k", [(9, 8), (100, 8), (1000, 3), (3, 2)])
def test_a_large_group_samples_k_with_the_first_and_the_last(n: int, k: int) -> None:
    members = group(n)
    [p] = confirm.plan(members, k=k, seed=7)
    assert len(p.sample) == k and not p.whole and len(p.rest()) == n - k
    assert p.sample[0].state == members[0].state and p.sample[-1].state == members[-1].state
    assert len({m.state for m in p.sample}) == k  # no state twice
    assert {m.state for m in p.sample} | {m.state for m in p.rest()} == {m.state for m in members}


def test_the_sample_is_deterministic_and_moves_with_the_seed() -> None:
    members = group(200)
    shuffled = random.Random(3).sample(members, len(members))
    a = confirm.plan(members, k=8, seed=0)[0].sample
    assert a == confirm.plan(shuffled, k=8, seed=0)[0].sample  # input order does not matter
    assert any(confirm.plan(members, k=8, seed=s)[0].sample != a for s in range(1, 6))


def test_groups_are_by_verdict_and_reason_class() -> None:
    fails = (
        group(10)
        + group(4, "corrupt-data", "row {} torn", model="write-cache")
        + group(3, "lost-ack", "file gone")
    )
    plans = {p.key: p for p in confirm.plan(fails, k=4)}
    assert set(plans) == {
        ("lost-ack", "key # lost"),
        ("corrupt-data", "row # torn"),
        ("lost-ack", "file gone"),
    }
    assert [len(plans[k].sample) for k in sorted(plans)] == [4, 3, 4]


def test_mode_all_judges_every_failure() -> None:
    [p] = confirm.plan(group(50), mode="all", k=2)
    assert p.whole and len(p.sample) == 50


def test_a_group_with_a_settled_flaky_state_is_judged_whole() -> None:
    members = group(30)
    earlier = dataclasses.replace(
        v("flush@99", 99),
        verdict="flaky",
        reasons=("judged twice",),
        first=("lost-ack", "key 17 lost"),
    )
    [p] = confirm.plan(members, k=4, settled=[earlier])
    assert p.whole
    other = dataclasses.replace(earlier, first=("corrupt-data", "row 1 torn"))
    assert not confirm.plan(members, k=4, settled=[other])[
        0
    ].whole  # a flake of another cause does not


def test_settle_agreeing_samples_confirm_the_rest_by_group() -> None:
    plans = confirm.plan(group(20), k=4)
    seconds = {m.state: m for m in plans[0].sample}  # the same verdicts alone
    by_group, escalate = confirm.settle(plans, seconds)
    assert len(by_group) == 16 and escalate == []


def test_settle_one_disagreement_escalates_the_whole_rest() -> None:
    plans = confirm.plan(group(20) + group(12, "corrupt-data", "bad {}"), k=4)
    seconds = {m.state: m for p in plans for m in p.sample}
    odd = plans[0].sample[2]
    seconds[odd.state] = dataclasses.replace(odd, verdict="pass", reasons=())
    by_group, escalate = confirm.settle(plans, seconds)
    assert {m.state for m in escalate} == {m.state for m in plans[0].rest()}
    assert {m.state for m in by_group} == {m.state for m in plans[1].rest()}


def test_settle_refuses_a_sample_without_its_second_verdict() -> None:
    plans = confirm.plan(group(20), k=4)
    with pytest.raises(ValueError, match="no lone verdict"):
        confirm.settle(plans, {})


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        confirm.plan(group(3), mode="some")
    with pytest.raises(ValueError, match="at least 2"):
        confirm.plan(group(3), k=1)


def test_group_key_of_a_flaky_state_is_its_first_verdicts() -> None:
    f = dataclasses.replace(
        v("flush@5", 5), verdict="flaky", reasons=("x",), first=("lost-ack", "key 12 lost")
    )
    assert confirm.group_key(f) == ("lost-ack", "key # lost") == confirm.group_key(v("flush@6", 6))


def test_verdict_confirmation_words_and_journal_round_trip() -> None:
    base = v("flush@1", 1)
    assert base.confirmation == "unconfirmed"
    assert dataclasses.replace(base, confirmed=True).confirmation == "confirmed"
    by = dataclasses.replace(base, by_group=True)
    assert by.confirmation == "confirmed-by-group" and Verdict.from_json(by.to_json()) == by
    assert "by_group" not in base.to_json() and Verdict.from_json(base.to_json()) == base
    assert dataclasses.replace(base, verdict="flaky").confirmation == "flaky"
    assert dataclasses.replace(base, verdict="pass", reasons=()).confirmation == ""


def test_the_minimized_state_is_always_in_its_groups_sample() -> None:
    members = group(100)
    for target in ("flush@150", "flush@101", "flush@198"):
        [p] = confirm.plan(
            members, k=4, seed=2, always={target, "write-cache@7/d1"}
        )  # a non-member is ignored
        states = [m.state for m in p.sample]
        assert (
            target in states
            and len(states) == 4
            and states[0] == "flush@100"
            and states[-1] == "flush@199"
        )


def test_settle_a_disagreeing_minimized_state_escalates_its_group() -> None:
    plans = confirm.plan(group(20), k=4)
    seconds = {m.state: m for m in plans[0].sample}  # the sample itself agrees
    by_group, escalate = confirm.settle(plans, seconds, disagreeing={plans[0].key})
    assert by_group == [] and len(escalate) == 16


def test_under_a_lying_disk_what_the_disk_did_is_part_of_the_group():
    from powercut.core.judging.confirm import group_key
    from powercut.core.judging.verdict import Verdict

    lost = Verdict(
        "lost-write@9/w3", "lost-write", 9, "lost-ack", ("acked txn(s) 2 lost",), 2, 0, 0.1
    )
    moved = Verdict(
        "misdirected-write@9/w3:s40",
        "misdirected-write",
        9,
        "lost-ack",
        ("acked txn(s) 2 lost",),
        2,
        0,
        0.1,
    )
    honest = Verdict("flush@9", "flush", 9, "lost-ack", ("acked txn(s) 2 lost",), 2, 0, 0.1)
    assert group_key(lost) != group_key(moved)
    assert group_key(lost)[0] == group_key(moved)[0] == group_key(honest)[0] == "lost-ack"
    assert group_key(honest)[1] == group_key(lost)[1].removeprefix("lost-write: ")

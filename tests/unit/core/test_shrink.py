"""The shrinker: reason classes, ``find_integer``, lost-write minimization against the exact answer
(every pair of a 30-write window; a run of up to 1000 irrelevant writes in O(log n) checks), prefix
bisection (the earliest failing cut when monotone, a judged failing cut with a passing predecessor
when not), torn states (fewer lost sectors, the tear removed), determinism, the budget, the cache,
the floor, id round trips (states no model enumerates), and a Hypothesis property on random logs and
predicates: the result fails the same way and is 1-minimal."""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.judging.shrink import Outcome, find_integer, minimize, reason_class, signature
from powercut.core.log.dmlog import FLUSH, FUA
from powercut.core.states.crashstate import CrashState
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.stateid import (
    HONEST_MODELS as MODELS,
)  # shrink minimizes power-loss states
from powercut.core.states.stateid import parse_id
from powercut.errors import UsageError
from tests.unit.logops import build_log

Judge = Callable[[CrashState], Outcome]
PASS = Outcome("pass")


def space_of(ops: list[tuple], directory: Path) -> CrashSpace:  # type: ignore[type-arg]
    with build_log(directory / "log", ops) as idx:
        return CrashSpace(idx)


def window(n: int) -> list[tuple]:  # type: ignore[type-arg]
    """Entry 0 a write, 1 a flush, 2..n+1 plain writes (one droppable window), n+2 ``ack:x``."""
    return (
        [("w", 0, 1, 0, 0), ("f",)] + [("w", i + 1, 1, 0, i) for i in range(n)] + [("m", "ack:x")]
    )


def missing(sp: CrashSpace, s: CrashState) -> set[int]:
    """Data entries not fully durable in a state (lost, torn, or past the cut): a function of the image."""
    gone = {t for t, _ in s.torn} | set(s.dropped)
    return {i for i in range(sp.n) if sp.is_data[i] and (i >= s.cut or i in gone)}


def lost_ack(
    sp: CrashSpace, relevant: set[int], *, need: str | None = "x", mode: str = "all"
) -> Judge:
    """lost-ack when ``need`` is acked and the relevant entries are missing (all / any / an odd number)."""

    def judge(s: CrashState) -> Outcome:
        hit = sorted(relevant & missing(sp, s))
        bad = {"all": len(hit) == len(relevant), "any": bool(hit), "odd": len(hit) % 2 == 1}[mode]
        if (need is None or need in s.acks) and bad:
            return Outcome("lost-ack", (f"acked record(s) {hit} missing",))
        return PASS

    return judge


class Counting:
    """Wraps a judge; counts how often each distinct image was judged."""

    def __init__(self, sp: CrashSpace, judge: Judge) -> None:
        self.sp, self.judge, self.seen = sp, judge, Counter[object]()

    def __call__(self, s: CrashState) -> Outcome:
        self.seen[image_key(self.sp, s)] += 1
        return self.judge(s)


def all_lost(sp: CrashSpace) -> CrashState:
    return sp.make_state("write-cache", sp.n, sp.droppable(sp.n))


@pytest.fixture(scope="module")
def w30(tmp_path_factory: pytest.TempPathFactory) -> CrashSpace:
    return space_of(window(30), tmp_path_factory.mktemp("w30"))


@pytest.fixture(scope="module")
def w1000(tmp_path_factory: pytest.TempPathFactory) -> CrashSpace:
    return space_of(window(1000), tmp_path_factory.mktemp("w1000"))


# -- pieces ----------------------------------------------------------------------------------------------
def test_reason_class() -> None:
    same = [
        "acked record(s) [3] missing",
        "acked record(s) [5, 7] missing",
        "acked record(s) [12-40]  missing",
    ]
    assert {reason_class(r) for r in same} == {"acked record(s) [#] missing"}
    assert reason_class("bad crc 0xdeadbeef at offset 4096") == reason_class(
        "bad crc 0x1F at offset 8"
    )
    assert reason_class("hash 3f2a9c0e1b7d mismatch") == "hash # mismatch"
    assert reason_class("acked record(s) [3] missing") != reason_class("record 3 torn")
    assert signature(Outcome("lost-ack", ("key 'k3' lost", "other"))) == (
        "lost-ack",
        "key 'k#' lost",
    )
    assert signature(Outcome("corrupt-data")) == ("corrupt-data", "")
    assert signature(Outcome("lost-ack", ("A 1",)), str.lower) == ("lost-ack", "a 1")  # replaceable


@given(st.sets(st.integers(1, 300)))
def test_find_integer_returns_a_local_maximum(true: set[int]) -> None:
    calls: list[int] = []
    k = find_integer(lambda x: calls.append(x) is None and x in true)
    assert (k == 0 or k in true) and k + 1 not in true
    if true == set(range(1, max(true, default=0) + 1)):  # monotone: the largest, in O(log k) calls
        assert k == max(true, default=0) and len(calls) <= 2 * math.log2(k + 1) + 2


# -- lost writes (write-cache) ------------------------------------------------------------------------------
def test_every_pair_of_a_30_write_window(w30: CrashSpace) -> None:
    orig, worst = all_lost(w30), 0
    for a in range(2, 32):
        for b in range(a + 1, 32):
            r = minimize(w30, orig, lost_ack(w30, {a, b}), budget=10**6)
            assert (r.minimized.cut, r.minimized.dropped) == (33, (a, b)) and not r.exhausted
            worst = max(worst, r.calls)
    assert (
        r.one_at_a_time == 30 and worst <= 27
    )  # measured 27; one at a time: >= 30, ddmin-style: ~30*2


@pytest.mark.parametrize("n", [30, 1000])
def test_a_run_of_irrelevant_writes_costs_log_n(n: int, w30: CrashSpace, w1000: CrashSpace) -> None:
    sp = w30 if n == 30 else w1000
    for rel in sorted({0, 1, n // 3, n // 2, n - 2, n - 1}):
        r = minimize(sp, all_lost(sp), lost_ack(sp, {rel + 2}), budget=10**6)
        assert r.minimized.dropped == (rel + 2,) and r.one_at_a_time == n
        assert r.calls <= 4 * math.log2(n) + 6  # measured <= 4 log2(n) + 2


def test_the_earliest_cut_and_the_id_of_a_state_no_model_enumerates(w30: CrashSpace) -> None:
    # the ack must be told: cut 33 (after it) stays; lost writes past an earlier cut count as lost
    r = minimize(w30, all_lost(w30), lost_ack(w30, {9, 22}))
    assert (
        r.minimized.id == "write-cache@33/d9,22"
        and parse_id(r.minimized.id).text() == r.minimized.id
    )
    assert r.minimized.id not in {s.id for s in w30.states("write-cache", samples=0)}
    assert w30.state_from_id(r.minimized.id) == r.minimized
    # without an ack to keep, the earliest failing cut is before the relevant writes: nothing lost
    r = minimize(w30, all_lost(w30), lost_ack(w30, {9, 22}, need=None))
    assert (r.minimized.cut, r.minimized.dropped) == (1, ()) and r.minimized.model == "write-cache"


def test_deterministic_and_json(w30: CrashSpace, tmp_path: Path) -> None:
    args = (all_lost(w30), lost_ack(w30, {4, 5, 30}, mode="odd"))
    r = minimize(w30, *args)
    assert minimize(w30, *args) == r == minimize(space_of(window(30), tmp_path), *args)
    j = r.to_json()
    assert j["minimized"] == r.minimized.id and j["calls"] == r.calls
    assert j["reason_class"] == "acked record(s) [#] missing" and j["reasons"] == list(r.reasons)
    assert j["dropped"] == list(r.minimized.dropped) and len(r.minimized.dropped) % 2 == 1


def test_the_budget_is_respected(w30: CrashSpace) -> None:
    orig, judge = all_lost(w30), lost_ack(w30, {9, 22})
    full, prev = minimize(w30, orig, judge), orig
    for budget in range(1, full.calls + 2):
        counting = Counting(w30, judge)
        r = minimize(w30, orig, counting, budget=budget)
        assert r.calls == sum(counting.seen.values()) <= budget and r.exhausted == (
            budget < full.calls
        )
        # the smallest failing state found so far: each budget's result a reduction of the one before
        assert signature(judge(r.minimized)) == full.signature and set(r.minimized.dropped) <= set(
            prev.dropped
        )
        assert (r.minimized != orig) == (budget >= 3) and r.minimized.cut <= prev.cut
        if budget == full.calls - 1:  # the last check only confirmed the result
            assert r.minimized == full.minimized and r.exhausted
        prev = r.minimized
    assert r == full


def test_judged_candidates_are_not_judged_again(w30: CrashSpace) -> None:
    orig = all_lost(w30)
    counting = Counting(w30, lost_ack(w30, {3, 17, 18}))
    r = minimize(w30, orig, counting)
    assert r.calls == len(counting.seen) and set(counting.seen.values()) == {1} and r.cache_hits > 0
    # a known outcome saves the original's check
    again = Counting(w30, lost_ack(w30, {3, 17, 18}))
    r2 = minimize(
        w30, orig, again, expected=Outcome("lost-ack", ("acked record(s) [3, 17, 18] missing",))
    )
    assert (
        image_key(w30, orig) not in again.seen
        and r2.calls == r.calls - 1
        and r2.minimized == r.minimized
    )


def test_the_floor_is_kept(w30: CrashSpace) -> None:
    judge = lost_ack(w30, {9}, need=None)
    r = minimize(w30, w30.make_state("write-cache", 33, range(6, 32)), judge, floor=5)
    assert (r.minimized.cut, r.minimized.dropped) == (
        6,
        (),
    )  # just after the floor, though cut 1 fails too
    with pytest.raises(UsageError, match="floor"):
        minimize(w30, all_lost(w30), judge, floor=5)  # loses entries 2..5
    with pytest.raises(UsageError, match="floor"):
        minimize(w30, w30.make_state("write-cache", 5), judge, floor=5)


def test_errors(w30: CrashSpace, tmp_path: Path) -> None:
    orig = all_lost(w30)
    with pytest.raises(UsageError, match="passes"):
        minimize(w30, orig, lambda s: PASS)
    for bad in (-1, 1.5, True):
        with pytest.raises(UsageError, match="budget"):
            minimize(w30, orig, lost_ack(w30, {9}), budget=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="budget of 0"):
        minimize(w30, orig, lost_ack(w30, {9}), budget=0)
    r = minimize(w30, orig, lost_ack(w30, {9}), budget=0, expected=Outcome("lost-ack", ("x",)))
    assert r.minimized == orig and r.calls == 0 and r.exhausted
    small = space_of(window(3), tmp_path)
    with pytest.raises(UsageError):
        minimize(small, orig, lost_ack(small, {2}))


# -- prefix states ------------------------------------------------------------------------------------------
def test_prefix_bisection_finds_the_earliest_cut(tmp_path: Path) -> None:
    sp = space_of([("w", i, 1, 0, i) for i in range(64)], tmp_path)
    for k in range(64):
        judge: Judge = lambda s, k=k: (  # noqa: E731
            Outcome("corrupt-data", (f"entry {k} present",)) if k < s.cut else PASS
        )
        r = minimize(sp, sp.make_state("no-cache", 64), judge)
        assert (
            r.minimized.id == f"no-cache@{k + 1}"
            and r.calls <= 1 + 6
            and r.one_at_a_time == 64 - k - 1
        )


def test_flush_model_earliest_cut_against_brute_force(tmp_path: Path) -> None:
    ops = [
        ("w", 0, 1, 0, 0),
        ("m", "mkfs"),
        ("w", 1, 2, 0, 1),
        ("f",),
        ("w", 3, 1, FUA, 2),
        ("m", "begin:a"),
        ("w", 4, 1, 0, 3),
        ("w", 5, 1, FLUSH, 4),
        ("m", "ack:a"),
        ("w", 6, 1, FLUSH | FUA, 5),
        ("w", 7, 1, 0, 6),
        ("f",),
        ("m", "ack:b"),
    ]
    sp = space_of(ops, tmp_path)
    cuts = [s.cut for s in sp.states("flush")]
    for k in [i for i in range(sp.n) if sp.is_data[i]]:
        judge: Judge = lambda s, k=k: (  # noqa: E731
            Outcome("lost-ack", ("b",)) if k < s.cut and k not in missing(sp, s) else PASS
        )
        want = min(c for c in cuts if k < c)
        r = minimize(sp, sp.make_state("flush", cuts[-1]), judge)
        assert image_key(sp, r.minimized) == image_key(sp, sp.make_state("flush", want))
        assert sp.state_from_id(r.minimized.id) == r.minimized


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 80), data=st.data())
def test_prefix_bisection_non_monotone(n: int, data: st.DataObject) -> None:
    failing = data.draw(st.sets(st.integers(1, n), min_size=1))
    orig = data.draw(st.sampled_from(sorted(failing)))
    with tempfile.TemporaryDirectory() as d:
        sp = space_of([("w", i, 1, 0, i) for i in range(n)], Path(d))
    counting = Counting(
        sp, lambda s: Outcome("lost-ack", (f"record {s.cut}",)) if s.cut in failing else PASS
    )
    r = minimize(sp, sp.make_state("no-cache", orig), counting)
    assert (
        r.minimized.cut in failing
        and r.minimized.cut <= orig
        and r.minimized.cut - 1 not in failing
    )
    assert r.calls == len(counting.seen) <= 1 + math.ceil(math.log2(orig))


# -- torn states ------------------------------------------------------------------------------------------
TORN_OPS = [
    ("w", 0, 1, 0, 0),
    ("f",),
    ("w", 10, 1, 0, 1),
    ("w", 20, 8, 0, 2),
    ("w", 40, 1, 0, 3),
    ("m", "ack:x"),
]


def sector_lost(sp: CrashSpace, sector: int) -> Judge:
    """corrupt-data when ``ack:x`` is told and a torn write lost this sector."""

    def judge(s: CrashState) -> Outcome:
        bad = [t for t, kept in s.torn if sector not in kept and "x" in s.acks]
        return Outcome("corrupt-data", (f"record at 0x{bad[0] * 4096:x} torn",)) if bad else PASS

    return judge


def test_torn_fewer_lost_sectors(tmp_path: Path) -> None:
    sp = space_of(TORN_OPS, tmp_path)
    orig = sp.make_state("torn", 6, (2, 4), ((3, (0,)),))
    r = minimize(sp, orig, sector_lost(sp, 5))
    assert (r.minimized.id, r.minimized.dropped) == ("torn@6/t3:s0-4,6-7", ())
    assert sp.state_from_id(r.minimized.id) == r.minimized and r.one_at_a_time == 2 + 7


def test_torn_tear_removed(tmp_path: Path) -> None:
    sp = space_of(TORN_OPS, tmp_path)
    r = minimize(sp, sp.make_state("torn", 6, (2, 4), ((3, (0, 1)),)), lost_ack(sp, {3}))
    assert r.minimized.id == "write-cache@6/d3"  # losing the write whole fails the same way


def test_torn_alone_fua_write(tmp_path: Path) -> None:
    sp = space_of([("w", 0, 1, 0, 0), ("m", "ack:x"), ("w", 20, 8, FUA, 2)], tmp_path)
    orig = sp.make_state("torn", 3, (), ((2, (0,)),))
    assert minimize(sp, orig, sector_lost(sp, 5)).minimized.id == "torn@3/s0-4,6-7"
    # the tear does not matter: kept whole (a FUA write cannot be lost), then the cut right after the ack
    assert minimize(sp, orig, lost_ack(sp, set())).minimized.id == "write-cache@2"


# -- the property -------------------------------------------------------------------------------------------
OP = st.one_of(
    st.tuples(st.just("w"), st.integers(1, 4), st.sampled_from([0, 0, 0, FUA, FLUSH, FLUSH | FUA])),
    st.just(("f",)),
    st.tuples(st.just("d"), st.integers(1, 2)),
    st.tuples(st.just("m"), st.sampled_from(["ack:x", "ack:y", "begin:x", "note"])),
)


def concrete(ops: list[tuple]) -> list[tuple]:  # type: ignore[type-arg]
    out: list[tuple] = []  # type: ignore[type-arg]
    for i, op in enumerate(ops):
        out.append(
            ("w", 8 * i, op[1], op[2], i)
            if op[0] == "w"
            else ("d", 8 * i, op[1])
            if op[0] == "d"
            else op
        )
    return out


def mixed(sp: CrashSpace, relevant: set[int], mode: str, need: str | None, sector: int) -> Judge:
    """lost-ack by ``lost_ack``, but corrupt-data when a torn relevant write lost ``sector``."""
    acks = lost_ack(sp, relevant, need=need, mode=mode)

    def judge(s: CrashState) -> Outcome:
        if any(t in relevant and sector not in kept for t, kept in s.torn):
            return Outcome("corrupt-data", (f"torn at {sector}",))
        return acks(s)

    return judge


def neighbours(sp: CrashSpace, s: CrashState) -> Iterator[CrashState]:
    """Every single-step reduction the result must not fail like: one lost write restored, one lost
    sector restored, the tear removed, the cut one earlier (previous model cut for prefix states)."""

    def make(model: str, cut: int, dropped: object = (), torn: object = ()) -> Iterator[CrashState]:
        try:
            yield sp.make_state(model, cut, dropped, torn)  # type: ignore[arg-type]
        except UsageError:
            pass

    for d in s.dropped:
        yield from make(s.model, s.cut, [x for x in s.dropped if x != d], s.torn)
    for t, kept in s.torn:
        for o in set(range(sp.entries[t].nr_sectors)) - set(kept):
            yield from make(s.model, s.cut, s.dropped, [(t, (*kept, o))])
        yield from make("write-cache", s.cut, s.dropped)
        yield from make("write-cache", s.cut, (*s.dropped, t))
    if s.model in ("no-cache", "flush"):
        earlier = [c.cut for c in sp.states(s.model) if c.cut < s.cut]
        if earlier:
            yield from make(s.model, earlier[-1])
    elif s.cut - 1 > (s.torn[0][0] if s.torn else 0):
        yield from make(s.model, s.cut - 1, [x for x in s.dropped if x < s.cut - 1], s.torn)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(OP, min_size=1, max_size=12),
    model=st.sampled_from(MODELS),
    mode=st.sampled_from(["all", "any", "odd"]),
    need=st.sampled_from([None, "x", "x", "y"]),
    sector=st.integers(0, 3),
    data=st.data(),
)
def test_result_fails_the_same_way_and_is_1_minimal(
    ops: list[tuple],
    model: str,
    mode: str,  # type: ignore[type-arg]
    need: str | None,
    sector: int,
    data: st.DataObject,
) -> None:
    ops.insert(data.draw(st.integers(0, len(ops))), ("m", "ack:x"))
    with tempfile.TemporaryDirectory() as d:
        sp = space_of(concrete(ops), Path(d))
    relevant = data.draw(
        st.sets(
            st.sampled_from([i for i in range(sp.n) if sp.is_data[i]] or [0]),
            min_size=1,
            max_size=3,
        )
    )
    judge = mixed(sp, relevant, mode, need, sector)
    failing = [
        s
        for s in sp.states(model, exhaustive_bound=4, samples=4, torn_samples=2)
        if judge(s) != PASS
    ]
    if not failing:
        return
    orig = data.draw(st.sampled_from(failing))
    counting = Counting(sp, judge)
    r = minimize(sp, orig, counting, budget=10**5)
    target = signature(judge(orig))
    assert not r.exhausted and r.signature == target == signature(judge(r.minimized))
    assert r.calls == len(counting.seen) and set(counting.seen.values()) == {1}
    assert sp.state_from_id(r.minimized.id) == r.minimized and r.minimized.cut <= orig.cut
    for smaller in neighbours(sp, r.minimized):
        assert signature(judge(smaller)) != target, (orig.id, r.minimized.id, smaller.id)
    assert minimize(sp, orig, judge, budget=10**5) == r

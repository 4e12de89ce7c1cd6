"""State ids: ranges and runs, the grammar (parse/format round trips, malformed ids), the seeded picks
an ``r`` part names (frozen values: an id must keep its meaning across versions), structured picks,
``resolve``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.states.stateid import (
    MODELS,
    Pick,
    StateId,
    format_id,
    format_ranges,
    not_under,
    parse_id,
    parse_ranges,
    pick_bits,
    resolve,
    runs,
    seeded_index,
    subset_picks,
    tear_picks,
    torn_sample,
    tw_sample,
    wc_sample,
)
from powercut.errors import UsageError

SORTED = st.lists(st.integers(0, 200), max_size=30, unique=True).map(sorted)


# -- ranges --------------------------------------------------------------------------------------------
@given(values=SORTED)
def test_runs_and_ranges_round_trip(values: list[int]) -> None:
    rs = runs(values)
    assert [v for lo, hi in rs for v in range(lo, hi)] == values
    assert all(hi > lo for lo, hi in rs) and all(a[1] < b[0] for a, b in zip(rs, rs[1:]))  # maximal
    assert parse_ranges(format_ranges(values), 201, "x") == tuple(values)


def test_ranges_examples_and_errors() -> None:
    assert (
        runs([]) == []
        and runs([3]) == [(3, 4)]
        and runs([0, 1, 2, 5, 7, 8]) == [(0, 3), (5, 6), (7, 9)]
    )
    assert format_ranges([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8" and format_ranges([]) == ""
    assert parse_ranges("", 5, "x") == ()
    for bad in ["3,2", "1-3,3", "2-1", "0-5"]:
        with pytest.raises(UsageError):
            parse_ranges(bad, 5, "x")
    with pytest.raises(UsageError, match="out of range"):
        parse_ranges("0-99999999999999999", 10, "x")  # refused before expanding


# -- the grammar -----------------------------------------------------------------------------------------
PICK_SUBSET = st.one_of(
    st.builds(Pick, st.sampled_from("dk"), SORTED.map(format_ranges)),
    st.builds(Pick, st.just("r"), st.just(""), st.integers(0, 10**6), st.integers(0, 999)),
)
PICK_TEAR = st.one_of(
    st.builds(Pick, st.just("s"), SORTED.filter(bool).map(format_ranges)),
    st.builds(Pick, st.just("r"), st.just(""), st.integers(0, 10**6), st.integers(0, 999)),
)
IDS = st.one_of(
    st.builds(StateId, st.sampled_from(["no-cache", "flush"]), st.integers(1, 10**9)),
    st.builds(StateId, st.just("write-cache"), st.integers(1, 10**9), st.none() | PICK_SUBSET),
    st.builds(StateId, st.just("torn"), st.integers(1, 10**9), st.none(), PICK_TEAR),
    st.builds(
        StateId,
        st.just("torn"),
        st.integers(1, 10**9),
        st.none() | PICK_SUBSET,
        PICK_TEAR,
        st.integers(0, 10**9),
    ),
)


@settings(max_examples=300)
@given(sid=IDS)
def test_ids_round_trip_through_text(sid: StateId) -> None:
    assert parse_id(sid.text()) == sid
    assert parse_id(f"  {sid.text()}\n") == sid
    assert sid.seeded == ("/r" in sid.text() or ":r" in sid.text())


@pytest.mark.parametrize(
    "text, want",
    [
        ("no-cache@3", StateId("no-cache", 3)),
        ("write-cache@8/k5", StateId("write-cache", 8, Pick("k", "5"))),
        ("write-cache@8/k", StateId("write-cache", 8, Pick("k", ""))),
        ("write-cache@8/r7.3", StateId("write-cache", 8, Pick("r", "", 7, 3))),
        ("torn@6/s0,2", StateId("torn", 6, None, Pick("s", "0,2"))),
        ("torn@6/r0.1", StateId("torn", 6, None, Pick("r", "", 0, 1))),
        ("torn@14/t9:s0-3/d11", StateId("torn", 14, Pick("d", "11"), Pick("s", "0-3"), 9)),
        ("torn@14/t9:r0.2/r0.2", StateId("torn", 14, Pick("r", "", 0, 2), Pick("r", "", 0, 2), 9)),
        ("torn@14/t9:s1", StateId("torn", 14, None, Pick("s", "1"), 9)),
    ],
)
def test_parse_examples(text: str, want: StateId) -> None:
    assert parse_id(text) == want and want.text() == text


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "nocache@1",
        "no-cache",
        "no-cache@",
        "no-cache@-1",
        "no-cache@1x",
        "no-cache@1/d0",
        "flush@2/s0",
        "write-cache@2/s0",
        "write-cache@2/x1",
        "write-cache@2/r0",
        "write-cache@ 2",
        "write-cache@2/d٣",
        "write-cache@2/d1,",
        "write-cache@2/t1:s0",
        "torn@2/d0",
        "torn@2/k",
        "torn@2/t1",
        "torn@2/t1:",
        "torn@2/t1:d0",
        "torn@2/t1:s0/",
        "torn@2/t1:s0/s1",
        "torn@2/t1:s0/d0/d1",
        "torn@2/tx:s0",
        "torn@2/t1:s0/r1",
        "no-cache@12345678901234567890",
        None,
        3,
    ],
)
def test_malformed_ids(bad: object) -> None:
    with pytest.raises(UsageError):
        parse_id(bad)


def test_format_id() -> None:
    assert format_id("write-cache", 8, (), (), ()) == "write-cache@8"
    assert format_id("write-cache", 8, (4,), (), (4, 5, 7)) == "write-cache@8/d4"
    assert format_id("write-cache", 8, (4, 7), (), (4, 5, 7)) == "write-cache@8/k5"
    assert format_id("torn", 6, (), ((5, (0, 2)),), ()) == "torn@6/s0,2"
    assert format_id("torn", 8, (), ((5, (0,)),), (4, 5, 7)) == "torn@8/t5:s0"
    assert format_id("torn", 8, (4,), ((5, (0,)),), (4, 5, 7)) == "torn@8/t5:s0/d4"
    assert format_id("torn", 8, (4, 7), ((5, (0,)),), (4, 5, 7)) == "torn@8/t5:s0/k"


# -- seeded picks: frozen values (these are what existing ids mean) -------------------------------------
def test_seeded_picks_keep_their_meaning() -> None:
    # values computed by the implementation that first issued write-cache@C/rS.N and torn@C/rS.N ids
    assert wc_sample(list(range(3, 13)), 7, 20, 3) == (3, 4, 5, 7, 8, 10, 12)
    assert wc_sample([4, 5, 7], 7, 8, 3) == (4, 5)
    assert torn_sample(3, 0, 6, 0) == (1, 2) and torn_sample(2, 0, 2, 5) == (1,)
    assert (
        torn_sample(64, 1, 5, 2)[:10] == (0, 2, 3, 5, 8, 9, 15, 18, 19, 22)
        and len(torn_sample(64, 1, 5, 2)) == 36
    )
    assert pick_bits([10, 11, 12], 0b101) == (10, 12)


@given(
    m=st.integers(2, 70),
    seed=st.integers(0, 2**63 - 1),
    after=st.integers(1, 10**6),
    n=st.integers(0, 10**4),
)
def test_torn_sample_is_a_proper_subset(m: int, seed: int, after: int, n: int) -> None:
    p = torn_sample(m, seed, after, n)
    assert 0 < len(p) < m and list(p) == sorted(set(p)) and all(0 <= x < m for x in p)
    assert p == torn_sample(m, seed, after, n)


@given(others=SORTED, seed=st.integers(0, 99), n=st.integers(0, 99), count=st.integers(1, 50))
def test_other_seeded_picks(others: list[int], seed: int, n: int, count: int) -> None:
    lost = tw_sample(others, seed, 9, 4, n)
    assert (
        set(lost) <= set(others)
        and list(lost) == sorted(lost)
        and lost == tw_sample(others, seed, 9, 4, n)
    )
    assert 0 <= seeded_index(count, seed, 9, n) < count


# -- structured picks ------------------------------------------------------------------------------------
def test_structured_picks() -> None:
    assert subset_picks([]) == [(), ()]
    assert subset_picks([4, 7]) == [(), (4, 7), (4,), (7,), (7,), (4,)]
    assert tear_picks(2, 0) == [(0,), (1,)]
    assert tear_picks(3, 0) == [(0,), (1, 2), (0, 1)]
    assert tear_picks(3, 3) == [(0,), (1,), (0, 1), (2,), (0, 2), (1, 2)]  # all proper subsets
    assert tear_picks(8, 4) == [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 2, 3, 4, 5, 6), (0,)]


def test_not_under() -> None:
    assert not_under(0, 6, (2, 2), []) == (0, 1, 4, 5)
    assert not_under(0, 6, (2, 2), [(3, 1)]) == (
        0,
        1,
        3,
        4,
        5,
    )  # sector 3 rewritten after the top write
    assert not_under(0, 6, (2, 2), [(2, 2)]) == ()  # the top write wins nowhere
    assert not_under(2, 2, (0, 8), []) == ()  # everywhere: that is losing the write, not tearing it
    assert not_under(0, 4, (10, 2), []) == ()  # no overlap


# -- resolve -------------------------------------------------------------------------------------------
def test_resolve() -> None:
    sectors = {5: 3, 1: 2}.get

    def res(text: str, droppable: tuple[int, ...] = (4, 5, 7)) -> object:
        return resolve(parse_id(text), droppable, lambda i: sectors(i, 0))

    assert res("write-cache@8") == ((), ())
    assert res("write-cache@8/d4,7") == ((4, 7), ())
    assert res("write-cache@8/k5") == ((4, 7), ())
    assert res("write-cache@8/r7.3") == (wc_sample([4, 5, 7], 7, 8, 3), ())
    assert res("torn@6/s0,2") == ((), ((5, (0, 2)),))
    assert res("torn@2/r0.1") == ((), ((1, torn_sample(2, 0, 2, 1)),))
    assert res("torn@8/t5:s1/k") == ((4, 7), ((5, (1,)),))
    assert res("torn@8/t5:r1.2/r3.4") == (
        tw_sample([4, 7], 3, 8, 5, 4),
        ((5, torn_sample(3, 1, 6, 2)),),
    )
    assert res("torn@8/t5:s0-2") == (
        (),
        ((5, (0, 1, 2)),),
    )  # not a proper subset: the model's to refuse
    for bad in [
        "torn@8/t4:s0",
        "torn@8/t5:s3",
        "torn@8/t5:s0/d5",
        "torn@8/t5:s0/d6",
        "torn@8/t9:s0",
        "write-cache@8/d6",
        "write-cache@8/k9",
    ]:
        with pytest.raises(UsageError):
            res(bad)
    assert MODELS == (
        "no-cache",
        "flush",
        "write-cache",
        "torn",
        "torn-4k",
        "lost-write",
        "misdirected-write",
        "corrupt-sector",
        "flush-ignored",
        "unreadable-sector",
    )
    assert parse_id("lost-write@8/w5") == StateId(
        "lost-write", 8, lie="w5"
    )  # the lie's part: core/crashmodels/lies.py
    assert parse_id("flush-ignored@8/r0.2").text() == "flush-ignored@8/r0.2"
    assert parse_id("torn-4k@8/t5:s1").model == "torn-4k" and parse_id("torn@8/s1").model == "torn"

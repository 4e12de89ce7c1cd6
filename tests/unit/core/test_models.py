"""Crash models: exact states on hand-checked logs, closed-form counts, a brute-force oracle for
write-cache coverage, validity/determinism/uniqueness properties, id round trips (the combined torn
ids too), marks that are not ack/begin splitting no state, the CrashSpace (no hidden cache,
thread-safe), torn+write-cache states and blind spot (b) replayed byte-exactly."""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import example as hyp_example
from hypothesis import strategies as st

from powercut.core.log.dmlog import FLUSH, FUA, Entry, LogIndex, open_log
from powercut.core.log.dmlog_writer import LogWriter
from powercut.core.states.coverage import SPACE_CAP, Tally
from powercut.core.states.crashstate import CrashState, state_to_json
from powercut.core.states.models import (
    CrashSpace,
    describe,
    durable_entries,
    enumerate_states,
    make_state,
    state_from_id,
)
from powercut.core.states.stateid import (
    HONEST_MODELS as MODELS,
)  # the power-loss models (lies: test_lies.py)
from powercut.core.states.stateid import format_ranges, tear_picks
from powercut.errors import UsageError
from tests.unit.logops import build_log

S = b"\1" * 512


def build(ops: list, d: str, at: list[int] | None = None) -> LogIndex:  # type: ignore[type-arg]
    """ops: ("w", nr, flags) | ("f",) | ("d", nr) | ("m", text); op i writes/discards at sector
    ``at[i]`` (default i)."""
    p = Path(d) / "m.log"
    with LogWriter(p) as w:
        for i, op in enumerate(ops):
            if op[0] == "w":
                w.write(i if at is None else at[i], S * op[1], op[2])
            elif op[0] == "f":
                w.flush()
            elif op[0] == "d":
                w.discard(i if at is None else at[i], op[1])
            else:
                w.mark(op[1])
    return open_log(p, strict=True)


@pytest.fixture
def example(tmp_path: Path):  # type: ignore[no-untyped-def]
    ops = [
        ("w", 1, 0),
        ("w", 2, 0),
        ("f",),
        ("m", "begin:a"),
        ("w", 1, 0),
        ("w", 3, 0),
        ("w", 1, FUA),
        ("w", 1, 0),
        ("f",),
        ("m", "ack:a"),
        ("d", 2),
        ("m", "dm-log-writes-end"),
    ]
    with build(ops, str(tmp_path)) as idx:
        yield idx


def ids(states: list[CrashState]) -> list[str]:
    return [s.id for s in states]


# -- exact states on a hand-checked log ------------------------------------------------------------
def test_no_cache_and_flush_exact(example: LogIndex) -> None:
    nc = enumerate_states(example, "no-cache")
    assert ids(nc) == [f"no-cache@{c}" for c in range(1, 13)]
    assert all(s.dropped == () and s.torn == () for s in nc)
    assert [s.acks for s in nc] == [()] * 9 + [("a",)] * 3
    assert [s.begun for s in nc] == [()] * 3 + [("a",)] * 6 + [()] * 3
    assert [s.epoch for s in nc] == [0, 0] + [1] * 6 + [2] * 4
    # after FLUSH, FUA and ack/begin marks; not after the end mark (entry 11) any more
    assert ids(enumerate_states(example, "flush")) == [f"flush@{c}" for c in (3, 4, 7, 9, 10)]


def test_write_cache_exact(example: LogIndex) -> None:
    got = [(s.id, s.dropped, s.acks, s.begun) for s in enumerate_states(example, "write-cache")]
    a, b = ("a",), ()
    assert got == [
        ("write-cache@2", (), b, b),
        ("write-cache@2/d0", (0,), b, b),
        ("write-cache@2/d1", (1,), b, b),
        ("write-cache@2/k", (0, 1), b, b),
        # cut 3 (just before begin:a) equals keep-all at cut 2: the empty flush made nothing new durable
        ("write-cache@6", (), b, a),
        ("write-cache@6/d4", (4,), b, a),
        ("write-cache@6/d5", (5,), b, a),
        ("write-cache@6/k", (4, 5), b, a),
        # the FUA entry 6 is durable from cut 7 on; 4, 5, 7 are still in the volatile cache
        ("write-cache@8", (), b, a),
        ("write-cache@8/d4", (4,), b, a),
        ("write-cache@8/d5", (5,), b, a),
        ("write-cache@8/d7", (7,), b, a),
        ("write-cache@8/k", (4, 5, 7), b, a),
        ("write-cache@8/k4", (5, 7), b, a),
        ("write-cache@8/k5", (4, 7), b, a),
        ("write-cache@8/k7", (4, 5), b, a),
        # cut 11 (just before the end mark) is no cut point any more: a mark that is no ack/begin
        ("write-cache@12", (), a, b),
        ("write-cache@12/k", (10,), a, b),
    ]


def test_torn_exact(example: LogIndex) -> None:
    got = [
        (s.id, s.dropped, s.torn)
        for s in enumerate_states(example, "torn")
        if "r" not in s.id.split("@")[1]
    ]
    assert got == [
        # alone: entry cut-1 torn, everything before it kept (unchanged)
        ("torn@2/s0", (), ((1, (0,)),)),
        ("torn@2/s1", (), ((1, (1,)),)),
        # combined at write-cache cut 2: tear 1 (first half), the rest (entry 0) lost
        ("torn@2/t1:s0/k", (0,), ((1, (0,)),)),
        ("torn@6/s0", (), ((5, (0,)),)),
        ("torn@6/s0,2", (), ((5, (0, 2)),)),
        ("torn@6/s0-1", (), ((5, (0, 1)),)),
        ("torn@6/s1", (), ((5, (1,)),)),
        ("torn@6/s1-2", (), ((5, (1, 2)),)),
        ("torn@6/s2", (), ((5, (2,)),)),
        ("torn@6/t5:s0/k", (4,), ((5, (0,)),)),
        # cut 8 (before the second flush): tear 5 with 4 and 7 kept, and with both lost
        ("torn@8/t5:s0", (), ((5, (0,)),)),
        ("torn@8/t5:s0/k", (4, 7), ((5, (0,)),)),
    ]
    seeded = [s for s in enumerate_states(example, "torn") if "r" in s.id.split("@")[1]]
    assert [s.id for s in seeded] == [
        "torn@6/t5:r0.0/r0.0",
        "torn@8/t5:r0.0/r0.0",
        "torn@8/t5:r0.1/r0.1",
        "torn@8/t5:r0.2/r0.2",
    ]
    for s in seeded:
        assert s.torn[0][0] == 5 and set(s.dropped) <= {4, 7} and state_from_id(example, s.id) == s
    assert not [
        s for s in enumerate_states(example, "torn", torn_samples=0) if "r" in s.id.split("@")[1]
    ]


def test_flush_with_payload_is_volatile_unless_fua(tmp_path: Path) -> None:
    with build(
        [("w", 1, 0), ("w", 1, FLUSH), ("w", 1, 0), ("w", 1, FLUSH | FUA), ("w", 1, 0)],
        str(tmp_path),
    ) as idx:
        got = {s.cut: [] for s in enumerate_states(idx, "write-cache")}
        for s in enumerate_states(idx, "write-cache"):
            got[s.cut].append(s.dropped)
    # cut 1: before the PREFLUSH write; cut 3: its payload (1) and 2 may be lost, 0 may not (losing
    # both equals keep-all at cut 1, so that one is not repeated)
    assert got[1] == [(), (0,)] and sorted(got[3]) == [(), (1,), (2,)]
    # cut 5: the FLUSH|FUA write 3 is durable, only 4 may be lost; drop-all equals keep-all at cut 3
    assert sorted(got[5]) == [()] + [(4,)]


# -- closed forms -----------------------------------------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("w"), st.integers(1, 5), st.sampled_from([0, 0, 0, FUA, FLUSH, FLUSH | FUA])
        ),
        st.tuples(st.just("f")),
        st.tuples(st.just("d"), st.integers(1, 4)),
        st.tuples(
            st.just("m"), st.sampled_from(["mkfs", "ack:x", "ack:y", "begin:x", "begin:y", "ack:z"])
        ),
    ),
    max_size=18,
)


def is_key(e: Entry) -> bool:
    return e.mark is not None and e.mark.startswith(("ack:", "begin:"))


def wc_closed_form(entries: tuple[Entry, ...]) -> int:
    """(all k <= exhaustive_bound) sum over cut points of 2**k, minus one for every FLUSH (not the first entry) whose own data
    is not made durable by it: its keep-all-before equals drop-all-after.  Cut points: before ack/begin marks, FLUSH and
    FUA entries with data, and the end (other marks are none)."""
    n = len(entries)
    data = [e.is_write or (e.is_discard and e.nr_sectors > 0) for e in entries]
    total = 0
    for c in range(1, n + 1):
        if c < n and not (
            is_key(entries[c]) or entries[c].is_flush or (entries[c].is_fua and data[c])
        ):
            continue
        last = max([i for i in range(c) if entries[i].is_flush], default=-1)
        total += 2 ** sum(1 for i in range(max(last, 0), c) if data[i] and not entries[i].is_fua)
    return total - sum(
        1 for f, e in enumerate(entries) if f >= 1 and e.is_flush and not (e.is_fua and data[f])
    )


def under_fua(entries: tuple[Entry, ...], s: CrashState) -> bool:
    """s is blind spot (b)'s state: the torn write keeps exactly its sectors that are not under some
    FUA write of its flush window logged before it (and not rewritten in between)."""
    ((t, sectors),) = s.torn
    w = entries[t]
    last_flush = max([i for i in range(s.cut) if entries[i].is_flush], default=0)
    for u in entries[max(last_flush, 0) : t]:
        if u.is_fua and u.is_write:
            top = {x for x in range(u.sector, u.sector + u.nr_sectors)}
            for x in entries[u.index + 1 : t]:
                if x.changes_device:
                    top -= set(range(x.sector, x.sector + x.nr_sectors))
            if tuple(o for o in range(w.nr_sectors) if w.sector + o not in top) == sectors:
                return True
    return False


def torn_closed_form(entries: tuple[Entry, ...], torn_samples: int) -> int:
    """The torn states that tear entry cut-1 with everything before kept (ids torn@C/s.. and torn@C/r..)."""
    total = 0
    for e in entries:
        if e.is_write and e.nr_sectors > 1:
            m = e.nr_sectors
            structured = {2: 2, 3: 3}.get(m, 4)
            total += min(2**m - 2, structured + torn_samples)
    return total


@settings(max_examples=150, deadline=None)
@given(ops=OPS, torn_samples=st.integers(0, 6))
def test_closed_form_counts(ops: list, torn_samples: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(ops, d) as idx:
        e = idx.entries
        assert len(enumerate_states(idx, "no-cache")) == len(e)
        assert len(enumerate_states(idx, "flush")) == sum(
            1 for x in e if x.is_flush or x.is_fua or is_key(x)
        )
        assert len(enumerate_states(idx, "write-cache", exhaustive_bound=20)) == wc_closed_form(e)
        torn = enumerate_states(idx, "torn", torn_samples=torn_samples)
        alone = [s for s in torn if "/t" not in s.id]
        # beyond the closed form only blind-spot-(b) states whose torn write is the last entry: they
        # have the plain id of "entry cut-1 torn, all before kept", with sectors no pick chose
        extra = [
            s
            for s in alone
            if s.torn[0][1] not in tear_picks(e[s.cut - 1].nr_sectors, torn_samples)
            and "/r" not in s.id
        ]
        assert len(alone) - len(extra) == torn_closed_form(e, torn_samples)
        assert all(under_fua(e, s) for s in extra)
        per_cut = Counter(s.cut for s in torn if "/t" in s.id and ":r" in s.id)
        assert all(v <= torn_samples for v in per_cut.values())


# -- write-cache against a brute-force oracle over every cut and every subset ----------------------
def oracle(
    entries: tuple[Entry, ...],
) -> set[tuple[frozenset[int], tuple[str, ...], tuple[str, ...]]]:
    """Every (durable data, acks, begun) a write-back cache can leave at any cut 1..n.  A data entry
    before the cut is forced durable iff it is FUA or a FLUSH entry follows it before the cut."""
    out = set()
    for c in range(1, len(entries) + 1):
        data = [i for i in range(c) if entries[i].changes_device]
        forced = {
            i
            for i in data
            if entries[i].is_fua or any(entries[f].is_flush for f in range(i + 1, c))
        }
        free = [i for i in data if i not in forced]
        acks, begun = keys_before(entries, c)
        for r in range(len(free) + 1):
            for lost in itertools.combinations(free, r):
                out.add((frozenset(data) - set(lost), acks, begun))
    return out


def keys_before(entries: tuple[Entry, ...], cut: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    acks = tuple(
        dict.fromkeys(e.mark[4:] for e in entries[:cut] if e.mark and e.mark.startswith("ack:"))
    )
    begun = tuple(
        dict.fromkeys(
            e.mark[6:]
            for e in entries[:cut]
            if e.mark and e.mark.startswith("begin:") and e.mark[6:] not in acks
        )
    )
    return acks, begun


def content(entries: tuple[Entry, ...], s: CrashState) -> frozenset[int]:
    return frozenset(i for i in range(s.cut) if entries[i].changes_device) - set(s.dropped)


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_write_cache_covers_exactly_the_oracle(ops: list) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(ops, d) as idx:
        e = idx.entries
        states = enumerate_states(idx, "write-cache", exhaustive_bound=20)
        got = {(content(e, s), s.acks, s.begun) for s in states}
        assert got == oracle(e)
        marks_before = [sum(1 for x in e[: s.cut] if is_key(x)) for s in states]
        keyed = [(content(e, s), m) for s, m in zip(states, marks_before)]
        assert len(set(keyed)) == len(keyed), (
            "two states with the same durable data and ack/begin marks"
        )


# -- validity, determinism, uniqueness, ids ----------------------------------------------------------
def assert_valid(entries: tuple[Entry, ...], s: CrashState) -> None:
    assert 1 <= s.cut <= len(entries)
    assert (s.acks, s.begun) == keys_before(entries, s.cut)
    assert s.epoch == sum(1 for x in entries[: s.cut] if x.is_flush)
    last_flush = max([i for i in range(s.cut) if entries[i].is_flush], default=-1)
    for i in s.dropped:
        assert i < s.cut and entries[i].changes_device and not entries[i].is_fua
        assert i >= last_flush, "dropped an entry the last flush made durable"
    assert list(s.dropped) == sorted(set(s.dropped))
    if s.model not in ("write-cache", "torn", "torn-4k"):
        assert s.dropped == ()
    if s.model in ("torn", "torn-4k"):
        ((i, sectors),) = s.torn
        if (
            s.model == "torn-4k"
        ):  # whole device-aligned 4 KiB units (8 sectors), at least two touched
            e = entries[i]
            units = {(e.sector + o) // 8 for o in sectors}
            assert {o for o in range(e.nr_sectors) if (e.sector + o) // 8 in units} == set(sectors)
            assert (e.sector + e.nr_sectors - 1) // 8 > e.sector // 8
        assert i < s.cut and entries[i].is_write and i not in s.dropped
        if (
            i != s.cut - 1 or s.dropped
        ):  # combined with the write cache: a droppable write of the epoch
            assert i >= last_flush and not entries[i].is_fua
        assert 0 < len(sectors) < entries[i].nr_sectors and list(sectors) == sorted(set(sectors))
        assert all(0 <= x < entries[i].nr_sectors for x in sectors)
    else:
        assert s.torn == ()
    if s.model == "flush":
        assert (
            entries[s.cut - 1].is_flush or entries[s.cut - 1].is_fua or is_key(entries[s.cut - 1])
        )


BIG_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(1, 40), st.sampled_from([0, 0, 0, 0, 0, FUA, FLUSH])),
        st.tuples(st.just("f")),
        st.tuples(st.just("m"), st.sampled_from(["ack:p", "begin:q", "ack:q"])),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=BIG_OPS, seed=st.integers(0, 2**32), bound=st.integers(0, 6), samples=st.integers(0, 12))
def test_properties_all_models(ops: list, seed: int, bound: int, samples: int) -> None:  # type: ignore[type-arg]
    kw = {"seed": seed, "exhaustive_bound": bound, "samples": samples, "torn_samples": samples % 5}
    with tempfile.TemporaryDirectory() as d, build(ops, d) as idx:
        e = idx.entries
        for model in MODELS:
            states = enumerate_states(idx, model, **kw)
            assert states == enumerate_states(idx, model, **kw), "not deterministic"
            assert [(s.cut, s.id) for s in states] == sorted((s.cut, s.id) for s in states)
            assert len({s.id for s in states}) == len(states)
            assert len({(s.cut, s.dropped, s.torn) for s in states}) == len(states)
            for s in states:
                assert s.model == model
                assert_valid(e, s)
                assert state_from_id(idx, s.id) == s
                assert state_from_id(list(e), s.id) == s  # also from a plain entry list
            json.dumps([state_to_json(s) for s in states])
            info = describe(states)
            assert info["total"] == len(states) == sum(x["states"] for x in info["epochs"])


def test_sampled_epochs_have_structured_picks_and_seeded_samples(tmp_path: Path) -> None:
    ops = [("w", 1, 0)] * 14 + [("m", "ack:x")]
    with build(ops, str(tmp_path)) as idx:
        states = [
            s for s in enumerate_states(idx, "write-cache", seed=3, samples=20) if s.cut == 14
        ]
        drops = {s.dropped for s in states}
        d = tuple(range(14))
        assert () in drops and d in drops
        assert all((i,) in drops and d[:i] + d[i + 1 :] in drops for i in range(14))
        sampled = [s for s in states if "/r3." in s.id]
        assert len(sampled) == 20 and len(states) == 2 + 28 + 20
        other = {
            s.dropped
            for s in enumerate_states(idx, "write-cache", seed=4, samples=20)
            if "/r4." in s.id
        }
        assert other != {s.dropped for s in sampled}
        more = {s.id for s in enumerate_states(idx, "write-cache", seed=3, samples=40)}
        assert {s.id for s in sampled} <= more, "a sample's id must not depend on the sample count"
        exhaustive = enumerate_states(idx, "write-cache", exhaustive_bound=14)
        assert len([s for s in exhaustive if s.cut == 14]) == 2**14
        info = describe(states)
        assert info["sampled"] == 20 and info["epochs"][0]["max_dropped"] == 14


def test_torn_samples_on_a_large_write(tmp_path: Path) -> None:
    with build([("w", 64, 0)], str(tmp_path)) as idx:
        states = enumerate_states(idx, "torn", seed=1, torn_samples=4)
        got = {s.torn[0][1] for s in states}
        assert {tuple(range(32)), tuple(range(32, 64)), tuple(range(63)), (0,)} <= got
        assert len(states) == 8 and sum("/r1." in s.id for s in states) == 4
        assert enumerate_states(idx, "torn", seed=1) == states
        assert {s.id for s in enumerate_states(idx, "torn", seed=2)} != {s.id for s in states}


# -- sampling tallies (coverage) ------------------------------------------------------------------------
def test_tally_window_at_or_below_the_bound_is_not_sampled(tmp_path: Path) -> None:
    with build([("w", 1, 0)] * 3 + [("m", "ack:x")], str(tmp_path)) as idx:
        t = Tally()
        states = enumerate_states(idx, "write-cache", exhaustive_bound=3, tally=t)
        # cut 3 (before the ack) and cut 4 (the end, acked): 2**3 subsets each
        assert (t.windows, t.sampled_windows, t.generated, t.space) == (2, 0, 0, 0) and len(
            states
        ) == 16


def test_tally_window_above_the_bound_is_sampled_with_its_space(tmp_path: Path) -> None:
    with build([("w", 1, 0)] * 14 + [("m", "ack:x")], str(tmp_path)) as idx:
        t = Tally()
        states = CrashSpace(idx).states("write-cache", seed=3, samples=20, tally=t)
        # cut 14 (before the ack) and cut 15 (the end, acked): 2 + 28 + 20 states of 2**14 each
        assert (t.windows, t.sampled_windows, t.space) == (2, 2, 2 * 2**14)
        assert t.generated == len(states) == 2 * (2 + 28 + 20)
    (tmp_path / "big").mkdir()
    with build([("w", 1, 0)] * 70, str(tmp_path / "big")) as idx:
        big = Tally()  # a window of 70 entries: its space saturates
        n = len(CrashSpace(idx).states("write-cache", samples=4, tally=big))
        assert big.space == SPACE_CAP and big.generated == n == 2 + 140 + 4


def test_tallies_of_a_hand_made_log(example: LogIndex) -> None:
    """Cut points 2, 3, 6, 8, 9, 12 with pools {0,1}, {}, {4,5}, {4,5,7}, {}, {10}; tearable writes
    1 (2 sectors) and 5 (3 sectors)."""

    def tally(model: str, **kw: int) -> tuple[int, int, int, int, int]:
        t = Tally()
        n = len(enumerate_states(example, model, tally=t, **kw))
        return t.windows, t.sampled_windows, t.generated, t.space, n

    assert tally("write-cache") == (6, 0, 0, 0, 18)
    assert tally("write-cache", exhaustive_bound=2) == (6, 1, 8, 8, 18)  # cut 8: 8 of 2**3
    # torn: alone at cuts 2 and 6 (every tear: 2 and 6 of them), combined at cuts 2, 6, 8:
    # (2**2-2) * 2**1 + (2**3-2) * 2**1 + (2**3-2) * 2**2 = 4 + 12 + 24
    assert tally("torn") == (5, 3, 8, 40, 16)
    # no seeded tears: the alone window at cut 6 (3 of its 6 tears) is sampled too
    assert tally("torn", torn_samples=0) == (5, 4, 7, 46, 9)
    assert tally("torn-4k") == (0, 0, 0, 0, 0)  # no write spans two 4 KiB units
    assert tally("no-cache") == (0, 0, 0, 0, 12)


# -- ids and validation --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        "",
        "nocache@1",
        "no-cache",
        "no-cache@",
        "no-cache@0",
        "no-cache@13",
        "no-cache@-1",
        "no-cache@1x",
        "no-cache@1/d0",
        "flush@1",
        "flush@2",
        "write-cache@2/d5",
        "write-cache@2/d1,0",
        "write-cache@2/d0-1,1",
        "write-cache@2/x1",
        "write-cache@2/s0",
        "write-cache@12/d0",
        "write-cache@2/d99999999999999999999",
        "torn@1/s0",
        "torn@2/s0-1",
        "torn@2/s",
        "torn@2/s2",
        "torn@3/s0",
        "torn@2/d0",
        "torn@1/r0.1",
        "no-cache@1/r0.1",
        "write-cache@2/r0",
        "write-cache@ 2",
        "write-cache@2/d٣",
    ],
)
def test_bad_ids(example: LogIndex, bad: str) -> None:
    with pytest.raises(UsageError):
        state_from_id(example, bad)


def test_ids_normalize_and_samples_rebuild(example: LogIndex) -> None:
    assert state_from_id(example, "write-cache@8/d4,5").id == "write-cache@8/k7"
    assert state_from_id(example, "write-cache@8/d").id == "write-cache@8"
    assert state_from_id(example, "write-cache@5").dropped == ()  # any cut 1..n is a valid state
    s = state_from_id(example, "write-cache@8/r7.3")
    assert s.id == "write-cache@8/r7.3" and s == state_from_id(example, "write-cache@8/r7.3")
    assert set(s.dropped) <= {4, 5, 7}
    for j in range(40):  # a seeded pick is always a proper non-empty subset, even of 2 sectors
        for cut, m in ((2, 2), (6, 3)):
            t = state_from_id(example, f"torn@{cut}/r0.{j}")
            assert 0 < len(t.torn[0][1]) < m and t.id == f"torn@{cut}/r0.{j}"


def test_make_state_and_durable_entries(example: LogIndex) -> None:
    s = make_state(example, "write-cache", 8, [7, 4])
    assert s.id == "write-cache@8/k5" and s.dropped == (4, 7)  # shorter as "keep only 5"
    assert [(e.index, t) for e, t in durable_entries(example, s)] == [
        (0, None),
        (1, None),
        (5, None),
        (6, None),
    ]
    t = make_state(example, "torn", 6, (), [(5, [2, 0])])
    assert t.id == "torn@6/s0,2"
    assert [(e.index, x) for e, x in durable_entries(example, t)][-1] == (5, (0, 2))
    for args in [
        ("write-cache", 8, [6]),
        ("write-cache", 8, [3]),
        ("no-cache", 3, [1]),
        ("torn", 6, (), [(4, [0])]),
        ("torn", 6, (), [(5, [0, 1, 2])]),
        ("flush", 1),
        ("bogus", 1),
        ("no-cache", 0),
    ]:
        with pytest.raises(UsageError):
            make_state(example, *args)  # type: ignore[arg-type]


def test_unknown_model_and_bad_parameters(example: LogIndex) -> None:
    with pytest.raises(UsageError, match="no-cache, flush, write-cache, torn"):
        enumerate_states(example, "writecache")
    for kw in [{"seed": -1}, {"exhaustive_bound": 21}, {"samples": -1}, {"torn_samples": True}]:
        with pytest.raises(UsageError):
            enumerate_states(example, "write-cache", **kw)  # type: ignore[arg-type]


def test_empty_log_and_json(tmp_path: Path, example: LogIndex) -> None:
    with build([], str(tmp_path)) as idx:
        assert all(enumerate_states(idx, m) == [] for m in MODELS)
        assert describe([]) == {"total": 0, "models": {}, "cuts": 0, "sampled": 0, "epochs": []}
    s = enumerate_states(example, "write-cache")[5]
    j = state_to_json(s)
    assert j == {
        "id": "write-cache@6/d4",
        "model": "write-cache",
        "cut": 6,
        "epoch": 1,
        "dropped": [4],
        "torn": [],
        "acks": [],
        "begun": ["a"],
    }
    assert format_ranges([1, 2, 3, 5, 7, 8]) == "1-3,5,7-8"


def test_describe_per_epoch(example: LogIndex) -> None:
    info = describe(enumerate_states(example, "write-cache"))
    assert info["total"] == 18 and info["cuts"] == 4 and info["models"] == {"write-cache": 18}
    assert [
        (x["epoch"], x["states"], x["cuts"], x["first_cut"], x["last_cut"]) for x in info["epochs"]
    ] == [(0, 4, 1, 2, 2), (1, 12, 2, 6, 8), (2, 2, 1, 12, 12)]
    torn = describe(enumerate_states(example, "torn"))
    assert torn["sampled"] == 4  # the seeded combined ids count as sampled
    mixed = [s for m in MODELS for s in enumerate_states(example, m)]
    assert describe(iter(mixed)) == describe(mixed)  # one pass: a stream needs no list
    assert describe(CrashSpace(example).iter_states("torn")) == torn
    d = describe(mixed)
    assert d["total"] == len(mixed) and d["cuts"] == len({s.cut for s in mixed})
    assert sum(e["states"] for e in d["epochs"]) == len(mixed) and d["models"] == dict(
        Counter(s.model for s in mixed)
    )
    for e in d["epochs"]:
        group = [s for s in mixed if s.epoch == e["epoch"]]
        assert e["max_dropped"] == max(len(s.dropped) for s in group) and e["cuts"] == len(
            {s.cut for s in group}
        )


# -- marks that are not ack/begin split no state ---------------------------------------------------
NOTE_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(1, 4), st.sampled_from([0, 0, 0, FUA, FLUSH])),
        st.tuples(st.just("f")),
        st.tuples(st.just("d"), st.integers(1, 3)),
        st.tuples(st.just("m"), st.sampled_from(["ack:x", "begin:x", "ack:y", "begin:y"])),
    ),
    max_size=12,
)


def signature(entries: tuple[Entry, ...], s: CrashState, origin: list[int]) -> tuple[object, ...]:
    """A state in terms of the original ops (entry index -> op index), independent of inserted notes."""
    return (
        frozenset(origin[i] for i in content(entries, s)),
        tuple((origin[i], x) for i, x in s.torn),
        s.acks,
        s.begun,
    )


@settings(max_examples=80, deadline=None)
@given(ops=NOTE_OPS, where=st.lists(st.integers(0, 12), max_size=5), bound=st.integers(0, 4))
@hyp_example(
    ops=[
        ("f",),
        ("f",),
        ("w", 1, 0),
        ("f",),
        ("f",),
        ("f",),
        ("f",),
        ("w", 2, FUA),
        ("w", 2, 0),
        ("w", 1, 0),
    ],
    where=[8],
    bound=0,
)  # write 8 overlaps the FUA write 7: a blind-spot-(b) state in both logs
def test_notes_add_no_states(ops: list, where: list[int], bound: int) -> None:  # type: ignore[type-arg]
    """Inserting marks that are not ack/begin anywhere (mkfs, a workload's notes) changes no model's
    set of (durable data, torn, acks, begun) and, but for no-cache's every-prefix, no count.  The
    empty state (nothing written, nothing acked) is left aside: a leading note gives it a cut.
    Each op keeps its sector in the noted log (a shifted write could gain or lose an overlap with a
    FUA write, and so blind spot (b)'s torn state: another disk, not the same one with a note)."""
    assume(ops)  # an empty log has no cut at all; one with only notes has the empty state
    noted = list(ops)
    for k, pos in enumerate(sorted(where, reverse=True)):
        noted.insert(min(pos, len(noted)), ("m", f"note {k}"))
    kw = {
        "exhaustive_bound": bound,
        "samples": 0,
        "torn_samples": 0,
    }  # seeded picks are keyed by cut number
    origin = [i for i, op in enumerate(noted) if op[0] != "m" or not op[1].startswith("note")]
    back = {new: old for old, new in enumerate(origin)}
    with (
        tempfile.TemporaryDirectory() as d,
        build(ops, d) as plain,
        tempfile.TemporaryDirectory() as d2,
        build(noted, d2, [back.get(i, 0) for i in range(len(noted))]) as idx,
    ):
        for model in MODELS:
            a = enumerate_states(plain, model, **kw)
            b = enumerate_states(idx, model, **kw)
            empty = (frozenset(), (), (), ())
            a = [
                s
                for s in a
                if signature(plain.entries, s, list(range(len(plain.entries)))) != empty
            ]
            b = [
                s
                for s in b
                if signature(idx.entries, s, [back.get(i, -1) for i in range(len(idx.entries))])
                != empty
            ]
            sig_a = {signature(plain.entries, s, list(range(len(plain.entries)))) for s in a}
            sig_b = {
                signature(idx.entries, s, [back.get(i, -1) for i in range(len(idx.entries))])
                for s in b
            }
            assert sig_a == sig_b, model
            if model != "no-cache":
                assert len(a) == len(b), model


# -- the CrashSpace ---------------------------------------------------------------------------------------
def test_no_hidden_cache_and_a_space_is_reusable(example: LogIndex) -> None:
    import powercut.core.states.models as models

    assert not any(
        isinstance(v, (list, dict)) and not k.startswith("__") and k not in ("__all__",)
        for k, v in vars(models).items()
    ), "module-level mutable state"
    sp = CrashSpace(example)
    for model in MODELS:
        states = sp.states(model)
        assert states == enumerate_states(example, model) == enumerate_states(sp, model)
        assert all(sp.state_from_id(s.id) == s == state_from_id(sp, s.id) for s in states)
    assert models.space(sp) is sp and models.space(example) is not models.space(example)
    lst = list(example.entries)
    sp2 = CrashSpace(lst)
    lst.pop()  # the space copied the entries: a list changing afterwards does not change it
    assert sp2.n == len(example.entries)
    with pytest.raises(UsageError, match="not a log's entry list"):
        CrashSpace(list(example.entries[1:]))


def test_space_is_thread_safe(tmp_path: Path) -> None:
    ops = [
        op
        for k in range(60)
        for op in (("w", 2, 0), ("m", f"begin:{k}"), ("f",), ("m", f"ack:{k}"))
    ]
    with build(ops, str(tmp_path)) as idx:
        sp = CrashSpace(idx)
        want = {m: CrashSpace(idx).states(m, exhaustive_bound=3) for m in MODELS}
        results: list[object] = []
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                for m in MODELS[k % 4 :] + MODELS[: k % 4]:
                    cuts = range(len(idx), 0, -1) if k % 2 else range(1, len(idx) + 1)
                    keys = [sp.keys(c) for c in cuts]  # backwards and forwards at once
                    results.append(
                        (m, sp.states(m, exhaustive_bound=3), keys[::-1] if k % 2 else keys)
                    )
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        first = [CrashSpace(idx).keys(c) for c in range(1, len(idx) + 1)]
        assert all(states == want[m] and keys == first for m, states, keys in results)  # type: ignore[misc]


@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_key_version_names_the_keys(ops: list) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(ops, d) as idx:
        sp = CrashSpace(idx)
        e = idx.entries
        for c1 in range(len(e) + 1):
            assert sp.keys(c1) == keys_before(e, c1)
            for c2 in range(c1, len(e) + 1):
                assert (sp.key_version[c1] == sp.key_version[c2]) == (
                    keys_before(e, c1) == keys_before(e, c2)
                )


# -- torn writes combined with the write cache -------------------------------------------------------------
def test_combined_torn_ids(example: LogIndex) -> None:
    s = state_from_id(example, "torn@8/t5:s0/d4")
    assert (s.cut, s.dropped, s.torn, s.id) == (8, (4,), ((5, (0,)),), "torn@8/t5:s0/d4")
    assert state_from_id(example, "torn@8/t5:s0-1/k4").dropped == (7,)
    assert state_from_id(example, "torn@8/t5:s2/d4,7").id == "torn@8/t5:s2/k"  # shorter form
    assert state_from_id(example, "torn@8/t5:s0/k4,7").id == "torn@8/t5:s0"  # nothing lost
    assert state_from_id(example, "torn@6/t5:s0,2").id == "torn@6/s0,2"  # = the plain torn id
    assert state_from_id(example, "torn@6/t5:s0,2") == state_from_id(example, "torn@6/s0,2")
    r = state_from_id(example, "torn@8/t5:r3.1/r3.2")
    assert r.id == "torn@8/t5:r3.1/r3.2" and r.torn[0][0] == 5 and set(r.dropped) <= {4, 7}
    assert make_state(example, "torn", 8, [4], [(5, [1])]).id == "torn@8/t5:s1/d4"
    for bad in [
        "torn@8/t6:s0",
        "torn@8/t1:s0",
        "torn@8/t5:s0/d6",
        "torn@8/t5:s0/d5",
        "torn@8/t5:s0-2",
        "torn@4/t5:s0",
        "torn@8/t5:s",
        "torn@8/t5:s0/",
        "torn@8/t5:d4",
        "torn@8/t5:s0/s1",
        "torn@8/t5",
        "torn@8/t:s0",
        "torn@8/t5:s0/d99999999999",
        "write-cache@8/t5:s0/d4",
        "torn@8/t99999999999999999999:s0",
        "torn@2/t1:s0/d1",
    ]:
        with pytest.raises(UsageError):
            state_from_id(example, bad)
    for args in [
        ("torn", 8, [4], [(6, [0])]),
        ("torn", 8, [5], [(5, [0])]),
        ("torn", 3, [0], [(1, [0])]),
        ("torn", 8, [], [(5, [0]), (1, [0])]),
    ]:
        with pytest.raises(UsageError):
            make_state(example, *args)  # type: ignore[arg-type]


def test_blind_spot_b_fua_on_top(tmp_path: Path) -> None:
    """A FUA write U logged before an overlapping plain write W of its window: besides "W on top"
    (log order) there is a torn state whose image has U's data on top; it and the other combined
    torn states materialize exactly as the from-scratch reference."""
    import hashlib

    from powercut.replay.materialize import materialize, reference_image

    ops = [
        ("w", 0, 8, 0, 1),
        ("f",),
        ("w", 2, 2, FUA, 50),
        ("m", "ack:u"),
        ("w", 0, 6, 0, 100),
        ("w", 10, 2, 0, 200),
        ("f",),
    ]
    with build_log(tmp_path / "l.bin", ops) as idx:
        states = enumerate_states(idx, "torn", torn_samples=0)
        mine = [s for s in states if s.torn == ((4, (0, 1, 4, 5)),) and s.dropped == ()]
        assert [s.id for s in mine] == ["torn@6/t4:s0-1,4-5"]
        img = reference_image(idx, mine[0], 16 * 512, tmp_path / "ref.img").read_bytes()
        sector = [img[k * 512] for k in range(12)]
        assert sector == [
            101,
            102,
            51,
            52,
            105,
            106,
            8,
            9,
            0,
            0,
            201,
            202,
        ]  # U (fill 50) on top of W (fill 100)
        assert state_from_id(idx, mine[0].id) == mine[0]
        with_samples = enumerate_states(
            idx, "torn"
        )  # seeded picks may hit the same state: it is there once
        assert (
            len([s for s in with_samples if (s.cut, s.dropped, s.torn) == (6, (), mine[0].torn)])
            == 1
        )
        combined = [s for s in with_samples if s.dropped or s.torn[0][0] != s.cut - 1]
        assert any(s.dropped for s in combined) and any(":r" in s.id for s in combined)
        for s, got in materialize(idx, None, 16 * 512, with_samples, tmp_path, "copy"):
            ref = reference_image(idx, s, 16 * 512, tmp_path / "ref.img")
            assert (
                hashlib.sha256(got.read_bytes()).digest()
                == hashlib.sha256(ref.read_bytes()).digest()
            ), s.id


REPLAY_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("w"),
            st.integers(0, 12),
            st.integers(1, 4),
            st.sampled_from([0, 0, 0, FUA, FLUSH]),
            st.integers(0, 250),
        ),
        st.tuples(st.just("f")),
        st.tuples(st.just("d"), st.integers(0, 12), st.integers(1, 3)),
        st.tuples(st.just("m"), st.sampled_from(["ack:a", "begin:b", "ack:b", "note"])),
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=25, deadline=None)
@given(ops=REPLAY_OPS, seed=st.integers(0, 99))
def test_combined_torn_states_replay_exactly(ops: list, seed: int) -> None:  # type: ignore[type-arg]
    """materialize (incremental walk + clone + extras) and reference_image (from entry 0) agree on
    every torn state, the combined ones included (torn entry not cut-1, entries lost)."""
    import hashlib

    from powercut.replay.materialize import materialize, reference_image

    with tempfile.TemporaryDirectory() as d:
        with build_log(Path(d) / "l.bin", ops) as idx:
            states = enumerate_states(idx, "torn", seed=seed, torn_samples=3)
            size = 16 * 512
            for state, img in materialize(idx, None, size, states, Path(d), "copy"):
                ref = reference_image(idx, state, size, Path(d) / "ref.img")
                assert (
                    hashlib.sha256(img.read_bytes()).digest()
                    == hashlib.sha256(ref.read_bytes()).digest()
                ), state.id


def test_torn_4k_tears_only_between_aligned_4k_units(tmp_path: Path) -> None:
    # entry 0: 8 sectors at sector 8 (one aligned 4 KiB unit); entry 1: 8 sectors at sector 20 (two
    # units, 4 + 4 sectors); entry 2: 24 sectors at 32 (three units)
    with build([("w", 8, 0), ("w", 8, 0), ("w", 24, 0)], str(tmp_path), at=[8, 20, 32]) as idx:
        sp = CrashSpace(idx)
        alone = {s.cut: [] for s in sp.states("torn-4k")}
        for s in sp.states(
            "torn-4k"
        ):  # 3 units: every proper subset (6 <= 3 structured + 4 samples)
            alone[s.cut].append(s)
        assert 1 not in alone  # a single aligned 4 KiB write never tears
        two = {tuple(s.torn[0][1]) for s in alone[2] if s.torn[0][0] == 1 and not s.dropped}
        assert two == {(0, 1, 2, 3), (4, 5, 6, 7)}
        three = {tuple(s.torn[0][1]) for s in alone[3] if s.torn[0][0] == 2 and not s.dropped}
        units = [tuple(range(8 * k, 8 * k + 8)) for k in range(3)]
        assert three == {
            sum((units[k] for k in ks), ()) for ks in [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]
        }
        first_last = next(s for s in alone[3] if s.torn == ((2, units[0] + units[2]),))
        assert first_last.id == "torn-4k@3/s0,2" and sp.state_from_id(first_last.id) == first_last
        for s in sp.states("torn-4k"):  # seeded ones included: every id rebuilds its state
            assert sp.state_from_id(s.id).torn == s.torn
        with pytest.raises(UsageError, match="4096-byte units"):
            sp.make_state("torn-4k", 3, (), [(2, [0])])
        # the sector model still tears inside the aligned block
        assert any(s.cut == 1 for s in sp.states("torn"))

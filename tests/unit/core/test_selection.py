"""Selection: the floor mark, each disk image judged once (the key against a brute-force durable
set, equal keys give byte-identical reference images, flush and write-cache keep-all collapse),
counts that add up, and max_states spread fairly and deterministically over the models."""

from __future__ import annotations

import hashlib
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.crashmodels.lies import with_lie
from powercut.core.log.dmlog import FLUSH, FUA, LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace, durable_entries, enumerate_states
from powercut.core.states.selection import Selection, fair_shares, select, spread
from powercut.core.states.shard import Shard
from powercut.core.states.stateid import MODELS
from powercut.core.states.statelist import StateList
from powercut.errors import UsageError
from powercut.replay.materialize import materialize, reference_image
from tests.unit.logops import build_log

SIZE = 16 * 512
KW = {"bound": 4, "samples": 3, "torn_samples": 2}


def build(path: Path, ops: list[tuple]) -> LogIndex:  # type: ignore[type-arg]
    return build_log(path, ops, 512)


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("w"),
            st.integers(0, 12),
            st.integers(1, 4),
            st.sampled_from([0, 0, 0, FUA, FLUSH]),
            st.integers(0, 3),
        ),  # few fills: different entries often write the same bytes
        st.tuples(st.just("f")),
        st.tuples(st.just("d"), st.integers(0, 12), st.integers(1, 3)),
        st.tuples(
            st.just("m"), st.sampled_from(["ack:a", "begin:b", "ack:b", "begin:a", "note", "mkfs"])
        ),
    ),
    min_size=1,
    max_size=12,
)


def truth(idx: LogIndex, s: CrashState) -> tuple[object, ...]:
    """What a state replays and tells the checker, computed the slow way (a lying disk's misdirected
    copy as a write at its sector; a flipped or unreadable sector as itself)."""
    rot = s.lie if s.lie is not None and s.lie.kind != "misdirect" else None
    return (
        tuple((e.index, e.sector, x) for e, x in with_lie(s, idx.entries, durable_entries(idx, s))),
        rot,
        s.acks,
        s.begun,
    )


def all_states(idx: LogIndex, seed: int = 0) -> list[CrashState]:
    return [
        s
        for m in MODELS
        for s in enumerate_states(idx, m, seed=seed, exhaustive_bound=4, samples=3, torn_samples=2)
    ]


def sha(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


# -- the key ------------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_key_equal_iff_same_durable_data_and_keys(ops: list) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        states = all_states(idx)
        by_key: dict[object, set[object]] = defaultdict(set)
        by_truth: dict[object, set[object]] = defaultdict(set)
        for s in states:
            by_key[image_key(sp, s)].add(truth(idx, s))
            by_truth[truth(idx, s)].add(image_key(sp, s))
        assert all(len(v) == 1 for v in by_key.values()), "one key, two contents"
        assert all(len(v) == 1 for v in by_truth.values()), "one content, two keys"


@settings(max_examples=30, deadline=None)
@given(ops=OPS, seed=st.integers(0, 9))
def test_equal_keys_give_identical_images(ops: list, seed: int) -> None:  # type: ignore[type-arg]
    """Brute force: every state's from-scratch reference image; states with one key share one image.
    The representatives materialized incrementally give the same bytes too."""
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        images: dict[object, set[bytes]] = defaultdict(set)
        for s in all_states(idx, seed):
            images[image_key(sp, s)].add(sha(reference_image(idx, s, SIZE, Path(d) / "ref.img")))
        assert all(len(v) == 1 for v in images.values())
        sel = select(sp, MODELS, seed=seed, floor_mark=None, **KW)
        for s, img in materialize(idx, None, SIZE, list(sel.states), Path(d), "copy"):
            assert {sha(img)} == images[image_key(sp, s)], s.id


def test_flush_and_write_cache_keep_all_collapse(tmp_path: Path) -> None:
    ops = [
        ("w", 0, 2, 0, 1),
        ("m", "begin:a"),
        ("w", 4, 1, 0, 2),
        ("f",),
        ("m", "ack:a"),
        ("w", 6, 1, FUA, 3),
    ]
    with build(tmp_path / "l.bin", ops) as idx:
        sel = select(idx, ["flush", "write-cache"], floor_mark=None)
        ids = {s.id for s in sel.states}
        # flush@5 (after ack:a) has what write-cache@5 keeps with everything kept: one image
        assert "flush@5" in ids and "write-cache@5" not in ids
        assert "write-cache@5" in sel.aliases["flush@5"]
        # just before the flush, keep-all = right after it; losing entry 2 = right after begin:a
        assert (
            "write-cache@3" in sel.aliases["flush@4"]
            and "write-cache@3/d2" in sel.aliases["flush@2"]
        )
        assert sel.counts["write-cache"].distinct > sel.counts["write-cache"].owned > 0
        # the other order: write-cache first represents, flush states become its aliases
        rev = select(idx, ["write-cache", "flush"], floor_mark=None)
        assert (
            "write-cache@5" in {s.id for s in rev.states}
            and "flush@5" in rev.aliases["write-cache@5"]
        )
        assert rev.counts["flush"].owned == 0 and rev.counts["flush"].judged == 0


# -- the floor ------------------------------------------------------------------------------------------
def test_floor_keeps_only_states_after_a_whole_mkfs(tmp_path: Path) -> None:
    ops = [
        ("w", 0, 2, 0, 1),
        ("f",),
        ("w", 8, 2, 0, 2),
        ("m", "mkfs"),
        ("w", 10, 2, 0, 3),
        ("f",),
        ("m", "ack:0"),
        ("w", 12, 2, 0, 4),
    ]
    with build(tmp_path / "l.bin", ops) as idx:
        mkfs = idx.find_mark("mkfs")
        sel = select(idx, MODELS, **KW)
        assert sel.floor == mkfs and sel.states
        sp = CrashSpace(idx)
        every = [
            s for m in MODELS for s in sp.states(m, exhaustive_bound=4, samples=3, torn_samples=2)
        ]
        by_id = {s.id: s for s in every}
        chosen = list(sel.states) + [by_id[a] for v in sel.aliases.values() for a in v]
        for s in chosen:
            assert (
                s.cut > mkfs
                and all(d > mkfs for d in s.dropped)
                and all(t > mkfs for t, _ in s.torn)
            )
        assert sum(c.below_floor for c in sel.counts.values()) == len(every) - len(chosen) > 0
        nofloor = select(idx, MODELS, floor_mark=None, **KW)
        assert nofloor.floor is None and len(nofloor.states) > len(sel.states)
        assert select(idx, MODELS, floor_mark="no such mark", **KW).states == nofloor.states


# -- counts and invariants --------------------------------------------------------------------------------
def check_selection(idx: LogIndex, sel: Selection, models: list[str], cap: int) -> None:
    sp = CrashSpace(idx)
    every = {
        m: [s for s in sp.states(m, exhaustive_bound=4, samples=3, torn_samples=2)] for m in models
    }
    by_id = {s.id: s for v in every.values() for s in v}
    after = {
        m: [
            s
            for s in v
            if sel.floor is None
            or (
                s.cut > sel.floor
                and all(d > sel.floor for d in s.dropped)
                and all(t > sel.floor for t, _ in s.torn)
            )
        ]
        for m, v in every.items()
    }
    keys = {image_key(sp, s) for v in after.values() for s in v}
    c = sel.counts
    assert list(c) == models
    assert all(
        c[m].generated == len(after[m]) and c[m].below_floor == len(every[m]) - len(after[m])
        for m in models
    )
    assert all(c[m].distinct == len({image_key(sp, s) for s in after[m]}) for m in models)
    assert sum(x.owned for x in c.values()) == len(keys)
    assert sum(x.generated for x in c.values()) == len(keys) + sum(map(len, sel.aliases.values()))
    assert (
        sum(x.judged for x in c.values())
        == len(sel.states)
        == (min(cap, len(keys)) if cap else len(keys))
    )
    assert sel.left_out == {m: c[m].owned - c[m].judged for m in models}
    assert len({image_key(sp, s) for s in sel.states}) == len(sel.states), "an image judged twice"
    order = [s.id for m in models for s in after[m]]
    pos = {sid: i for i, sid in enumerate(order)}
    for rep, aliases in sel.aliases.items():
        for a in aliases:
            assert image_key(sp, by_id[a]) == image_key(sp, by_id[rep]) and pos[rep] < pos[a]
    assert [pos[s.id] for s in sel.states] == sorted(
        pos[s.id] for s in sel.states
    )  # model order, then own order


@settings(max_examples=80, deadline=None)
@given(
    ops=OPS,
    cap=st.integers(0, 12),
    models=st.permutations(MODELS).flatmap(lambda p: st.integers(1, 4).map(lambda k: list(p[:k]))),
    floor=st.sampled_from(["mkfs", None]),
)
def test_counts_add_up(ops: list, cap: int, models: list[str], floor: str | None) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sel = select(idx, models, max_states=cap, floor_mark=floor, **KW)
        check_selection(idx, sel, models, cap)
        again = select(CrashSpace(idx), models, max_states=cap, floor_mark=floor, **KW)
        assert (
            again.states == sel.states
            and again.aliases == sel.aliases
            and again.counts == sel.counts
        )


# -- max_states -----------------------------------------------------------------------------------------
@given(sizes=st.lists(st.integers(0, 50), max_size=6), n=st.integers(0, 200))
def test_fair_shares(sizes: list[int], n: int) -> None:
    got = fair_shares(sizes, n)
    assert got == fair_shares(sizes, n)
    assert all(0 <= g <= s for g, s in zip(got, sizes))
    assert sum(got) == (sum(sizes) if n == 0 else min(n, sum(sizes)))
    for i, gi in enumerate(got):  # max-min fair: a group below another one is full
        for j, gj in enumerate(got):
            if gi < gj:
                assert gi == sizes[i] or (gj - gi == 1 and j < i), (sizes, n, got)


@given(count=st.integers(0, 300), q=st.integers(0, 300))
def test_spread(count: int, q: int) -> None:
    got = spread(count, q)
    assert (
        len(got) == min(count, q) and got == sorted(set(got)) and all(0 <= x < count for x in got)
    )
    if 2 <= q < count:
        assert got[0] == 0 and got[-1] == count - 1
        gaps = [b - a for a, b in zip(got, got[1:])]
        assert max(gaps) - min(gaps) <= 1


def test_max_states_is_spread_over_models(tmp_path: Path) -> None:
    """Many flush states and a write-cache that comes second: a cap still judges write-cache states,
    early and late ones (before: the first N in model order, no write-cache state at all)."""
    ops: list[tuple] = [("w", 0, 4, 0, 1), ("f",), ("m", "mkfs")]  # type: ignore[type-arg]
    for k in range(40):
        ops += [
            ("w", k % 12, 2, 0, k),
            ("w", 12 + k % 3, 1, 0, k),
            ("m", f"begin:{k}"),
            ("f",),
            ("m", f"ack:{k}"),
        ]
    with build(tmp_path / "l.bin", ops) as idx:
        full = select(idx, ["flush", "write-cache"], bound=3)
        owned = {m: c.owned for m, c in full.counts.items()}
        assert owned["flush"] > 30 and owned["write-cache"] > 30
        sel = select(idx, ["flush", "write-cache"], bound=3, max_states=30)
        assert len(sel.states) == 30
        assert {m: c.judged for m, c in sel.counts.items()} == {"flush": 15, "write-cache": 15}
        assert sel.left_out == {m: owned[m] - 15 for m in owned}
        wc = [s for s in full.states if s.model == "write-cache"]
        chosen = [s for s in sel.states if s.model == "write-cache"]
        assert chosen[0] == wc[0] and chosen[-1] == wc[-1]  # early and late cuts both judged
        assert select(idx, ["flush", "write-cache"], bound=3, max_states=30) == sel
        check_selection(idx, sel, ["flush", "write-cache"], 30)
        # a model that needs fewer leaves its share to the others
        few = select(idx, ["no-cache", "flush", "write-cache"], bound=3, max_states=200)
        assert (
            few.counts["flush"].owned == 0
            and few.counts["no-cache"].judged + few.counts["write-cache"].judged == 200
        )


def test_bad_arguments(tmp_path: Path) -> None:
    with build(tmp_path / "l.bin", [("w", 0, 1, 0, 1)]) as idx:
        with pytest.raises(UsageError):
            select(idx, [])
        with pytest.raises(UsageError):
            select(idx, ["bogus"])
        for bad in (-1, True, 1.5):
            with pytest.raises(UsageError):
                select(idx, ["flush"], max_states=bad)  # type: ignore[arg-type]
        assert select(idx, ["flush", "flush"]).counts.keys() == {"flush"}
        sel = select(list(idx.entries), ["no-cache"])
        assert [s.id for s in sel.states] == ["no-cache@1"] and sel.to_json()["judged"] == 1


# -- streaming and compact: the same selection as the plain, all-in-memory algorithm ------------------
def plain_select(
    idx: LogIndex, models: list[str], max_states: int, floor_mark: str | None, seed: int
) -> tuple[list[CrashState], dict[str, tuple[str, ...]], dict[str, tuple[int, ...]]]:
    """The selection's definition, written the obvious way: model by model, every state in memory."""
    sp = CrashSpace(idx)
    floor = (
        next((e.index for e in sp.entries if e.mark == floor_mark), None) if floor_mark else None
    )
    reps: dict[object, CrashState] = {}
    owned: dict[str, list[CrashState]] = {}
    aliases: dict[str, list[str]] = {}
    counts: dict[str, tuple[int, ...]] = {}
    for m in dict.fromkeys(models):
        every = sp.states(m, seed=seed, exhaustive_bound=4, samples=3, torn_samples=2)
        after = [
            s
            for s in every
            if floor is None
            or (
                s.cut > floor
                and all(d > floor for d in s.dropped)
                and all(t > floor for t, _ in s.torn)
            )
        ]
        owned[m] = []
        for s in after:
            rep = reps.setdefault(image_key(sp, s), s)
            if rep is s:
                owned[m].append(s)
            else:
                aliases.setdefault(rep.id, []).append(s.id)
        counts[m] = (
            len(after),
            len({image_key(sp, s) for s in after}),
            len(owned[m]),
            len(every) - len(after),
        )
    shares = fair_shares([len(v) for v in owned.values()], max_states)
    chosen = [
        s for m, q in zip(owned, shares) for s in (owned[m][i] for i in spread(len(owned[m]), q))
    ]
    return (
        chosen,
        {k: tuple(v) for k, v in aliases.items()},
        {m: c + (q,) for (m, c), q in zip(counts.items(), shares)},
    )


@settings(max_examples=120, deadline=None)
@given(
    ops=OPS,
    cap=st.integers(0, 12),
    seed=st.integers(0, 3),
    floor=st.sampled_from(["mkfs", None]),
    models=st.permutations(MODELS).flatmap(
        lambda p: st.integers(1, len(p)).map(lambda k: list(p[:k]))
    ),
)
def test_streaming_select_equals_the_plain_one(
    ops: list,
    cap: int,
    seed: int,
    floor: str | None,  # type: ignore[type-arg]
    models: list[str],
) -> None:
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sel = select(idx, models, max_states=cap, floor_mark=floor, seed=seed, **KW)
        chosen, aliases, counts = plain_select(idx, models, cap, floor, seed)
        assert list(sel.states) == chosen  # rebuilt from the ids: the very states, in order
        assert [s.id for s in sel.states] == [s.id for s in chosen]
        assert sel.aliases == aliases
        assert {
            m: (c.generated, c.distinct, c.owned, c.below_floor, c.judged)
            for m, c in sel.counts.items()
        } == counts


@settings(max_examples=60, deadline=None)
@given(ops=OPS, seed=st.integers(0, 3))
def test_iter_states_is_states_one_at_a_time(ops: list, seed: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        for m in MODELS:
            kw = {"seed": seed, "exhaustive_bound": 4, "samples": 3, "torn_samples": 2}
            assert list(sp.iter_states(m, **kw)) == sp.states(m, **kw)


def test_state_list(tmp_path: Path) -> None:
    idx = build(
        tmp_path / "l.bin",
        [
            ("m", "mkfs"),
            ("w", 0, 4, 0, 1),
            ("w", 4, 2, 0, 2),
            ("f",),
            ("m", "ack:a"),
            ("w", 1, 4, 0, 3),
            ("w", 8, 2, FUA, 1),
            ("m", "ack:b"),
        ],
    )
    with idx:
        sel = select(idx, list(MODELS), **KW)
        states = sel.states
        assert isinstance(states, StateList) and len(states) > 10
        whole = list(states)
        assert [states[i] for i in range(len(states))] == whole
        assert (
            states[-1] == whole[-1]
            and states[1:7:2] == whole[1:7:2]
            and states[::-1] == whole[::-1]
        )
        assert states == tuple(whole) and states == whole and states != whole[:-1]
        assert list(states.ids()) == [s.id for s in whole]
        with pytest.raises(IndexError):
            states[len(states)]
        assert Shard(2, 3).take(states) == tuple(whole[1::3])
        with pytest.raises(TypeError):
            hash(states)


def test_state_list_extend_and_wide_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = build(
        tmp_path / "l.bin",
        [
            ("m", "mkfs"),
            ("w", 0, 4, 0, 1),
            ("w", 4, 2, 0, 2),
            ("f",),
            ("m", "ack:a"),
            ("w", 1, 4, 0, 3),
            ("m", "ack:b"),
        ],
    )
    with idx:
        sp = CrashSpace(idx)
        wc, flush = (sp.states(m, exhaustive_bound=4) for m in ("write-cache", "flush"))
        a, b = StateList(sp, (s.id for s in flush)), StateList(sp, (s.id for s in wc))
        a.extend(b)
        a.extend(StateList(sp))
        assert list(a) == flush + wc and a == StateList(sp, [s.id for s in flush + wc])
        monkeypatch.setattr(
            StateList, "WIDE", 8
        )  # offsets past it switch to 8 bytes, ids unchanged
        c = StateList(sp, (s.id for s in wc))
        d = StateList(sp, [flush[0].id])
        d.extend(c)
        assert c._ends.typecode == d._ends.typecode == "Q"
        assert list(c.ids()) == [s.id for s in wc] and list(d) == flush[:1] + wc
        with pytest.raises(ValueError):
            StateList(sp, ["no model"])

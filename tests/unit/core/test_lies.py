"""Lying-disk models (core/crashmodels/lies.py): exact states on a hand-checked log; on random logs each model's
states are exactly a brute-force oracle's (none missing, none extra, no duplicate image); ids round
trip; sampled windows keep the program's data writes first and are seeded; images built by replay
(the incremental walk and the from-scratch baseline) equal an image computed here directly from the
log's operations; malformed or unfitting ids are one-line usage errors."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.crashmodels.flushignored import canon, ignored_pool
from powercut.core.crashmodels.lies import CORRUPT_BITS, unreadable_of, windows
from powercut.core.crashmodels.target import LieTarget
from powercut.core.log.dmlog import FUA, METADATA, LogIndex
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import Lie
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.selection import select
from powercut.core.states.stateid import LIE_MODELS
from powercut.errors import UsageError
from powercut.replay.materialize import materialize, reference_image
from tests.unit.logops import build_log

SIZE = 64 * 512
PER_WRITE = ("lost-write", "misdirected-write", "corrupt-sector", "unreadable-sector")


def states(idx: LogIndex, model: str, **kw: int) -> list:  # type: ignore[type-arg]
    kw = {"exhaustive_bound": 10, "samples": 1000, **kw}
    return CrashSpace(idx).states(model, **kw)


@pytest.fixture
def example(tmp_path: Path):  # type: ignore[no-untyped-def]
    ops = [
        ("w", 0, 2, 0, 1),
        ("m", "mkfs"),  # 0, 1
        ("m", "begin:a"),
        ("w", 8, 2, 0, 2),
        ("w", 20, 1, METADATA, 3),
        ("f",),  # 2-5
        ("w", 21, 1, FUA | METADATA, 4),
        ("m", "ack:a"),  # 6, 7
        ("m", "begin:b"),
        ("w", 10, 2, 0, 5),
        ("w", 8, 1, 0, 6),
        ("f",),
        ("m", "ack:b"),  # 8-12
        ("w", 30, 1, METADATA, 7),
    ]  # 13: after the last ack
    with build_log(tmp_path / "l.bin", ops) as idx:
        yield idx


# -- exact states --------------------------------------------------------------------------------------
def test_windows_are_the_commits_after_the_floor(example: LogIndex) -> None:
    assert windows(CrashSpace(example)) == [(8, (3, 4, 6)), (13, (9, 10)), (14, (13,))]


def test_lost_write_exact(example: LogIndex) -> None:
    got = states(example, "lost-write")
    assert [(s.id, s.dropped, s.acks) for s in got] == [
        ("lost-write@8/w3", (3,), ("a",)),
        ("lost-write@8/w4", (4,), ("a",)),
        ("lost-write@8/w6", (6,), ("a",)),
        ("lost-write@13/w10", (10,), ("a", "b")),
        ("lost-write@13/w9", (9,), ("a", "b")),
        ("lost-write@14/w13", (13,), ("a", "b")),
    ]
    assert all(
        s.lie is None and s.torn == () for s in got
    )  # the mkfs write (entry 0) is never lost


def test_misdirected_write_exact(example: LogIndex) -> None:
    got = {s.id: s.lie for s in states(example, "misdirected-write")}
    # entry 3 (2 sectors at 8): no earlier 2-sector write after the floor, none later in its commit;
    # entry 9 (2 at 10) lands on entry 3's sectors 8-9; entry 13 on the nearest earlier 1-sector write's
    assert got == {
        "misdirected-write@8/w4:s21": Lie("misdirect", 4, 21),
        "misdirected-write@8/w6:s20": Lie("misdirect", 6, 20),
        "misdirected-write@13/w9:s8": Lie("misdirect", 9, 8),
        "misdirected-write@13/w10:s21": Lie("misdirect", 10, 21),
        "misdirected-write@14/w13:s8": Lie("misdirect", 13, 8),
    }
    assert all(s.dropped == (s.lie.entry,) for s in states(example, "misdirected-write"))


def test_corrupt_and_unreadable_sectors(example: LogIndex) -> None:
    for model in ("corrupt-sector", "unreadable-sector"):
        got = states(example, model, seed=5)
        # entry 3's sector 8 is overwritten by entry 10 before cut 13, not before cut 8: still a target
        assert [s.lie.entry for s in got] == [3, 4, 6, 10, 9, 13]
        for s in got:
            e = example.entries[s.lie.entry]
            assert e.sector <= s.lie.sector < e.sector + e.nr_sectors and s.dropped == ()
            assert (len(s.lie.bits) == CORRUPT_BITS) == (model == "corrupt-sector")
            assert all(0 <= b < 4096 for b in s.lie.bits)
        assert got == states(example, model, seed=5)
    assert {s.id for s in states(example, "corrupt-sector", seed=5)} != {
        s.id for s in states(example, "corrupt-sector", seed=6)
    }
    s = states(example, "unreadable-sector")[0]
    assert unreadable_of(s) == ((s.lie.sector, 1),)


def test_flush_ignored_exact(example: LogIndex) -> None:
    sp = CrashSpace(example)
    got = states(example, "flush-ignored")
    for s in got:  # no state an honest write cache could leave
        c, d = canon(sp, s.cut, s.dropped)
        assert set(d) - set(sp.droppable(c)), s.id
    # cut 12 (before ack:b): the ignored flush is entry 11, the one before it entry 5: entries 6, 9, 10 may go
    assert ignored_pool(sp, 12) == (6, 9, 10)
    # losing the FUA write 6 at cut 12 is the same image as at cut 11 (before the flush): generated there
    assert "flush-ignored@11/d6" in {s.id for s in got} and not [s for s in got if s.cut == 12]
    # cut 8 (before ack:a): flush 5 ignored, every write of commit a may be lost, each one alone too
    at8 = {s.dropped for s in got if s.cut == 8}
    assert {(3,), (4,), (6,), (3, 4, 6)} <= at8 and () not in at8


# -- the oracle ------------------------------------------------------------------------------------------
OP = st.one_of(
    st.tuples(
        st.just("w"),
        st.integers(0, 12),
        st.integers(1, 3),
        st.sampled_from([0, FUA, METADATA]),
        st.integers(0, 200),
    ),
    st.tuples(st.just("f")),
    st.tuples(st.just("m"), st.sampled_from(["ack:x", "ack:y", "begin:z", "mkfs"])),
)


def oracle(idx: LogIndex, model: str) -> set:  # type: ignore[type-arg]
    """The model's states the slow way: (cut, target, detail) per write after the floor."""
    es, n = idx.entries, len(idx.entries)
    floor = next((e.index + 1 for e in es if e.mark == "mkfs"), 0)
    writes = [e for e in es[floor:] if e.is_write]
    out = set()
    for e in writes:
        cut = next((a.index + 1 for a in es[e.index :] if a.ack_key is not None), n)
        later = {
            s
            for x in es[e.index + 1 : cut]
            if x.changes_device
            for s in range(x.sector, x.sector + x.nr_sectors)
        }
        live = [o for o in range(e.nr_sectors) if e.sector + o not in later]
        if model == "misdirected-write":
            same = [
                o
                for o in writes
                if o.nr_sectors == e.nr_sectors
                and o.index != e.index
                and (o.sector + o.nr_sectors <= e.sector or e.sector + e.nr_sectors <= o.sector)
            ]
            before = [o for o in same if o.index < e.index][-1:]
            after = [o for o in same if e.index < o.index < cut][:1]
            for o in before + after:
                if live or any(s not in later for s in range(o.sector, o.sector + e.nr_sectors)):
                    out.add((cut, e.index, o.sector))
        elif live:
            out.add((cut, e.index, None if model == "lost-write" else tuple(live)))
    return out


def seen(model: str, s) -> tuple:  # type: ignore[no-untyped-def,type-arg]
    if model == "lost-write":
        return s.cut, s.dropped[0], None
    if model == "misdirected-write":
        return s.cut, s.lie.entry, s.lie.sector
    return s.cut, s.lie.entry, s.lie.sector


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(OP, min_size=1, max_size=14), seed=st.integers(0, 3))
def test_per_write_models_are_exactly_the_oracle(ops: list, seed: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build_log(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        for model in PER_WRITE:
            got = sp.states(model, seed=seed, samples=1000)
            want = oracle(idx, model)
            if model in ("corrupt-sector", "unreadable-sector"):
                assert {(c, w) for c, w, _ in want} == {(s.cut, s.lie.entry) for s in got}
                live = {(c, w): offs for c, w, offs in want}
                for s in got:  # the sector is one the write still holds at the cut
                    assert (
                        s.lie.sector - idx.entries[s.lie.entry].sector in live[(s.cut, s.lie.entry)]
                    )
            else:
                assert {seen(model, s) for s in got} == want
            assert len({image_key(sp, s) for s in got}) == len(got), "two states, one image"
            assert [(s.cut, s.id) for s in got] == sorted((s.cut, s.id) for s in got)
            for s in got:
                assert sp.state_from_id(s.id) == s and s.model == model


def truth(idx: LogIndex, cut: int, dropped: tuple[int, ...]) -> tuple:  # type: ignore[type-arg]
    kept = tuple(i for i in range(cut) if idx.entries[i].changes_device and i not in dropped)
    return kept, CrashSpace(idx).key_version[cut]


@settings(max_examples=120, deadline=None)
@given(ops=st.lists(OP, min_size=1, max_size=11))
def test_flush_ignored_is_exactly_every_lying_subset(ops: list) -> None:  # type: ignore[type-arg]
    """Every (durable set, keys) that some write-cache cut point's subset across its ignored
    barrier leaves and that no honest write-cache state of any cut leaves -- once each."""
    with tempfile.TemporaryDirectory() as d, build_log(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        floor = next((e.index + 1 for e in idx.entries if e.mark == "mkfs"), 0)

        def subsets(pool: tuple[int, ...]):  # type: ignore[no-untyped-def]
            return itertools.chain.from_iterable(
                itertools.combinations(pool, k) for k in range(len(pool) + 1)
            )

        # cut 0 too: the power failing before the first entry leaves the initial image
        honest = {truth(idx, c, lost) for c in range(sp.n + 1) for lost in subsets(sp.droppable(c))}
        want = {
            truth(idx, c, lost)
            for c in sp.cut_points()
            if (pool := ignored_pool(sp, c)) and pool[-1] >= floor
            for lost in subsets(pool)
        } - honest
        got = sp.states("flush-ignored", exhaustive_bound=12)
        have = [truth(idx, s.cut, s.dropped) for s in got]
        assert set(have) == want and len(have) == len(set(have))
        assert all(sp.state_from_id(s.id) == s for s in got)


# -- sampling and coverage ------------------------------------------------------------------------------------
def test_a_big_commit_is_sampled_data_writes_first(tmp_path: Path) -> None:
    ops = (
        [("m", "mkfs")]
        + [("w", 2 * i, 1, METADATA if i % 2 else 0, i) for i in range(20)]
        + [("m", "ack:x")]
    )
    with build_log(tmp_path / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        t = Tally()
        got = sp.states("lost-write", samples=6, seed=1, tally=t)
        assert len(got) == 6 and t.windows == 1 and t.sampled_windows == 1 and t.space == 20
        data = [i for i in range(1, 21) if not idx.entries[i].is_metadata]
        assert {s.dropped[0] for s in got} >= set(data[-3:]), "the newest data writes come first"
        assert got == sp.states("lost-write", samples=6, seed=1)
        assert {s.id for s in got} != {s.id for s in sp.states("lost-write", samples=6, seed=2)}
        whole = Tally()
        assert (
            len(sp.states("lost-write", samples=20, tally=whole)) == 20
            and whole.sampled_windows == 0
        )
        sel = select(sp, ["lost-write"], samples=6, seed=1)
        assert sel.coverage.models[0].sampled_windows == 1 and "sampled" in sel.coverage.words


def test_selection_floor_and_distinct_images(example: LogIndex) -> None:
    sel = select(example, list(LIE_MODELS))
    assert set(sel.counts) == set(LIE_MODELS)
    assert all(s.lie is None or s.lie.entry > 1 for s in sel.states)
    assert sel.counts["unreadable-sector"].owned == len(states(example, "unreadable-sector"))


# -- images -------------------------------------------------------------------------------------------------
def direct_image(idx: LogIndex, ops: list, s) -> bytes:  # type: ignore[no-untyped-def,type-arg]
    """The state's image from the ops themselves: every write before the cut but the dropped ones,
    a misdirected write's data at its new place in its turn, then the flipped bits."""
    img = bytearray(SIZE)
    for e in idx.entries[: s.cut]:
        data = None
        if e.is_write:
            data = bytes(idx.data(e))
        elif e.is_discard:
            data = bytes(e.nr_sectors * 512)
        if data is None:
            continue
        if s.lie is not None and s.lie.kind == "misdirect" and e.index == s.lie.entry:
            img[s.lie.sector * 512 : s.lie.sector * 512 + len(data)] = data
        if e.index not in s.dropped:
            img[e.sector * 512 : e.sector * 512 + len(data)] = data
    if s.lie is not None and s.lie.kind == "corrupt":
        for b in s.lie.bits:
            img[s.lie.sector * 512 + b // 8] ^= 1 << (b % 8)
    return bytes(img)


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(OP, min_size=1, max_size=12), seed=st.integers(0, 3))
def test_replay_builds_the_lie(ops: list, seed: int) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as d, build_log(Path(d) / "l.bin", ops) as idx:
        sp = CrashSpace(idx)
        every = [
            s for m in LIE_MODELS for s in sp.states(m, seed=seed, exhaustive_bound=4, samples=6)
        ]
        for s in every:
            assert reference_image(idx, s, SIZE, Path(d) / "ref.img").read_bytes() == direct_image(
                idx, ops, s
            ), s.id
        for s, img in materialize(idx, None, SIZE, every, Path(d), "copy"):
            assert img.read_bytes() == direct_image(idx, ops, s), s.id


# -- ids -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "bad",
    [
        "lost-write@8",
        "lost-write@8/d3",
        "lost-write@8/w7",
        "lost-write@8/w8",
        "lost-write@99/w3",
        "misdirected-write@8/w3:s9",
        "misdirected-write@8/w3:s900",
        "misdirected-write@8/w3",
        "corrupt-sector@8/w3:s2:b1",
        "corrupt-sector@8/w3:s0:b4096",
        "corrupt-sector@8/w3:s0:b3,1",
        "unreadable-sector@8/w3:s5",
        "flush-ignored@3/d0",
        "flush-ignored@12/d9",
        "flush-ignored@12/d2",
    ],
)
def test_bad_ids_are_one_line_usage_errors(example: LogIndex, bad: str) -> None:
    with pytest.raises(UsageError) as e:
        CrashSpace(example).state_from_id(bad)
    assert "\n" not in str(e.value)


def test_hand_written_ids_rebuild(example: LogIndex) -> None:
    sp = CrashSpace(example)
    s = sp.state_from_id("corrupt-sector@13/w9:s1:b0-2,7")
    assert s.lie == Lie("corrupt", 9, 11, (0, 1, 2, 7)) and s.id == "corrupt-sector@13/w9:s1:b0-2,7"
    assert sp.state_from_id("flush-ignored@12/k9").dropped == (6, 10)
    r = sp.state_from_id("flush-ignored@12/r3.1")
    assert r.id == "flush-ignored@12/r3.1" and set(r.dropped) <= {6, 9, 10}


def test_with_a_file_map_the_programs_blocks_come_first(tmp_path: Path) -> None:
    """The recording's file map (guest/record.file_map) puts the writes that touch the program's files
    first in a sampled window, metadata or not, and corrupt/unreadable sectors inside them; the ids
    mean what they meant (they rebuild the same states without the map)."""
    ops = (
        [("m", "mkfs")]
        + [("w", 4 * i, 4, METADATA if i % 2 else 0, i) for i in range(20)]
        + [("m", "ack:x")]
    )
    with build_log(tmp_path / "l.bin", ops) as idx:
        # the program's file: sectors 8..9 (entry 3, a metadata write by its flag) and 41..42 (entry 11)
        target = LieTarget.of([(8, 2), (41, 2)], idx.sectorsize)
        sp = CrashSpace(idx, lie_target=target)
        assert target.touches(8, 9) and target.touches(40, 42) and not target.touches(10, 40)
        got = sp.states("lost-write", samples=4, seed=1)
        assert {3, 11} <= {s.dropped[0] for s in got}
        rot = sp.states("corrupt-sector", samples=4, seed=1)
        hit = {s.lie.entry: s.lie.sector for s in rot}
        assert hit[3] in (8, 9) and hit[11] in (41, 42)
        plain = CrashSpace(idx)
        assert all(plain.state_from_id(s.id) == s for s in got + rot)
        assert {3, 11} - {s.dropped[0] for s in plain.states("lost-write", samples=4, seed=1)}


def test_a_lie_file_restricts_the_models_to_its_blocks(tmp_path: Path) -> None:
    """--lie-file: only writes still holding one of the file's sectors are targets, and a corrupt or
    unreadable sector is one of the file's."""
    ops = [("m", "mkfs")] + [("w", 4 * i, 4, 0, i) for i in range(12)] + [("m", "ack:x")]
    with build_log(tmp_path / "l.bin", ops) as idx:
        # sectors 9..10: entry 3's (sectors 8..11)
        sp = CrashSpace(idx, lie_target=LieTarget.of([(9, 2)], idx.sectorsize, only=True))
        assert [s.dropped for s in sp.states("lost-write")] == [(3,)]
        un = sp.states("unreadable-sector")
        assert [(s.lie.entry, s.lie.sector) for s in un] == [(3, un[0].lie.sector)] and un[
            0
        ].lie.sector in (9, 10)
        assert all(s.lie.sector in (9, 10) for s in sp.states("corrupt-sector"))

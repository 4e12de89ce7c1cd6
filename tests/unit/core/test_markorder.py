"""Ordered marks (issue 21): over random I/O histories run through a model of dm-log-writes
(dmlw_sim), no prefix state of the no-cache and flush models loses a write that completed before an
ack, when the marks are ordered (and there are such histories when they are not: the old false
alarm); the ordering flushes add no durability (the write-cache and torn state spaces equal those of
the same log without them); the window rule and ``mark_order`` on hand-built logs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from powercut.core.log.dmlog import FLUSH, FUA, MARK, ORDER_BEGIN, ORDER_END, Entry, LogIndex
from powercut.core.log.markorder import (
    FLUSH_INSIDE,
    ORPHAN_BEGIN,
    AmbiguousWindow,
    LateWrites,
    ambiguous_windows,
    late_writes,
    mark_order,
)
from powercut.core.states.models import CrashSpace
from tests.unit.dmlw_sim import Block, Sim, history
from tests.unit.logops import build_log

SEEDS = range(300)


def lost_before_ack(
    entries: list[Entry], completed_at: dict[str, set[int]], model: str
) -> list[tuple[str, str]]:
    """(state id, key) of each state acking a key while missing a write completed before that ack."""
    sp = CrashSpace(entries)
    bad = []
    for s in sp.states(model):
        kept = {entries[i].sector for i, _ in s.kept([e.changes_device for e in entries])}
        for k in s.acks:
            if completed_at[k] - kept:
                bad.append((s.id, k))
    return bad


@pytest.mark.parametrize("model", ["no-cache", "flush"])
def test_ordered_marks_never_lose_a_write_completed_before_the_ack(model: str) -> None:
    for seed in SEEDS:
        sim = history(seed, ordered=True)
        assert lost_before_ack(sim.entries(), sim.completed_at_mark, model) == [], seed


@pytest.mark.parametrize("model", ["no-cache", "flush"])
def test_unordered_marks_do_lose_such_writes(model: str) -> None:
    """The property fails on the old behaviour: the test above can fail."""
    failing = [
        seed
        for seed in SEEDS
        if lost_before_ack(
            (sim := history(seed, ordered=False)).entries(), sim.completed_at_mark, model
        )
    ]
    assert len(failing) > len(SEEDS) // 4


@pytest.mark.parametrize("model", ["no-cache", "flush"])
def test_the_flush_alone_is_not_enough(model: str) -> None:
    """Without the wait for bios in flight, a write taken by a program flush still in flight when
    the mark is given (e.g. jbd2's commit) is logged after the mark: why the marking code suspends."""
    failing = [
        seed
        for seed in SEEDS
        if lost_before_ack(
            (sim := history(seed, ordered=True, quiesce=False)).entries(),
            sim.completed_at_mark,
            model,
        )
    ]
    assert failing


def without_ordering(entries: list[Entry]) -> tuple[list[Entry], list[int]]:
    """The log without its order marks and ordering flushes, and the old index of each entry kept."""
    sp = CrashSpace(entries)
    keep = [i for i, e in enumerate(entries) if i not in sp.ordering and not e.is_order_mark]
    return [
        Entry(j, entries[i].flags, entries[i].sector, entries[i].nr_sectors, 0, entries[i].mark)
        for j, i in enumerate(keep)
    ], keep


def images(entries: list[Entry], model: str) -> set[tuple[object, ...]]:
    """Each state as (kept writes with their torn sectors, acks, begun): comparable across logs."""
    sp = CrashSpace(entries)
    out = set()
    for s in sp.states(model, exhaustive_bound=14, torn_samples=0):
        kept = frozenset(
            (entries[i].sector, t) for i, t in s.kept([e.changes_device for e in entries])
        )
        out.add((kept, s.acks, s.begun))
    return out


@pytest.mark.parametrize("model", ["write-cache", "torn"])
def test_ordering_flushes_add_no_durability(model: str) -> None:
    checked = 0
    for seed in range(120):
        sim = history(seed, ordered=True, steps=24)
        es = sim.entries()
        sp = CrashSpace(es)
        pool = max(len(sp.droppable(c)) for c in sp.cut_points())
        if pool > 14:
            continue
        plain, _ = without_ordering(es)
        assert images(es, model) == images(plain, model), seed
        checked += bool(sp.ordering)
    assert checked > 30


def E(i: int, flags: int = 0, sector: int = 0, nr: int = 0, mark: str | None = None) -> Entry:
    return Entry(i, flags | (MARK if mark else 0), sector, nr, 0, mark)


def test_write_cache_still_loses_writes_ordered_before_an_ack() -> None:
    """An O_DIRECT-like history: a plain write completes, ordered ack, no program flush: write-cache
    may lose it after the ack, the prefix models keep it."""
    es = [
        E(0, 0, 8, 1),
        E(1, mark=ORDER_BEGIN),
        E(2, 0, 9, 1),
        E(3, FLUSH),
        E(4, mark=ORDER_END),
        E(5, mark="ack:1"),
        E(6, mark="dm-log-writes-end"),
    ]
    sp = CrashSpace(es)
    assert sp.ordering == {3} and sp.last_flush[6] == -1 and sp.droppable(6) == (0, 2)
    assert any("1" in s.acks and s.dropped for s in sp.states("write-cache"))
    assert all(s.cut != 4 for s in sp.states("flush"))  # no cut right after the ordering flush
    assert mark_order(es) == {
        "key_marks": 1,
        "ordered_key_marks": 1,
        "ordering_flushes": 1,
        "ambiguous_windows": 0,
        "ordered": True,
    }
    assert sp.state_from_id("write-cache@6/d0,2").acks == ("1",)


def test_a_program_flush_in_the_window_makes_it_ambiguous_and_all_count_as_barriers() -> None:
    es = [
        E(0, 0, 8, 1),
        E(1, mark=ORDER_BEGIN),
        E(2, FLUSH),
        E(3, 0, 9, 1),
        E(4, FLUSH),
        E(5, mark=ORDER_END),
        E(6, mark="ack:1"),
    ]
    sp = CrashSpace(es)
    assert sp.ordering == frozenset() and sp.ambiguous_windows == 1 and sp.last_flush[7] == 4
    # the window's end mark: the marker suspended the device before ack:1, so the mark is still ordered
    # (every write completed before it is logged before it); only the window's flushes are ambiguous (#52)
    assert mark_order(es)["ordered"] is True and mark_order(es)["ambiguous_windows"] == 1


def test_a_window_left_open_is_ambiguous() -> None:
    es = [E(0, 0, 8, 1), E(1, mark=ORDER_BEGIN), E(2, FLUSH), E(3, mark="ack:1")]
    sp = CrashSpace(es)
    assert sp.ordering == frozenset() and sp.ambiguous_windows == 1 and sp.is_barrier(2)


def test_flushes_with_data_or_fua_are_never_ordering_flushes() -> None:
    es = [
        E(0, mark=ORDER_BEGIN),
        E(1, FLUSH | FUA, 8, 1),
        E(2, FLUSH),
        E(3, mark=ORDER_END),
        E(4, mark="ack:1"),
    ]
    sp = CrashSpace(es)
    assert sp.ordering == {2} and sp.is_barrier(1) and not sp.is_barrier(2)


def test_concurrent_markers_nest() -> None:
    es = [
        E(0, mark=ORDER_BEGIN),
        E(1, mark=ORDER_BEGIN),
        E(2, 0, 8, 1),
        E(3, FLUSH),
        E(4, mark=ORDER_END),
        E(5, FLUSH),
        E(6, mark="ack:1"),
        E(7, mark=ORDER_END),
        E(8, mark="ack:2"),
    ]
    sp = CrashSpace(es)
    assert sp.ordering == {3, 5} and sp.order_windows == 1
    # each ack's own window closed before it: ack:2's flush (5) was issued after ack:2 was asked for, so
    # it logged every write completed by then -- both ordered (#52; before, ack:2 counted as unordered)
    assert mark_order(es)["ordered_key_marks"] == 2


def test_old_logs_are_unchanged() -> None:
    """No order marks: every FLUSH is a barrier, as before."""
    es = [E(0, 0, 8, 1), E(1, FLUSH), E(2, mark="ack:1")]
    sp = CrashSpace(es)
    assert sp.ordering == frozenset() and sp.is_barrier(1) and sp.last_flush[3] == 1
    assert [s.cut for s in sp.states("flush")] == [2, 3]
    assert mark_order(es) == {
        "key_marks": 1,
        "ordered_key_marks": 0,
        "ordering_flushes": 0,
        "ambiguous_windows": 0,
        "ordered": False,
    }


# -- ambiguous windows and orphan begins (issue 37, item 5) -------------------------------------------
def orphan_ops(orphan_at: int | None) -> list[tuple]:  # type: ignore[type-arg]
    """Five O_DIRECT-like commits, each ordered-acked before its program flush: write-cache may
    lose each commit's write after its ack (5 lost-ack states); an orphan begin mark (a marker
    killed between its begin and end) before commit ``orphan_at`` (0-based; None: none)."""
    ops: list[tuple] = [("w", 0, 2, 0, 1), ("f",), ("m", "mkfs")]  # type: ignore[type-arg]
    for k in range(5):
        if k == orphan_at:
            ops.append(("m", ORDER_BEGIN))
        ops += [
            ("w", 8 * (k + 1), 1, 0, k),
            ("m", ORDER_BEGIN),
            ("f",),
            ("m", ORDER_END),
            ("m", f"ack:k{k + 1}"),
            ("f",),
        ]
    return ops + [("m", "dm-log-writes-end")]


def lost_acks(idx: LogIndex) -> int:
    """Write-cache states that ack a commit whose write they lost."""
    write = {e.sector // 8: e.index for e in idx.entries if e.is_write and e.sector >= 8}
    return sum(
        1
        for s in CrashSpace(idx).states("write-cache")
        if any(write[int(k[1:])] in s.dropped for k in s.acks)
    )


def test_an_orphan_begin_closes_at_the_next_key_mark(tmp_path: Path) -> None:
    """The issue's case: before, the orphan kept its window open to the end of the log and every
    later ordering flush counted as a barrier (0 lost-ack states of 5); now only the window its span
    overlaps does (the first commit's), and the ambiguity is named with the ack it affects."""
    with build_log(tmp_path / "plain.log", orphan_ops(None)) as idx:
        assert lost_acks(idx) == 5 and CrashSpace(idx).ambiguous == ()
    with build_log(tmp_path / "orphan.log", orphan_ops(0)) as idx:
        sp = CrashSpace(idx)
        assert lost_acks(idx) == 4
        ack1 = idx.find_mark("ack:k1")
        assert (
            sp.ambiguous
            == (AmbiguousWindow(3, ack1 - 1, ORPHAN_BEGIN, ack1, "ack:k1"),)
            == ambiguous_windows(idx)
        )
        assert sp.ambiguous_windows == 1 and len(sp.ordering) == 4
        assert "affects ack:k1" in sp.ambiguous[0].note() and "entry 3" in sp.ambiguous[0].note()
        # ack:k1's own marker closed its window (its flush is one of the barriers): ordered (#52)
        assert mark_order(idx)["ordered_key_marks"] == 5
    with build_log(tmp_path / "late.log", orphan_ops(2)) as idx:  # before the third commit
        assert lost_acks(idx) == 4 and [w.key_mark for w in CrashSpace(idx).ambiguous] == ["ack:k3"]
    ops = orphan_ops(None)
    with build_log(
        tmp_path / "end.log", ops[:-1] + [("m", ORDER_BEGIN), ("m", "dm-log-writes-end")]
    ) as idx:
        (w,) = CrashSpace(idx).ambiguous
        assert lost_acks(idx) == 5 and (w.why, w.key, w.last) == (
            ORPHAN_BEGIN,
            None,
            len(idx.entries) - 1,
        )
        assert "no key mark after it" in w.note()


def test_a_program_flush_inside_names_the_window_and_its_ack() -> None:
    es = [
        E(0, 0, 8, 1),
        E(1, mark=ORDER_BEGIN),
        E(2, FLUSH),
        E(3, 0, 9, 1),
        E(4, FLUSH),
        E(5, mark=ORDER_END),
        E(6, mark="ack:7"),
    ]
    (w,) = ambiguous_windows(es)
    assert w == AmbiguousWindow(1, 5, FLUSH_INSIDE, 6, "ack:7") and CrashSpace(es).ambiguous == (w,)
    assert w.note() == (
        "ordering window at entries 1-5 (a program flush completed inside it) counted as a "
        "barrier: write-cache losses across it not generated; affects ack:7"
    )


def test_an_orphan_nested_in_a_live_window_makes_only_that_window_a_barrier() -> None:
    """B B F1 E ack:1 | B F2 E ack:2: which of the first two begins died the log cannot tell (the
    end is matched to the later one, so entry 0 is the orphan); the window overlapping its span
    counts as a barrier, the next one is an ordering window again."""
    es = [
        E(0, mark=ORDER_BEGIN),
        E(1, mark=ORDER_BEGIN),
        E(2, FLUSH),
        E(3, mark=ORDER_END),
        E(4, mark="ack:1"),
        E(5, mark=ORDER_BEGIN),
        E(6, FLUSH),
        E(7, mark=ORDER_END),
        E(8, mark="ack:2"),
    ]
    sp = CrashSpace(es)
    assert sp.ordering == {6} and [(w.first, w.last, w.why, w.key) for w in sp.ambiguous] == [
        (0, 3, ORPHAN_BEGIN, 4)
    ]


def dying_history(seed: int, steps: int = 40) -> tuple[list[Entry], set[int]]:
    """dmlw_sim's ordered history with markers that die after their begin mark (some after sending
    their flush, which completes later): the entries and the true ordering flushes' indices."""
    rnd = random.Random(seed)
    sim = Sim()
    ours: list[Block] = []
    sim.complete(sim.submit(0, 2))
    sim.complete(sim.submit(FLUSH, 0))
    for key in range(steps):
        r = rnd.random()
        if r < 0.4:
            sim.submit(0, 1)
        elif r < 0.55:
            sim.submit(FLUSH, 0)
        elif r < 0.8:
            if sim.inflight:
                sim.complete(rnd.choice(sim.inflight))
        else:
            sim.mark(ORDER_BEGIN)
            if rnd.random() < 0.25:  # killed here; maybe after sending its flush
                if rnd.random() < 0.5:
                    ours.append(sim.submit(FLUSH, 0))
                continue
            h = sim.submit(FLUSH, 0)
            ours.append(h)
            sim.complete(h)
            sim.mark(ORDER_END)
            while sim.inflight:
                sim.complete(rnd.choice(sim.inflight))
            sim.mark(f"ack:{key}")
    while sim.inflight:
        sim.complete(sim.inflight[0])
    return sim.entries(), {i for i, b in enumerate(sim.log) if any(b is o for o in ours)}


def test_dying_markers_never_make_a_program_flush_an_ordering_flush() -> None:
    orphaned = recovered = 0
    for seed in range(300):
        es, ours = dying_history(seed)
        sp = CrashSpace(es)
        assert sp.ordering <= ours, seed
        orphans = [w for w in sp.ambiguous if w.why == ORPHAN_BEGIN]
        orphaned += bool(orphans)
        recovered += bool(orphans) and any(f > orphans[-1].last for f in sp.ordering)
    assert (
        orphaned > 100 and recovered > 50
    )  # windows after an orphan's span are ordering windows again


# -- writes completing while a flush is in flight (issue 37, item 6) ------------------------------------
def commit_logs() -> tuple[list[Entry], list[Entry]]:
    """Data write A, fsync F of it, commit record W, fsync G, ordered ack -- (1) W written by another
    thread while F is in flight, (2) W written after F returned (the correct sequential program)."""

    def run(overlap: bool) -> list[Entry]:
        sim = Sim()
        sim.complete(sim.submit(0, 1))  # A (sector 8)
        f = sim.submit(FLUSH, 0)  # F takes A at its submission
        if overlap:
            sim.complete(sim.submit(0, 1))  # W (sector 10) completes while F is in flight
            sim.complete(f)
        else:
            sim.complete(f)
            sim.complete(sim.submit(0, 1))  # W issued after F returned
        sim.complete(sim.submit(FLUSH, 0))  # G takes W
        sim.mark(ORDER_BEGIN)
        sim.complete(sim.submit(FLUSH, 0))
        sim.mark(ORDER_END)
        sim.mark("ack:c1")
        sim.mark("dm-log-writes-end")
        return sim.entries()

    return run(True), run(False)


def test_an_in_flight_flush_is_a_weakening_note_not_states() -> None:
    """The issue's example: "W durable, A lost" is real for (1) and impossible for (2), and the two
    logs are the same, so generating it would fail the correct program: not generated, named."""
    concurrent, sequential = commit_logs()
    assert concurrent == sequential
    sp = CrashSpace(concurrent)
    a, f, w = 0, 1, 2
    assert (concurrent[a].sector, concurrent[w].sector) == (8, 10) and concurrent[f].is_flush
    for model in ("write-cache", "torn"):
        assert not [
            s for s in sp.states(model) if a in s.dropped and s.cut > w and w not in s.dropped
        ]
    # bounded by the first key mark: only states before it (nothing acknowledged yet) are kept from the models
    assert (
        sp.late
        == LateWrites(flushes=(f,), fuas=(), unbounded=0, keys=("ack:c1",), setup_only=True)
        == late_writes(concurrent)
    )
    assert sp.setup_notes == sp.notes
    (note,) = sp.notes
    assert (
        note.startswith("writes logged after 1 flush before the next ordered key mark")
        and "ack:c1" in note
    )


def test_late_writes_bounds() -> None:
    w = lambda i, s, flags=0: E(i, flags, s, 1)  # noqa: E731
    # no write after F before the ordered ack: nothing to say; the write after the ack is bounded away
    es = [
        w(0, 8),
        E(1, FLUSH),
        E(2, mark=ORDER_BEGIN),
        E(3, FLUSH),
        E(4, mark=ORDER_END),
        E(5, mark="ack:1"),
        w(6, 9),
        E(7, FLUSH),
    ]
    assert not late_writes(es) and CrashSpace(es).notes == ()
    # F completes inside the ack's ordering window: the marker's flush may have missed W, bound = next ack
    es = [
        w(0, 8),
        E(1, mark=ORDER_BEGIN),
        E(2, FLUSH),
        E(3, FLUSH),
        E(4, mark=ORDER_END),
        E(5, mark="ack:1"),
        w(6, 9),
        E(7, FLUSH),
        E(8, mark=ORDER_BEGIN),
        E(9, FLUSH),
        E(10, mark=ORDER_END),
        E(11, mark="ack:2"),
    ]
    lw = late_writes(es)
    assert lw.fuas == () and lw.keys[-1:] == ("ack:1",) and lw.unbounded == 0 and lw.flushes
    # a FUA write with a plain write logged after it (blind spot (a)); no ordered marks: unbounded
    es = [w(0, 8, FUA), w(1, 9), E(2, FLUSH), E(3, mark="ack:1"), w(4, 10), E(5, FLUSH)]
    lw = late_writes(es)
    assert (lw.flushes, lw.fuas, lw.unbounded, lw.keys) == ((2,), (0,), 2, ("ack:1",))
    assert lw.note().startswith(
        "log without ordered marks: writes completing during a flush not bounded; "
        "writes logged after 1 flush and 1 FUA write"
    )
    # a flush with an empty window of its own loses nothing
    assert not late_writes([E(0, FLUSH), w(1, 9), E(2, FLUSH)])

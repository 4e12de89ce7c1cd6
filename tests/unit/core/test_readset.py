"""The read-set rule (core/judging/readset.py): a proof never says more than the images show."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.judging.readset import (
    Mismatch,
    ReadSet,
    ReadSetRule,
    entry_span,
)
from powercut.core.log.dmlog import FLUSH, MARK, Entry
from powercut.core.states.crashstate import CrashState, Lie

SS = 4096  # the log's sector size: 8 device sectors a log sector


def log(rows: list[tuple[int, int, int]]) -> list[Entry]:
    """(flags, sector, nr_sectors) rows as a log's entries."""
    return [
        Entry(i, f, s, n, 0, "ack:x" if f == MARK else None) for i, (f, s, n) in enumerate(rows)
    ]


def state(sid: str, cut: int, dropped=(), torn=(), acks=("a",), model="write-cache", lie=None):
    return CrashState(model, cut, tuple(dropped), tuple(torn), acks, (), sid, 0, lie)


def image(entries: list[Entry], s: CrashState) -> dict[int, tuple[int, int]]:
    """A state's image as device sector -> (the entry that wrote it, its sector): replay's rule."""
    img: dict[int, tuple[int, int]] = {}
    per = SS // 512
    for i, torn in s.kept([e.changes_device for e in entries]):
        e = entries[i]
        offs = range(e.nr_sectors) if torn is None else torn
        for off in offs:
            for k in range(per):
                sector = (e.sector + off) * per + k
                img[sector] = (-1, sector) if e.is_discard else (i, sector)
    return img


# -- ReadSet ----------------------------------------------------------------------------------------
def test_a_read_set_merges_overlapping_and_adjacent_spans():
    r = ReadSet([(10, 20), (0, 8), (15, 30), (30, 31), (40, 40)])
    assert r.spans == ((0, 8), (10, 31))
    assert r.sectors == 29


def test_touches_is_overlap_of_half_open_spans():
    r = ReadSet([(8, 16), (32, 40)])
    assert r.touches(0, 9) and r.touches(15, 20) and r.touches(39, 100) and r.touches(0, 100)
    assert not r.touches(0, 8) and not r.touches(16, 32) and not r.touches(40, 50)


def test_entry_span_is_in_device_sectors():
    assert entry_span(Entry(0, 0, 3, 2, 0), 4096) == (24, 40)
    assert entry_span(Entry(0, 0, 3, 2, 0), 512) == (3, 5)


# -- the rule on a small log -------------------------------------------------------------------------
ROWS = [(0, 0, 1), (0, 1, 1), (0, 2, 1), (FLUSH, 0, 0), (0, 5, 1), (0, 6, 1), (0, 7, 2)]


def test_a_state_differing_only_where_the_judge_did_not_read_is_proven():
    es = log(ROWS)
    j = state("J", 7, dropped=(4,))
    s = state("S", 7, dropped=(4, 5))  # also drops entry 5 (sectors 48..56): J never read it
    rule = ReadSetRule(es, SS, [j, s])
    assert rule.add(j, ReadSet([(0, 24), (56, 72)]), "pass")
    assert rule.proof(s) == "J"


def test_a_state_differing_where_the_judge_read_is_judged():
    es = log(ROWS)
    j = state("J", 7, dropped=(4,))
    s = state("S", 7, dropped=(4, 5))
    rule = ReadSetRule(es, SS, [j, s])
    rule.add(j, ReadSet([(50, 51)]), "pass")
    assert rule.proof(s) is None


def test_a_torn_entry_is_equal_only_torn_at_the_same_sectors():
    es = log(ROWS)
    j = state("J", 7, torn=((6, (0,)),))
    same = state("S1", 7, torn=((6, (0,)),))
    other = state("S2", 7, torn=((6, (1,)),))
    rule = ReadSetRule(es, SS, [j, same, other])
    rule.add(j, ReadSet([(56, 72)]), "lost-ack")
    assert rule.proof(same) == "J"
    assert rule.proof(other) is None


def test_other_acks_or_another_model_are_another_group():
    es = log(ROWS)
    j = state("J", 7, dropped=(4,))
    other_acks = state("S1", 7, dropped=(4, 5), acks=("a", "b"))
    other_model = state("S2", 7, dropped=(4, 5), model="flush")
    rule = ReadSetRule(es, SS, [j, other_acks, other_model])
    rule.add(j, ReadSet([(0, 8)]), "pass")
    assert rule.proof(other_acks) is None
    assert rule.proof(other_model) is None


def test_what_cannot_be_shared_is_not_indexed():
    es = log(ROWS)
    j = state("J", 7, dropped=(4,))
    s = state("S", 7, dropped=(4, 5))
    rule = ReadSetRule(es, SS, [j, s])
    assert not rule.add(j, None, "pass")  # reads unknown
    assert not rule.add(j, ReadSet([]), "pass")  # a judge reads at least a superblock
    for verdict in ("timeout", "kernel-panic", "flaky"):
        assert not rule.add(j, ReadSet([(0, 8)]), verdict)
    assert rule.proof(s) is None


def test_a_lying_disk_state_is_never_proven_nor_shared():
    es = log(ROWS)
    lie = Lie("corrupt", 5, 6, (3,), SS)
    j = state("J", 7, dropped=(4,), lie=lie)
    s = state("S", 7, dropped=(4,), lie=lie)
    rule = ReadSetRule(es, SS, [j, s])
    assert not rule.add(j, ReadSet([(0, 8)]), "pass")
    plain = state("P", 7, dropped=(4,))
    rule = ReadSetRule(es, SS, [plain, s])
    rule.add(plain, ReadSet([(0, 8)]), "pass")
    assert rule.proof(s) is None


def test_a_mismatch_turns_the_rule_off():
    es = log(ROWS)
    j = state("J", 7, dropped=(4,))
    s = state("S", 7, dropped=(4, 5))
    rule = ReadSetRule(es, SS, [j, s])
    rule.add(j, ReadSet([(0, 8)]), "pass")
    m = Mismatch("S", "J", "pass", "lost-ack")
    rule.disprove(m)
    assert rule.off and rule.proof(s) is None
    assert "S" in m.line() and "J" in m.line() and "lost-ack" in m.line()


# -- soundness: a proof never says more than the images show ------------------------------------------
@st.composite
def cases(draw: st.DrawFn):
    rows = []
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(("w", "w", "w", "flush", "mark")))
        if kind == "flush":
            rows.append((FLUSH, 0, 0))
        elif kind == "mark":
            rows.append((MARK, 0, 0))
        else:
            rows.append((0, draw(st.integers(0, 7)), draw(st.integers(1, 3))))
    es = log(rows)
    n = len(es)
    data = [i for i, e in enumerate(es) if e.changes_device]

    def one(sid: str) -> CrashState:
        cut = draw(st.integers(0, n))
        pool = [i for i in data if i < cut]
        dropped = draw(st.lists(st.sampled_from(pool), unique=True)) if pool else []
        rest = [i for i in pool if i not in dropped and es[i].nr_sectors > 1]
        torn = []
        if rest and draw(st.booleans()):
            i = draw(st.sampled_from(rest))
            offs = draw(st.lists(st.integers(0, es[i].nr_sectors - 1), unique=True, min_size=1))
            torn = [(i, tuple(sorted(offs)))]
        return state(sid, cut, sorted(dropped), torn)

    states = [one(f"s{k}") for k in range(draw(st.integers(2, 6)))]
    reads = [
        ReadSet(
            draw(
                st.lists(
                    st.tuples(st.integers(0, 80), st.integers(1, 24)).map(
                        lambda t: (t[0], t[0] + t[1])
                    ),
                    min_size=1,
                    max_size=4,
                )
            )
        )
        for _ in states
    ]
    return es, states, reads


@settings(max_examples=400, deadline=None)
@given(cases())
def test_a_proven_state_equals_its_judged_state_on_every_sector_read(case):
    es, states, reads = case
    rule = ReadSetRule(es, SS, states)
    read_by = {}
    for s, r in zip(states, reads):
        found = rule.proof(s)
        if found is None:
            rule.add(s, r, "pass")
            read_by[s.id] = r
            continue
        j = next(x for x in states if x.id == found)
        a, b = image(es, s), image(es, j)
        for lo, hi in read_by[found].spans:
            for sector in range(lo, hi):
                assert a.get(sector) == b.get(sector), (s, j, sector)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_a_state_keeping_what_a_judged_state_kept_is_proven(case):
    es, states, reads = case
    j = states[0]
    twin = CrashState(j.model, j.cut, j.dropped, j.torn, j.acks, j.begun, "twin", 0)
    rule = ReadSetRule(es, SS, [j, twin])
    rule.add(j, reads[0], "pass")
    assert rule.proof(twin) == j.id

"""blame.place over random logs (writes, PREFLUSH/FUA writes, discards, barrier flushes, the marking
code's ordering flushes, key marks and other marks): every sentence it says is true of the log.

Issue #52 item 5: "the crash came before the flush at #200 (before ack:1)" named the first ack
after the *cut*, though the flush came after ack:5; the ack named after a flush is the first ack
mark after that flush, and none is named when no ack follows it."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.log.dmlog import DISCARD, FLUSH, FUA, MARK, ORDER_BEGIN, ORDER_END, Entry
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import CrashSpace
from powercut.debug import blame
from tests.unit.logops import build_log

WRITE_FLAGS = (0, 0, 0, FUA, FLUSH, FLUSH | FUA, DISCARD)


def _op(draw: st.DrawFn, k: int) -> list[tuple[int, int, int, str | None]]:
    """One random operation as (flags, sector, nr_sectors, mark) rows."""
    kind = draw(
        st.sampled_from(
            ("write", "write", "write", "flush", "order", "begin", "ack", "ack", "note")
        )
    )
    key = str(draw(st.integers(0, 4)))  # keys repeat: a retried commit, several threads
    if kind == "write":
        return [
            (
                draw(st.sampled_from(WRITE_FLAGS)),
                draw(st.integers(0, 64)),
                draw(st.integers(1, 8)),
                None,
            )
        ]
    if kind == "flush":
        return [(FLUSH, 0, 0, None)]
    if kind == "order":  # the marking code's ordering flush: an ordering point, not a barrier
        return [(MARK, 0, 0, ORDER_BEGIN), (FLUSH, 0, 0, None), (MARK, 0, 0, ORDER_END)]
    return [(MARK, 0, 0, {"begin": "begin:", "ack": "ack:", "note": "note-"}[kind] + key)]


@st.composite
def logs(draw: st.DrawFn) -> list[Entry]:
    rows = [r for k in range(draw(st.integers(1, 30))) for r in _op(draw, k)]
    return [Entry(i, f, s, n, 0, m) for i, (f, s, n, m) in enumerate(rows)]


@st.composite
def spaces_and_states(draw: st.DrawFn) -> tuple[CrashSpace, CrashState]:
    sp = CrashSpace(draw(logs()))
    cut = draw(st.integers(1, sp.n))
    model = draw(st.sampled_from(("no-cache", "write-cache")))
    pool = sp.droppable(cut) if model == "write-cache" else ()
    dropped = sorted(draw(st.sets(st.sampled_from(pool)))) if pool else []
    return sp, sp.make_state(model, cut, dropped)


def _first(sp: CrashSpace, lo: int, hi: int, what: str) -> Entry | None:
    """The first entry in [lo, hi) that is an ack mark (``what`` "ack") or a barrier flush ("barrier")."""
    for e in sp.entries[lo:hi]:
        if (e.ack_key is not None) if what == "ack" else sp.is_barrier(e.index):
            return e
    return None


def _named_ack_follows(sp: CrashSpace, text: str, after: int) -> None:
    """The ack a sentence names after entry ``after`` is the first ack mark after it; none named
    when no ack mark follows it."""
    m = re.search(r" \(before (ack:\S*)\)", text)
    first = _first(sp, after + 1, sp.n, "ack")
    assert (m.group(1) if m else None) == (first.mark if first else None), text


SENTENCES = {
    "fua": re.compile(
        r"; a FUA write(?:, done before the cut|, the crash came before it(?: \(before ack:\S*\))?)$"
    ),
    "unflushed": re.compile(r", not yet flushed when (ack:\S*) was given$"),
    "flushed": re.compile(r"; the flush at #(\d+)(?: \(before ack:\S*\))? came before the cut$"),
    "crash": re.compile(r"; the crash came before the flush at #(\d+)(?: \(before ack:\S*\))?$"),
    "never": re.compile(r"; never flushed$"),
}


def _check(sp: CrashSpace, state: CrashState, entry: int) -> None:
    text = blame.place(sp, entry, state)
    w = sp.entries[entry]
    key = next(
        (
            e
            for e in reversed(sp.entries[:entry])
            if e.ack_key is not None or e.begin_key is not None
        ),
        None,
    )
    head = f"written after {key.mark}" if key is not None else "written before the first commit"
    assert text.startswith(head), text
    rest = text[len(head) :]
    found = {name: m for name, rx in SENTENCES.items() if (m := rx.match(rest))}
    assert len(found) == 1, text
    ((name, m),) = found.items()
    barrier = _first(sp, entry + 1, sp.n, "barrier")
    if name == "fua":
        assert w.is_fua and w.changes_device, text
        if entry >= state.cut:
            _named_ack_follows(sp, text, entry)
        return
    assert not (w.is_fua and w.changes_device), text
    if name == "unflushed":  # an ack given before the cut, and no barrier between the write and it
        ack = _first(sp, entry + 1, state.cut, "ack")
        assert entry < state.cut and ack is not None and ack.mark == m.group(1), text
        assert barrier is None or barrier.index > ack.index, text
    elif name == "flushed":  # a barrier after the write, before the cut, and no ack before it
        f = int(m.group(1))
        assert barrier is not None and f == barrier.index and entry < f < state.cut, text
        assert _first(sp, entry + 1, f, "ack") is None, text
        _named_ack_follows(sp, text, f)
    elif name == "crash":  # the first barrier after the write, at or after the cut
        f = int(m.group(1))
        assert barrier is not None and f == barrier.index and f >= state.cut, text
        assert _first(sp, entry + 1, state.cut, "ack") is None, text
        _named_ack_follows(sp, text, f)
    else:
        assert barrier is None and _first(sp, entry + 1, state.cut, "ack") is None, text


@settings(max_examples=400, deadline=None)
@given(spaces_and_states())
def test_every_sentence_of_place_is_true_of_the_log(case: tuple[CrashSpace, CrashState]) -> None:
    sp, state = case
    for entry, _ in blame.writes_that_matter(sp, state):
        _check(sp, state, entry)
    for entry in range(sp.n):  # any write, blamed or not
        if sp.entries[entry].changes_device:
            _check(sp, state, entry)


def test_the_ack_after_the_flush_not_after_the_cut(tmp_path: Path) -> None:
    """append-fsync fsync=false: every ack given, then the writeback and its flush; a state cut
    before ack:1 lacks the writes, which came before the flush at #18, itself before ack:6 -- not
    before ack:1 (the old words)."""
    ops: list[tuple] = [("m", "mkfs")]  # type: ignore[type-arg]
    for i in range(6):
        ops += [("m", f"begin:{i}"), ("m", f"ack:{i}")]
    ops += [("w", 100 + 8 * k, 8, 0, k) for k in range(5)] + [
        ("f",),
        ("m", "begin:6"),
        ("m", "ack:6"),
    ]
    sp = CrashSpace(build_log(tmp_path / "log.bin", ops))
    state = sp.make_state("no-cache", next(e.index for e in sp.entries if e.mark == "ack:1"))
    late = [
        i for i, how in blame.writes_that_matter(sp, state) if how == "not yet durable at the cut"
    ]
    assert [sp.entries[i].sector for i in late] == [100, 108, 116, 124, 132]
    assert {blame.place(sp, i, state) for i in late} == {
        "written after ack:5; the crash came before the flush at #18 (before ack:6)"
    }
    no_ack_after = CrashSpace(build_log(tmp_path / "b.bin", ops[:-2]))
    assert (
        blame.place(no_ack_after, late[0], no_ack_after.make_state("no-cache", state.cut))
        == "written after ack:5; the crash came before the flush at #18"
    )

"""replay/zeros.py: the log's all-zero writes, and a walk that skips them only where the image is
still zero -- every state of every model byte-identical to the reference with or without them;
``Written`` against a set of bytes."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from powercut.core.log.dmlog import open_log
from powercut.core.log.dmlog_writer import LogWriter
from powercut.core.states.models import enumerate_states
from powercut.core.states.stateid import HONEST_MODELS
from powercut.replay.materialize import ReplayStats, materialize, reference_image
from powercut.replay.zeros import Written, zero_writes
from tests.unit.replay.test_materialize import NSECT, sha

SS = 512


def zlog(path: Path, seed: int, n: int):  # type: ignore[no-untyped-def]
    """A random log of mkfs-like zero writes, data writes (some over the zeros), flushes, discards
    and marks; the first mark ends the part ``zero_writes`` scans by default."""
    r = random.Random(seed)
    with LogWriter(path, SS) as w:
        for i in range(n):
            x = r.random()
            nr = r.choice([1, 2, 4, 8])
            sector = r.randrange(NSECT - nr)
            if x < 0.4:
                w.write(sector, bytes(nr * SS), r.choice([0, 0, 1]))
            elif x < 0.75:
                w.write(sector, bytes([r.randrange(1, 256)]) * (nr * SS), 0)
            elif x < 0.85:
                w.flush(0)
            elif x < 0.92:
                w.discard(sector, nr)
            else:
                w.mark(f"ack:{i}")
        w.mark("dm-log-writes-end")
    return open_log(path, strict=True)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 40), whole=st.booleans())
def test_skipping_zero_writes_never_changes_an_image(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int, whole: bool
) -> None:
    d = tmp_path_factory.mktemp("z")
    size = NSECT * SS
    with zlog(d / "l.bin", seed, n) as idx:
        zeros = zero_writes(idx, len(idx.entries) if whole else None)
        for lo, hi in zeros:
            assert all(not any(idx.data(e)) for e in idx.entries[lo:hi])
        for model in HONEST_MODELS:
            states = enumerate_states(idx, model, exhaustive_bound=3, samples=2)
            with contextlib.closing(
                materialize(idx, None, size, states, d, "copy", known_zero=zeros)
            ) as it:
                for state, img in it:
                    reference_image(idx, state, size, d / "ref.img")
                    assert sha(img) == sha(d / "ref.img"), state.id


def test_mkfs_like_zeros_are_not_read_and_a_zero_write_over_data_is(tmp_path: Path) -> None:
    size = NSECT * SS
    with LogWriter(tmp_path / "l.bin", SS) as w:
        w.write(0, bytes(16 * SS), 0)  # mkfs zeroing a table: skipped
        w.write(32, b"\1" * (4 * SS), 0)  # data
        w.write(32, bytes(2 * SS), 0)  # zeros over that data: applied
        w.mark("mkfs")
        w.flush(0)
        w.mark("dm-log-writes-end")
    with open_log(tmp_path / "l.bin", strict=True) as idx:
        zeros = zero_writes(idx)
        assert zeros == ((0, 1), (2, 3))
        stats = ReplayStats()
        states = enumerate_states(idx, "flush")
        with contextlib.closing(
            materialize(idx, None, size, states, tmp_path, "copy", stats=stats, known_zero=zeros)
        ) as it:
            for state, img in it:
                reference_image(idx, state, size, tmp_path / "ref.img")
                assert sha(img) == sha(tmp_path / "ref.img")
        assert stats.zero_skipped == 16 * SS


def test_an_initial_image_disables_the_skip(tmp_path: Path) -> None:
    size = NSECT * SS
    init = tmp_path / "init.img"
    init.write_bytes(b"\7" * size)
    with LogWriter(tmp_path / "l.bin", SS) as w:
        w.write(0, bytes(8 * SS), 0)
        w.mark("dm-log-writes-end")
    with open_log(tmp_path / "l.bin", strict=True) as idx:
        stats = ReplayStats()
        states = enumerate_states(idx, "no-cache")
        with contextlib.closing(
            materialize(
                idx, init, size, states, tmp_path, "copy", stats=stats, known_zero=zero_writes(idx)
            )
        ) as it:
            for state, img in it:
                if state.cut >= 1:
                    assert img.read_bytes()[: 8 * SS] == bytes(8 * SS)
        assert stats.zero_skipped == 0


@settings(max_examples=300, deadline=None)
@given(
    ranges=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 30)), max_size=25),
    probes=st.lists(st.tuples(st.integers(0, 240), st.integers(1, 30)), max_size=10),
)
def test_written_agrees_with_a_set_of_bytes(
    ranges: list[tuple[int, int]], probes: list[tuple[int, int]]
) -> None:
    w = Written()
    seen: set[int] = set()
    for lo, n in ranges:
        for plo, pn in probes:
            assert w.overlaps(plo, plo + pn) == bool(seen & set(range(plo, plo + pn)))
        w.add(lo, lo + n)
        seen |= set(range(lo, lo + n))
        assert all(a < b for a, b in zip(w.hi, w.lo[1:])) and sum(
            hi - lo for lo, hi in zip(w.lo, w.hi)
        ) == len(seen)

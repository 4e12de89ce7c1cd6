"""core/states/crashstate.py: the one rule of what a crash state keeps, against a direct reading of the
definition (docs/crash-models.md: a state is (cut, kept); dropped entries lost, torn ones in part)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from powercut.core.states.crashstate import CrashState


def state(cut: int, dropped: tuple[int, ...] = (), torn: tuple = ()) -> CrashState:
    return CrashState("write-cache", cut, dropped, torn, (), (), "x", 0)


def test_base_is_the_first_entry_that_differs_from_the_prefix() -> None:
    assert state(9).base == 9
    assert state(9, (4, 6)).base == 4
    assert state(9, (6,), ((3, (0, 1)),)).base == 3


@given(st.lists(st.booleans(), min_size=1, max_size=30), st.data())
def test_kept_is_every_device_write_before_the_cut_not_dropped_torn_in_part(changes, data) -> None:
    n = len(changes)
    cut = data.draw(st.integers(0, n))
    writes = [i for i in range(cut) if changes[i]]
    dropped = tuple(
        sorted(data.draw(st.sets(st.sampled_from(writes)) if writes else st.just(set())))
    )
    left = [i for i in writes if i not in dropped]
    torn_at = data.draw(st.sampled_from(left)) if left and data.draw(st.booleans()) else None
    torn = ((torn_at, (0,)),) if torn_at is not None else ()
    s = state(cut, dropped, torn)
    want = tuple(
        (i, (0,) if i == torn_at else None) for i in range(cut) if changes[i] and i not in dropped
    )
    assert s.kept(changes) == want
    assert s.kept(changes, s.base) == tuple(k for k in want if k[0] >= s.base)
    assert all(
        changes[i] and i not in dropped and i != torn_at for i in range(s.base) if changes[i]
    )

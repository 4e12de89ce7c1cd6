"""Cluster states are dealt to the checker VMs in contiguous chunks (a node's state changes rarely
inside one, so its walks stay few) of near-equal size, in order, never an empty one."""
from __future__ import annotations

import pytest

from powercut.check.clustervm import chunks


@pytest.mark.parametrize(("n", "jobs"), [(0, 2), (1, 3), (7, 1), (7, 2), (7, 3), (10, 4), (3, 8)])
def test_chunks_are_contiguous_near_equal_and_whole(n: int, jobs: int) -> None:
    states = list(range(n))
    got = chunks(states, jobs)  # type: ignore[arg-type]
    assert [x for c in got for x in c] == states
    assert all(got) and len(got) == min(jobs, n)
    if got:
        assert max(map(len, got)) - min(map(len, got)) <= 1

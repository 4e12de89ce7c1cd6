"""Shards (core/states/shard.py): the split is a partition (disjoint, complete), deterministic, balanced,
and the grammar refuses what is not i/n."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from powercut.core.states.shard import Shard
from powercut.errors import UsageError


@given(st.lists(st.integers(), max_size=200), st.integers(1, 17))
def test_shards_partition_the_items_in_order(items, n) -> None:
    parts = [Shard(i, n).take(items) for i in range(1, n + 1)]
    assert sorted(x for p in parts for x in p) == sorted(items)  # complete
    assert sum(map(len, parts)) == len(items)  # disjoint (by position)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced
    assert parts == [Shard(i, n).take(list(items)) for i in range(1, n + 1)]  # deterministic
    for i, p in enumerate(parts):  # round-robin, in the selection's order
        assert p == tuple(items[j] for j in range(i, len(items), n))


def test_whole_is_everything() -> None:
    assert Shard().whole and Shard().take([3, 1, 2]) == (3, 1, 2) and str(Shard(2, 5)) == "2/5"


@pytest.mark.parametrize(
    "text, want", [("1/1", Shard(1, 1)), ("3/4", Shard(3, 4)), (" 2 / 3 ", Shard(2, 3))]
)
def test_parse(text, want) -> None:
    assert Shard.parse(text) == want


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "1", "a/b", "-1/2", "1/2/3", ""])
def test_parse_refuses(text) -> None:
    with pytest.raises(UsageError, match="i/n"):
        Shard.parse(text)

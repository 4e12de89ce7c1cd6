"""Shards (pure; host): a deterministic split of a campaign's distinct states (or a matrix's rows)
that needs no coordination.  ``--shard i/n`` (1-based, as Playwright, Jest and Node write it) takes
every n-th item of the selection's order starting at the i-th: each shard recomputes the same
selection from the same log and settings, the shards are disjoint, together they are the whole, and
their sizes differ by at most one.  Round-robin over the selection's order (model by model, cut by
cut) also spreads the cheap early cuts and the expensive late ones evenly."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from powercut.errors import UsageError

T = TypeVar("T")
_FORM = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True, slots=True)
class Shard:
    index: int = 1  # 1-based
    total: int = 1

    def __post_init__(self) -> None:
        if self.total < 1 or not 1 <= self.index <= self.total:
            raise UsageError(f"a shard is i/n with 1 <= i <= n, not {self.index}/{self.total}")

    @staticmethod
    def parse(text: str) -> "Shard":
        m = _FORM.fullmatch(text or "")
        if not m:
            raise UsageError(f"--shard wants i/n (e.g. 2/4, 1-based), not {text!r}")
        return Shard(int(m.group(1)), int(m.group(2)))

    @property
    def whole(self) -> bool:
        return self.total == 1

    def take(self, items: Sequence[T]) -> tuple[T, ...]:
        """This shard's items: every ``total``-th, from the ``index``-th."""
        return tuple(items[self.index - 1 :: self.total])

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"

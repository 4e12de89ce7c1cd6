"""What the checkers say of a record's key in a failure: whether the state had acked it, begun it
without an ack, or never begun it (shared by the postgres, sqlite and zodb checkers)."""

from __future__ import annotations

from collections.abc import Container


def key_state(key: int, acked: Container[int], begun: Container[int]) -> str:
    if key in acked:
        return "acked"
    if key in begun:
        return "begun, not acked"
    return "never begun"

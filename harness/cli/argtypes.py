"""The command line's value types (host): each refuses a value out of its range with one line, so a
bad value exits 2 like a bad option, before anything runs (cli/parser.py uses them)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable

__all__ = ["at_least", "non_negative_float", "positive_float", "seed", "shard", "shell_words"]


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``least`` (a bad value exits 2 before anything runs)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"wants a whole number, not {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
        return value

    parse.__name__ = f"integer >= {least}"
    return parse


def _float(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"wants a number, not {text!r}") from None
    if value != value or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(
            f"must be {'more than' if positive else 'at least'} 0, not {text}"
        )
    return value


def shell_words(text: str) -> tuple[str, ...]:
    """An argparse type: one shell-quoted string split into words (an unbalanced quote exits 2)."""
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} in {text!r}") from None


def shard(text: str):
    """An argparse type: i/n, 1 <= i <= n (a bad value exits 2)."""
    from powercut.core.states.shard import Shard
    from powercut.errors import UsageError

    try:
        return Shard.parse(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def seed(text: str) -> int:
    """An argparse type: a seed (a whole number >= 0) or ``auto`` (a new one each run, printed)."""
    if text == "auto":
        return -1  # core.selection.SEED_AUTO (the parser does not import the core at start-up)
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"wants a whole number or auto, not {text!r}")
    return int(text)


def positive_float(text: str) -> float:
    return _float(text, True)


def non_negative_float(text: str) -> float:
    return _float(text, False)

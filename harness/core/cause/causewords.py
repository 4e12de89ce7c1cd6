"""The words every cause shares (pure): the lines that list a finding's calls as evidence, what a
held sync says after its call, and what a cause adds when other acks broke the same rule.  Each
rule's own sentence is in its module (core/cause/rules/).  Pure: no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op

__all__ = ["EVIDENCE_LINES", "alike", "evidence_line", "evidence_lines", "held_suffix"]

EVIDENCE_LINES = 6  # the calls a cause lists, at most (the last ones)


def evidence_line(o: Op) -> str:
    """One call as evidence: where the trace has it, and what it was."""
    where = f"line {o.line}, pid {o.pid}"
    if o.kind == sc.MARK:
        return f"{where}: mark {o.text}"
    return f"{where}: {o.text}{held_suffix(o)}"


def held_suffix(o: Op) -> str:
    """What a sync --delay-sync held says after its call ("" for any other call)."""
    return f" [--delay-sync held it {o.held * 1000:g} ms]" if o.held > 0 else ""


def evidence_lines(ops: Sequence[Op]) -> tuple[str, ...]:
    """The evidence lines of a finding's calls: the last ``EVIDENCE_LINES`` of them."""
    return tuple(evidence_line(o) for o in ops[-EVIDENCE_LINES:])


def alike(n: int) -> str:
    """What a cause adds when ``n`` other acked commits broke the same rule first ("" for none)."""
    return f" (and {n} more acked commit{'s' if n != 1 else ''} alike)" if n else ""

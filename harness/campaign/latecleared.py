"""The late flushes each disk's log may drop from its coverage notes (thin adapter): the recording's
system-call trace read once (debug/cause.load_trace), a cluster's split per node
(core/cause/nodetrace.node_trace), judged by core/trace/latetrace.quiet.  Without a trace (``--no-trace``,
strace missing, unreadable) nothing is cleared: every note stays."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from powercut.core.cause.nodetrace import node_root, node_trace
from powercut.core.log.dmlog import LogIndex
from powercut.core.log.markorder import late_writes
from powercut.core.trace.latetrace import quiet
from powercut.debug.cause import ROOT, load_trace
from powercut.record.recording import Recording

log = logging.getLogger(__name__)

__all__ = ["cleared_by_trace"]


def cleared_by_trace(rec: Recording, logs: Sequence[LogIndex]) -> list[frozenset[int]]:
    """Per disk, the late flushes and FUA writes its log's notes leave out (core/trace/latetrace.py)."""
    late = [late_writes(lg.entries) for lg in logs]
    if not any(late):
        return [frozenset() for _ in logs]
    trace = load_trace(rec)
    out: list[frozenset[int]] = []
    for i, (lg, lw) in enumerate(zip(logs, late)):
        if trace is None or not lw:
            out.append(frozenset())
            continue
        tr, root = (
            (trace, ROOT) if len(logs) == 1 else (node_trace(trace, i, ROOT), node_root(ROOT, i))
        )
        got = quiet(lg.entries, lw, tr, root)
        log.debug(
            "disk %d: %d of %d late flushes cleared by the trace",
            i,
            len(got.cleared),
            len(got.cleared) + len(got.kept),
        )
        out.append(got.cleared)
    return out

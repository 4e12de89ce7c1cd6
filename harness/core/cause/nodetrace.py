"""One node's part of a cluster recording's system-call trace, and which nodes a cluster failure's
cause is about (pure: no I/O).

A cluster recording traces its client and every node in one trace (guest/record.py): the node i
files are those under ``<root>/n<i>/`` (its filesystem's mount), and every cluster mark is one
ioctl per node's log (``_logmark.insert_on_nodes``), each naming its node's device (``Op.target``,
``...-n<i>``).  ``node_trace`` keeps of it what node i's log and filesystem saw: node i's marks
(so that the k-th mark of a text is the k-th in node i's log, ``syscalls.align``), the calls on
node i's files, and the calls that reach every filesystem (``sync``, io_uring's blind spot); a
``syncfs`` of another node's filesystem makes nothing of node i durable, so it is left out.  The
cause rules (core/cause/causes.py) then judge node i alone, against node i's log, with ``node_root``.

Which nodes a failure's cause names (``cause_nodes``), in this order of trust:

1. the lying node of a lying-disk state (what its disk did is the cause);
2. the nodes the state's reasons name (``node 1 (standby, promoted): ...``): the checker's word;
3. else the nodes the per-node blame found missing writes of the program's files (lost, torn or not
   yet durable at the cut), whose rule must then be about one of those files (``blame agrees``)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any

from powercut.core.cause.causes import lost_keys
from powercut.core.judging.nodesshrink import nodes_named
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Trace

__all__ = [
    "BLAME",
    "LIE",
    "REASONS",
    "cause_nodes",
    "missing_writes",
    "node_keys",
    "node_of_target",
    "node_root",
    "node_trace",
]

# why a node was chosen (``cause_nodes``)
LIE = "lie"
REASONS = "reasons"
BLAME = "blame"
_TARGET = re.compile(r"-n(\d+)$")
_NODE = re.compile(r"\bnode \d+\b")


def node_root(root: str, node: int) -> str:
    """Where node ``node``'s filesystem is mounted under the recording's ``root``."""
    return f"{root.rstrip('/')}/n{node}"


def node_of_target(target: str) -> int | None:
    """The node a mark was sent to, from its device's name (``powercut-rec-n2`` -> 2); None: not a node's."""
    m = _TARGET.search(target)
    return int(m.group(1)) if m else None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


def node_trace(trace: Trace, node: int, root: str) -> Trace | None:
    """Node ``node``'s part of a cluster's trace (see the module's docstring), its ops numbered
    again (``Op.seq`` is a position in the trace it belongs to), each keeping its line in the
    trace file; None when the trace's marks do not say their node (no node can be told apart)."""
    marks = trace.marks()
    if not marks or any(node_of_target(m.target) is None for m in marks):
        return None
    top = node_root(root, node)
    others = re.compile(re.escape(root.rstrip("/")) + r"/n(\d+)(?:/|\b)")
    kept = [
        o
        for o in trace.ops
        if (
            node_of_target(o.target) == node
            if o.kind == sc.MARK
            else o.kind in (sc.SYNC, sc.IO_URING) or _under(o.path, top) or _under(o.path2, top)
        )
    ]
    out = Trace(
        [dataclasses.replace(o, seq=k) for k, o in enumerate(kept)], trace.lines, trace.unparsed
    )
    out.blind = [b for b in trace.blind if all(int(m.group(1)) == node for m in others.finditer(b))]
    return out


def node_keys(reasons: Iterable[str], keys: Iterable[str]) -> list[str]:
    """``causes.lost_keys`` for a cluster's reasons: "node 1" names a node, not the key 1; the keys
    the reasons call keys (``record 3``, ``ack:3``) when they name any, rather than every number
    (``intact on 1 of 3 nodes``)."""
    text = [_NODE.sub("node", r) for r in reasons]
    keys = list(keys)
    return lost_keys(text, keys, words=False) or lost_keys(text, keys)


def missing_writes(culprits: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of a node's blamed writes (debug/blame.Culprit as JSON) those of the program's files that the
    state did not hold: lost, torn or not yet durable (not "durable, the last write before the cut")."""
    return [
        c for c in culprits if c.get("path") and not str(c.get("how", "")).startswith("durable")
    ]


def cause_nodes(
    lying: Sequence[int],
    reasons: Iterable[str],
    culprits: Sequence[Sequence[dict[str, Any]]],
    nodes: int,
) -> tuple[list[int], str]:
    """(the nodes a cluster failure's cause is about, in order; why: ``LIE``, ``REASONS`` or
    ``BLAME``), ([], "") when none can be told: ``lying``: the nodes whose state is a lying disk's;
    ``culprits``: per node, its blamed writes (empty without a diagnosis)."""
    if lying:
        return list(lying), LIE
    named = [n for n in nodes_named(reasons) if n < nodes]
    if named:
        return named, REASONS
    blamed = [n for n, cs in enumerate(culprits) if n < nodes and missing_writes(cs)]
    return (blamed, BLAME) if blamed else ([], "")

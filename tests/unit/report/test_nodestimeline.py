"""The cluster timeline (report/nodestimeline.py): one band per node, the shared key marks at the
same x on every node whatever each node wrote between them, each failing cluster state drawn
through its cut on every node, ids the logs cannot rebuild left out."""

from __future__ import annotations

import re
from pathlib import Path

from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import FLUSH
from powercut.core.states.nodes import Nodes
from powercut.core.states.selection import SelectionSpec, select_nodes
from powercut.report import nodestimeline
from tests.unit.logops import build_log

GLOBAL = ["mkfs", "begin:1", "ack:1", "begin:2", "ack:2"]


def _logs(tmp_path: Path, writes: list[list[int]]):  # type: ignore[no-untyped-def]
    """Node n writes writes[n][k] blocks (then flushes) before global mark k."""
    out = []
    for n, per in enumerate(writes):
        ops: list[tuple] = []  # type: ignore[type-arg]
        for k, mark in enumerate(GLOBAL):
            ops += [("w", 8 * j, 1, 0, j + k) for j in range(per[k])] + [("f",)]
            ops.append(("m", mark))
        ops += [("w", 200, 1, FLUSH, 7)]
        out.append(build_log(tmp_path / f"n{n}.bin", ops))
    return out


def test_key_marks_line_up_across_nodes_and_failing_cuts_are_drawn(tmp_path: Path) -> None:
    logs = _logs(tmp_path, [[3, 1, 0, 5, 1], [1, 6, 2, 0, 0], [2, 2, 2, 2, 2]])
    cs = Nodes(logs)
    states = select_nodes(cs, SelectionSpec(models=("flush",))).states
    failing = [Verdict(s.id, s.model, s.instant, "lost-ack", ("x",), 1, 1, 0.0) for s in states[:3]]
    failing.append(
        Verdict("flush~flush@999+flush@1+flush@1", "flush", 0, "lost-ack", (), 0, 0, 0.0)
    )
    tl = nodestimeline.of_logs(logs, failing)
    assert len(tl.bands) == 3 and tl.entries == sum(len(x) for x in logs)
    x = tl.x_of()
    for k in range(len(tl.bands[0].anchors)):  # every shared key mark at one x on every node
        xs = {round(x(n, b.anchors[k]), 6) for n, b in enumerate(tl.bands)}
        assert len(xs) == 1, (k, xs)
    for n, b in enumerate(tl.bands):  # entries keep their order on each node
        pos = [x(n, i) for i in range(b.entries)]
        assert pos == sorted(pos)
    assert [c for c, _ in tl.cuts] == [
        tuple(s.cut for s in st.nodes) for st in states[:3]
    ]  # the bad id is left out
    svg = tl.svg()
    assert svg.count('class="cut"') == 3 and svg.count("node 2") >= 1
    assert (
        len(re.findall(r'<polyline class="cut" points="([^"]+)"', svg)[0].split()) == 3
    )  # one point per node

"""A cluster recording as a picture (host; issue 40): one band per node, each its own log's data
writes, flushes (FUA beside them) and key marks, the bands lined up at the key marks every node's
log shares -- so one x is one instant on every node -- and each failing cluster state drawn as a
red polyline through its node cuts: a consistent cut, one point per node.

The x axis is the instant, not the entry index: the span between two consecutive key marks is as
wide as the busiest node's entries there (at least ``MIN_SPAN`` units), and each node's entries
in that span are spread evenly across it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from powercut.core.log.dmlog import LogIndex
from powercut.core.states.nodes import Nodes, key_events
from powercut.errors import UsageError

WIDTH = 1200
LEFT = 96
TOP = 8
BAND_H = 54
GAP = 10
MIN_SPAN = (
    4  # entries' worth of width per instant at least (an instant with no writes stays visible)
)
MAX_CUTS = 300


@dataclass(frozen=True, slots=True)
class NodeBand:
    entries: int
    anchors: tuple[int, ...]  # the entry index of each shared key mark, in order
    writes: tuple[int, ...]  # entry indexes of data writes
    flushes: tuple[tuple[int, str], ...]  # (entry index, hover text): FLUSH, FUA
    marks: tuple[tuple[int, str], ...]  # (entry index, mark text): ack:/begin:


@dataclass(frozen=True, slots=True)
class NodesTimeline:
    bands: tuple[NodeBand, ...]
    cuts: list[tuple[tuple[int, ...], str]] = field(
        default_factory=list
    )  # (cut per node, state + verdict)

    @property
    def entries(self) -> int:
        return sum(b.entries for b in self.bands)

    def _spans(self) -> list[float]:
        """Each instant's width in entries: the busiest node's entries between two key marks."""
        k = len(self.bands[0].anchors)
        spans = []
        for j in range(k + 1):
            widths = []
            for b in self.bands:
                lo = b.anchors[j - 1] if j else 0
                hi = b.anchors[j] if j < k else b.entries
                widths.append(hi - lo)
            spans.append(float(max(MIN_SPAN, *widths)))
        rest = sum(spans[1:])
        if rest:  # before the first key mark: mkfs and set-up, drawn at most a tenth of the width
            spans[0] = min(spans[0], max(float(MIN_SPAN), rest / 9))
        return spans

    def x_of(self) -> Any:
        """node, entry index -> x (the piecewise-linear map that lines the key marks up)."""
        spans = self._spans()
        total = sum(spans)
        starts = [0.0]
        for s in spans:
            starts.append(starts[-1] + s)
        scale = (WIDTH - LEFT - 8) / max(total, 1.0)

        def x(node: int, i: int) -> float:
            b = self.bands[node]
            k = len(b.anchors)
            j = next((j for j, a in enumerate(b.anchors) if i < a), k)
            lo = b.anchors[j - 1] if j else 0
            hi = b.anchors[j] if j < k else b.entries
            frac = (i - lo) / (hi - lo) if hi > lo else 0.0
            return LEFT + (starts[j] + frac * spans[j]) * scale

        return x

    def svg(self) -> str:
        x = self.x_of()
        height = TOP + len(self.bands) * (BAND_H + GAP) + 10
        out = [
            f'<svg class="timeline cluster" viewBox="0 0 {WIDTH} {height}" preserveAspectRatio="none" role="img" '
            f'aria-label="cluster timeline, {len(self.bands)} nodes">'
        ]
        for n, b in enumerate(self.bands):
            y = TOP + n * (BAND_H + GAP)
            out.append(
                f'<text x="4" y="{y + 14}" class="lane">node {n}</text>'
                f'<text x="4" y="{y + 28}" class="tick">{b.entries} entries</text>'
            )
            out.append(
                f'<rect x="{LEFT}" y="{y}" width="{WIDTH - LEFT - 8}" height="{BAND_H}" fill="none" '
                'stroke="#e5e5e5"/>'
            )
            out.extend(self._writes(n, b, y, x))
            for i, text in b.flushes[:3000]:
                out.append(
                    f'<line x1="{x(n, i):.1f}" x2="{x(n, i):.1f}" y1="{y + 20}" y2="{y + 34}" stroke="#333" '
                    f'stroke-width="1"><title>node {n} #{i} {escape(text)}</title></line>'
                )
            for i, text in b.marks[:3000]:
                color = "#2e8b57" if text.startswith("ack:") else "#c8a02e"
                out.append(
                    f'<line x1="{x(n, i):.1f}" x2="{x(n, i):.1f}" y1="{y + 36}" y2="{y + BAND_H - 2}" '
                    f'stroke="{color}" stroke-width="1.2"><title>node {n} #{i} {escape(text)}</title></line>'
                )
        for cuts, text in self.cuts[:MAX_CUTS]:
            pts = " ".join(
                f"{x(n, c):.1f},{TOP + n * (BAND_H + GAP) + BAND_H / 2:.1f}"
                for n, c in enumerate(cuts)
            )
            where = ", ".join(f"node {n} at {c}" for n, c in enumerate(cuts))
            out.append(
                f'<polyline class="cut" points="{pts}" fill="none" stroke="#d62728" stroke-width="1.5" '
                f'stroke-dasharray="3 2"><title>{escape(text)} ({where})</title></polyline>'
            )
        out.append("</svg>")
        return "\n".join(out)

    def _writes(self, n: int, b: NodeBand, y: int, x: Any) -> list[str]:
        bins: dict[int, int] = {}
        for i in b.writes:
            px = int(x(n, i))
            bins[px] = bins.get(px, 0) + 1
        top = max(bins.values(), default=0) or 1
        return [
            f'<rect x="{px}" y="{y + 18 - 16 * c / top:.1f}" width="1" height="{16 * c / top:.1f}" '
            f'fill="#6b8fb3"><title>node {n}: {c} writes</title></rect>'
            for px, c in sorted(bins.items())
        ]


def of_logs(logs: Sequence[LogIndex], failing: Sequence[Any] = ()) -> NodesTimeline:
    """The timeline of a cluster recording's node logs (node 0 first) with the failing verdicts'
    cluster states; a state id the logs cannot rebuild is left out of the picture."""
    cs = Nodes(logs)
    bands = []
    for index, sp in zip(logs, cs.nodes):
        anchors = tuple(i for _, _, i in key_events(sp))
        writes = []
        flushes = []
        marks = []
        for e in index:
            if e.is_mark:
                if not e.is_order_mark and e.mark and e.mark.startswith(("ack:", "begin:")):
                    marks.append((e.index, e.mark))
                continue
            if e.is_flush or e.is_fua:
                flushes.append(
                    (
                        e.index,
                        "FLUSH" + (" + FUA" if e.is_fua else "")
                        if e.is_flush
                        else f"FUA write, sector {e.sector}",
                    )
                )
            elif e.changes_device:
                writes.append(e.index)
        bands.append(NodeBand(len(index), anchors, tuple(writes), tuple(flushes), tuple(marks)))
    cuts = []
    for v in failing:
        try:
            st = cs.state_from_id(v.state)
        except UsageError:
            continue
        cuts.append((tuple(s.cut for s in st.nodes), f"{v.state}: {v.verdict}"))
    return NodesTimeline(tuple(bands), cuts)

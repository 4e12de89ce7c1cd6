"""The log as a picture (host): an inline SVG timeline of a recording's dm-log-writes log -- data
writes, flushes, FUA writes and marks (ack/begin keys) along the entry index -- with the cut of each
failing state drawn across it.  Readable at 10^4 entries and more: entries are binned into at most
``WIDTH`` columns (a column's height is how many writes it holds; each lane's marks and flushes are
ticks with a hover title), and the page's script zooms and pans the picture."""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.log.markorder import ordering_flushes

WIDTH = 1200  # SVG user units across
LANES = (
    ("write", "data writes", "#6b8fb3"),
    ("flush", "FLUSH", "#333333"),
    ("fua", "FUA", "#8a5cb8"),
    ("ack", "ack: marks", "#2e8b57"),
    ("begin", "begin: marks", "#c8a02e"),
    ("mark", "other marks", "#999999"),
)
LANE_H = 26
TOP = 8
LEFT = 96


@dataclass(frozen=True, slots=True)
class Timeline:
    entries: int
    lanes: dict[str, list[tuple[int, str]]]  # lane -> (entry index, hover text)
    cuts: list[tuple[int, str]] = field(
        default_factory=list
    )  # failing states: (cut, state id + verdict)

    def svg(self) -> str:
        n = max(self.entries, 1)
        height = TOP + LANE_H * len(LANES) + 22
        x = lambda i: LEFT + (WIDTH - LEFT - 8) * i / n  # noqa: E731
        out = [
            f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" preserveAspectRatio="none" '
            f'role="img" aria-label="log timeline, {self.entries} entries">'
        ]
        for k, (lane, label, color) in enumerate(LANES):
            y = TOP + k * LANE_H
            out.append(f'<text x="4" y="{y + 16}" class="lane">{escape(label)}</text>')
            out.append(
                f'<line x1="{LEFT}" x2="{WIDTH - 8}" y1="{y + LANE_H - 4}" y2="{y + LANE_H - 4}" '
                'stroke="#e5e5e5"/>'
            )
            items = self.lanes.get(lane, [])
            if lane == "write":
                out.extend(self._histogram(items, y, color, x))
                continue
            for i, text in items[:4000]:
                out.append(
                    f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{y + 3}" y2="{y + LANE_H - 4}" '
                    f'stroke="{color}" stroke-width="1.2"><title>#{i} {escape(text)}</title></line>'
                )
        for cut, text in self.cuts[:500]:
            out.append(
                f'<line class="cut" x1="{x(cut):.1f}" x2="{x(cut):.1f}" y1="{TOP}" '
                f'y2="{TOP + LANE_H * len(LANES)}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="3 2">'
                f"<title>cut {cut}: {escape(text)}</title></line>"
            )
        axis = TOP + LANE_H * len(LANES) + 14
        for t in range(11):
            i = round(n * t / 10)
            out.append(f'<text x="{x(i):.1f}" y="{axis}" class="tick">{i}</text>')
        out.append("</svg>")
        return "\n".join(out)

    def _histogram(self, items: list[tuple[int, str]], y: int, color: str, x: Any) -> list[str]:
        bins = min(WIDTH - LEFT - 8, max(self.entries, 1))
        counts = [0] * bins
        for i, _ in items:
            counts[min(bins - 1, i * bins // max(self.entries, 1))] += 1
        top = max(counts, default=0) or 1
        w = (WIDTH - LEFT - 8) / bins
        per = max(self.entries, 1) / bins
        return [
            f'<rect x="{LEFT + b * w:.1f}" y="{y + LANE_H - 4 - (LANE_H - 7) * c / top:.1f}" width="{max(w, 0.6):.1f}" '
            f'height="{(LANE_H - 7) * c / top:.1f}" fill="{color}"><title>entries {int(b * per)}-'
            f"{int((b + 1) * per) - 1}: {c} writes</title></rect>"
            for b, c in enumerate(counts)
            if c
        ]


def from_log(path: str | Path, failing: tuple[Any, ...] | list[Any] = ()) -> Timeline | None:
    """The timeline of the log at ``path`` (None if it cannot be read) with the failing verdicts' cuts."""
    try:
        index = open_log(path, quiet=True)
    except Exception:  # noqa: BLE001 -- a report never fails for want of its picture
        return None
    with index:
        return of_index(index, failing)


def of_index(index: LogIndex, failing: tuple[Any, ...] | list[Any] = ()) -> Timeline:
    """The timeline of an open log."""
    lanes: dict[str, list[tuple[int, str]]] = {lane: [] for lane, _, _ in LANES}
    ordering, _, _ = ordering_flushes(index.entries)
    for e in index:
        if e.is_mark:
            if e.is_order_mark:  # the marking code's, around its ordering flush
                continue
            text = e.mark or ""
            if text.startswith("ack:"):
                lane = "ack"
            elif text.startswith("begin:"):
                lane = "begin"
            else:
                lane = "mark"
            lanes[lane].append((e.index, text))
            continue
        if e.is_flush:
            lanes["flush"].append(
                (
                    e.index,
                    "ordering flush (a mark's, no barrier)"
                    if e.index in ordering
                    else "FLUSH" + (" + FUA" if e.is_fua else ""),
                )
            )
        if e.is_fua and e.nr_sectors:
            lanes["fua"].append((e.index, f"FUA write, sector {e.sector} +{e.nr_sectors}"))
        elif e.changes_device and not e.is_fua:
            lanes["write"].append((e.index, f"sector {e.sector} +{e.nr_sectors}"))
    n = len(index)
    cuts = sorted({(v.cut, f"{v.state}: {v.verdict}") for v in failing})
    return Timeline(n, lanes, cuts)

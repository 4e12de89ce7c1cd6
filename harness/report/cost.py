"""The durability-vs-cost report (host): each verdict-matrix row's verdicts (states judged, states that
lost an ack, corrupt states, per model) next to its price -- commits/s and p99 commit latency with
the disk write cache on and off, timed by ``powercut bench`` on the same workload configuration
(``measure``: the rows timed in a VM, one run per filesystem) -- as a table, Markdown and a plot,
and the answers to the seeds' question in plain sentences: what the second fsync (or EXTRA, FULL,
a CRC...) buys, and at what price."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from powercut.bench.results import BenchEntry, BenchResults
from powercut.core.trace.anatomy import short as short_anatomy
from powercut.errors import UsageError
from powercut.report import html
from powercut.report.bench import fmt_us
from powercut.report.matrix import Row

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Line:
    """One configuration: its verdict cells (matrix.json) and its timings (cache on, off)."""

    row: Row
    cells: tuple[dict[str, Any], ...]
    on: BenchEntry | None
    off: BenchEntry | None
    anatomy: str = ""  # what a commit costs in block writes and flushes (core/trace/anatomy.py), from matrix.json

    def verdicts(self) -> str:
        """Per model: ``pass/judged``, or the failing states by verdict out of those judged."""
        parts = []
        for c in self.cells:
            f = c.get("failing", {})
            if not f or c.get("seen") == "pass (untorn)":
                parts.append(f"{c['model']} pass {c['judged']}")
            else:
                parts.append(
                    f"{c['model']} "
                    + "+".join(f"{n} {v}" for v, n in sorted(f.items()))
                    + f"/{c['judged']}"
                )
        return "; ".join(parts) or "not checked"

    @property
    def durable(self) -> bool:
        return bool(self.cells) and all(
            not c.get("failing") or c.get("seen") == "pass (untorn)" for c in self.cells
        )


def join(rows: list[Row], matrix_doc: dict[str, Any], benches: list[BenchResults]) -> list[Line]:
    anatomy = {
        str(i.get("row")): short_anatomy(i.get("anatomy") or {}) for i in matrix_doc.get("rows", [])
    }
    cells: dict[str, list[dict[str, Any]]] = {}
    for c in matrix_doc.get("cells", []):
        cells.setdefault(c["row"], []).append(c)
    out = []
    for r in rows:
        on = next((e for b in benches if (e := b.find(r.id, True)) is not None), None)
        off = next((e for b in benches if (e := b.find(r.id, False)) is not None), None)
        if r.id in cells or on or off:
            out.append(Line(r, tuple(cells.get(r.id, ())), on, off, anatomy.get(r.id, "")))
    return out


def load_matrix(path: Path) -> dict[str, Any]:
    p = path / "matrix.json" if path.is_dir() else path
    try:
        return json.loads(p.read_text())
    except OSError:
        raise UsageError(f"{p}: no matrix results (run 'powercut matrix' first)") from None
    except ValueError as e:
        raise UsageError(f"{p}: not matrix results ({e})") from None


def _rate(e: BenchEntry | None) -> str:
    return f"{e.commits_per_s:,.1f}" if e is not None and e.commits_per_s else "-"


def _p99(e: BenchEntry | None) -> str:
    return fmt_us(e.p99_us) if e is not None else "-"


def markdown(lines: list[Line], meta: str) -> str:
    out = [
        "| configuration | verdicts | commits/s cache on | p99 on | commits/s cache off | p99 off |",
        "|---|---|---|---|---|---|",
    ]
    for ln in lines:
        out.append(
            f"| {ln.row.id} | {ln.verdicts()} | {_rate(ln.on)} | {_p99(ln.on)} | {_rate(ln.off)} | "
            f"{_p99(ln.off)} |"
        )
    return "\n".join(out + ["", *(f"- {s}" for s in findings(lines)), "", meta]) + "\n"


def table(lines: list[Line]) -> Any:
    t = Table(title="durability vs cost")
    for col in ("configuration", "verdicts", "commits/s on", "p99 on", "commits/s off", "p99 off"):
        t.add_column(
            col, justify="right" if col != "configuration" and col != "verdicts" else "left"
        )
    for ln in lines:
        style = "green" if ln.durable else "red"
        t.add_row(
            f"[{style}]{ln.row.id}[/]",
            ln.verdicts(),
            _rate(ln.on),
            _p99(ln.on),
            _rate(ln.off),
            _p99(ln.off),
        )
    return t


def findings(lines: list[Line]) -> list[str]:
    """Pairs of configurations that differ in one parameter, one durable and one not: what the
    safer setting buys and what it costs (cache on and off)."""
    out = []
    for a in lines:
        for b in lines:
            diff = {
                k
                for k in set(a.row.params) | set(b.row.params)
                if a.row.params.get(k) != b.row.params.get(k)
            }
            same_place = (a.row.workload, a.row.fs, a.row.mount_opts) == (
                b.row.workload,
                b.row.fs,
                b.row.mount_opts,
            )
            if not same_place or len(diff) != 1 or not (b.durable and not a.durable):
                continue
            (k,) = diff
            costs = []
            for wc, x, y in ((True, a.on, b.on), (False, a.off, b.off)):
                if x is not None and y is not None and x.commits_per_s and y.commits_per_s:
                    costs.append(
                        f"{y.commits_per_s / x.commits_per_s:.2f}x the commits/s with the cache "
                        f"{'on' if wc else 'off'} ({x.commits_per_s:,.1f} -> {y.commits_per_s:,.1f})"
                    )
            bad = "; ".join(
                f"{c['model']}: {', '.join(f'{n} {v}' for v, n in c['failing'].items())}"
                for c in a.cells
                if c.get("failing") and c.get("seen") != "pass (untorn)"
            )
            out.append(
                f"{a.row.workload} on {a.row.fs}{' ' + a.row.mount_opts if a.row.mount_opts else ''}: "
                f"{k}={b.row.params.get(k, '(default)')} instead of {a.row.params.get(k, '(default)')} "
                f"turns [{bad}] into a pass, "
                f"at " + ("; ".join(costs) or "a cost not measured")
            )
    return out


def where(benches: list[BenchResults]) -> str:
    """Where the rows were timed (one clause per bench run)."""
    return "; ".join(
        sorted(
            {
                f"timed in a {b.meta.mode} ({b.meta.accel}, QEMU cache={b.meta.qemu_cache or '-'}, "
                f"{b.meta.backing}){': ' + b.meta.note if b.meta.note else ''}"
                for b in benches
            }
        )
    )


def view(lines: list[Line], meta: str, svg: Path | None = None) -> dict[str, Any]:
    """The durability-vs-cost section of the matrix page (report/html.write_matrix): the table's
    lines, the findings, where the figures were taken, and the plot's SVG to inline."""
    return {
        "lines": [
            {
                "id": ln.row.id,
                "verdicts": ln.verdicts(),
                "durable": ln.durable,
                "on_rate": _rate(ln.on),
                "on_p99": _p99(ln.on),
                "off_rate": _rate(ln.off),
                "off_p99": _p99(ln.off),
                "anatomy": ln.anatomy,
            }
            for ln in lines
        ],
        "findings": findings(lines),
        "meta": meta,
        "svg": html.inline_svg(svg),
    }


def plot(lines: list[Line], out: Path) -> list[Path]:
    """Commits/s per configuration, cache on and off side by side, log scale; durable ones green."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plots need matplotlib: pip install 'powercut[bench]'") from None
    timed = [ln for ln in lines if ln.on or ln.off]
    if not timed:
        return []
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(timed) + 2.0))
    ys = range(len(timed))
    for dy, attr, label, alpha in ((-0.2, "on", "cache on", 1.0), (0.2, "off", "cache off", 0.55)):
        vals = [getattr(ln, attr).commits_per_s if getattr(ln, attr) else 0 for ln in timed]
        ax.barh(
            [y + dy for y in ys],
            vals,
            height=0.38,
            alpha=alpha,
            label=label,
            color=["tab:green" if ln.durable else "tab:red" for ln in timed],
        )
    ax.set_yticks(list(ys), [ln.row.id for ln in timed], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("commits/s (log scale)")
    from matplotlib.patches import Patch

    handles = [
        Patch(color="tab:green", label="every state passed"),
        Patch(color="tab:red", label="a failure found"),
        Patch(color="0.3", label="cache on (upper bar)"),
        Patch(color="0.3", alpha=0.45, label="cache off (lower bar)"),
    ]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.6 / len(timed)),
        ncol=4,
        fontsize=8,
    )
    ax.set_title(
        "durability vs cost: commits/s with the disk write cache on (dark) and off (light)"
    )
    fig.tight_layout()
    paths = [out / "durability-vs-cost.png", out / "durability-vs-cost.svg"]
    for p in paths:
        fig.savefig(p, dpi=110)
    plt.close(fig)
    return paths

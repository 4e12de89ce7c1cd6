"""How a ``powercut bench`` run is shown (host): the terminal table (rich: ops/s, MB/s, commits/s,
per-op p50/p99/p99.9, the slowdown against buffered writes of the same size, the cache off/on
ratio), the seed comparisons (report/seeds.py) and the plots (matplotlib, optional: the ``bench``
extra): per-op latency per guarantee, write cache on and off side by side, log scale, as PNG and
SVG.  Nothing here prints; cli/ does."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

from rich.table import Table

from powercut.bench.profiles import size_label
from powercut.bench.results import BenchEntry, BenchResults
from powercut.errors import EnvironmentNotReady

log = logging.getLogger(__name__)


def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us < 1000:
        return f"{us:.0f} µs" if us >= 10 else f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1000:.3g} ms"
    return f"{us / 1e6:.3g} s"


def fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return "-"
    elif x >= 10:
        return f"{x:.1f}x"
    else:
        return f"{x:.2f}x"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def buffered_peer(results: BenchResults, e: BenchEntry) -> BenchEntry | None:
    """The buffered profile with ``e``'s block size, cache setting and conditions."""
    bs = e.detail.get("bytes", 0) and e.detail.get("ops") and e.detail["bytes"] // e.detail["ops"]
    if e.kind != "fio" or not bs:
        return None
    return results.find(f"buffered-{size_label(bs)}", e.write_cache, setting=e.setting)


def cache_peer(results: BenchResults, e: BenchEntry) -> BenchEntry | None:
    """The same item with the write cache on (for a cache-off entry)."""
    if e.write_cache is not False:
        return None
    return results.find(e.name, True, suite=e.suite, setting=e.setting)


COLUMNS = (
    "suite",
    "item",
    "cache",
    "ops/s",
    "MB/s",
    "commits/s",
    "p50",
    "p99",
    "p99.9",
    "vs buffered",
    "off/on",
)


def rows(results: BenchResults) -> list[dict[str, str]]:
    """The main table's rows (terminal and page alike): column -> text, ``error`` for a failed item."""
    out = []
    for e in results.entries:
        if e.error:
            out.append({"suite": e.suite, "item": e.name, "cache": e.cache, "error": e.error})
            continue
        slow = ratio(getattr(buffered_peer(results, e), "ops_per_s", None), e.ops_per_s)
        on = cache_peer(results, e)
        off_on = ratio(on.commits_per_s, e.commits_per_s) if on else None
        out.append(
            {
                "suite": e.suite,
                "item": e.name,
                "cache": e.cache + (f", {e.setting}" if e.setting else ""),
                "ops/s": fmt_num(e.ops_per_s),
                "MB/s": fmt_num(e.mb_per_s),
                "commits/s": fmt_num(e.commits_per_s),
                "p50": fmt_us(e.p50_us),
                "p99": fmt_us(e.p99_us),
                "p99.9": fmt_us(e.p999_us),
                "vs buffered": fmt_ratio(slow)
                if slow and e.name.split("-")[0] != "buffered"
                else "",
                "off/on": fmt_ratio(off_on),
            }
        )
    return out


def title(results: BenchResults) -> str:
    m = results.meta
    where = f"{m.mode}, {m.accel}" + (f", qemu cache={m.qemu_cache}" if m.qemu_cache else "")
    return f"powercut bench ({where}; {m.fs} on {m.device or m.backing})"


def main_table(results: BenchResults) -> Table:
    t = Table(title=title(results), title_justify="left")
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("suite", "item", "cache") else "right")
    suite = None
    for r in rows(results):
        shown = r["suite"] if r["suite"] != suite else ""
        suite = r["suite"]
        if "error" in r:
            t.add_row(shown, r["item"], r["cache"], f"[red]failed: {r['error'][:60]}[/red]")
        else:
            t.add_row(shown, *(r[c] for c in COLUMNS[1:]))
    return t


def describe(results: BenchResults) -> list[str]:
    """The lines that say where the figures come from (every output states them)."""
    m = results.meta
    lines = [
        f"where: {m.mode} mode, accel {m.accel}"
        + (
            f", QEMU cache={m.qemu_cache} (honours flushes), bus {m.bus}"
            if m.mode == "vm"
            else f", {m.bus}"
        ),
        f"disk: {m.device or '-'} backed by {m.backing}; {m.fs}"
        + (f", guest kernel {m.guest_kernel}" if m.guest_kernel else ""),
        "latency: per commit (write(s) + the sync that makes them durable); timed workloads: ack - begin",
    ]
    checked = [c for c in results.checks if "item" in c]
    if checked:
        ok = all(
            c.get("hdparm") in (c["wanted"], None) and c.get("sysfs") in (c["wanted"], None)
            for c in checked
        )
        lines.append(
            f"write cache read back before each of {len(checked)} runs (hdparm -W and queue/write_cache): "
            + ("as asked every time" if ok else "MISMATCH")
        )
    if m.note:
        lines.append(f"note: {m.note}")
    return lines


# --- plots ---------------------------------------------------------------------------------------------


def _plottable(results: BenchResults) -> list[str]:
    names: list[str] = []
    for e in results.entries:
        if not e.error and e.p50_us and not e.setting and e.name not in names:
            names.append(e.name)
    return names


def plot(results: BenchResults, out_dir: str | Path, stem: str = "latency") -> list[Path]:
    """Per-op latency (bar: p50, whisker: p99, dot: p99.9) per item, write cache on and off side by
    side, log scale; commits/s below.  Writes ``stem``.png and ``stem``.svg into ``out_dir``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise EnvironmentNotReady("plots need matplotlib: pip install 'powercut[bench]'") from None
    names = _plottable(results)
    if not names:
        raise EnvironmentNotReady("nothing to plot: no entry with latency figures")
    fig, (ax, ax2) = plt.subplots(
        2,
        1,
        figsize=(max(7.0, 0.75 * len(names) + 2), 7.5),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 2]},
    )
    width = 0.38
    for k, (wc, color) in enumerate(((True, "#4c72b0"), (False, "#dd8452"), (None, "#55a868"))):
        xs = []
        p50 = []
        lo = []
        hi = []
        p999 = []
        cps = []
        for i, name in enumerate(names):
            e = results.find(name, wc)
            if e is None or e.p50_us is None:
                continue
            xs.append(i + (k - 0.5) * width if wc is not None else i)
            p50.append(e.p50_us)
            lo.append(0.0)
            hi.append(max(0.0, (e.p99_us or e.p50_us) - e.p50_us))
            p999.append(e.p999_us or e.p50_us)
            cps.append(e.commits_per_s or 0.0)
        if not xs:
            continue
        label = {True: "write cache on", False: "write cache off", None: "cache as is"}[wc]
        ax.bar(
            xs,
            p50,
            width,
            color=color,
            label=f"{label}: p50",
            yerr=[lo, hi],
            capsize=3,
            error_kw={"elinewidth": 1, "ecolor": "#333333"},
        )
        ax.scatter(
            xs,
            p999,
            marker="_",
            s=120,
            color="#222222",
            zorder=3,
            label="p99.9" if k == 0 else None,
        )
        ax2.bar(xs, cps, width, color=color, label=label)
    ax.set_yscale("log")
    ax.set_ylabel("per-op latency (µs, log)\nbar p50, whisker p99")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
    ax2.set_yscale("log")
    ax2.set_ylabel("commits/s (log)")
    ax2.grid(axis="y", which="both", alpha=0.3)
    ax2.set_xticks(range(len(names)))
    ax2.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    m = results.meta
    title = f"powercut bench: {m.fs} on {m.device or m.backing} ({m.mode}, {m.accel}"
    title += f", qemu cache={m.qemu_cache})" if m.qemu_cache else ")"
    ax.set_title(
        "\n".join(
            [title] + textwrap.wrap(f"backed by {m.backing}", 110) + textwrap.wrap(m.note, 110)
        ),
        fontsize=9,
    )
    fig.tight_layout()
    out = Path(out_dir)
    paths = [out / f"{stem}.png", out / f"{stem}.svg"]
    for p in paths:
        fig.savefig(p, dpi=110)
    plt.close(fig)
    return paths


def summary_json(results: BenchResults) -> dict[str, Any]:
    """A compact view for --json on stdout: meta plus name/cache/figures per entry."""
    keep = (
        "suite",
        "name",
        "write_cache",
        "target",
        "mount_opts",
        "ops_per_s",
        "mb_per_s",
        "commits_per_s",
        "p50_us",
        "p99_us",
        "p999_us",
        "error",
    )
    return {
        "meta": results.to_json()["meta"],
        "entries": [{k: getattr(e, k) for k in keep} for e in results.entries],
    }

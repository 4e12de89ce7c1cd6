"""The seed suites' tables next to the seeds' own figures (host; pure: rich tables from
``BenchResults``, nothing printed).  The seeds (shared/seeds) measured real disks; the figures here
are compared as **ratios** (cache off/on, O_SYNC/buffered, fsync=0/fsync=1...), which is what
carries over from an emulated disk.

Seeds: TLPI table 13-3 (1,000,000 bytes; O_SYNC 1 B 1030 s, 4096 B 0.34 s; with hdparm -W0 ~16,000 s
and 4 s); ZODB FileStorage 2864 / 30.9 / 15.0 txn/s for fsync 0 / 1 / 2; Postgres 598 tps where one
fsync costs ~1 ms; Adium F_FULLFSYNC 1142 µs vs fsync 92.8 µs."""

from __future__ import annotations

from io import StringIO

from rich.console import Console
from rich.table import Table

from powercut.bench.profiles import GROUP_COMMIT_BLOCK, PG_METHODS, size_label
from powercut.bench.results import BenchEntry, BenchResults
from powercut.report.bench import fmt_num, fmt_ratio, fmt_us, ratio

TLPI_BUFFERED = {1: 0.73, 16: 0.05, 256: 0.02, 4096: 0.01}
TLPI_OSYNC = {1: 1030.0, 16: 65.0, 256: 4.07, 4096: 0.34}
TLPI_OSYNC_NOCACHE = {1: 16000.0, 4096: 4.0}
ZODB_TXN_S = {0: 2864.36, 1: 30.8977, 2: 15.0112}
PG_TPS, PG_FSYNC_US = 598.07, 1000.0
ADIUM_FULLFSYNC_US, ADIUM_FSYNC_US = 1142.0, 92.8
PG_GOAL, OVERHEAD_GOAL = 0.15, 2.0


def _table(title: str, *cols: str) -> Table:
    t = Table(title=title, title_justify="left")
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 else "right")
    return t


def _scaled(e: BenchEntry | None) -> float | None:
    return None if e is None else e.detail.get("scaled_seconds", e.seconds)


def tlpi(r: BenchResults) -> Table | None:
    rows = [bs for bs in TLPI_OSYNC if r.find(f"osync-{size_label(bs)}", True, suite="tlpi")]
    if not rows:
        return None
    t = _table(
        "tlpi: seconds to write 1,000,000 bytes (TLPI 13-3); ratios vs TLPI",
        "buffer",
        "buffered",
        "O_SYNC on",
        "O_SYNC off",
        "O_SYNC/buffered",
        "TLPI",
        "off/on",
        "TLPI",
    )
    for bs in rows:
        label = size_label(bs)
        buf, on, off = (
            r.find(f"{g}-{label}", wc, suite="tlpi")
            for g, wc in (("buffered", True), ("osync", True), ("osync", False))
        )
        seed_off = TLPI_OSYNC_NOCACHE.get(bs)
        t.add_row(
            f"{bs} B",
            f"{_scaled(buf) or 0:.3g} s" if buf else "-",
            f"{_scaled(on):.3g} s",
            f"{_scaled(off):.3g} s" if off else "-",
            fmt_ratio(ratio(_scaled(on), _scaled(buf))),
            fmt_ratio(TLPI_OSYNC[bs] / TLPI_BUFFERED[bs]),
            fmt_ratio(ratio(_scaled(off), _scaled(on))),
            fmt_ratio(seed_off / TLPI_OSYNC[bs]) if seed_off else "-",
        )
    scaled = {
        (e.detail["bytes"], e.detail["scaled_to_bytes"])
        for e in r.entries
        if e.suite == "tlpi" and e.note and "scaled_to_bytes" in e.detail
    }
    if scaled:
        t.caption = "scaled to 1,000,000 bytes from what was written: " + ", ".join(
            f"{b:,} B (x{to / b:.3g})" for b, to in sorted(scaled)
        )
    return t


def zodb(r: BenchResults) -> Table | None:
    if not any(e.suite == "zodb-fsync" for e in r.entries):
        return None
    t = _table(
        "zodb-fsync: filestorage txn/s (seed: ZODB FileStorage, WinXP IDE disk)",
        "cache",
        "fsync=0",
        "fsync=1",
        "fsync=2",
        "0/1",
        "seed 0/1",
        "1/2",
        "seed 1/2",
    )
    for wc in (True, False):
        got = [r.find(f"filestorage fsync={f}", wc, suite="zodb-fsync") for f in (0, 1, 2)]
        if not any(got):
            continue
        tps = [e.commits_per_s if e else None for e in got]
        t.add_row(
            "on" if wc else "off",
            *(fmt_num(x) for x in tps),
            fmt_ratio(ratio(tps[0], tps[1])),
            fmt_ratio(ZODB_TXN_S[0] / ZODB_TXN_S[1]),
            fmt_ratio(ratio(tps[1], tps[2])),
            fmt_ratio(ZODB_TXN_S[1] / ZODB_TXN_S[2]),
        )
    return t


def commit(r: BenchResults) -> Table | None:
    base_name = f"fsync-{size_label(GROUP_COMMIT_BLOCK)}"
    if not r.find(base_name, True, suite="commit") and not r.find(base_name, False, suite="commit"):
        return None
    t = _table(
        f"commit: one fsync per {GROUP_COMMIT_BLOCK}-byte commit vs group commit "
        f"(seed: Postgres {PG_TPS:.0f} tps where one fsync costs ~1 ms: fsync is "
        f"{PG_TPS * PG_FSYNC_US / 1e6:.0%} of a commit)",
        "item",
        "cache",
        "txn/s",
        "fsyncs/s",
        "fsync mean",
        "fsync share",
        "vs one fsync",
    )
    for wc in (True, False):
        base = r.find(base_name, wc, suite="commit")
        for e in (
            x for x in r.entries if x.suite == "commit" and x.write_cache == wc and not x.error
        ):
            sync = e.detail.get("sync_mean_us")
            share = sync * e.commits_per_s / 1e6 if sync and e.commits_per_s else None
            t.add_row(
                e.name,
                e.cache,
                fmt_num(e.ops_per_s),
                fmt_num(e.commits_per_s),
                fmt_us(sync),
                f"{share:.0%}" if share is not None else "-",
                fmt_ratio(ratio(e.ops_per_s, base.ops_per_s if base else None)),
            )
    return t


def flush_cost(r: BenchResults) -> Table | None:
    rows = [
        (lbl, r.find("fsync-4k", wc, suite="flush-cost", setting=s))
        for lbl, wc, s in (
            ("cache on (flush)", True, ""),
            ("cache on, nobarrier (no flush)", True, "nobarrier"),
            ("cache off", False, ""),
        )
    ]
    if not any(e for _, e in rows):
        return None
    t = _table(
        f"flush-cost: fsync per 4 KiB write (seed: F_FULLFSYNC {ADIUM_FULLFSYNC_US:.0f} µs vs fsync "
        f"{ADIUM_FSYNC_US} µs = {ADIUM_FULLFSYNC_US / ADIUM_FSYNC_US:.1f}x)",
        "setting",
        "fsync mean",
        "fsync p50",
        "fsync p99",
        "vs no flush",
    )
    nobar = rows[1][1].detail.get("sync_mean_us") if rows[1][1] else None
    for lbl, e in rows:
        if e is None:
            continue
        mean = e.detail.get("sync_mean_us")
        t.add_row(
            lbl,
            fmt_us(mean),
            fmt_us(e.detail.get("sync_p50_us")),
            fmt_us(e.detail.get("sync_p99_us")),
            fmt_ratio(ratio(mean, nobar)),
        )
    return t


def pg(r: BenchResults) -> Table | None:
    if not any(e.kind == "pg_test_fsync" for e in r.entries):
        return None
    runs = len(
        r.find_all("pg_test_fsync fsync", True, suite="pg")
        or r.find_all("pg_test_fsync fsync", False, suite="pg")
    )
    t = _table(
        f"pg: our rewrite-in-place profiles vs pg_test_fsync, one 8kB write, ops/s"
        f"{f' (median of {runs} interleaved runs)' if runs > 1 else ''} (goal: within {PG_GOAL:.0%})",
        "method",
        "cache",
        "ours",
        "pg_test_fsync",
        "ours/pg",
        "within goal",
        "spread ours",
        "spread pg",
    )
    for wc in (True, False):
        for method in PG_METHODS:
            ours = r.median("commits_per_s", f"pg-{method}-8k", wc, suite="pg")
            theirs = r.median("ops_per_s", f"pg_test_fsync {method}", wc, suite="pg")
            if ours is None and theirs is None:
                continue
            q = ratio(ours, theirs)
            if q is None:
                within_goal = "-"
            elif abs(q - 1) <= PG_GOAL:
                within_goal = "yes"
            else:
                within_goal = "no"
            t.add_row(
                method,
                "on" if wc else "off",
                fmt_num(ours),
                fmt_num(theirs),
                fmt_ratio(q),
                within_goal,
                fmt_ratio(spread(r, "commits_per_s", f"pg-{method}-8k", wc)),
                fmt_ratio(spread(r, "ops_per_s", f"pg_test_fsync {method}", wc)),
            )
    if runs > 1:
        t.caption = "spread: the largest over the smallest of a tool's repeated runs (the noise floor of the ratio)"
    return t


def spread(r: BenchResults, attr: str, name: str, wc: bool) -> float | None:
    values = [v for e in r.find_all(name, wc, suite="pg") if (v := getattr(e, attr))]
    return max(values) / min(values) if len(values) > 1 else None


def overhead(r: BenchResults) -> Table | None:
    logged = [
        e for e in r.entries if e.suite == "overhead" and e.target == "log-writes" and not e.error
    ]
    if not logged:
        return None
    names = list(dict.fromkeys(e.name for e in logged))
    runs = len(r.find_all(names[0], True, suite="overhead", setting="log-writes"))
    t = _table(
        f"overhead: the same fio job on the bare disk and through dm-log-writes"
        f"{f' (median of {runs} interleaved pairs)' if runs > 1 else ''} (goal <= {OVERHEAD_GOAL:g}x)",
        "item",
        "bare commits/s",
        "log-writes commits/s",
        "bare/logged",
        "p50 bare",
        "p50 logged",
    )
    for name in names:
        med = {
            s: {
                a: r.median(a, name, True, suite="overhead", setting=s)
                for a in ("commits_per_s", "p50_us")
            }
            for s in ("", "log-writes")
        }
        bare, log_ = med[""], med["log-writes"]
        t.add_row(
            name,
            fmt_num(bare["commits_per_s"]),
            fmt_num(log_["commits_per_s"]),
            fmt_ratio(ratio(bare["commits_per_s"], log_["commits_per_s"])),
            fmt_us(bare["p50_us"]),
            fmt_us(log_["p50_us"]),
        )
    return t


def tables(r: BenchResults) -> list[Table]:
    """Every seed comparison the run has figures for, in suite order."""
    return [
        t for t in (tlpi(r), zodb(r), commit(r), flush_cost(r), pg(r), overhead(r)) if t is not None
    ]


def tlpi_text(results: list[BenchResults]) -> str:
    """The TLPI table of each result set beside the book's figures, as plain text (for a page)."""
    return as_text([t for r in results if (t := tlpi(r)) is not None])


def as_text(tables: list[Table]) -> str:
    """Rich tables as plain text (a page shows them in a <pre>)."""
    buf = StringIO()
    console = Console(file=buf, width=130, color_system=None)
    for t in tables:
        console.print(t)
    return buf.getvalue()

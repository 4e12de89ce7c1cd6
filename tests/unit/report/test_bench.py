"""benchresults.py, benchreport.py, benchseeds.py: the results JSON round trip, entries from what
the guest returns, the terminal table (slowdown vs buffered, cache off/on), the seed comparisons and
the plots (files written, not empty)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from powercut.bench import results as benchresults
from powercut.bench.parse import parse_fio_json
from powercut.bench.profiles import by_name
from powercut.bench.results import BenchEntry, BenchMeta, BenchResults, entries_for, from_sets
from powercut.config import BenchItem, RunSet
from powercut.errors import UsageError
from powercut.report import bench as benchreport
from powercut.report import seeds as benchseeds

FIXTURES = Path(__file__).resolve().parents[3] / "bench" / "fixtures"


def fio(name: str, fixture: str | None = None) -> dict:
    return parse_fio_json(
        (FIXTURES / f"fio-{fixture or name}.json").read_text(), by_name(name)
    ).as_dict()


def meta(**kw) -> BenchMeta:
    base = dict(
        mode="vm",
        accel="tcg",
        qemu_cache="none",
        backing="/r/bench-data.img on /dev/vda (ext4)",
        guest_kernel="6.1.0",
        fs="ext4",
        bus="ahci",
        quick=True,
        date="2026-11-22T10:00:00+0000",
        suites=("guarantees",),
        device="/dev/sda (QEMU HARDDISK)",
        note=benchresults.TCG_NOTE,
    )
    return BenchMeta(**{**base, **kw})


def entry(name: str, wc: bool | None, cps: float, p50: float, **kw) -> BenchEntry:
    return BenchEntry(
        suite=kw.pop("suite", "guarantees"),
        name=name,
        kind=kw.pop("kind", "fio"),
        write_cache=wc,
        ops_per_s=kw.pop("ops", cps),
        commits_per_s=cps,
        p50_us=p50,
        p99_us=p50 * 3,
        p999_us=p50 * 5,
        mean_us=p50,
        **kw,
    )


def sample() -> BenchResults:
    bs = {"bytes": 4096 * 64, "ops": 64}
    es = [
        entry("buffered-4k", True, 40000, 20, detail=bs),
        entry("fsync-4k", True, 500, 1900, detail=bs),
        entry("buffered-4k", False, 40000, 20, detail=bs),
        entry("fsync-4k", False, 50, 19000, detail=bs),
        entry("filestorage fsync=1", True, 30, 30000, kind="workload", suite="zodb-fsync"),
        BenchEntry("guarantees", "osync-4k", "fio", False, error="fio osync-4k exited 1: boom"),
    ]
    return BenchResults(
        meta(),
        tuple(es),
        (
            {
                "device": "/dev/sda",
                "wanted": True,
                "hdparm": True,
                "sysfs": True,
                "item": "fsync-4k",
                "set": "cache on",
            },
        ),
    )


def render(t) -> str:
    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None).print(t)
    return buf.getvalue()


def test_results_json_round_trip(tmp_path: Path) -> None:
    r = sample()
    path = benchresults.write(r, tmp_path / "results.json")
    back = benchresults.load(path)
    assert back == r
    doc = json.loads(path.read_text())
    assert (
        doc["format"] == 1 and doc["meta"]["qemu_cache"] == "none" and doc["meta"]["accel"] == "tcg"
    )
    assert set(doc["meta"]) >= {
        "accel",
        "qemu_cache",
        "backing",
        "guest_kernel",
        "fs",
        "bus",
        "quick",
        "date",
    }
    assert {"ops_per_s", "mb_per_s", "commits_per_s", "p50_us", "p99_us", "p999_us"} <= set(
        doc["entries"][0]
    )
    with pytest.raises(UsageError, match="not a powercut bench results file"):
        benchresults.from_json({"format": 99})
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UsageError, match="cannot read"):
        benchresults.load(tmp_path / "bad.json")


def test_entries_from_fio_workload_pg_and_a_failure() -> None:
    item = BenchItem("fio", "fsync-4k", "guarantees", 262144, 5)
    (e,) = entries_for(
        item,
        {"ok": True, "result": fio("fsync-4k")},
        write_cache=True,
        target="disk",
        mount_opts="",
    )
    raw = fio("fsync-4k")
    assert (e.ops_per_s, e.commits_per_s, e.p99_us) == (
        raw["iops"],
        raw["commits_per_s"],
        raw["commit_p99_us"],
    )
    assert (
        e.mb_per_s == pytest.approx(raw["bw_bytes_s"] / 1e6)
        and e.detail["sync_mean_us"] == raw["sync_mean_us"]
    )
    tlpi = BenchItem("fio", "osync-4k", "tlpi", 262144, 5, scale_to=1_000_000, note="scaled")
    (t,) = entries_for(
        tlpi,
        {"ok": True, "result": fio("osync-4k")},
        write_cache=True,
        target="disk",
        mount_opts="",
    )
    assert (
        t.detail["scaled_seconds"] == pytest.approx(t.seconds * 1_000_000 / 262144)
        and t.note == "scaled"
    )
    wl = BenchItem(
        "workload", "filestorage", "zodb-fsync", params={"fsync": 1}, label="filestorage fsync=1"
    )
    timing = {
        "commits": 10,
        "seconds": 1.0,
        "commits_per_s": 10.0,
        "mean_us": 9e4,
        "p50_us": 8e4,
        "p99_us": 2e5,
        "p999_us": 3e5,
    }
    (w,) = entries_for(
        wl, {"ok": True, "result": timing}, write_cache=False, target="disk", mount_opts=""
    )
    assert (w.name, w.commits_per_s, w.p99_us, w.detail["params"]) == (
        "filestorage fsync=1",
        10.0,
        2e5,
        {"fsync": 1},
    )
    pg = BenchItem("pg_test_fsync", "pg_test_fsync", "pg", runtime_s=1)
    got = entries_for(
        pg,
        {"ok": True, "result": {"ops_per_s": {"fsync": 200.0, "open_sync": 100.0}}},
        write_cache=True,
        target="disk",
        mount_opts="",
    )
    assert [(g.name, g.ops_per_s, g.mean_us) for g in got] == [
        ("pg_test_fsync fsync", 200.0, 5000.0),
        ("pg_test_fsync open_sync", 100.0, 10000.0),
    ]
    (bad,) = entries_for(
        item, {"ok": False, "error": "fio exited 1"}, write_cache=True, target="disk", mount_opts=""
    )
    assert bad.error == "fio exited 1" and bad.ops_per_s is None


def test_from_sets_pairs_items_with_outcomes_and_keeps_the_checks() -> None:
    rs = (RunSet(True, (BenchItem("fio", "fsync-4k", "guarantees", 262144),)),)
    check = {"device": "/dev/sda", "wanted": True, "hdparm": True, "sysfs": True}
    sets = [{"checks": [check], "items": [{"ok": True, "result": fio("fsync-4k"), "check": check}]}]
    entries, checks = from_sets(rs, sets)
    assert [e.name for e in entries] == ["fsync-4k"] and [c.get("item") for c in checks] == [
        None,
        "fsync-4k",
    ]
    with pytest.raises(UsageError, match="2 run sets for 1"):
        from_sets(rs, sets * 2)


def test_table_has_the_figures_and_the_ratios() -> None:
    text = render(benchreport.main_table(sample()))
    for col in ("ops/s", "MB/s", "commits/s", "p50", "p99", "p99.9", "vs buffered", "off/on"):
        assert col in text
    fsync_off = next(ln for ln in text.splitlines() if "fsync-4k" in ln and " off " in ln)
    assert "800.0x" in fsync_off  # buffered 40000 ops/s (cache off too) vs 50
    assert "10.0x" in fsync_off  # cache on 500 commits/s vs off 50
    assert "19 ms" in fsync_off and "57 ms" in fsync_off and "95 ms" in fsync_off
    assert "failed: fio osync-4k exited 1" in text


def test_describe_states_where_the_figures_come_from() -> None:
    lines = benchreport.describe(sample())
    assert "accel tcg" in lines[0] and "QEMU cache=none" in lines[0] and "bus ahci" in lines[0]
    assert "/dev/vda" in lines[1] and "6.1.0" in lines[1]
    assert any("read back before each of 1 runs" in ln and "as asked" in ln for ln in lines)
    assert lines[-1].startswith("note: ") and "ratios" in lines[-1]


def test_plot_writes_png_and_svg(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    paths = benchreport.plot(sample(), tmp_path)
    assert [p.name for p in paths] == ["latency.png", "latency.svg"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 10_000
    svg = paths[1].read_text()
    assert "<svg" in svg and "fsync-4k" in svg


def test_format_helpers() -> None:
    assert [benchreport.fmt_us(x) for x in (None, 5.25, 92.8, 1142, 2.5e6)] == [
        "-",
        "5.2 µs",
        "93 µs",
        "1.14 ms",
        "2.5 s",
    ]
    assert benchreport.fmt_ratio(12.34) == "12.3x" and benchreport.fmt_ratio(1.234) == "1.23x"
    assert benchreport.ratio(None, 2) is None and benchreport.ratio(6, 2) == 3


def seeds_results() -> BenchResults:
    es = [
        entry("filestorage fsync=0", True, 3000, 100, kind="workload", suite="zodb-fsync"),
        entry("filestorage fsync=1", True, 30, 30000, kind="workload", suite="zodb-fsync"),
        entry("filestorage fsync=2", True, 15, 60000, kind="workload", suite="zodb-fsync"),
        entry("pg-fsync-8k", True, 105, 9000, suite="pg"),
        entry("pg_test_fsync fsync", True, 100, 0, kind="pg_test_fsync", suite="pg"),
        entry("fsync-4k", True, 100, 9000, suite="overhead"),
        entry("fsync-4k", True, 60, 15000, suite="overhead", target="log-writes"),
        entry("fsync-4k", True, 100, 9000, suite="flush-cost", detail={"sync_mean_us": 1000.0}),
        entry(
            "fsync-4k",
            True,
            300,
            3000,
            suite="flush-cost",
            mount_opts="nobarrier",
            detail={"sync_mean_us": 100.0},
        ),
    ]
    return BenchResults(meta(suites=("zodb-fsync", "pg", "overhead", "flush-cost")), tuple(es))


def test_seed_tables_put_our_ratios_next_to_the_seeds() -> None:
    tables = {t.title.split(":")[0]: render(t) for t in benchseeds.tables(seeds_results())}
    assert set(tables) == {"zodb-fsync", "pg", "overhead", "flush-cost"}
    assert (
        "100.0x" in tables["zodb-fsync"]
        and "92.7x" in tables["zodb-fsync"]
        and "2.06x" in tables["zodb-fsync"]
    )
    pg_row = next(ln for ln in tables["pg"].splitlines() if " fsync " in ln)
    assert "1.05x" in pg_row and "yes" in pg_row
    assert "1.67x" in tables["overhead"]
    assert "10.0x" in tables["flush-cost"] and "12.3x" in tables["flush-cost"]


def test_repeated_runs_are_compared_by_their_medians() -> None:
    es = [
        entry("fsync-4k", True, cps, 1000, suite="overhead", target=tgt)
        for cps, tgt in (
            (100, "disk"),
            (50, "log-writes"),
            (300, "disk"),
            (60, "log-writes"),
            (120, "disk"),
            (40, "log-writes"),
        )
    ]
    r = BenchResults(meta(), tuple(es))
    assert r.median("commits_per_s", "fsync-4k", True, suite="overhead") == 120
    assert r.median("commits_per_s", "fsync-4k", True, suite="overhead", setting="log-writes") == 50
    assert r.median("commits_per_s", "fsync-4k", False) is None
    text = render(benchseeds.overhead(r))
    assert "median of 3" in " ".join(text.split()) and "2.40x" in text


def test_the_bench_page_shows_every_item_the_plot_and_where(tmp_path: Path) -> None:
    """powercut bench's report.html: the terminal table's rows (a failed item says so), the latency
    plot inlined without its XML prolog, the seeds' tables, where the figures were taken; nothing
    loaded from outside."""
    import re

    from powercut.report import html

    pytest.importorskip("matplotlib")
    r = sample()
    benchreport.plot(r, tmp_path)
    text = html.write_bench(r, tmp_path).read_text()
    assert (
        "6 items timed in a vm" in text
        and "1 failed." in text
        and 'id="verdict">FAILED ITEMS<' in text
    )
    assert (
        "failed: fio osync-4k exited 1: boom" in text
        and "fsync-4k" in text
        and "19 ms" in text
        and "800.0x" in text
    )
    assert "<svg" in text and "<?xml" not in text
    assert all(line in text for line in benchreport.describe(r))
    assert not re.search(
        r'(src|href)="(?!#)|url\((?!#)|@import', text
    )  # the SVG's clip-paths are url(#...)

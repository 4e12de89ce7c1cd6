"""costreport.py: verdicts joined with bench timings by row, the plain-sentence findings (what the
safer setting buys and costs), the timed parameters, the plot file."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.bench.results import BenchEntry, BenchMeta, BenchResults
from powercut.campaign.matrix import timed_params
from powercut.report import cost as costreport
from powercut.report import matrix

MATRIX = """
[[row]]
workload = "filestorage"
variant = "fsync=1 prealloc"
params = { fsync = 1, prealloc = true }
fs = "ext4"
expect = { write-cache = "corrupt-data" }
why = "x"

[[row]]
workload = "filestorage"
variant = "fsync=2 prealloc"
params = { fsync = 2, prealloc = true }
fs = "ext4"
expect = { write-cache = "pass" }
why = "y"

[[row]]
workload = "osync"
variant = "o_sync"
params = { mode = "o_sync", bs = 16 }
fs = "ext4"
expect = { write-cache = "pass" }
why = "z"
"""


def _entry(name: str, wc: bool, rate: float) -> BenchEntry:
    return BenchEntry("report", name, "workload", wc, commits_per_s=rate, p99_us=1000.0 / rate * 3)


@pytest.fixture
def rows(tmp_path: Path) -> list[matrix.Row]:
    p = tmp_path / "m.toml"
    p.write_text(MATRIX)
    return matrix.load(p)


def test_join_and_the_second_fsync_finding(rows: list[matrix.Row], tmp_path: Path) -> None:
    doc = {
        "cells": [
            {
                "row": rows[0].id,
                "model": "write-cache",
                "judged": 400,
                "failing": {"corrupt-data": 16},
                "seen": "corrupt-data",
            },
            {
                "row": rows[1].id,
                "model": "write-cache",
                "judged": 500,
                "failing": {},
                "seen": "pass",
            },
        ]
    }
    meta = BenchMeta("vm", "tcg", "none", "disk.img", "6.1", "ext4", "ahci", True, "today")
    bench = BenchResults(
        meta,
        (
            _entry(rows[0].id, True, 150.0),
            _entry(rows[0].id, False, 100.0),
            _entry(rows[1].id, True, 100.0),
            _entry(rows[1].id, False, 80.0),
        ),
    )
    lines = costreport.join(rows, doc, [bench])
    assert [ln.row.id for ln in lines] == [
        rows[0].id,
        rows[1].id,
    ]  # osync: neither judged nor timed
    assert not lines[0].durable and lines[1].durable
    assert (
        lines[0].verdicts() == "write-cache 16 corrupt-data/400"
        and lines[1].verdicts() == "write-cache pass 500"
    )
    (finding,) = costreport.findings(lines)
    assert finding.startswith(
        "filestorage on ext4: fsync=2 instead of 1 turns [write-cache: 16 corrupt-data] into a pass"
    )
    assert "0.67x the commits/s with the cache on (150.0 -> 100.0)" in finding
    assert "0.80x the commits/s with the cache off" in finding
    md = costreport.markdown(lines, "timed in a vm (tcg)")
    assert "| filestorage/fsync=1 prealloc/ext4 | write-cache 16 corrupt-data/400 | 150.0 |" in md
    paths = costreport.plot(lines, tmp_path)
    assert all(p.stat().st_size > 1000 for p in paths) and {p.suffix for p in paths} == {
        ".png",
        ".svg",
    }


def test_timed_runs_get_enough_commits(rows: list[matrix.Row]) -> None:
    assert timed_params(rows[0], quick=True) == {"fsync": 1, "prealloc": True, "n": 24}
    assert timed_params(rows[2], quick=False) == {"mode": "o_sync", "bs": 16, "total": 16 * 64}


def test_report_without_matrix_results_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from powercut.cli import main

    assert main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no matrix results" in err[0]

"""The verdict matrix, end to end: `powercut matrix` records each row in a VM and judges it (ext4
data=ordered on the host, a sample in checker VMs); every cell must be as the matrix file says -- 0
false alarms on correct variants, every buggy variant caught with a first failing state and the
cause the row expects -- then `powercut report --measure --quick` times each row and Chromium shows
both pages.  ci/matrix.sh runs the whole matrix.

The fast suite judges a slice that reaches every kind of cell the matrix has (a durable row and
the broken one it is priced against, a bug caught in checker VMs, an fsync error acked after, a
lying disk's silent corruption); the nightly suite judges all of CI's part (21 rows, ~450 s here;
the cluster rows are covered in the fast suite by test_cluster_vm)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from powercut.report import matrix

pytestmark = pytest.mark.vm

SLICE = (
    "filestorage/fsync=1 prealloc/ext4",
    "filestorage/fsync=2 prealloc/ext4",
    "append-fsync/ack-early n=3/ext4",
    "wal/fsync EIO, retry/ext4",
    "wal/no-crc, lying disk/ext4",
)


def test_a_slice_of_the_verdict_matrix(tmp_path: Path) -> None:
    judge_rows(tmp_path, list(SLICE))


@pytest.mark.nightly
def test_ci_part_of_the_verdict_matrix(tmp_path: Path) -> None:
    judge_rows(tmp_path, ["--ci"])


def judge_rows(tmp_path: Path, which: list[str]) -> None:
    out = tmp_path / "matrix"
    t0 = time.monotonic()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "matrix",
            *which,
            "--bound",
            "6",
            "--samples",
            "12",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=40 * 60,
    )
    wall = time.monotonic() - t0
    print(res.stdout[-6000:])
    print((out / "matrix.md").read_text() if (out / "matrix.md").exists() else res.stderr[-3000:])
    doc = json.loads((out / "matrix.json").read_text())
    surprises = [c for c in doc["cells"] if not c["ok"]]
    assert not surprises, "\n".join(
        f"{c['row']} {c['model']}: expected {c['expected']}, seen {c['seen']} "
        f"{c['error'] or c['first_reason']}"
        for c in surprises
    )
    assert res.returncode == 0, res.stderr[-2000:]
    patterns = [w for w in which if w != "--ci"]
    rows = {
        r.id: r for r in matrix.choose(matrix.load(), patterns, ci="--ci" in which)
    }  # ids hold no *?[
    assert {c["row"] for c in doc["cells"]} == set(rows)
    for c in doc["cells"]:
        if c["expected"] != "pass":  # a caught bug names its first failing state
            assert c["first_failing_state"].startswith(
                (c["model"] + "@", c["model"] + "~")
            )  # ~: a cluster row
    # ... and its cause in the program's terms: the rule the row expects (issue #38)
    wrong = [
        f"{c['row']} {c['model']}: cause {c['cause'] or 'none'}, expected {c['expected_cause']}"
        for c in doc["cells"]
        if c["failing"] and c["expected_cause"] and c["cause"] != c["expected_cause"]
    ]
    assert not wrong, "\n".join(wrong)
    assert all(c["cause"] == "" for c in doc["cells"] if not c["failing"])  # durable rows: no cause
    part = "CI part" if "--ci" in which else "slice"
    print(f"the matrix ({part}): {len(rows)} rows, {len(doc['cells'])} cells in {wall:.0f} s")
    # the durability-vs-cost report: each row timed with the disk write cache on and off in a bench VM
    t0 = time.monotonic()
    rep = subprocess.run(
        [sys.executable, "-m", "powercut.cli", "report", str(out), "--measure", "--quick"],
        capture_output=True,
        text=True,
        timeout=20 * 60,
    )
    print(rep.stdout[-5000:])
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (out / "report" / "report.md").read_text()
    assert "fsync=2 instead of 1 turns" in md  # what the second fsync buys, and its price
    assert (out / "report" / "durability-vs-cost.png").stat().st_size > 1000
    print(f"durability-vs-cost report in {time.monotonic() - t0:.0f} s")
    # the pages a person reads: the matrix's, and the report's with the cost view, as Chromium shows them
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is missing: ci/setup.sh installs the Debian package"
    for page, wanted in (
        (out / "report.html", f"{len(doc['cells'])} as expected, 0 surprises"),
        (out / "report" / "report.html", "Durability vs cost"),
    ):
        dom = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--dump-dom",
                f"file://{page}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        seen = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom.stdout))
        assert wanted in seen and "AS EXPECTED" in seen, seen[:2000]
        assert all(r in seen for r in rows), [r for r in rows if r not in seen]

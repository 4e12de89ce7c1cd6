"""ci/suite_times.py: the suite's total and slowest tests from pytest's JUnit XML, a comparison with
an earlier run, a budget, and one line for an unreadable file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ci" / "suite_times.py"


def junit(path: Path, cases: dict[str, float], wall: float) -> Path:
    rows = "".join(
        f'<testcase classname="{n.split("::")[0]}" name="{n.split("::")[1]}" time="{t}"/>'
        for n, t in cases.items()
    )
    path.write_text(
        f'<?xml version="1.0"?><testsuites><testsuite name="pytest" time="{wall}">{rows}'
        "</testsuite></testsuites>"
    )
    return path


def run(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60
    )


def test_total_slowest_and_modules(tmp_path: Path) -> None:
    new = junit(
        tmp_path / "new.xml",
        {
            "tests.vm.test_a::test_x": 300.0,
            "tests.unit.test_b::test_y": 2.0,
            "tests.vm.test_a::test_z": 30.0,
        },
        335.0,
    )
    res = run(new, "--top", "2")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert (
        lines[0].startswith("suite: 3 tests (3 passed) in 5 min")
        and "tests alone 5 min" in lines[0]
    )
    assert (
        "300.0 s  tests.vm.test_a::test_x" in lines[2]
        and "30.0 s  tests.vm.test_a::test_z" in lines[3]
    )
    assert any("330.0 s  tests.vm" in x for x in lines)  # the slowest modules


def test_against_an_earlier_run_and_a_budget(tmp_path: Path) -> None:
    old = junit(
        tmp_path / "old.xml", {"tests.vm.m::test_x": 300.0, "tests.vm.m::test_gone": 100.0}, 400.0
    )
    new = junit(
        tmp_path / "new.xml", {"tests.vm.m::test_x": 100.0, "tests.vm.m::test_new": 5.0}, 105.0
    )
    res = run(new, "--before", old, "--budget", "60")
    assert res.returncode == 1 and "over the budget" in res.stderr
    assert "6 min 40.0 s -> 1 min 45.0 s (0.26x)" in res.stdout
    assert (
        "-200.0 s  tests.vm.m::test_x" in res.stdout and "test_gone (not in this run)" in res.stdout
    )
    assert "+5.0 s  tests.vm.m::test_new (new)" in res.stdout
    assert run(new, "--budget", "200").returncode == 0


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.xml").write_text("<testsuites")
    res = run(tmp_path / "bad.xml")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "cannot read" in res.stderr

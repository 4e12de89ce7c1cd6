"""bench/matrix_runners.py: the workflow's scheduling model (list scheduling per stage, stages one
after the other), reading a matrix output's rows, and its errors.  Figures are the script's to print."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit import benchscripts


@pytest.fixture(scope="module")
def mr() -> ModuleType:
    return benchscripts.load("matrix_runners")


def test_makespan_is_list_scheduling(mr: ModuleType) -> None:
    assert mr.makespan([], 4) == 0
    assert mr.makespan([3, 3, 3], 1) == 9
    assert mr.makespan([3, 3, 3], 3) == 3 == mr.makespan([3, 3, 3], 30)
    assert mr.makespan([5, 1, 1, 1, 1, 1], 2) == 5  # the short ones fill the other runner
    assert mr.makespan([1, 1, 5], 2) == 6  # in order: the long last job waits


def row(
    mr: ModuleType,
    name: str,
    record: float,
    check: float,
    states: int,
    state_s: float,
    tear: int = 0,
):  # noqa: ANN201
    return mr.RowCost(name, record, check, states, state_s, tear)


def test_wall_model(mr: ModuleType) -> None:
    rows = [row(mr, "a", 10, 60, 100, 100), row(mr, "b", 20, 30, 50, 40, tear=10)]
    kw = {"jobs": 2, "overhead": 0.0, "boot": 5.0, "merge": 0.0}
    assert rows[0].fixed_s(5.0) == 10 and rows[1].fixed_s(5.0) == 10
    assert mr.RowCost("c", 1, 60, 100, 100, 0, jobs=1).fixed_s(5.0) == 5  # at least a boot
    record, check, merge = mr.stage_jobs(rows, 2, **kw)
    assert record == [10, 20] and merge == [0, 0]
    tear_b = 5 + 10 * 0.8 / 2
    assert check == [10 + 25, 10 + 25, 10 + 10 + tear_b / 2, 10 + 10 + tear_b / 2]
    assert mr.wall(rows, 1, 1, **kw) == 30 + (10 + 50) + (10 + 20 + tear_b)
    walls = [mr.wall(rows, n, s, **kw) for n in (1, 2, 4, 8) for s in (1,)]
    assert walls == sorted(walls, reverse=True)  # more runners never cost time here
    t = mr.table(rows, runners=(1, 4), shard_counts=(1, 2), **kw)
    assert [x["runners"] for x in t] == [1, 4] and t[0]["best_shards"] == 1
    assert t[1]["best_s"] == min(t[1]["wall_s"].values())
    measured = [rows[0], mr.RowCost("b", 20, 30, 50, 40, 10, 3.0)]
    assert mr.stage_jobs(measured, 1, **kw)[1] == [10 + 50, 10 + 20 + 3.0]
    with_overhead = mr.wall(rows, 4, 2, jobs=2, overhead=60.0, boot=5.0, merge=0.0)
    assert with_overhead == mr.wall(rows, 4, 2, **kw) + 3 * 60


def write_row(
    d: Path,
    vm_wall: float,
    seconds: float,
    verdicts: list[tuple[str, float]],
    status: str = "complete",
) -> None:
    (d / "check").mkdir(parents=True)
    (d / "manifest.toml").write_text(f'[recording]\nstatus = "ok"\nvm_wall_s = {vm_wall}\n')
    (d / "check" / "summary.json").write_text(
        json.dumps({"status": status, "seconds": seconds, "total": len(verdicts)})
    )
    (d / "check" / "journal.jsonl").write_text(
        "".join(json.dumps({"state": s, "seconds": x}) + "\n" for s, x in verdicts)
    )


def test_reads_a_matrix_output(
    mr: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_row(
        tmp_path / "wal__correct__ext4",
        12.5,
        40.0,
        [("flush@3", 0.5), ("flush@9", 0.25), ("flush@3", 0.75)],
    )
    write_row(tmp_path / "half", 1.0, 1.0, [("flush@1", 1.0)], status="interrupted")
    (tmp_path / "not-a-row").mkdir()
    (tmp_path / "matrix.json").write_text(
        json.dumps(
            {
                "rows": [
                    {
                        "recording": str(tmp_path / "wal__correct__ext4"),
                        "tear_checks": {"checked": 7, "seconds": 9.5},
                    }
                ]
            }
        )
    )
    rows = mr.read_rows(tmp_path)
    assert rows == [mr.RowCost("wal__correct__ext4", 12.5, 40.0, 3, 1.0, 7, 9.5, 2)]
    assert mr.read_rows(tmp_path, jobs=1)[0].jobs == 1  # the later line of a state wins
    assert "half" in capsys.readouterr().err
    assert mr.main([str(tmp_path), "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "1 rows" in out and "runners" in out and "best" in out
    assert json.loads((tmp_path / "t.json").read_text())["rows"][0]["tear_states"] == 7


def test_errors_are_one_line(
    mr: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert mr.main([str(tmp_path / "nope")]) == 2
    assert mr.main([str(tmp_path)]) == 2
    assert mr.main([str(tmp_path), "--jobs", "0"]) == 2
    assert mr.main([f"{tmp_path}:0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("matrix_runners: ") for line in err)


def test_several_directories_are_one_run(
    mr: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_row(tmp_path / "a" / "wal__correct__ext4", 10.0, 20.0, [("flush@3", 1.0)])
    write_row(
        tmp_path / "b" / "postgres__defaults__ext4",
        30.0,
        900.0,
        [("flush@4", 9.0), ("flush@8", 11.0)],
    )
    assert mr.main([str(tmp_path / "a"), f"{tmp_path / 'b'}:1"]) == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("2 rows, 3 states") and "postgres__defaults__ext4" in out and "-j 1/2" in out
    )
    assert (
        mr.main([str(tmp_path / "a"), f"{tmp_path / 'b'}:1", "--json", str(tmp_path / "t.json")])
        == 0
    )
    assert [r["jobs"] for r in json.loads((tmp_path / "t.json").read_text())["rows"]] == [2, 1]
    assert mr.main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2


def test_resumed_rows_take_earlier_figures_or_an_estimate(
    mr: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed check's summary counts its last invocation only (its span, campaign.json to
    summary.json, is far longer): the row takes an earlier run's figures, else an estimate."""
    import os

    m = tmp_path / "m"
    for name in ("a__x__ext4", "b__x__ext4", "c__x__ext4"):
        write_row(m / name, 10.0, 0.2, [("flush@1", 30.0), ("flush@2", 30.0)])
        (m / name / "check" / "campaign.json").write_text("{}")
        os.utime(m / name / "check" / "campaign.json", (1000, 1000))
        os.utime(m / name / "check" / "summary.json", (5000, 5000))  # resumed hours later
    fresh = m / "d__x__ext4"
    write_row(fresh, 10.0, 50.0, [("flush@1", 30.0), ("flush@2", 30.0)])
    (fresh / "check" / "campaign.json").write_text("{}")
    os.utime(fresh / "check" / "campaign.json", (1000, 1000))
    os.utime(fresh / "check" / "summary.json", (1050, 1050))
    rows = {r.row: r for r in mr.read_rows(m, 2)}
    assert [rows[n].resumed for n in sorted(rows)] == [True, True, True, False]
    earlier = tmp_path / "earlier.json"
    earlier.write_text(
        json.dumps(
            {
                "rows": [
                    {
                        "row": "a__x__ext4",
                        "record_s": 10.0,
                        "check_s": 70.0,
                        "states": 2,
                        "state_s": 60.0,
                        "tear_states": 0,
                    },
                    {
                        "row": "b__x__ext4",
                        "record_s": 10.0,
                        "check_s": 5.0,
                        "states": 2,
                        "state_s": 60.0,
                        "tear_states": 0,
                    },
                ]
            }
        )
    )
    out = tmp_path / "t.json"
    assert mr.main([str(m), "--earlier", str(earlier), "--json", str(out), "--boot", "5"]) == 0
    got = {r["row"]: r["check_s"] for r in json.loads(out.read_text())["rows"]}
    # a: the earlier figure; b: its earlier figure is itself implausible -> estimated; c: none -> estimated
    assert got == {
        "a__x__ext4": 70.0,
        "b__x__ext4": 60.0 / 2 + 5,
        "c__x__ext4": 60.0 / 2 + 5,
        "d__x__ext4": 50.0,
    }
    assert "1 resumed row(s) take" in capsys.readouterr().out
    assert mr.main([str(m), "--earlier", str(tmp_path / "missing.json")]) == 2


def test_a_row_in_two_directories_is_the_later_ones(mr: ModuleType, tmp_path: Path) -> None:
    write_row(tmp_path / "one" / "a__x__ext4", 10.0, 40.0, [("flush@1", 10.0)])
    write_row(tmp_path / "two" / "a__x__ext4", 10.0, 80.0, [("flush@1", 20.0)])
    out = tmp_path / "t.json"
    assert mr.main([str(tmp_path / "one"), str(tmp_path / "two"), "--json", str(out)]) == 0
    assert [r["check_s"] for r in json.loads(out.read_text())["rows"]] == [80.0]

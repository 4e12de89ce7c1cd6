"""The main job (campaign/demo.py): the showcase rows are the three named workloads, each durable and
broken, with the full matrix's expectations; one sentence per workload says what survived and what
it costs; the page, the exit status and a failed timing (the verdicts stand) -- with the VMs faked."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.bench.results import BenchEntry, BenchMeta, BenchResults
from powercut.campaign import demo
from powercut.report import matrix


def test_the_showcase_rows_are_three_workloads_durable_and_broken() -> None:
    rows = matrix.load(demo.showcase_path())
    assert [r.workload for r in rows] == ["filestorage"] * 2 + ["wal"] * 2 + ["osync"] * 2
    full = {r.id: r for r in matrix.load()}
    for durable, broken in zip(rows[::2], rows[1::2]):
        assert all(v == "pass" for v in durable.expect.values())
        assert any(v != "pass" for v in broken.expect.values())
        for r in (durable, broken):  # the same expectations as the verdict matrix's row
            assert {m: full[r.id].expect[m] for m in r.expect} == r.expect


def fake_cells(row: matrix.Row, caught: bool = True) -> list[matrix.Cell]:
    out = []
    for m in row.models:
        e = row.expect[m]
        failing = {} if e == "pass" or not caught else {e if e != "fail" else "corrupt-data": 2}
        out.append(
            matrix.Cell(
                row.id,
                m,
                e,
                judged=20,
                failing=failing,
                first="write-cache@9/d1" if failing else "",
                cause="unordered-writes" if failing else "",
            )
        )
    return out


@pytest.fixture
def faked(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    state = {"caught": True, "cost_fails": False}

    def run_rows(rows, how, on_row=None, then=None):  # type: ignore[no-untyped-def]
        state["then"] = then
        out = []
        for r in rows:
            cells = fake_cells(r, state["caught"] or r.variant not in ("buffered",))
            if on_row:
                on_row(r, cells, {})
            anatomy = {
                "commits": 3,
                "flushes": 2,
                "writes": 9,
                "write_bytes": 10240,
                "program_bytes": 2048.0,
            }
            out.append(
                (
                    cells,
                    {
                        "row": r.id,
                        "recording": str(how.out / r.slug),
                        "check_in": how.check_in,
                        "anatomy": anatomy,
                    },
                )
            )
        return out

    def measure(rows, out, timing):  # type: ignore[no-untyped-def]
        if state["cost_fails"]:
            from powercut.errors import VmError

            raise VmError("the bench VM did not boot")
        assert timing.suites == ("tlpi",) and timing.quick
        entries = [
            BenchEntry(
                "report",
                r.id,
                "workload",
                wc,
                commits_per_s=(50.0 if wc else 20.0) * (k + 1),
                p99_us=900.0,
            )
            for k, r in enumerate(rows)
            for wc in (True, False)
        ]
        meta = BenchMeta(
            mode="vm",
            accel="tcg",
            qemu_cache="none",
            backing="a file",
            guest_kernel="6.1",
            fs="ext4",
            bus="ahci",
            quick=True,
            date="2026-11-24",
        )
        return [BenchResults(meta, tuple(entries))]

    monkeypatch.setattr(demo, "run_rows", run_rows)
    monkeypatch.setattr(demo, "measure", measure)
    return state


def test_a_demo_where_every_broken_configuration_is_caught(tmp_path: Path, faked) -> None:
    res = demo.run_demo(demo.DemoSpec(out=tmp_path))
    assert not res.surprises and len(res.lines) == 3
    assert res.lines[0].startswith(
        "filestorage: fsync=2 prealloc survived every crash state judged (20 flush, 20 write-cache), "
        "2 flushes, 9 writes (10 KiB) for 2048 B per commit, 50 commits/s "
        "with the cache on (20 off); fsync=1 prealloc failed: 2 corrupt-data of 20 write-cache states "
        "(unordered-writes), 2 flushes"
    )
    page = res.paths["html"].read_text()
    assert (
        "AS EXPECTED" in page
        and "Durability vs cost" in page
        and all(line in page for line in res.lines)
    )
    assert callable(faked["then"])  # the bench VM's template, built in the recording lane


def test_without_timings_no_bench_template_is_built(tmp_path: Path, faked) -> None:
    demo.run_demo(demo.DemoSpec(out=tmp_path, cost=False))
    assert faked["then"] is None


def test_a_broken_configuration_not_caught_is_a_surprise(tmp_path: Path, faked) -> None:
    faked["caught"] = False
    res = demo.run_demo(demo.DemoSpec(out=tmp_path, cost=False))
    assert {c.row for c in res.surprises} == {"osync/buffered/ext4"}
    assert (
        "osync: o_dsync survived every crash state judged (20 flush, 20 write-cache), 2 flushes, 9 writes (10 KiB) "
        "for 2048 B per commit; buffered survived every"
    ) in res.lines[2]
    assert "SURPRISES" in res.paths["html"].read_text()


def test_the_verdicts_stand_when_the_timing_fails(tmp_path: Path, faked) -> None:
    faked["cost_fails"] = True
    res = demo.run_demo(demo.DemoSpec(out=tmp_path))
    assert not res.surprises and "did not boot" in res.cost_error
    page = res.paths["html"].read_text()
    assert "cost not measured" in page and "Durability vs cost" not in page

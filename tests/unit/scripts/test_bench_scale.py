"""bench/bench_scale.py, functionally: its logs (synthetic, a tiled "real" one) and its smallest
configuration end to end -- every phase in the table and results, the plot written.  No timing
assertions (tests/README.md): the figures are the bench's to print."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from powercut.core.log.dmlog import END_MARK, open_log
from tests.unit import benchscripts


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return benchscripts.load("bench_scale")


def test_synthetic_log_is_shaped_like_a_filesystems(bench: ModuleType, tmp_path: Path) -> None:
    p = tmp_path / "s.log"
    bench.synthetic_log(p, 2000)
    with open_log(p, strict=True) as idx:
        es = idx.entries
        assert len(es) == 2000 and es[0].mark == "mkfs" and es[-1].mark == END_MARK
        writes = [e for e in es if e.is_write]
        assert Counter(e.nr_sectors for e in writes).most_common(1)[0][0] == 8  # mostly 4 KiB
        flushes = [e.index for e in es if e.is_flush]
        gaps = [
            sum(1 for e in es[a + 1 : b] if e.is_write and not e.is_fua)
            for a, b in zip(flushes, flushes[1:])
        ]
        assert gaps and all(20 <= g <= 30 for g in gaps)
        assert any(e.is_fua for e in writes) and any(e.is_discard for e in es)
        acks = idx.acks()
        assert len(acks) == len(flushes) and len({k for _, k in acks}) == len(acks)


def test_tile_log_repeats_the_workload_section(bench: ModuleType, tmp_path: Path) -> None:
    src, dst = tmp_path / "src.log", tmp_path / "tiled.log"
    bench.synthetic_log(src, 300)
    got = bench.tile_log(src, dst, 1000)
    with open_log(src) as a, open_log(dst, strict=True) as b:
        assert (
            len(b) == got["entries"] == 1000
            and b.entries[-1].mark == END_MARK
            and not b.stale_super
        )
        assert got["tiles"] >= 3 and got["prefix"] + got["unit"] == len(a) - 1
        keys = [k for _, k in b.acks()]
        assert len(keys) == len(set(keys)) > len(a.acks())  # each tile's keys are new
        unit = a.entries[got["prefix"] : -1]
        for e in b.entries[got["prefix"] : -1]:
            u = unit[(e.index - got["prefix"]) % len(unit)]
            assert (e.flags, e.sector, e.nr_sectors) == (u.flags, u.sector, u.nr_sectors)
            if e.is_write:
                assert bytes(b.data(e)) == bytes(a.data(u))


def test_smallest_configuration_end_to_end(bench: ModuleType, tmp_path: Path) -> None:
    real = tmp_path / "real.log"
    bench.synthetic_log(real, 400, seed=7)
    out = tmp_path / "out"
    assert (
        bench.main(
            ["--max", "1000", "--real-log", str(real), "--walk-states", "4", "--out", str(out)]
        )
        == 0
    )
    text = (out / "table.txt").read_text()
    results = json.loads((out / "results.json").read_text())["results"]
    assert set(results) == {"synthetic", "real"}
    for source, runs in results.items():
        assert list(runs) == ["1000"]
        got = runs["1000"]
        assert set(got) == set(bench.PHASES)
        assert all(
            r["entries"] == 1000 and r["seconds"] >= 0 and "peak_mib" in r for r in got.values()
        )
        assert all(got[f"enum:{m}"]["states"] > 0 for m in bench.ENUM_MODELS)
        assert got["walk"]["states"] == 4 and got["select"]["states"] >= 4
        block = text.split(f"== {source} log")[1]
        assert all(f"\n{phase} " in block for phase in bench.PHASES)
    assert (out / "scale.png").stat().st_size > 0 and (out / "scale.svg").stat().st_size > 0
    assert not list((out / "logs").glob("*.log"))  # removed unless --keep-logs

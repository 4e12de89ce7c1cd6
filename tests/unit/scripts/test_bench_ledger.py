"""bench/bench_ledger.py, functionally: on a small synthetic log, three nights with a cap -- the
ledger never judges a state twice and its union grows by the cap each night; a fixed seed's does not."""

from __future__ import annotations

from tests.unit import benchscripts


def test_three_capped_nights(tmp_path, capsys) -> None:
    bl = benchscripts.load("bench_ledger")
    log = tmp_path / "log.bin"
    bl.synthetic_log(log, 600)
    from powercut.core.log.dmlog import open_log
    from powercut.core.states.models import CrashSpace
    from powercut.core.states.selection import SelectionSpec

    with open_log(log) as index:
        sp = CrashSpace(index)
        spec = SelectionSpec(models=("write-cache",), bound=4, samples=8, max_states=50)
        fixed = bl.nights(sp, spec, 3, auto=False, ledger=False)
        led = bl.nights(sp, spec, 3, auto=True, ledger=True)
    assert [t for _, t in fixed] == [50, 50, 50]
    assert [t for _, t in led] == [50, 100, 150]
    assert (
        bl.main(
            [
                "--log",
                str(log),
                "--nights",
                "2",
                "--bound",
                "4",
                "--samples",
                "8",
                "--max-states",
                "50",
            ]
        )
        == 0
    )
    assert "seed auto+ledger: 100 distinct states after 2 nights = 2.00x" in capsys.readouterr().out

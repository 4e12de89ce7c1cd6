"""bench/bench_explore_real.py without a VM: its configurations, and a wrong --configs refused in one line."""

from __future__ import annotations

import pytest

from tests.unit import benchscripts

bench = benchscripts.load("bench_explore_real")


def test_the_configurations_are_the_durable_setting_and_the_documented_loss() -> None:
    assert (
        bench.CONFIGS["on"]["synchronous_commit"] == "on"
        and bench.CONFIGS["off"]["synchronous_commit"] == "off"
    )


def test_an_unknown_configuration_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["bench_explore_real.py", "--configs", "on,sometimes"])
    assert bench.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sometimes" in err[0]

"""The verdict vocabulary (core/judging/verdict.py): ``detected`` and ``silent-corruption``; what a verdict
means under a lying-disk model (detected passes, the filesystem's noticing is detected, unflagged
wrong data is silent-corruption) and under a power-loss model (detected is a finding)."""

from __future__ import annotations

import pytest

from powercut.core.judging.verdict import (
    CHECKER_VERDICTS,
    FINDINGS,
    SEVERITY,
    Verdict,
    is_pass,
    lie_verdict,
    worst,
)
from powercut.core.states.stateid import HONEST_MODELS, LIE_MODELS


def v(verdict: str, model: str) -> Verdict:
    return Verdict(f"{model}@1", model, 1, verdict, (), 0, 0, 0.0)


def test_the_new_verdicts() -> None:
    assert {"detected", "silent-corruption"} <= set(CHECKER_VERDICTS) & FINDINGS
    assert SEVERITY.index("pass") < SEVERITY.index("detected") < SEVERITY.index("lost-ack")
    assert SEVERITY.index("corrupt-data") < SEVERITY.index("silent-corruption")
    assert worst(["detected", "silent-corruption", "pass"]) == "silent-corruption"


@pytest.mark.parametrize("model", LIE_MODELS)
def test_under_a_lying_disk_detected_passes(model: str) -> None:
    assert (
        is_pass("detected", model)
        and not v("detected", model).failed
        and not v("detected", model).finding
    )
    assert v("silent-corruption", model).finding and v("lost-ack", model).finding
    assert (
        lie_verdict("mount-failed", model) == "detected"
        and lie_verdict("fsck-error", model) == "detected"
    )
    assert lie_verdict("corrupt-data", model) == "silent-corruption"
    assert lie_verdict("lost-ack", model) == "lost-ack" and lie_verdict("pass", model) == "pass"


@pytest.mark.parametrize("model", HONEST_MODELS)
def test_under_power_loss_detected_is_a_finding(model: str) -> None:
    assert (
        not is_pass("detected", model)
        and v("detected", model).failed
        and v("detected", model).finding
    )
    for verdict in SEVERITY:
        assert lie_verdict(verdict, model) == verdict


def test_round_trip() -> None:
    x = v("silent-corruption", "corrupt-sector")
    assert Verdict.from_json(x.to_json()) == x

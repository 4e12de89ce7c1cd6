"""Shared by the checker tests that run their workload on the host first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import powercut


@pytest.fixture
def workload_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    """``run(module, **params)``: a named workload's main run in ``tmp_path`` with its defaults and
    ``params``; the begin/ack marks it made, in order."""
    marks: list[str] = []
    monkeypatch.setattr(powercut, "begin", lambda k: marks.append(f"begin:{k}"))
    monkeypatch.setattr(powercut, "ack", lambda k: marks.append(f"ack:{k}"))
    monkeypatch.chdir(tmp_path)

    def run(module: ModuleType, **params: Any) -> list[str]:
        module.main({**module.WORKLOAD.defaults, **params})
        return marks

    return run

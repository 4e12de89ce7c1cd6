"""Fixtures shared by the replay and snapshot tests: the hand-made and random logs of test_replay at
both sector sizes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from powercut.core.log.dmlog import LogIndex
from tests.unit.replay.test_materialize import LOGS, build


@pytest.fixture(params=[512, 4096], ids=["ss512", "ss4096"])
def ss(request: pytest.FixtureRequest) -> int:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=sorted(LOGS))
def small_log(request: pytest.FixtureRequest, ss: int, tmp_path: Path) -> Iterator[LogIndex]:
    with build(tmp_path / "log.bin", LOGS[request.param], ss) as idx:
        yield idx

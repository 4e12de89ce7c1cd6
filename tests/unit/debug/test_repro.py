"""debug/repro.py's judge is one call for N >= 1 disks (``judge_for``): at N = 1 the place is given
what the one-disk repro gave it -- the context with the log's fault windows (check/context.with_faults),
the disk's own CrashState, its one log -- and at N = 3 every node's log, each node's windows and the
cluster state; ``shell`` hands the checker VM the state as it is (one disk's id is the disk's own)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from powercut.check.context import with_faults, with_node_faults
from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import Nodes, NodesState
from powercut.debug import repro
from tests.unit.debug import bundleinputs as inputs


class Place:
    """Records what it is asked to judge."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def judge(
        self,
        ctx: Any,
        src: Any,
        index: Any,
        states: Sequence[Any],
        sink: Any,
        work: Path,
        *,
        jobs: int = 1,
        prove: bool = False,
    ) -> None:
        self.calls.append((ctx, src, index, list(states)))

    def vm(self) -> str:
        return "vm-spec"


@pytest.mark.parametrize("name", ["one-disk", "cluster"])
def test_one_judge_for_one_disk_and_n(tmp_path: Path, name: str) -> None:
    t = repro.resolve(str(shutil.copytree(inputs.FIXTURES / name, tmp_path / name)))
    indexes = [open_log(p) for p in t.logs]
    st = Nodes(indexes).state_from_id(t.state)
    place = Place()
    repro.judge_for(t, place, indexes)([st], lambda v: None, tmp_path / "w")  # type: ignore[arg-type]
    ((ctx, src, index, states),) = place.calls
    assert (
        src == t.source_of_all()
        and ([index] if isinstance(index, LogIndex) else list(index)) == indexes
    )
    if name == "one-disk":  # what the one-disk branch gave: with_faults, the disk's CrashState
        assert ctx == with_faults(t.ctx, indexes[0]) and states == [st.nodes[0]]
        assert isinstance(states[0], CrashState) and states[0].id == t.state
    else:
        assert (
            ctx == with_node_faults(t.ctx, indexes)
            and states == [st]
            and isinstance(states[0], NodesState)
        )


@pytest.mark.parametrize("name", ["one-disk", "cluster"])
def test_shell_hands_the_vm_the_state_whose_id_it_rebuilds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    t = repro.resolve(str(shutil.copytree(inputs.FIXTURES / name, tmp_path / name)))
    seen: list[Any] = []
    monkeypatch.setattr(
        repro, "shell_vm", lambda ctx, src, state, work, spec: seen.append((src, state.id))
    )
    repro.shell(t, Place())  # type: ignore[arg-type]
    assert seen == [(t.source_of_all(), t.state)]

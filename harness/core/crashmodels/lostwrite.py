"""The lost-write model (pure; host and guest): ``lost-write@C/wE`` -- the disk acked write E
(plain, flushed or FUA) and never stored it; C is the cut of E's commit (core/crashmodels/lies.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from powercut.core.crashmodels.lies import NUM, PerWriteLie, lie_state
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.crashstate import CrashState


@dataclass(frozen=True)
class LostWrite(PerWriteLie):
    """One write of a commit that still holds a sector at the cut, lost."""

    def candidates(
        self,
        sp: SpaceTables,
        seed: int,
        w: int,
        cut: int,
        live: list[int],
        mine: list[int],
        cover: Any,
        context: Any,
    ) -> tuple[list[tuple[int, Any]], int]:
        if not live:
            return [], 0
        return [(w, None)], 0

    def make(self, sp: SpaceTables, cut: int, w: int, x: Any, seed: int) -> CrashState:
        return lie_state(sp, self.name, cut, f"w{w}", (w,), None)

    def rebuild_write(
        self, sp: SpaceTables, whole: str, cut: int, w: int, m: re.Match[str]
    ) -> CrashState:
        return self.make(sp, cut, w, None, 0)


LOST_WRITE = LostWrite(
    "lost-write", pattern=re.compile(rf"w({NUM})"), form="wENTRY", per_write=True
)

"""The unreadable-sector model (pure; host and guest): ``unreadable-sector@C/wE:sO`` -- sector O of
write E (seeded among those E still holds at C) fails every read with EIO at recovery: the image is
the honest one, the check puts a device-mapper ``error`` segment over the sector
(linux/badsector.py, check/judge.py).  Writes there fail too (core/crashmodels/lies.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from powercut.core.crashmodels.lies import NUM, PerWriteLie, lie_state, offset_in
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.crashstate import CrashState, Lie


@dataclass(frozen=True)
class UnreadableSector(PerWriteLie):
    """A surviving sector of one write of a commit, unreadable."""

    def make(self, sp: SpaceTables, cut: int, w: int, x: Any, seed: int) -> CrashState:
        lie = Lie("unreadable", w, sp.entries[w].sector + x, (), sp.sectorsize)
        return lie_state(sp, self.name, cut, f"w{w}:s{x}", (), lie)

    def rebuild_write(
        self, sp: SpaceTables, whole: str, cut: int, w: int, m: re.Match[str]
    ) -> CrashState:
        return self.make(sp, cut, w, offset_in(whole, sp.entries[w], int(m.group(2))), 0)


UNREADABLE_SECTOR = UnreadableSector(
    "unreadable-sector", pattern=re.compile(rf"w({NUM}):s({NUM})"), form="wENTRY:sOFFSET"
)

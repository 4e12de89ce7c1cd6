"""The corrupt-sector model (pure; host and guest): ``corrupt-sector@C/wE:sO:bB,..`` -- sector O of
write E (one E still holds at C; seeded) has the bits B (offsets in the sector, ``CORRUPT_BITS``
seeded ones) flipped: rot at rest, after E completed.  Its windows are always sampled (the bits are
seeded) (core/crashmodels/lies.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from powercut.core.crashmodels.lies import (
    NUM,
    RANGES,
    PerWriteLie,
    lie_state,
    offset_in,
    pick_bits_in,
)
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.crashstate import CrashState, Lie
from powercut.core.states.idparts import format_ranges, parse_ranges


@dataclass(frozen=True)
class CorruptSector(PerWriteLie):
    """A surviving sector of one write of a commit, with seeded bits flipped."""

    def make(self, sp: SpaceTables, cut: int, w: int, x: Any, seed: int) -> CrashState:
        bits = pick_bits_in(seed, w, sp.sectorsize)
        return self._rot(sp, cut, w, x, bits)

    def rebuild_write(
        self, sp: SpaceTables, whole: str, cut: int, w: int, m: re.Match[str]
    ) -> CrashState:
        x = offset_in(whole, sp.entries[w], int(m.group(2)))
        bits = parse_ranges(m.group(3), 8 * sp.sectorsize, f"state id {whole!r}: bits")
        return self._rot(sp, cut, w, x, bits)

    def _rot(self, sp: SpaceTables, cut: int, w: int, x: int, bits: tuple[int, ...]) -> CrashState:
        lie = Lie("corrupt", w, sp.entries[w].sector + x, bits, sp.sectorsize)
        return lie_state(sp, self.name, cut, f"w{w}:s{x}:b{format_ranges(bits)}", (), lie)


CORRUPT_SECTOR = CorruptSector(
    "corrupt-sector",
    pattern=re.compile(rf"w({NUM}):s({NUM}):b({RANGES})"),
    form="wENTRY:sOFFSET:bBITS",
    always_sampled=True,
)

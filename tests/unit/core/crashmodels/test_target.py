"""The lying-disk models' target (core/crashmodels/target.py): file-map extents in another sector
size widened to whole log sectors and merged; ``touches`` on range edges."""

from __future__ import annotations

from powercut.core.crashmodels.target import NO_TARGET, LieTarget


def test_extents_are_widened_to_log_sectors_and_merged() -> None:
    t = LieTarget.of([(9, 1), (0, 0), (16, 8), (10, 2)], 4096)  # 512-byte extents on a 4 KiB log
    assert (t.starts, t.ends, t.only) == (
        (1,),
        (3,),
        False,
    )  # [1, 2) and [2, 3): touching, one range
    t = LieTarget.of([(8, 2), (41, 2), (10, 1)], 512, only=True)
    assert (t.starts, t.ends, t.only) == ((8, 41), (11, 43), True)


def test_touches_is_true_only_for_an_overlap() -> None:
    t = LieTarget.of([(8, 2), (41, 2)], 512)
    assert t.touches(8, 9) and t.touches(40, 42) and t.touches(9, 41)
    assert not t.touches(10, 41) and not t.touches(0, 8) and not t.touches(43, 50)
    assert not NO_TARGET.touches(0, 1 << 40) and not NO_TARGET.only

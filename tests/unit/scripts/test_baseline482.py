"""bench/baseline482.py, functionally: generic/482's states (every FUA entry from the mkfs mark on)
and its replay from entry 0 (a pwrite per entry, a discard as zeros where the target cannot
discard) give the image powercut's own reference replay gives for the same cut."""

from __future__ import annotations

import os

from powercut.core.log.dmlog import FUA
from powercut.core.states.models import CrashSpace
from powercut.replay.materialize import reference_image
from tests.unit import benchscripts
from tests.unit.logops import build_log


def test_fua_points_and_replay_from_entry_0(tmp_path) -> None:
    b = benchscripts.load("baseline482")
    log = tmp_path / "log.bin"
    ops = [
        ("w", 0, 8, 0, 1),
        ("w", 8, 2, FUA, 2),
        ("f",),
        ("m", "mkfs"),  # a FUA before the mark: not checked
        ("w", 16, 4, 0, 3),
        ("w", 0, 1, FUA, 4),
        ("d", 16, 2),
        ("m", "ack:1"),
        ("w", 24, 8, FUA, 5),
        ("f",),
        ("w", 40, 2, 0, 6),
    ]
    index = build_log(log, ops)
    assert b.fua_points(log) == [5, 8]
    ss, nr, es = b.entries(log)
    assert (ss, nr) == (512, len(index.entries)) and [f for f, _ in es] == [
        e.flags for e in index.entries
    ]
    size = 64 * 512
    sp = CrashSpace(index)
    for limit in (6, 9, nr):
        img = tmp_path / f"replayed-{limit}.img"
        with open(img, "wb") as f:
            f.truncate(size)
        vfd = os.open(tmp_path / "seqres.full", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            b.replay(
                log, str(img), limit, vfd
            )  # a regular file: BLKDISCARD fails, zeros are written
        finally:
            os.close(vfd)
        want = reference_image(
            index, sp.make_state("no-cache", limit), size, tmp_path / f"want-{limit}.img"
        )
        assert img.read_bytes() == want.read_bytes(), limit
    assert (tmp_path / "seqres.full").read_text().count("replaying ") == 6 + 9 + nr

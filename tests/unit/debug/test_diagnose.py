"""The pure parts of a diagnosis (debug/diagnose.py): the writes that matter look past the harness's
ordering flushes (they make nothing durable) to the real barrier; blame's image reaches the commit
after them (``settled``); each disk's images and mount point (``Workspace.where``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from powercut.check.context import CheckContext
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import FLUSH, FUA
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import Nodes
from powercut.debug import diagnose
from powercut.debug.blame import writes_that_matter
from powercut.debug.diagnose import Workspace, settled
from powercut.linux import filesystems
from tests.unit.logops import build_log

# 0 mkfs, 1 w, 2 flush, 3 order-begin, 4 (ordering) flush, 5 order-end, 6 ack:1, 7 w (data), 8 w (journal),
# 9 flush, 10 w FUA (commit), 11 w FUA, 12 w, 13 flush
OPS = [
    ("m", "mkfs"),
    ("w", 1, 1, 0, 1),
    ("f",),
    ("m", "powercut-order-begin"),
    ("f",),
    ("m", "powercut-order-end"),
    ("m", "ack:1"),
    ("w", 40, 8, 0, 2),
    ("w", 90, 2, 0, 3),
    ("f",),
    ("w", 92, 2, FUA, 4),
    ("w", 94, 2, FUA, 5),
    ("w", 3, 1, 0, 6),
    ("f",),
]


def test_writes_that_matter_look_past_ordering_flushes(tmp_path: Path) -> None:
    sp = CrashSpace(build_log(tmp_path / "l.bin", OPS))
    assert 4 in sp.ordering and sp.entries[4].flags & FLUSH
    st = sp.make_state("no-cache", 4)  # cut before the ordering flush: the data comes after it
    assert writes_that_matter(sp, st) == [
        (1, "durable, the last write before the cut"),
        (7, "not yet durable at the cut"),
        (8, "not yet durable at the cut"),
    ]


def test_settled_reaches_the_commit_after_the_next_barrier(tmp_path: Path) -> None:
    sp = CrashSpace(build_log(tmp_path / "l.bin", OPS))
    assert settled(sp, 9) == 12  # through the barrier at 9 and the FUA writes 10, 11
    assert settled(sp, 13) == 14  # the last barrier, nothing after it
    assert settled(sp, 5) == 12  # the ordering flush at 4 is no barrier: the next is 9
    assert settled(sp, 3) == 3  # the barrier at 2, no FUA write after it


def test_every_nodes_images_are_under_n_whatever_the_number_of_nodes(tmp_path: Path) -> None:
    one = Workspace(Nodes([build_log(tmp_path / "a.bin", OPS)]), (), 1 << 20, tmp_path / "w")
    three = Workspace(
        Nodes([build_log(tmp_path / f"n{i}.bin", OPS) for i in range(3)]),
        (),
        1 << 20,
        tmp_path / "w",
    )
    assert (one.where("mnt", 0), one.where("diag", 0)) == (
        tmp_path / "w" / "mnt" / "n0",
        tmp_path / "w" / "diag" / "n0",
    )
    assert three.where("mnt", 2) == tmp_path / "w" / "mnt" / "n2"


@pytest.mark.parametrize(
    ("fs", "settles", "image_cut"),
    [("ext4", True, 12), ("xfs", True, 12), ("btrfs", True, 12), ("ext4", False, 9)],
)
def test_one_disks_blame_image_reaches_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fs: str, settles: bool, image_cut: int
) -> None:
    """Delayed allocation writes data before the commit that maps it, copy on write its trees before
    the superblock that points at them: one disk's blame reads the image past that commit (through
    the FUA writes 10, 11); a filesystem not in SETTLE_FS would stay at the flush its cut came
    before."""
    if not settles:
        monkeypatch.setattr(diagnose, "SETTLE_FS", frozenset())
    disks = Nodes([build_log(tmp_path / "a.bin", OPS)])
    state = disks.nodes[0].make_state(
        "no-cache", 4
    )  # the writes that matter: 7, 8 (up to the barrier at 9)
    cuts: list[int] = []

    @contextlib.contextmanager
    def image(ws: Any, node: int, st: Any) -> Iterator[str]:
        cuts.append(st.cut)
        yield "/dev/fake"

    shrunk = SimpleNamespace(
        minimized=disks.make("no-cache", [state]),
        nodes=(),
        signature=("lost-ack", "x"),
        reasons=("x",),
        calls=1,
        exhausted=False,
        one_at_a_time=0,
    )
    monkeypatch.setattr(diagnose, "minimize_nodes", lambda *a, **k: shrunk)
    monkeypatch.setattr(diagnose, "_image", image)
    monkeypatch.setattr(diagnose, "mount", lambda *a, **k: None)
    monkeypatch.setattr(diagnose, "umount", lambda *a, **k: None)
    monkeypatch.setattr(diagnose, "blame", lambda *a, **k: [])
    first = Verdict(state.id, state.model, state.cut, "lost-ack", ("x",), 1, 0, 0.01)
    diagnose.diagnose(
        CheckContext(filesystems.get(fs)),
        Workspace(disks, (), 1 << 20, tmp_path / "w"),
        disks.make("no-cache", [state]),
        first,
    )
    assert cuts == [image_cut]

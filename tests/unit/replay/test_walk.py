"""The checker VM's cluster job walks each node's pristine forward run by run: ``runs`` cuts a
node's states (in the cluster's product order) where the pristine would have to go back, and
``NodeImages`` yields for every position exactly the image host mode replays from entry 0 (here
over the copy provider: the unit tests have no device-mapper)."""

from __future__ import annotations

from pathlib import Path

from powercut.core.states.models import CrashSpace
from powercut.replay.materialize import replay_into
from powercut.replay.snapshot import CopyProvider
from powercut.replay.walk import NodeImages, runs
from tests.unit.logops import build_log


def test_runs_cut_where_the_base_goes_back() -> None:
    assert runs([]) == []
    assert runs([5]) == [range(1)]
    assert runs([0, 1, 1, 3, 0, 2, 2, 1]) == [range(4), range(4, 7), range(7, 8)]
    assert runs([3, 3, 3]) == [range(3)]


def test_node_images_are_the_replayed_states_in_product_order(tmp_path: Path) -> None:
    ops = [
        ("m", "mkfs"),
        ("w", 0, 2, 0, 1),
        ("f",),
        ("w", 4, 1, 0, 2),
        ("w", 8, 3, 0, 3),
        ("m", "ack:1"),
        ("w", 4, 1, 0, 9),
        ("f",),
        ("w", 12, 1, 0, 4),
    ]
    index = build_log(tmp_path / "n.bin", ops)
    sp = CrashSpace(index)
    mine = [
        s for s in sp.iter_states("write-cache", seed=0, exhaustive_bound=4, samples=2) if s.cut > 1
    ]
    assert len(mine) >= 4
    # as the last node of a product sees them: its pool again and again, with repeats
    order = [mine[k % len(mine)] for k in range(2 * len(mine))] + [mine[-1], mine[-1], mine[0]]
    size = 32 * 512
    images = NodeImages(index, size, order, tmp_path, CopyProvider(tmp_path))
    try:
        for k, state in enumerate(order):
            got = images.next_image().read_bytes()
            want = replay_into(index, state, size, tmp_path / f"want{k}.img").read_bytes()
            assert got == want, (k, state.id)
    finally:
        images.close()
    assert images.walks == len(runs([s.base for s in order])) < len(order)

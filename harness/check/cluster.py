"""Judge cluster crash states on this machine (``--check-in host``; host, root): every node's image
rebuilt and attached to its own loop device, then judged by the one judge of N disks
(check/judge.judge_disks: every node mounted, the checker given every mount, every node fsck'd; a
node that fails to mount is the state's finding, with its kernel words and fsck). Per node, the
images come from replay/walk.NodeImages: a pristine walked forward over each run of the node's
states (cluster states come in product order: the last nodes change fastest), cloned per cluster
state by the workspace's provider (reflink, or a sparse copy: a mount's recovery writes the image),
as in the checker VM."""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from powercut.check.context import CheckContext
from powercut.check.host import cleanup_stale, require_root
from powercut.check.judge import judge_disks
from powercut.core.disks import DisksState
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.linux import interrupt
from powercut.linux.loopdev import LoopDevice
from powercut.replay.providers import choose_provider
from powercut.replay.walk import NodeImages

log = logging.getLogger(__name__)

Sink = Callable[[Verdict], None]


def check_cluster_host(ctx: CheckContext, logs: Sequence[LogIndex], size: int, states: Sequence[DisksState],
                       sink: Sink, workspace: Path) -> None:
    """Judge ``states`` (one DisksState each, over ``logs``, node 0 first) one after another;
    each verdict goes to ``sink``.  Stops between states on an interrupt."""
    require_root()
    cleanup_stale(workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    n = len(logs)
    mnts = [str(workspace / "mnt" / f"n{i}") for i in range(n)]
    states = list(states)
    with contextlib.ExitStack() as stack:
        nodes = []
        for i, index in enumerate(logs):
            where = workspace / f"n{i}"
            where.mkdir(parents=True, exist_ok=True)
            prov = choose_provider(where, image_bytes=2 * size + (256 << 20))
            nodes.append(NodeImages(index, size, [s.nodes[i] for s in states], where, prov))
            stack.callback(nodes[-1].close)   # its walk and its provider
        for state in states:
            if interrupt.stopping():
                return
            t0 = time.monotonic()
            imgs = [node.next_image() for node in nodes]
            with contextlib.ExitStack() as loops:   # one device per node image, write-back (check/host)
                devs = [loops.enter_context(LoopDevice(img)) for img in imgs]
                v = judge_disks(ctx, devs, state.nodes, mnts, sid=state.id, model=state.model, at=state.instant,
                                t0=t0)
            if interrupt.stopping():
                return
            sink(v)

"""Judge cluster crash states on this machine (``--check-in host``; host, root): every node's image
rebuilt, attached to its own loop device and mounted (the kernel recovers each), the workload's
checker given every mount (``CheckInput.mounts``, node 0 first), every node unmounted and fsck'd.

A node that fails to mount is the state's finding (``mount-failed``, naming the node and the
kernel's words); the checker does not run then.  A node's fsck error makes a passing state
``fsck-error``.  Per node, the images come from replay/walk.NodeImages: a pristine walked forward
over each run of the node's states (cluster states come in product order: the last nodes change
fastest), cloned per cluster state by the workspace's provider (reflink, or a sparse copy: a
mount's recovery writes the image), as in the checker VM."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from powercut.check.context import CheckContext
from powercut.check.host import cleanup_stale, require_root
from powercut.check.judge import KernelLog, fsck, unmount
from powercut.checker import CheckInput, CheckResult
from powercut.core.disks import DisksState
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.errors import CheckerError
from powercut.linux import interrupt
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import MountError, mount
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
                v = judge_cluster(ctx, devs, state, mnts, t0)
            if interrupt.stopping():
                return
            sink(v)


def judge_cluster(ctx: CheckContext, devs: Sequence[str], state: DisksState, mnts: Sequence[str],
                  t0: float | None = None) -> Verdict:
    """The verdict for one cluster state whose node images are the block devices ``devs``."""
    t0 = time.monotonic() if t0 is None else t0
    reasons: list[str] = []

    def done(verdict: str) -> Verdict:
        return Verdict(state.id, state.model, state.instant, verdict, tuple(reasons), len(state.acks),
                       len(state.begun), round(time.monotonic() - t0, 3))

    mounted: list[str] = []
    try:
        for i, (dev, mnt) in enumerate(zip(devs, mnts)):
            os.makedirs(mnt, exist_ok=True)
            kmsg = KernelLog()
            try:
                mount(dev, mnt, ctx.fs.name, ctx.state_mount_opts)
            except MountError as e:
                reasons.append(f"node {i}: mount failed: {e.one_line()}")
                reasons.extend(f"node {i}: kernel: {line}" for line in kmsg.lines_about(dev, ctx.fs.name))
                return done("mount-failed")
            finally:
                kmsg.close()
            mounted.append(mnt)
        try:
            result = ctx.checker.run(CheckInput(mnts[0], tuple(state.acks), state.begun, ctx.params, state.id,
                                                mounts=tuple(mnts)))
        except CheckerError:
            raise
        except Exception as e:   # a checker's bug is that state's finding
            log.exception("checker crashed on %s", state.id)
            result = CheckResult("checker-crashed", (f"{type(e).__name__}: {e}",))
    finally:
        for mnt in reversed(mounted):
            unmount(mnt)
    reasons.extend(result.reasons)
    verdict = result.verdict
    for i, dev in enumerate(devs):
        ok, report = fsck(ctx, dev)
        if not ok:
            reasons.append(f"node {i}: fsck: {report}")
            verdict = verdict if verdict != "pass" else "fsck-error"
    return done(verdict)

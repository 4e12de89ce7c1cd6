"""Judge cluster crash states on this machine (``--check-in host``; host, root): every node's image
rebuilt, attached to its own loop device and mounted (the kernel recovers each), the workload's
checker given every mount (``CheckInput.mounts``, node 0 first), every node unmounted and fsck'd.

A node that fails to mount is the state's finding (``mount-failed``, naming the node and the
kernel's words); the checker does not run then.  A node's fsck error makes a passing state
``fsck-error``.  Per node, the state's image is replayed once into a *pristine* when the node's
state changes (cluster states come in product order: the last nodes change fastest) and copied
sparse for each cluster state (a mount's recovery writes the image)."""
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
from powercut.core.cluster import ClusterState
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.errors import CheckerError
from powercut.linux import interrupt
from powercut.linux.imageio import sparse_copy
from powercut.linux.loopdev import LoopSlot
from powercut.linux.mounts import MountError, mount
from powercut.replay.materialize import replay_into

log = logging.getLogger(__name__)

Sink = Callable[[Verdict], None]


def _copy(src: Path, dst: Path, size: int) -> None:
    sparse_copy(src, dst, size, 0o644)


def check_cluster_host(ctx: CheckContext, logs: Sequence[LogIndex], size: int, states: Sequence[ClusterState],
                       sink: Sink, workspace: Path) -> None:
    """Judge ``states`` (one ClusterState each, over ``logs``, node 0 first) one after another;
    each verdict goes to ``sink``.  Stops between states on an interrupt."""
    require_root()
    cleanup_stale(workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    n = len(logs)
    pristine = [workspace / f"n{i}.pristine" for i in range(n)]
    work = [workspace / f"n{i}.img" for i in range(n)]
    mnts = [str(workspace / "mnt" / f"n{i}") for i in range(n)]
    current: list[str | None] = [None] * n
    with contextlib.ExitStack() as stack:
        slots = [stack.enter_context(LoopSlot()) for _ in range(n)]
        for state in states:
            if interrupt.stopping():
                return
            t0 = time.monotonic()
            for i, ns in enumerate(state.nodes):
                if current[i] != ns.id:
                    replay_into(logs[i], ns, size, pristine[i], fsync=False)
                    current[i] = ns.id
                _copy(pristine[i], work[i], size)
            devs = [slot.attach(img) for slot, img in zip(slots, work)]
            try:
                v = judge_cluster(ctx, devs, state, mnts, t0)
            finally:
                for slot in slots:
                    slot.detach()
            if interrupt.stopping():
                return
            sink(v)
        for p in (*pristine, *work):
            p.unlink(missing_ok=True)


def judge_cluster(ctx: CheckContext, devs: Sequence[str], state: ClusterState, mnts: Sequence[str],
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

"""``--check-in host`` (host, root): judge crash states on this machine over loop devices, ``jobs``
incremental walks in parallel.  For trusted, disposable machines: a corrupt image meets the host
kernel.  States of N > 1 disks (``check_cluster_host``) are judged one after another: every
node's image rebuilt and attached to its own loop device, then judged by the one judge of N disks
(check/judge.judge_disks: every node mounted, the checker given every mount, every node fsck'd; a
node that fails to mount is the state's finding, with its kernel words and fsck).  Per node the
images come from replay/walk.NodeImages: a pristine walked forward over each run of the node's
states (they come in product order: the last nodes change fastest), cloned per state by the
workspace's provider (reflink, or a sparse copy: a mount's recovery writes the image), as in the
checker VM.

Clones of one filesystem share its UUID/fsid; what lets them be judged side by side comes from the
filesystem table (``nouuid`` for xfs), and a filesystem whose clones cannot be mounted together in
one kernel (btrfs before temp-fsid) has its mounts serialized -- the walks still run in parallel."""
from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from powercut.check.context import CheckContext, LogSource
from powercut.check.judge import judge, judge_disks
from powercut.core.crashstate import CrashState
from powercut.core.disks import DisksState
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.errors import EnvironmentNotReady
from powercut.linux import interrupt, loopcache
from powercut.linux.loopcache import ensure_write_cache
from powercut.linux.loopdev import LoopDevice, detach, loops_backed_under
from powercut.linux.mounts import mounts_under, umount
from powercut.replay.materialize import materialize, plan
from powercut.replay.providers import choose_provider
from powercut.replay.walk import NodeImages

log = logging.getLogger(__name__)

Sink = Callable[[Verdict], None]


def require_root(what: str = "--check-in host") -> None:
    if os.geteuid() != 0:
        raise EnvironmentNotReady(f"{what} needs root (loop devices and mount): run it as root, or check in "
                                  "the VM (--check-in vm, the default)")


def split_by_base(index: LogIndex, states: list[CrashState], parts: int) -> list[list[CrashState]]:
    """Contiguous chunks in walk order, one incremental walk each."""
    ordered = sorted(states, key=lambda s: plan(index, s).base)
    parts = max(1, min(parts, len(ordered)))
    size, extra = divmod(len(ordered), parts)
    chunks, pos = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        chunks.append(ordered[pos:pos + n])
        pos += n
    return [c for c in chunks if c]


def cleanup_stale(workspace: str | os.PathLike[str]) -> None:
    """Undo what a killed run left under ``workspace``: deepest mount first, and before unmounting a
    filesystem, detach the loop devices whose backing files live on it.  Every such loop gets its
    write cache back first (the XFS workspace's is off, and autoclear detaches it at the unmount),
    and so does every write-through loop a dead run left anywhere on the host (loopcache).

    Only for a workspace this run owns: under its output directory's run lock (linux/runlock),
    which no live run holds then -- what is left there is a dead run's."""
    loopcache.restore_orphans()
    root = os.path.realpath(workspace)
    loops = loops_backed_under(root)
    for dev, _ in loops:
        ensure_write_cache(dev)

    def detach_under(top: str) -> None:
        for dev, back in [lp for lp in loops if lp[1] == top or lp[1].startswith(top + "/")]:
            log.warning("detaching %s (%s) left by an interrupted run", dev, back)
            detach(dev)
            loops.remove((dev, back))

    for m in mounts_under(root):
        detach_under(m.target)
        log.warning("unmounting %s left by an interrupted run", m.target)
        umount(m.target, missing_ok=True)
    detach_under(root)


def check_host(ctx: CheckContext, src: LogSource, index: LogIndex, states: list[CrashState], sink: Sink,
               workspace: Path, *, jobs: int = 1) -> None:
    """Judge ``states`` here; each verdict goes to ``sink`` (called under a lock, in walk order per
    worker).  Stops between states on an interrupt; what is mounted or attached is undone."""
    require_root()
    cleanup_stale(workspace)
    lock = threading.Lock()
    serial = threading.Lock() if not ctx.fs.clones_mount_together else None
    failed = threading.Event()

    def worker(wid: int, chunk: list[CrashState]) -> None:
        ws = workspace / f"w{wid}"
        ws.mkdir(parents=True, exist_ok=True)
        mnt = str(ws / "mnt")
        walk = materialize(index, src.initial, src.size, chunk, ws)
        with contextlib.closing(walk):
            for state, img in walk:
                if interrupt.stopping() or failed.is_set():
                    return
                with serial or contextlib.nullcontext():
                    v = _judge_image(ctx, img, state, mnt)
                if interrupt.stopping():
                    return  # its checker or fsck may have been killed: not a verdict
                with lock:
                    sink(v)

    chunks = split_by_base(index, states, jobs)
    if not chunks:
        return
    with ThreadPoolExecutor(max_workers=len(chunks), thread_name_prefix="powercut-host") as pool:
        futures = [pool.submit(worker, i, c) for i, c in enumerate(chunks)]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    failed.set()
            for f in futures:
                f.result()
        except BaseException:
            failed.set()
            raise


def _judge_image(ctx: CheckContext, img: Path, state: CrashState, mnt: str) -> Verdict:
    """One state's image judged on a loop device of its own, attached for it and detached after:
    write-back, as the kernel gives it.  (A device kept write-through between states would be
    free, and so handed write-through to whatever program attaches a loop next.)"""
    if stat.S_ISBLK(os.stat(img).st_mode):
        return judge(ctx, str(img), state, mnt)
    with LoopDevice(img) as dev:
        return judge(ctx, dev, state, mnt)


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

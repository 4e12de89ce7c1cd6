"""``--check-in host`` (host, root): judge states of N >= 1 disks (core/states/nodes.NodesState; one disk's
plain CrashState too) on this machine over loop devices, ``jobs`` incremental walks in parallel.
For trusted, disposable machines: a corrupt image meets the host kernel.

One walk for any N, as the checker VM's (guest/check.py): the states are put in walk order and cut
into contiguous chunks, one worker each (``walk_chunks``) -- one disk's sorted by the pristine
position each needs (``split_by_base``: one forward walk per worker, the incremental replay of
replay/materialize), a cluster's kept in product order (the last node changes fastest).  Per worker
and per disk the images come from replay/walk.NodeImages: a pristine walked forward over each run
of the disk's states, cloned per state by the workspace's provider (reflink, an XFS workspace or a
sparse copy: a mount's recovery writes the image).  Each image is attached to a loop device of its
own for its state (write-back) and every disk is judged at once by check/judge.judge_nodes: every
disk mounted (one disk at the worker's ``mnt``, node i at ``mnt/n<i>``), the checker given every
mount, every disk fsck'd; a disk that fails to mount is the state's finding, with its kernel words
and fsck.  One disk's verdict lies at its cut, a cluster's at its instant.

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
from typing import TypeVar

from powercut.check.context import CheckContext, LogSource
from powercut.check.judge import judge_nodes
from powercut.check.proving import Proving, Report, judge_or_prove
from powercut.core.judging.readset import ReadSet
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import NodesState
from powercut.errors import EnvironmentNotReady
from powercut.linux import interrupt, loopcache
from powercut.linux.blockreads import BlockReads
from powercut.linux.loopcache import ensure_write_cache
from powercut.linux.loopdev import LoopDevice, detach, loops_backed_under
from powercut.linux.mounts import mounts_under, umount
from powercut.replay.materialize import plan
from powercut.replay.providers import choose_provider
from powercut.replay.walk import NodeImages

log = logging.getLogger(__name__)

Sink = Callable[[Verdict], None]
S = TypeVar("S", bound=CrashState | NodesState)
T = TypeVar("T")


def require_root(what: str = "--check-in host") -> None:
    if os.geteuid() != 0:
        raise EnvironmentNotReady(
            f"{what} needs root (loop devices and mount): run it as root, or check in "
            "the VM (--check-in vm, the default)"
        )


def split_by_base(index: LogIndex, states: Sequence[S], parts: int) -> list[list[S]]:
    """One disk's states in walk order (by the pristine position each needs), cut into at most
    ``parts`` contiguous chunks: one incremental walk each."""
    ordered = sorted(states, key=lambda s: plan(index, _disks(s)[0][0]).base)
    parts = max(1, min(parts, len(ordered)))
    size, extra = divmod(len(ordered), parts)
    chunks, pos = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        chunks.append(ordered[pos : pos + n])
        pos += n
    return [c for c in chunks if c]


def chunks(states: Sequence[T], n: int) -> list[list[T]]:
    """``states`` cut into at most ``n`` contiguous chunks whose sizes differ by at most one."""
    n = max(1, min(n, len(states)))
    return [
        list(states[k * len(states) // n : (k + 1) * len(states) // n]) for k in range(n) if states
    ]


def walk_chunks(logs: Sequence[LogIndex], states: Sequence[S], parts: int) -> list[list[S]]:
    """The states of the disks whose opened logs are ``logs`` in walk order, cut into at most
    ``parts`` contiguous chunks, one worker's walks each: one disk's sorted by base
    (``split_by_base``), a cluster's in the product order they come in (per node one forward walk
    per wrap, replay/walk.NodeImages)."""
    return split_by_base(logs[0], states, parts) if len(logs) == 1 else chunks(states, parts)


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


def check_host(
    ctx: CheckContext,
    src: LogSource,
    logs: Sequence[LogIndex],
    states: Sequence[CrashState] | Sequence[NodesState],
    sink: Sink,
    workspace: Path,
    *,
    jobs: int = 1,
    prove: bool = False,
) -> Report | None:
    """Judge ``states`` of the disks whose opened logs are ``logs`` (``src``'s, disk 0 first; ``ctx``
    knowing their fault windows: check/context.with_faults, with_node_faults) here, in at most
    ``jobs`` parallel walks; each verdict goes to ``sink`` (called under a lock, in walk order per
    worker).  Stops between states on an interrupt; what is mounted or attached is undone.

    ``prove``: states the read-set rule proves (check/proving.py) are not judged; their verdicts
    reach ``sink`` after the walks.  If confirmation disproved the rule, those states are judged
    after all.  What the rule did that the verdicts do not say is returned (None: no rule)."""
    require_root()
    cleanup_stale(workspace)
    lock = threading.Lock()
    serial = threading.Lock() if not ctx.fs.clones_mount_together else None
    failed = threading.Event()
    initial = (
        src.initial if len(logs) == 1 else None
    )  # a cluster's disks start from zeros (record/)
    proving = Proving.of(logs[0], states, len(logs)) if prove else None

    def worker(wid: int, chunk: list[CrashState | NodesState]) -> None:
        with contextlib.ExitStack() as stack:
            disks = stack.enter_context(
                contextlib.closing(HostNodes(logs, src.size, initial, chunk, workspace / f"w{wid}"))
            )
            reads = stack.enter_context(contextlib.closing(BlockReads())) if proving else None
            for state in chunk:
                if interrupt.stopping() or failed.is_set():
                    return
                v = judge_or_prove(
                    proving,
                    reads,
                    state,
                    lambda traced: disks.judge(ctx, state, serial, traced),  # noqa: B023 -- called now
                    disks.pass_by,
                )
                if interrupt.stopping():
                    return  # its checker or fsck may have been killed: not a verdict
                if v is None:
                    continue  # proven: its verdict follows the walks
                with lock:
                    sink(v)

    parts: list[list[CrashState | NodesState]] = walk_chunks(logs, list(states), jobs)
    if not parts:
        return None
    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="powercut-host") as pool:
        futures = [pool.submit(worker, i, c) for i, c in enumerate(parts)]
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
    if proving is None or interrupt.stopping():
        return None
    if proving.mismatch is None:
        for v in proving.proven:
            sink(v)
        return proving.report()
    again = {v.state for v in proving.proven}
    todo = [s for s in states if s.id in again]
    check_host(ctx, src, logs, todo, sink, workspace, jobs=jobs)  # type: ignore[arg-type]
    return proving.report()


class HostNodes:
    """One worker's disks: per disk a NodeImages over the disk's states in the worker's chunk (one
    disk's in the worker's directory ``ws``, node i's in ``ws/n<i>``), each on a provider of the
    workspace's own (choose_provider), and the mount points (``ws/mnt``; node i's ``ws/mnt/n<i>``).
    ``close`` ends the walks and removes the providers."""

    def __init__(
        self,
        logs: Sequence[LogIndex],
        size: int,
        initial: Path | None,
        states: Sequence[CrashState | NodesState],
        ws: Path,
    ) -> None:
        one = len(logs) == 1
        with contextlib.ExitStack() as stack:
            self.nodes: list[NodeImages] = []
            for i, index in enumerate(logs):
                where = ws if one else ws / f"n{i}"
                where.mkdir(parents=True, exist_ok=True)
                prov = choose_provider(where, image_bytes=2 * size + (256 << 20))
                stack.callback(
                    prov.close
                )  # NodeImages.close closes it too (closing twice is nothing)
                self.nodes.append(
                    NodeImages(
                        index, size, [_disks(s)[0][i] for s in states], where, prov, initial=initial
                    )
                )
                stack.callback(self.nodes[-1].close)
            self._close = stack.pop_all()
        self.mnts = (
            [str(ws / "mnt")] if one else [str(ws / "mnt" / f"n{i}") for i in range(len(logs))]
        )

    def judge(
        self,
        ctx: CheckContext,
        state: CrashState | NodesState,
        serial: threading.Lock | None,
        reads: BlockReads | None = None,
    ) -> tuple[Verdict, ReadSet | None]:
        """The next state's verdict: every disk's image built and attached, then judged (under
        ``serial``, if given).  Its seconds count building and judging, not waiting for ``serial``.
        With ``reads`` (one disk): also the sectors its judge read (None: unknown)."""
        t0 = time.monotonic()
        nodes, at = _disks(state)
        imgs = [node.next_image() for node in self.nodes]
        with contextlib.ExitStack() as loops:
            devs = [_attached(img, loops) for img in imgs if img is not None]
            built = time.monotonic() - t0
            with serial or contextlib.nullcontext():
                if reads is not None:
                    reads.watch(devs[0])
                v = judge_nodes(
                    ctx,
                    devs,
                    nodes,
                    self.mnts,
                    sid=state.id,
                    model=state.model,
                    at=at,
                    t0=time.monotonic() - built,
                )
                spans = reads.take() if reads is not None else None
        return v, None if spans is None else ReadSet(spans)

    def pass_by(self) -> None:
        """The next state is not judged (proven): the walks pass it, no image is made."""
        for node in self.nodes:
            node.next_image(build=False)

    def close(self) -> None:
        self._close.close()


def _attached(img: Path, loops: contextlib.ExitStack) -> str:
    """The block device one disk's image is judged on: a loop device of its own, attached for this
    state and detached after (by ``loops``) -- write-back, as the kernel gives it.  (A device kept
    write-through between states would be free, and so handed write-through to whatever program
    attaches a loop next.)  An image that is a block device already (a dm-snapshot clone) as it is."""
    if stat.S_ISBLK(os.stat(img).st_mode):
        return str(img)
    return str(loops.enter_context(LoopDevice(img)))


def _disks(state: CrashState | NodesState) -> tuple[tuple[CrashState, ...], int]:
    """(each disk's state, where the verdict says the state lies): a CrashState is one disk's, at its
    cut; a NodesState of one disk lies at its disk's cut too (the verdict one disk always had, as in
    the checker VM), a cluster's at its instant."""
    if isinstance(state, CrashState):
        return (state,), state.cut
    return state.nodes, state.cut

"""The guest's checker-VM jobs, one handler per job kind (guestjob): ``check`` judges states,
``diagnose`` minimizes and blames failures, ``shell`` opens a shell in one recovered state.  Each
rebuilds its states with dm-snapshot over a pristine replayed incrementally inside the guest, on a
scratch disk, and writes one progress line before and one after each step, so the host can
attribute a panic or a hang to its state.

``check`` and ``shell`` take states of N >= 1 disks (core/states/nodes.NodesState; one disk is N = 1): per
disk a pristine walked forward over a *run* of its states whose positions never decrease
(replay/walk.NodeImages), a dm-snapshot clone per state, and every disk judged at once by
check/judge.judge_nodes (every disk mounted, the checker given every mount, every disk fsck'd).
One disk's states are first put in walk order (one run: the incremental replay they always had),
mounted at ``MNT``, judged against the log's fault windows; the states of several come in product
order (the last node changes fastest: per node one walk per wrap), node i mounted at ``MNT/n<i>``."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut import registry
from powercut.check.context import CheckContext, with_node_faults
from powercut.check.judge import judge_nodes
from powercut.check.proving import Proving, judge_or_prove
from powercut.core.judging.readset import ReadSet
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.states.nodes import Nodes, NodesState
from powercut.linux import filesystems, process
from powercut.linux.blockdev import find_disk
from powercut.linux.blockreads import BlockReads
from powercut.linux.jsonlines import JsonLines
from powercut.linux.mounts import mount, umount
from powercut.replay.dmsnapshot import DmSnapshotProvider
from powercut.replay.materialize import plan
from powercut.replay.walk import NodeImages
from powercut.vm.guestjob import GUEST_MNT as MNT
from powercut.vm.guestjob import (
    SCRATCH_MKFS,
    SHELL_READY,
    CheckJob,
    DiagnoseJob,
    ShellJob,
    StateSource,
    uptime,
)

log = logging.getLogger(__name__)

WORK = "/run/powercut/work"


@dataclass(slots=True)
class _Session:
    """A diagnosis job's open logs (one disk's, or every node's) and their crash spaces, the judging
    context, the scratch work dir, the progress file."""

    ctx: CheckContext
    indexes: tuple[LogIndex, ...]
    disks: Nodes
    work: Path
    progress: JsonLines


@dataclass(slots=True)
class _Disks:
    """The disks of a check or shell job: the judging context, the states (core/states/nodes.NodesState,
    one disk's too), each disk's images (replay/walk.NodeImages: a pristine walked forward over the
    disk's states, a dm-snapshot clone per state), the mount points -- one disk's at ``MNT``, node
    i's at ``MNT/n<i>`` -- and the progress file."""

    ctx: CheckContext
    states: list[NodesState]
    nodes: list[NodeImages]
    mnts: list[str]
    progress: JsonLines
    ready: float | None = None  # when the first state began (uptime)

    @staticmethod
    def of(
        ctx: CheckContext,
        indexes: Sequence[LogIndex],
        size: int,
        states: list[NodesState],
        progress: JsonLines,
        stack: contextlib.ExitStack,
        zeros: Sequence[tuple[tuple[int, int], ...]] = (),
        initial: str = "",
    ) -> _Disks:
        one = len(indexes) == 1
        nodes = []
        for i, index in enumerate(indexes):
            where = Path(WORK) if one else Path(WORK) / f"n{i}"
            where.mkdir(parents=True, exist_ok=True)
            nodes.append(
                NodeImages(
                    index,
                    size,
                    [s.nodes[i] for s in states],
                    where,
                    DmSnapshotProvider(where),
                    initial=Path(initial) if initial and i == 0 else None,
                    known_zero=zeros[i] if i < len(zeros) else (),
                )
            )
            stack.callback(nodes[-1].close)
        mnts = [MNT] if one else [f"{MNT}/n{i}" for i in range(len(indexes))]
        for m in mnts:
            os.makedirs(m, exist_ok=True)
        return _Disks(ctx, states, nodes, mnts, progress)

    def judge(
        self, state: NodesState, reads: BlockReads | None = None
    ) -> tuple[Verdict, list[str], ReadSet | None]:
        """One state judged (one progress line before, one after): its verdict, its disks' devices
        and with ``reads`` (one disk) the sectors its judge read (None: unknown)."""
        if self.ready is None:  # the boot timeline: kernel start -> this VM judges its first state
            self.ready = uptime()
            log.info("first state begins %.2f s after the kernel", self.ready)
        self.progress.add({"begin": state.id})
        t0 = time.monotonic()
        devs = [str(node.next_image()) for node in self.nodes]
        log.debug("%s: materialized in %.3f s", state.id, time.monotonic() - t0)
        if reads is not None:
            reads.watch(devs[0])
        v = judge_nodes(
            self.ctx,
            devs,
            state.nodes,
            self.mnts,
            sid=state.id,
            model=state.model,
            at=state.cut,
            t0=t0,
        )
        spans = reads.take() if reads is not None else None
        self.progress.add({"verdict": v.to_json()})
        return v, devs, None if spans is None else ReadSet(spans)

    def judged(self, state: NodesState, reads: BlockReads | None) -> tuple[Verdict, ReadSet | None]:
        """``judge`` as a walk of the read-set rule wants it: the verdict and the sectors read."""
        v, _, read = self.judge(state, reads)
        return v, read

    def pass_by(self) -> None:
        """The next state is proven, not judged: the walks pass it, no clone is made."""
        for node in self.nodes:
            node.next_image(build=False)

    def walks(self) -> list[dict[str, Any]]:
        """Per disk, its walks and what they cost."""
        return [
            {
                "walks": n.walks,
                "walk_entries": n.stats.walk_entries,
                "walk_mb": n.stats.walk_bytes >> 20,
                **{
                    k: round(getattr(n.stats, k), 2)
                    for k in ("walk_s", "setup_s", "clone_s", "extras_s", "release_s")
                },
            }
            for n in self.nodes
        ]


@contextlib.contextmanager
def prepared(src: StateSource) -> Iterator[CheckContext]:
    """The judging context of a job's source, with the scratch disk mounted at WORK (both the
    check and shell jobs of N >= 1 disks and the diagnosis)."""
    for key, ref in src.entries.items():
        registry.preset(*key.split("/", 1), ref)  # type: ignore[call-arg]  # key: "group/name"
    if src.fsck:
        filesystems.preset_fsck(src.fstype, src.fsck)
    scratch = find_disk(src.disks["scratch"])
    os.makedirs(WORK, exist_ok=True)
    if not src.scratch_ready:
        process.run([*SCRATCH_MKFS, scratch], timeout=300)
    mount(scratch, WORK, "ext4", "noatime")
    try:
        yield CheckContext(
            filesystems.get(src.fstype),
            src.checker,
            dict(src.params),
            src.mount_opts,
            trace_reads=src.trace_reads,
        )
    finally:
        umount(WORK)


@contextlib.contextmanager
def _session(src: StateSource, logs: Sequence[str], jobdir: Path) -> Iterator[_Session]:
    """A diagnosis job's disks: one (``src.log``; ``logs`` empty) or N (``logs``)."""
    with prepared(src) as ctx, contextlib.ExitStack() as stack:
        indexes = tuple(stack.enter_context(open_log(p)) for p in (tuple(logs) or (src.log,)))
        progress = stack.enter_context(JsonLines(jobdir / "progress.jsonl", durable=False))
        yield _Session(
            with_node_faults(ctx, indexes), indexes, Nodes(indexes), Path(WORK), progress
        )


@contextlib.contextmanager
def _disks(
    src: StateSource, logs: Sequence[str], ids: Sequence[str], jobdir: Path
) -> Iterator[_Disks]:
    """A check or shell job's disks: one (``src.log``; ``logs`` empty) or N (``logs``)."""
    paths = tuple(logs) or (src.log,)
    with prepared(src) as ctx, contextlib.ExitStack() as stack:
        indexes = [stack.enter_context(open_log(p)) for p in paths]
        progress = stack.enter_context(JsonLines(jobdir / "progress.jsonl", durable=False))
        disks = Nodes(indexes)
        states = [disks.state_from_id(i) for i in ids]
        if len(indexes) == 1:  # in walk order (materialize's): one forward walk of the pristine
            states.sort(key=lambda s: plan(indexes[0], s.nodes[0]).base)
        yield _Disks.of(
            with_node_faults(ctx, indexes),
            indexes,
            src.size,
            states,
            progress,
            stack,
            src.zeros,
            src.initial,
        )


def check(job: CheckJob, jobdir: Path) -> dict[str, Any]:
    """The checker VM: judge each listed state (of one disk, or of N).  With ``job.prove`` the
    read-set rule proves what it can (check/proving.py): the proven states' verdicts follow the
    walk, each a progress line alone, then a "readset" line (check/proving.Report).  If
    confirmation disproved the rule the proven verdicts are not sent: the host judges the states
    left without a verdict in a job without the rule."""
    n = 0
    proven = 0
    with _disks(job.src, job.logs, job.states, jobdir) as d:
        proving = Proving.of(d.nodes[0].index, d.states, len(d.nodes)) if job.prove else None
        with contextlib.ExitStack() as stack:
            reads = stack.enter_context(contextlib.closing(BlockReads())) if proving else None
            for state in d.states:
                judged = judge_or_prove(
                    proving,
                    reads,
                    state,
                    lambda traced: d.judged(state, traced),  # noqa: B023 -- called at once
                    d.pass_by,
                )
                n += judged is not None
        if proving is not None and proving.mismatch is None:
            for v in proving.proven:
                d.progress.add({"verdict": v.to_json()})
            proven = len(proving.proven)
        if proving is not None:
            d.progress.add({"readset": proving.report().to_json()})
    return {
        "judged": n,
        "proven": proven,
        "first_state_s": d.ready,
        **({"nodes": d.walks()} if len(d.nodes) > 1 else {}),
    }


def diagnose_job(job: DiagnoseJob, jobdir: Path) -> dict[str, Any]:
    """Minimize and blame the failures the host asked about (debug.diagnose), of one disk or of N,
    one progress line each."""
    # only this job needs them, and every checker VM imports this module: under TCG an import costs
    # 10-50x what it does natively, paid at each VM's start
    from powercut.debug.diagnose import Workspace, diagnose, without_tear

    with _session(job.src, job.logs, jobdir) as s:
        ws = Workspace(
            s.disks,
            s.indexes,
            job.src.size,
            s.work / "diagnose",
            Path(job.src.initial) if job.src.initial else None,
            provider="dm-snapshot",
            floors=tuple(f if f >= 0 else None for f in job.floors),
        )
        for first in map(Verdict.from_json, job.failures):
            s.progress.add({"begin-diagnosis": first.state})
            state = s.disks.state_from_id(first.state)
            if job.tear_only:  # one disk's torn state
                s.progress.add(
                    {
                        "diagnosis": {
                            "state": first.state,
                            "without_tear": without_tear(s.ctx, ws, state.nodes[0], first),
                        }
                    }
                )
                continue
            s.progress.add(
                {"diagnosis": diagnose(s.ctx, ws, state, first, budget=job.budget).to_json()}
            )
    return {"diagnosed": len(job.failures)}


def shell(job: ShellJob, jobdir: Path) -> dict[str, Any]:
    """``powercut repro --shell``: judge the state, then mount it again -- every disk's, at the mounts
    the checker saw (the kernel replays each journal) -- and run an interactive shell on the console
    in ``MNT``; the VM powers off when the shell exits."""
    with _disks(job.src, job.logs, (job.state,), jobdir) as d:
        state = d.states[0]
        v, devs, _ = d.judge(state)
        shell_on(d.ctx, list(zip(devs, d.mnts)), state.id, state.acks, v, MNT)
    return {"judged": 1}


def shell_on(
    ctx: CheckContext,
    mounts: Sequence[tuple[str, str]],
    sid: str,
    acks: Sequence[str],
    v: Verdict,
    cwd: str,
) -> None:
    """Mount each (device, mount point) -- the kernel replays its journal -- and run an interactive
    shell in ``cwd`` on the console (``shell``: one disk's mount, or every node's)."""
    done: list[str] = []
    try:
        for device, mnt in mounts:
            os.makedirs(mnt, exist_ok=True)
            mount(device, mnt, ctx.fs.name, ctx.state_mount_opts)
            done.append(mnt)
        where = (
            f"{cwd} (your shell's cwd)"
            if done == [cwd]
            else f"{', '.join(done)} (your shell's cwd: {cwd})"
        )
        with open("/dev/console", "r+b", buffering=0) as tty:
            tty.write(
                (
                    f"\n=== {sid}: {v.verdict}: {v.reasons[0] if v.reasons else ''}\n"
                    f"{SHELL_READY.decode()} {where}; acked: {', '.join(acks) or '-'}"
                    "; exit (or Ctrl-D) powers the VM off\n"
                ).encode()
            )
            env = dict(os.environ, PS1=f"powercut {sid}# ", HOME="/tmp")
            with process.Spawned(
                ["/bin/sh", "-i"], stdin=tty, stdout=tty, stderr=tty, cwd=cwd, env=env
            ) as sh:
                sh.wait(None)
    finally:
        os.chdir("/")
        for mnt in reversed(done):
            umount(mnt)

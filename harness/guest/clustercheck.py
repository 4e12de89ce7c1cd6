"""The checker VM's cluster job (guest; issue 40): judge cluster crash states in one VM, every node's
image rebuilt from its own log with the one-disk machinery (replay.materialize over a dm-snapshot
provider: a pristine walked forward in log order per node, a dm-snapshot clone of it per cluster
state, so a mount's recovery never writes the pristine), every node mounted at once, the workload's
checker given every mount, every node fsck'd -- ``check.judge.judge_disks``, the one judge of host
mode and of one disk, so the verdicts and reasons are host mode's.  One progress line before and one after each
state, as for one disk (the host blames a panic or a hang on the state in progress).  ``cluster_shell``
(``repro --shell`` of a cluster state) judges one state so, then mounts every node again and opens
a shell on the console in ``GUEST_MNT``, each node at ``n<i>`` below it.

Cluster states come in product order (the last node changes fastest), so one node's states are not
sorted by the pristine position they need.  Each node walks its pristine forward over a *run* of
its states whose positions never decrease, and starts a new walk from entry 0 only when the next
state lies behind: per node one walk per wrap of the product, each state a clone plus its few
extra writes (host mode replays every node from entry 0 whenever its state changes)."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext, with_node_faults
from powercut.check.judge import judge_disks
from powercut.core.disks import Disks, DisksState
from powercut.core.dmlog import open_log
from powercut.core.verdict import Verdict
from powercut.guest.check import WORK, prepared, shell_on
from powercut.linux.jsonlines import JsonLines
from powercut.replay.dmsnapshot import DmSnapshotProvider
from powercut.replay.walk import NodeImages
from powercut.vm.guestjob import GUEST_MNT, ClusterCheckJob, ClusterShellJob, StateSource, uptime

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _nodes(src: StateSource, logs: Sequence[str], ids: Sequence[str],
           jobdir: Path) -> Iterator[tuple[CheckContext, list[DisksState], list[NodeImages], list[str], JsonLines]]:
    """A cluster job's judging context, its states, each node's images (a pristine walked over the
    node's states, a dm-snapshot clone per state), the mount points (``GUEST_MNT/n<i>``) and the
    progress file."""
    with prepared(src) as ctx, contextlib.ExitStack() as stack:
        indexes = [stack.enter_context(open_log(p)) for p in logs]
        progress = stack.enter_context(JsonLines(jobdir / "progress.jsonl", durable=False))
        cs = Disks(indexes)
        states = [cs.state_from_id(i) for i in ids]
        nodes = []
        for i, index in enumerate(indexes):
            where = Path(WORK) / f"n{i}"
            where.mkdir(parents=True, exist_ok=True)
            nodes.append(NodeImages(index, src.size, [s.nodes[i] for s in states], where,
                                    DmSnapshotProvider(where)))
            stack.callback(nodes[-1].close)
        mnts = [f"{GUEST_MNT}/n{i}" for i in range(len(indexes))]
        for m in mnts:
            os.makedirs(m, exist_ok=True)
        yield with_node_faults(ctx, indexes), states, nodes, mnts, progress   # each node's fault windows


def _judge(ctx: CheckContext, state: DisksState, nodes: list[NodeImages], mnts: list[str],
           progress: JsonLines) -> tuple[Verdict, list[str]]:
    """One cluster state judged (one progress line before, one after): its verdict and node devices."""
    progress.add({"begin": state.id})
    t0 = time.monotonic()
    devs = [str(node.next_image()) for node in nodes]
    log.debug("%s: materialized in %.3f s", state.id, time.monotonic() - t0)
    v = judge_disks(ctx, devs, state.nodes, mnts, sid=state.id, model=state.model, at=state.instant, t0=t0)
    progress.add({"verdict": v.to_json()})
    return v, devs


def cluster_check(job: ClusterCheckJob, jobdir: Path) -> dict[str, Any]:
    """The checker VM: judge each listed cluster state."""
    ready: float | None = None
    n = 0
    with _nodes(job.src, job.logs, job.states, jobdir) as (ctx, states, nodes, mnts, progress):
        for state in states:
            if ready is None:   # the boot timeline: kernel start -> this VM judges its first state
                ready = uptime()
                log.info("first cluster state begins %.2f s after the kernel", ready)
            _judge(ctx, state, nodes, mnts, progress)
            n += 1
        walks = [{"walks": node.walks, "walk_entries": node.stats.walk_entries, "walk_mb": node.stats.walk_bytes >> 20,
                  **{k: round(getattr(node.stats, k), 2) for k in ("walk_s", "setup_s", "clone_s", "extras_s", "release_s")}}
                 for node in nodes]
    return {"judged": n, "first_state_s": ready, "nodes": walks}


def cluster_shell(job: ClusterShellJob, jobdir: Path) -> dict[str, Any]:
    """``powercut repro --shell`` of a cluster state: judge it, then mount every node's image at
    ``GUEST_MNT/n<i>`` (the mounts the checker saw; the kernel replays each journal) and run an
    interactive shell in ``GUEST_MNT`` on the console; the VM powers off when the shell exits."""
    with _nodes(job.src, job.logs, (job.state,), jobdir) as (ctx, states, nodes, mnts, progress):
        state = states[0]
        v, devs = _judge(ctx, state, nodes, mnts, progress)
        shell_on(ctx, list(zip(devs, mnts)), state.id, state.acks, v, GUEST_MNT)
    return {"judged": 1}

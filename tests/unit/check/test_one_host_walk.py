"""Host mode's one walk for N >= 1 disks (check/host.check_host) judges every state as the two walks it
replaced did: the one-disk walk (``jobs`` workers, each a replay/materialize walk judged by
check/judge.judge) and the cluster walk (serial, one replay/walk.NodeImages per node, judged by
judge_nodes).  Both are kept here verbatim (but for their names) as the oracle.

The recording is made without a VM (tests/unit/synthrec): a real ext4 in a dm-log-writes log whose
third commit lies in a fault window (its writes never logged, acked anyway), so its states pass,
lose acks, fail under the lying-disk models and are ``acked-after-error``.  A cluster is three
copies of that log (every node the same disk: the logs share their key marks).  Root: loop
devices and mount."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

from powercut.check.context import (
    CheckContext,
    LogSource,
    context_for,
    with_faults,
    with_node_faults,
)
from powercut.check.host import check_host, cleanup_stale, require_root
from powercut.check.judge import judge, judge_nodes
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import Nodes, NodesState
from powercut.core.states.selection import SelectionSpec, select, select_nodes
from powercut.core.states.stateid import MODELS
from powercut.linux import interrupt
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import mounts_under
from powercut.record import recording
from powercut.replay.materialize import materialize, plan
from powercut.replay.providers import choose_provider
from powercut.replay.walk import NodeImages
from tests.unit.synthrec import CHECKER, SIZE, ext4_recording

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/loop-control") or not shutil.which("mkfs.ext4"),
    reason="needs root, /dev/loop-control and mkfs.ext4",
)
ON_HOST = tuple(
    m for m in MODELS if m != "unreadable-sector"
)  # that one needs device-mapper on the host

Sink = Callable[[Verdict], None]
LOOP = re.compile(r"\bloop\d+\b")
WORKER = re.compile(r"/w\d+/")


# -- the oracle: the two walks as they were (check/host.py before issue 49's one walk) ------------------
def old_split_by_base(
    index: LogIndex, states: list[CrashState], parts: int
) -> list[list[CrashState]]:
    """Contiguous chunks in walk order, one incremental walk each."""
    ordered = sorted(states, key=lambda s: plan(index, s).base)
    parts = max(1, min(parts, len(ordered)))
    size, extra = divmod(len(ordered), parts)
    chunks, pos = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        chunks.append(ordered[pos : pos + n])
        pos += n
    return [c for c in chunks if c]


def old_check_host(
    ctx: CheckContext,
    src: LogSource,
    index: LogIndex,
    states: list[CrashState],
    sink: Sink,
    workspace: Path,
    *,
    jobs: int = 1,
) -> None:
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
                    with LoopDevice(img) as dev:
                        v = judge(ctx, dev, state, mnt)
                if interrupt.stopping():
                    return
                with lock:
                    sink(v)

    chunks = old_split_by_base(index, states, jobs)
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


def old_check_cluster_host(
    ctx: CheckContext,
    logs: Sequence[LogIndex],
    size: int,
    states: Sequence[NodesState],
    sink: Sink,
    workspace: Path,
) -> None:
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
            stack.callback(nodes[-1].close)
        for state in states:
            if interrupt.stopping():
                return
            t0 = time.monotonic()
            imgs = [node.next_image() for node in nodes]
            with contextlib.ExitStack() as loops:
                devs = [loops.enter_context(LoopDevice(img)) for img in imgs]
                v = judge_nodes(
                    ctx,
                    devs,
                    state.nodes,
                    mnts,
                    sid=state.id,
                    model=state.model,
                    at=state.instant,
                    t0=t0,
                )
            if interrupt.stopping():
                return
            sink(v)


# -- the comparison --------------------------------------------------------------------------------------
def verdicts(run: Callable[[Sink, Path], None], work: Path) -> dict[str, dict[str, Any]]:
    """Each state's verdict as the journal writes it, but its time, the loop devices it was judged on
    and its worker's mount point (a failed mount's and an fsck's words name them), and the kernel's
    lines about another worker's device (KernelLog.lines_about keeps every line naming the
    filesystem: with two workers, those of the other's mounts at the same moment too); nothing left
    mounted."""
    got: list[Verdict] = []
    run(got.append, work)
    assert not mounts_under(str(work))

    def same(v: Verdict) -> list[str]:
        mine = {d for r in v.reasons if "mount failed" in r for d in LOOP.findall(r)}
        return [
            WORKER.sub("/wK/", LOOP.sub("loopN", r.replace(str(work), "WORK")))
            for r in v.reasons
            if "kernel: " not in r or set(LOOP.findall(r)) <= mine
        ]

    out = {
        v.state: {**{k: x for k, x in v.to_json().items() if k != "seconds"}, "reasons": same(v)}
        for v in got
    }
    assert len(out) == len(got)
    return out


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> recording.Recording:
    return recording.load(
        ext4_recording(tmp_path_factory.mktemp("synthetic"), commits=4, fault_at=3)
    )


def test_one_disk_is_judged_as_the_one_disk_walk_judged_it(
    rec: recording.Recording, tmp_path: Path
) -> None:
    src = LogSource.of(rec)
    with open_log(src.path) as index:
        ctx = with_faults(context_for(rec, CHECKER), index)
        how = SelectionSpec(models=ON_HOST, bound=3, samples=2, torn_samples=1, max_states=60)
        states = list(select(index, how).states)
        want = verdicts(
            lambda sink, w: old_check_host(ctx, src, index, states, sink, w, jobs=2),
            tmp_path / "old",
        )
        got = verdicts(
            lambda sink, w: check_host(ctx, src, [index], states, sink, w, jobs=2), tmp_path / "new"
        )
        assert got == want, [
            (k, got[k]["reasons"], want[k]["reasons"]) for k in got if got[k] != want[k]
        ][:3]
        as_disks = [
            Nodes([index]).state_from_id(s.id) for s in states
        ]  # one disk's DisksStates: the same
        got = verdicts(
            lambda sink, w: check_host(ctx, src, [index], as_disks, sink, w, jobs=1),
            tmp_path / "disks",
        )
        assert got == want, [
            (k, got[k]["reasons"], want[k]["reasons"]) for k in got if got[k] != want[k]
        ][:3]
    found = {v["model"] for v in want.values() if v["verdict"] != "pass"}
    assert (
        len(want) == len(states) >= 50 and {"write-cache", "lost-write", "flush-ignored"} <= found
    ), found
    assert {"pass", "lost-ack", "acked-after-error", "detected"} <= {
        v["verdict"] for v in want.values()
    }


def test_a_cluster_is_judged_as_the_cluster_walk_judged_it_by_any_number_of_workers(
    rec: recording.Recording, tmp_path: Path
) -> None:
    where = tmp_path / "cluster"
    where.mkdir()
    paths = tuple(where / f"log{i}.bin" for i in range(3))
    for p in paths:
        shutil.copyfile(rec.log_path, p)
    src = LogSource(paths[0], SIZE, None, paths)
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open_log(p)) for p in paths]
        ctx = with_node_faults(context_for(rec, CHECKER), logs)
        how = SelectionSpec(
            models=("flush", "write-cache", "lost-write"), bound=2, samples=2, max_states=30
        )
        states = list(select_nodes(Nodes(logs), how).states)
        want = verdicts(
            lambda sink, w: old_check_cluster_host(ctx, logs, SIZE, states, sink, w),
            tmp_path / "old",
        )
        for jobs in (1, 2):
            got = verdicts(
                lambda sink, w, j=jobs: check_host(ctx, src, logs, states, sink, w, jobs=j),
                tmp_path / f"new{jobs}",
            )
            assert got == want, jobs
    found = {v["verdict"] for v in want.values()}
    assert len(want) == len(states) == 30 and {"pass", "acked-after-error"} <= found, found

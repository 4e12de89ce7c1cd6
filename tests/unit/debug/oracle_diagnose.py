"""One disk's diagnosis and a cluster's as they were before one diagnosis for N >= 1 disks replaced
them (commit 2b4c8c7: ``debug.diagnose.diagnose`` with its ``Diagnosis``, ``blame_state`` and
``_with_image``; ``debug.clusterdebug.diagnose_cluster_state`` with ``ClusterDiagnosis``,
``judge_one`` and ``host_blame``; and ``core.clustershrink.minimize_cluster``, which it called),
kept as the oracle of tests/unit/debug/test_one_diagnosis.py.  Their logic is verbatim; the tests
replace the images, the judge, blame's tools and the mounts with fakes in this module and in the
new one alike."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext
from powercut.check.host import cleanup_stale
from powercut.check.judge import judge
from powercut.core.judging.nodesshrink import InstantSpace, NodeShrunk, cause_line, node_floor
from powercut.core.judging.shrink import Judged, Outcome, minimize, reason_class, signature
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import Nodes, NodesState
from powercut.debug.blame import Culprit, blame, writes_that_matter
from powercut.debug.diagnose import settled
from powercut.errors import PowercutError, UsageError
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import mount, umount
from powercut.replay.materialize import materialize

log = logging.getLogger(__name__)
MAX_ROUNDS = 4
DEFAULT_BUDGET = 60


# -- debug/diagnose.py ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A failing state, its minimized form and the writes it comes down to."""

    state: str
    verdict: str
    minimized: str
    minimized_reasons: tuple[str, ...]
    reason_class: str
    calls: int
    one_at_a_time: int
    exhausted: bool
    culprits: tuple[Culprit, ...]
    seconds: float

    @property
    def cause(self) -> str:
        """What groups failures of one bug: the verdict, its reason class and what the culprits are."""
        short = {"lost": "lost", "torn": "torn", "not": "late", "durable,": "present"}
        objs = sorted(
            {
                f"{short.get(c.how.split(' ')[0], c.how)} {c.what}"
                + (f" of {c.path}" if c.path else "")
                for c in self.culprits
            }
        )
        return f"{self.verdict}: {self.reason_class} <- " + (
            "; ".join(objs) or "no write (the cut alone)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "verdict": self.verdict,
            "minimized": self.minimized,
            "minimized_reasons": list(self.minimized_reasons),
            "reason_class": self.reason_class,
            "calls": self.calls,
            "one_at_a_time": self.one_at_a_time,
            "exhausted": self.exhausted,
            "culprits": [c.to_json() for c in self.culprits],
            "cause": self.cause,
            "seconds": self.seconds,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Diagnosis":
        cs = tuple(
            Culprit(**{k: v for k, v in c.items() if k != "text"}) for c in d.get("culprits", ())
        )
        return Diagnosis(
            str(d["state"]),
            str(d["verdict"]),
            str(d["minimized"]),
            tuple(d.get("minimized_reasons", ())),
            str(d.get("reason_class", "")),
            int(d.get("calls", 0)),
            int(d.get("one_at_a_time", 0)),
            bool(d.get("exhausted", False)),
            cs,
            float(d.get("seconds", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class Workspace:
    """What it takes to rebuild and judge states: the log, the data device, where to work."""

    index: Any
    size: int
    initial: Path | None
    workdir: Path
    provider: str = "auto"
    floor: int | None = None
    space: CrashSpace | None = (
        None  # the log's CrashSpace, when the caller has one (else built per call)
    )

    def crash_space(self) -> CrashSpace:
        return self.space if self.space is not None else CrashSpace(self.index)


def diagnose(
    ctx: CheckContext,
    ws: Workspace,
    state: CrashState,
    first: Verdict,
    *,
    budget: int = DEFAULT_BUDGET,
) -> Diagnosis:
    """Minimize ``state`` (judged ``first``) and blame what is left."""
    t0 = time.monotonic()
    sp = ws.crash_space()
    mnt = str(ws.workdir / "mnt")

    def judge_one(candidate: CrashState) -> Verdict:
        return _with_image(ws, candidate, lambda dev: judge(ctx, dev, candidate, mnt))

    floor = ws.floor if ws.floor is not None and ws.floor < state.cut else None
    shrunk = minimize(sp, state, judge_one, budget=budget, expected=first, floor=floor)
    culprits = tuple(blame_state(ctx, ws, sp, shrunk.minimized, mnt))
    return Diagnosis(
        state.id,
        first.verdict,
        shrunk.minimized.id,
        shrunk.reasons,
        shrunk.signature[1],
        shrunk.calls,
        shrunk.one_at_a_time,
        shrunk.exhausted,
        culprits,
        round(time.monotonic() - t0, 2),
    )


def blame_state(
    ctx: CheckContext,
    ws: Workspace,
    sp: CrashSpace,
    state: CrashState,
    mnt: str,
    *,
    settle: bool = False,
) -> list[Culprit]:
    """Blame on the image of the state's cut with every write kept (for a prefix state: up to the
    flush its cut came too early for), recovered by a mount; with ``settle`` up to the commit that
    follows the culprits (``settled``: delayed allocation writes a file's data before the journal
    commit that maps it, so on the image without it the data blocks read as free)."""
    items = writes_that_matter(sp, state)
    cut = max(
        [state.cut] + [i + 1 for i, _ in items]
    )  # for a prefix state: up to the flush it came before
    cut = settled(sp, cut) if settle else cut
    kept = sp.make_state("no-cache", min(cut, sp.n))

    def run(dev: str) -> list[Culprit]:
        try:
            mount(dev, mnt, ctx.fs.name, ctx.state_mount_opts)
            umount(mnt)
        except Exception as e:  # an unrecoverable image is still worth a try with the tools
            log.info("blame: recovery mount of %s failed: %s", kept.id, e)
        return blame(sp, state, ctx.fs.name, dev)

    return _with_image(ws, kept, run)


def _with_image(ws: Workspace, state: CrashState, use: Any) -> Any:
    (ws.workdir / "diag").mkdir(parents=True, exist_ok=True)
    walk = materialize(ws.index, ws.initial, ws.size, [state], ws.workdir / "diag", ws.provider)
    with contextlib.closing(walk):
        for _, img in walk:
            if stat.S_ISBLK(os.stat(img).st_mode):
                return use(str(img))
            with LoopDevice(img) as dev:
                return use(dev)
    raise RuntimeError(f"no image for {state.id}")


# -- core/clustershrink.py ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ClusterShrunk:
    original: NodesState
    minimized: NodesState
    signature: tuple[str, str]
    reasons: tuple[str, ...]
    nodes: tuple[NodeShrunk, ...]
    calls: int
    exhausted: bool
    rounds: int


def minimize_cluster(
    cs: Nodes,
    state: NodesState,
    judge: Callable[[NodesState], Judged],
    *,
    budget: int,
    expected: Judged,
    floors: Sequence[int | None] = (),
    classify: Callable[[str], str] = reason_class,
) -> ClusterShrunk:
    """Minimize each node's state of the failing ``state`` in turn, the others fixed, while the
    cluster state fails like ``expected`` (its known judgement); at most ``budget`` calls of
    ``judge`` over all nodes and rounds.  ``floors``: per node, the floor mark's entry (or None)."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise UsageError(f"the shrink budget must be a non-negative integer, got {budget!r}")
    target = signature(expected, classify)
    if target[0] == "pass":
        raise UsageError(f"cluster state {state.id} passes: nothing to minimize")
    floors = list(floors) or [None] * len(cs)
    current = list(state.nodes)
    last: Judged = Outcome(expected.verdict, tuple(expected.reasons))
    calls = [0] * len(cs)
    exhausted = [False] * len(cs)
    used, rounds, cut_short = 0, 0, False
    while rounds < MAX_ROUNDS:
        rounds += 1
        changed = False
        for n in range(len(cs)):
            if used >= budget:
                cut_short = True
                break
            window = cs.window(n, state.instant)
            sp = InstantSpace(cs.nodes[n], window, state.model)
            seen: dict[str, Judged] = {}

            def judge_node(cand: CrashState, n: int = n, seen: dict[str, Judged] = seen) -> Judged:
                nodes = [*current[:n], cand, *current[n + 1 :]]
                got = judge(cs.make(state.model, nodes))
                seen[cand.id] = got
                return got

            shrunk = minimize(
                sp,
                current[n],
                judge_node,
                budget=budget - used,
                expected=last,
                classify=classify,
                floor=node_floor(cs.nodes[n], window, current[n], floors[n]),
            )
            used += shrunk.calls
            calls[n] += shrunk.calls
            exhausted[n] = exhausted[n] or shrunk.exhausted
            if shrunk.minimized.id != current[n].id:
                current[n] = shrunk.minimized
                last = Outcome(shrunk.signature[0], shrunk.reasons)
                changed = True
        if not changed or cut_short:
            break
    minimized = cs.make(state.model, current)
    per_node = tuple(
        NodeShrunk(n, state.nodes[n], current[n], calls[n], exhausted[n]) for n in range(len(cs))
    )
    return ClusterShrunk(
        state,
        minimized,
        target,
        tuple(last.reasons),
        per_node,
        used,
        any(exhausted) or cut_short,
        rounds,
    )


# -- debug/clusterdebug.py ------------------------------------------------------------------------------

Sink = Callable[[Verdict], None]
JudgeStates = Callable[[Sequence[NodesState], Sink, Path], None]  # judge these states into the sink
BlameNode = Callable[[int, CrashState, Path], list[Culprit]]  # node, its state, a work directory


def judge_one(judge: JudgeStates, state: NodesState, work: Path) -> Verdict:
    """One cluster state's verdict through ``judge``, in a fresh ``work`` directory."""
    got: list[Verdict] = []
    try:
        judge([state], got.append, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not got:
        raise UsageError(f"cluster state {state.id} was not judged (interrupted?)")
    return got[0]


def host_blame(
    ctx: CheckContext, cs: Nodes, logs: Sequence[LogIndex], size: int, floors: Sequence[int | None]
) -> BlameNode:
    """Blame one node's state on the host: the image of its cut with every write kept, up to the
    commit after the culprit writes (so a file's late data maps to the file), recovered by a mount,
    mapped by the filesystem's tools (debug/diagnose.blame_state)."""

    def blame(n: int, state: CrashState, work: Path) -> list[Culprit]:
        work.mkdir(parents=True, exist_ok=True)
        cleanup_stale(work)
        (work / "mnt").mkdir(exist_ok=True)
        try:
            ws = Workspace(logs[n], size, None, work, "auto", floors[n], cs.nodes[n])
            return blame_state(ctx, ws, cs.nodes[n], state, str(work / "mnt"), settle=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return blame


@dataclass(frozen=True, slots=True)
class ClusterDiagnosis:
    """A failing cluster state, its minimized form (per node), each node's blamed writes, the cause."""

    state: str
    verdict: str
    minimized: str
    minimized_reasons: tuple[str, ...]
    reason_class: str
    calls: int
    exhausted: bool
    nodes: tuple[
        dict[str, Any], ...
    ]  # per node: original, minimized, calls, cut, lost, torn, culprits
    cause: str
    seconds: float
    blame_note: str = ""

    def culprits(self, node: int) -> list[dict[str, Any]]:
        return list(self.nodes[node].get("culprits", ()))

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "verdict": self.verdict,
            "minimized": self.minimized,
            "minimized_reasons": list(self.minimized_reasons),
            "reason_class": self.reason_class,
            "calls": self.calls,
            "exhausted": self.exhausted,
            "nodes": [dict(n) for n in self.nodes],
            "cause": self.cause,
            "seconds": self.seconds,
            **({"blame_note": self.blame_note} if self.blame_note else {}),
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> ClusterDiagnosis:
        return ClusterDiagnosis(
            str(d["state"]),
            str(d["verdict"]),
            str(d["minimized"]),
            tuple(d.get("minimized_reasons", ())),
            str(d.get("reason_class", "")),
            int(d.get("calls", 0)),
            bool(d.get("exhausted", False)),
            tuple(dict(n) for n in d.get("nodes", ())),
            str(d.get("cause", "")),
            float(d.get("seconds", 0.0)),
            str(d.get("blame_note", "")),
        )


def diagnose_cluster_state(
    cs: Nodes,
    state: NodesState,
    first: Verdict,
    judge: JudgeStates,
    blame: BlameNode | None,
    work: Path,
    *,
    budget: int,
    floors: Sequence[int | None],
) -> ClusterDiagnosis:
    """Minimize ``state`` (judged ``first``) node by node through ``judge`` (``budget`` judge calls
    shared by the nodes), then blame each node's minimized state with ``blame``."""
    t0 = time.monotonic()
    k = 0

    def judge_cluster(cand: NodesState) -> Verdict:
        nonlocal k
        k += 1
        return judge_one(judge, cand, work / f"shrink-{k}")

    shrunk = minimize_cluster(
        cs, state, judge_cluster, budget=budget, expected=first, floors=floors
    )
    per_node: list[dict[str, Any]] = [n.to_json() for n in shrunk.nodes]
    note = (
        ""
        if blame is not None
        else "blame per node runs in host mode only for now (check --check-in host)"
    )
    for n, ns in enumerate(shrunk.minimized.nodes):
        culprits: list[Culprit] = []
        if blame is not None:
            try:
                culprits = blame(n, ns, work / f"blame-n{n}")
            except PowercutError as e:  # an explanation: the verdicts stand without it
                log.warning("blame of node %d failed: %s", n, e.one_line())
                note = f"blame failed on node {n}: {e.one_line()}"
        per_node[n]["culprits"] = [c.to_json() for c in culprits]
    cause = (
        cause_line(first.verdict, shrunk.signature[1], [p["culprits"] for p in per_node])
        if blame is not None
        else f"{first.verdict}: {shrunk.signature[1]} (no blame per node: {note})"
    )
    return ClusterDiagnosis(
        state.id,
        first.verdict,
        shrunk.minimized.id,
        shrunk.reasons,
        shrunk.signature[1],
        shrunk.calls,
        shrunk.exhausted,
        tuple(per_node),
        cause,
        round(time.monotonic() - t0, 2),
        note,
    )

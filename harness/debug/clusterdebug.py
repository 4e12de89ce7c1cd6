"""From a failing cluster state to its cause (host): minimize it node by node (core/disksshrink.py
chooses the candidates, a *judge callback* judges them), then blame each node's minimized state
(debug/blame.py on the node's recovered image of its cut), and name the cause per node.

Every judgement goes through a ``JudgeStates`` callback -- ``(states, sink, workspace)`` -- so where
cluster states are judged is the caller's choice (campaign/phases.py: check/place.Place.judge, the
host or one warm checker VM).  Blame mounts node
images and runs the filesystem's tools: ``host_blame`` does it on the host; without a blame
callback a diagnosis has no culprits (and says so)."""
from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext
from powercut.check.host import cleanup_stale
from powercut.core.crashstate import CrashState
from powercut.core.disks import Disks, DisksState
from powercut.core.disksshrink import cause_line, minimize_disks
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.debug.blame import Culprit
from powercut.debug.diagnose import Workspace, blame_state
from powercut.errors import PowercutError, UsageError

log = logging.getLogger(__name__)

Sink = Callable[[Verdict], None]
JudgeStates = Callable[[Sequence[DisksState], Sink, Path], None]   # judge these states into the sink
BlameNode = Callable[[int, CrashState, Path], list[Culprit]]         # node, its state, a work directory


def judge_one(judge: JudgeStates, state: DisksState, work: Path) -> Verdict:
    """One cluster state's verdict through ``judge``, in a fresh ``work`` directory."""
    got: list[Verdict] = []
    try:
        judge([state], got.append, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not got:
        raise UsageError(f"cluster state {state.id} was not judged (interrupted?)")
    return got[0]


def host_blame(ctx: CheckContext, cs: Disks, logs: Sequence[LogIndex], size: int,
               floors: Sequence[int | None]) -> BlameNode:
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
    nodes: tuple[dict[str, Any], ...]   # per node: original, minimized, calls, cut, lost, torn, culprits
    cause: str
    seconds: float
    blame_note: str = ""

    def culprits(self, node: int) -> list[dict[str, Any]]:
        return list(self.nodes[node].get("culprits", ()))

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "verdict": self.verdict, "minimized": self.minimized,
                "minimized_reasons": list(self.minimized_reasons), "reason_class": self.reason_class,
                "calls": self.calls, "exhausted": self.exhausted, "nodes": [dict(n) for n in self.nodes],
                "cause": self.cause, "seconds": self.seconds, **({"blame_note": self.blame_note} if self.blame_note
                                                                  else {})}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ClusterDiagnosis:
        return ClusterDiagnosis(str(d["state"]), str(d["verdict"]), str(d["minimized"]),
                                tuple(d.get("minimized_reasons", ())), str(d.get("reason_class", "")),
                                int(d.get("calls", 0)), bool(d.get("exhausted", False)),
                                tuple(dict(n) for n in d.get("nodes", ())), str(d.get("cause", "")),
                                float(d.get("seconds", 0.0)), str(d.get("blame_note", "")))


def diagnose_cluster_state(cs: Disks, state: DisksState, first: Verdict, judge: JudgeStates,
                           blame: BlameNode | None, work: Path, *, budget: int,
                           floors: Sequence[int | None]) -> ClusterDiagnosis:
    """Minimize ``state`` (judged ``first``) node by node through ``judge`` (``budget`` judge calls
    shared by the nodes), then blame each node's minimized state with ``blame``."""
    t0 = time.monotonic()
    k = 0

    def judge_cluster(cand: DisksState) -> Verdict:
        nonlocal k
        k += 1
        return judge_one(judge, cand, work / f"shrink-{k}")

    shrunk = minimize_disks(cs, state, judge_cluster, budget=budget, expected=first, floors=floors)
    per_node: list[dict[str, Any]] = [n.to_json() for n in shrunk.nodes]
    note = "" if blame is not None else "blame per node runs in host mode only for now (check --check-in host)"
    for n, ns in enumerate(shrunk.minimized.nodes):
        culprits: list[Culprit] = []
        if blame is not None:
            try:
                culprits = blame(n, ns, work / f"blame-n{n}")
            except PowercutError as e:   # an explanation: the verdicts stand without it
                log.warning("blame of node %d failed: %s", n, e.one_line())
                note = f"blame failed on node {n}: {e.one_line()}"
        per_node[n]["culprits"] = [c.to_json() for c in culprits]
    cause = (cause_line(first.verdict, shrunk.signature[1], [p["culprits"] for p in per_node]) if blame is not None
             else f"{first.verdict}: {shrunk.signature[1]} (no blame per node: {note})")
    return ClusterDiagnosis(state.id, first.verdict, shrunk.minimized.id, shrunk.reasons, shrunk.signature[1],
                            shrunk.calls, shrunk.exhausted, tuple(per_node), cause,
                            round(time.monotonic() - t0, 2), note)

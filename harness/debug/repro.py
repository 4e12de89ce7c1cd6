"""``powercut repro`` (host): rebuild one failing state of N >= 1 disks -- from a repro bundle
(debug/bundle.py), or from a recording and a state id (one disk's, or a cluster's
``MODEL~ID0+ID1+...``) -- and judge it again where checks run (a checker VM by default: a
possibly corrupt image never meets the host kernel, or ``--check-in host``), optionally keeping
each disk's image (``--keep-image``) or opening a shell in a checker VM on the recovered, mounted
state (``--shell``).

The state is a core/states/nodes.NodesState of the target's disks whatever N, judged by
check/place.Place.judge (host or checker VM, as every check's) -- or through the ``judge``
callback a caller gives (``JudgeStates``)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext, LogSource, context_for, with_node_faults
from powercut.check.place import Place
from powercut.check.vm import shell_vm
from powercut.core.cause import causes
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import Nodes, NodesState
from powercut.debug import bundle
from powercut.errors import BadLog, BadRecording, UsageError
from powercut.linux import filesystems
from powercut.record import recording
from powercut.replay.materialize import replay_state

CHECKER_SAID = (
    "lost-ack",
    "corrupt-data",
    "fail",
    "checker-crashed",
)  # verdicts only a checker gives
JudgeStates = Callable[
    [Sequence[NodesState], Callable[[Verdict], None], Path], None
]  # judge these into the sink


@dataclass(frozen=True, slots=True)
class Target:
    """What a repro rebuilds (each disk's log source and the state), how it is judged, and what was seen before."""

    disks: tuple[LogSource, ...]  # node 0 first; one disk: its log, size and initial image
    ctx: CheckContext
    state: str
    before: str = ""  # the verdict the bundle recorded ("" for a recording)
    source: str = ""
    why: dict[str, Any] | None = None  # the bundle's cause in the program's terms (debug/cause.py)
    cause: str = ""  # a cluster bundle's cause line, naming the nodes

    @property
    def src(self) -> LogSource:
        """Node 0's log source (one disk's only one)."""
        return self.disks[0]

    def source_of_all(self) -> LogSource:
        """One source of every disk's log (check/context.LogSource: one directory, node 0 first)."""
        if len({log.parent for log in self.logs}) != 1:
            raise UsageError(f"{self.source}: the node logs are not in one directory")
        return LogSource(self.src.path, self.src.size, self.src.initial, nodes=self.logs)

    @property
    def logs(self) -> tuple[Path, ...]:
        return tuple(d.path for d in self.disks)

    @property
    def nodes(self) -> int:
        return len(self.disks)


def resolve(path: str, state: str = "") -> Target:
    p = Path(path)
    if (p / bundle.MANIFEST).exists():
        b = bundle.load(p)
        fs = filesystems.get(str(b.doc["fstype"]))
        ctx = CheckContext(
            fs, b.checker, dict(b.doc.get("params") or {}), str(b.doc.get("mount_opts", ""))
        )
        before = str(b.doc.get("verdict", ""))
        if before in CHECKER_SAID and not (
            b.checker.name or b.checker.command or b.checker.function
        ):
            raise UsageError(
                f"bundle {p} names no checker, but its verdict {before} came from one: judged without "
                "it the state would seem to pass; write the bundle again with powercut check"
            )
        b.checker.validate()  # a command this machine cannot run is refused here, not judged as "no longer fails"
        size = int(b.doc["data_size"])
        return Target(
            tuple(
                LogSource(log, size, b.initial if i == 0 else None) for i, log in enumerate(b.logs)
            ),
            ctx,
            state or b.state,
            before,
            f"bundle {p}",
            b.doc.get("why") or None,
            b.cause,
        )
    if (p / recording.MANIFEST).exists():
        return _from_recording(p, state)
    raise UsageError(
        f"{path}: neither a repro bundle ({bundle.MANIFEST}) nor a recording ({recording.MANIFEST})"
    )


def _from_recording(p: Path, state: str) -> Target:
    try:
        rec: recording.Recording | None = recording.load(p)
    except BadRecording:
        rec = None  # said below, once the state is there
    nodes = len(rec.nodes) if rec is not None else 1
    if not state:
        raise UsageError(
            f"{p} is a recording: give the state to rebuild with --state ID"
            if nodes == 1
            else f"{p} is a cluster recording: give the cluster state to rebuild with --state "
            "MODEL~ID0+ID1+... (one state id per node)"
        )
    rec = (rec or recording.load(p)).require_ok()
    recording.verify_logs(rec)
    disks = tuple(
        LogSource(log, rec.data_size, rec.initial_image if i == 0 else None)
        for i, log in enumerate(rec.node_logs)
    )
    return Target(disks, context_for(rec), state, "", f"recording {p}")


def image_paths(keep_image: str, nodes: int) -> list[str]:
    """Where ``--keep-image PATH`` writes each disk's image: PATH for one disk, PATH.n<i> for node i of several."""
    return [keep_image] if nodes == 1 else [f"{keep_image}.n{i}" for i in range(nodes)]


def judge_for(target: Target, place: Place, indexes: Sequence[LogIndex]) -> JudgeStates:
    """The target's states judged where ``place`` says (check/place.Place.judge), with each disk's
    fault windows (check/context.with_node_faults: at N = 1 one disk's, named as it always was)."""
    src = target.source_of_all()
    ctx = with_node_faults(target.ctx, indexes)

    def judge(states: Sequence[NodesState], sink: Callable[[Verdict], None], work: Path) -> None:
        place.judge(ctx, src, indexes, placed(states), sink, work)

    return judge


def placed(states: Sequence[NodesState]) -> Sequence[CrashState] | Sequence[NodesState]:
    """The states as check/place.Place.judge takes them: one disk's as its own CrashStates (its
    walk and its verdicts' cut are the disk's), N disks' as they are."""
    if all(len(s.nodes) == 1 for s in states):
        return [s.nodes[0] for s in states]
    return states


@contextlib.contextmanager
def _opened(target: Target) -> Any:
    """The target's logs opened and its state rebuilt: (indexes, state)."""
    with contextlib.ExitStack() as stack:
        try:
            indexes = [
                stack.enter_context(open_log(log, quiet=target.nodes > 1)) for log in target.logs
            ]
        except BadLog as e:
            raise UsageError(f"{target.source}: {e.one_line()}") from None
        yield indexes, Nodes(indexes).state_from_id(target.state)


def run(
    target: Target, place: Place, *, keep_image: str = "", judge: JudgeStates | None = None
) -> Verdict:
    """Judge the target's state once where ``place`` says (or through ``judge``); ``keep_image``:
    also write each disk's (unrecovered) image there (image_paths)."""
    got: list[Verdict] = []
    if judge is None:
        place.require()
    work = Path(tempfile.mkdtemp(prefix="powercut-repro-"))
    try:
        with _opened(target) as (indexes, st):
            if keep_image:
                for d, s, out in zip(target.disks, st.nodes, image_paths(keep_image, target.nodes)):
                    replay_state(d.path, s.id, out, size=d.size, initial=d.initial)
            (judge or judge_for(target, place, indexes))([st], got.append, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not got:
        raise UsageError(f"state {target.state} was not judged")
    return got[0]


def shell(target: Target, place: Place) -> Verdict | None:
    """Judge the state in a checker VM, then a shell in it on the recovered, mounted state (every
    node's, for a cluster)."""
    src = target.source_of_all()
    work = Path(tempfile.mkdtemp(prefix="powercut-shell-"))
    try:
        with _opened(target) as (_, st):
            return shell_vm(target.ctx, src, st, work, place.vm())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def describe(target: Target, v: Verdict) -> list[str]:
    lines = []
    if (
        target.why and v.failed
    ):  # the cause in the program's terms leads, as in the check that found it
        c = causes.Cause.from_json(target.why)
        lines += [c.head(), *(f"  | {e}" for e in c.evidence[-4:])]
    if target.cause and v.failed and target.nodes > 1:  # the line naming the nodes (one disk's
        # cause is its ``why``, above)
        lines.append(f"cause: {target.cause}")
    nodes = f", {target.nodes} nodes" if target.nodes > 1 else ""
    lines.append(f"{target.state} ({target.source}{nodes}): {v.verdict}")
    lines += [f"  {r}" for r in v.reasons[:8]]
    if target.before:
        same = (
            "the same verdict as in the bundle"
            if v.verdict == target.before
            else f"the bundle recorded {target.before}"
        )
        lines.append(f"  {'still fails' if v.failed else 'no longer fails'}: {same}")
    return lines


def exit_status(v: Verdict) -> int:
    return 3 if v.failed else 0


def info(target: Target) -> dict[str, Any]:
    return {
        "log": str(target.src.path),
        "size": target.src.size,
        "state": target.state,
        "fstype": target.ctx.fs.name,
        **({"logs": [str(log) for log in target.logs]} if target.nodes > 1 else {}),
    }

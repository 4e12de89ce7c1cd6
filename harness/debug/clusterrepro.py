"""``powercut repro`` of a cluster (host): rebuild one cluster state -- from a cluster repro bundle
(debug/clusterbundle.py), or from a cluster recording and a ``MODEL~ID0+ID1+...`` id -- and judge it
again through a judge callback (debug/clusterdebug.JudgeStates): in one checker VM (the default,
check/clustervm.py) or on the host (``--check-in host``).  ``--shell`` and ``--keep-image`` are for
one-disk states only, refused in one line."""
from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext, LogSource, context_for
from powercut.check.place import Place
from powercut.core.disks import Disks, DisksState
from powercut.core.dmlog import open_log
from powercut.core.verdict import Verdict
from powercut.debug import bundle, clusterbundle
from powercut.debug.clusterdebug import JudgeStates, judge_one
from powercut.errors import BadLog, BadRecording, UsageError
from powercut.linux import filesystems
from powercut.record import recording


@dataclass(frozen=True, slots=True)
class ClusterTarget:
    """What a cluster repro rebuilds (every node's log, the state) and how it is judged."""

    logs: tuple[Path, ...]
    size: int
    ctx: CheckContext
    state: str
    before: str = ""          # the verdict the bundle recorded ("" for a recording)
    source: str = ""
    cause: str = ""           # the bundle's cause line, naming the nodes


def resolve(path: str, state: str = "") -> ClusterTarget | None:
    """A cluster bundle's or a cluster recording's target; None when ``path`` is neither (a
    one-disk bundle or recording: debug/repro.py)."""
    p = Path(path)
    man = p / bundle.MANIFEST
    if man.is_file():
        try:
            doc = json.loads(man.read_text())
        except (OSError, ValueError):
            return None   # debug/repro.py says what is wrong with it
        if not clusterbundle.is_cluster(doc):
            return None
        b = clusterbundle.load(p)
        ctx = CheckContext(filesystems.get(str(b.doc["fstype"])), b.checker, dict(b.doc.get("params") or {}),
                           str(b.doc.get("mount_opts", "")))
        b.checker.validate()
        return ClusterTarget(b.logs, int(b.doc["data_size"]), ctx, state or b.state, str(b.doc.get("verdict", "")),
                             f"bundle {p}", str(b.doc.get("cause", "")))
    if (p / recording.MANIFEST).is_file():
        try:
            rec = recording.load(p)
        except BadRecording:
            return None
        if rec.nodes < 2:
            return None
        if not state:
            raise UsageError(f"{path} is a cluster recording: give the cluster state to rebuild with --state "
                             "MODEL~ID0+ID1+... (one state id per node)")
        rec.require_ok()
        recording.verify_node_logs(rec)
        return ClusterTarget(rec.node_logs, rec.data_size, context_for(rec), state, "", f"recording {p}")
    return None


def run(target: ClusterTarget, check_in: str, judge: JudgeStates | None = None, accel: str = "auto") -> Verdict:
    """Judge the target's cluster state once: through ``judge``, else where ``check_in`` says (a
    checker VM, or the host: check/place.Place.judge)."""
    if len({p.parent for p in target.logs}) != 1:
        raise UsageError(f"{target.source}: the node logs are not in one directory")
    place = Place("host" if check_in == "host" else "vm", accel)
    src = LogSource(target.logs[0], target.size, nodes=target.logs)
    with contextlib.ExitStack() as stack:
        try:
            logs = [stack.enter_context(open_log(p, quiet=True)) for p in target.logs]
        except BadLog as e:
            raise UsageError(f"{target.source}: {e.one_line()}") from None
        cs = Disks(logs)
        st = cs.state_from_id(target.state)
        work = Path(tempfile.mkdtemp(prefix="powercut-repro-"))

        def where(states: Sequence[DisksState], sink: Callable[[Verdict], None], w: Path) -> None:
            place.judge(target.ctx, src, logs, states, sink, w)
        return judge_one(judge or where, st, work)


def describe(target: ClusterTarget, v: Verdict) -> list[str]:
    lines = [f"cause: {target.cause}"] if target.cause and v.failed else []
    lines.append(f"{target.state} ({target.source}, {len(target.logs)} nodes): {v.verdict}")
    lines += [f"  {r}" for r in v.reasons[:8]]
    if target.before:
        same = "the same verdict as in the bundle" if v.verdict == target.before else \
            f"the bundle recorded {target.before}"
        lines.append(f"  {'still fails' if v.failed else 'no longer fails'}: {same}")
    return lines


def info(target: ClusterTarget) -> dict[str, Any]:
    return {"logs": [str(p) for p in target.logs], "size": target.size, "state": target.state,
            "fstype": target.ctx.fs.name}

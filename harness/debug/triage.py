"""Triage after a campaign of N >= 1 disks (host): group the failing states by how they fail --
verdict and the class of the first reason (shrink.reason_class: particulars stripped) -- so 1,000
failing states of one bug read as one group; minimize and blame the first state of the first ``k``
groups where the check runs (``diagnose_at``: debug.diagnose on the host, or in a checker VM, by
the campaign's check.place.Place); save each as a repro bundle (``write_bundles``), with what a
group of several disks says beyond one disk's (``group_extras``: the nodes it names, the
minimization and blame per node).  Writes ``diagnoses.json`` and ``bundles/`` into the campaign's
output directory."""

from __future__ import annotations

import json
import logging
import re
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from powercut.check.context import CheckContext, LogSource
from powercut.check.host import cleanup_stale
from powercut.check.place import Place
from powercut.check.vm import diagnose_vm
from powercut.core.judging.confirm import group_key, order
from powercut.core.judging.nodesshrink import bundle_cuts as instant_cuts
from powercut.core.judging.nodesshrink import nodes_named, nodes_note
from powercut.core.judging.verdict import SEVERITY, Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.nodes import Nodes
from powercut.core.states.stateid import parse_id
from powercut.debug import bundle
from powercut.debug.blame import lines as blame_lines
from powercut.debug.diagnose import Workspace, diagnose, without_tear
from powercut.debug.diagnosis import Diagnosis, culprits_of
from powercut.errors import PowercutError

if TYPE_CHECKING:
    from powercut.record.recording import Recording

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Group:
    """Failing states that fail the same way."""

    verdict: str
    reason_class: str
    states: list[Verdict] = field(default_factory=list)
    diagnosis: dict[str, Any] | None = None
    bundle: str = ""
    escalated: bool = False  # its confirmation sample disagreed: confirmed state by state
    diagnosis_error: str = (
        ""  # why its diagnosis could not be made (the diagnosing VM panicked, ...)
    )
    why: dict[str, Any] | None = (
        None  # its cause in the program's terms (debug/cause.py), with a trace
    )
    extra: dict[str, Any] = field(
        default_factory=dict
    )  # N > 1 disks: the nodes it names, per-node blame (group_extras)

    @property
    def first(self) -> Verdict:
        return min(self.states, key=order)

    def to_json(self) -> dict[str, Any]:
        d = self.diagnosis or {}
        return {
            "verdict": self.verdict,
            "reason_class": self.reason_class,
            "count": len(self.states),
            "first": self.first.state,
            "states": [v.state for v in self.states[:20]],
            "cause": d.get("cause", ""),
            "minimized": d.get("minimized", ""),
            "culprits": blame_lines(culprits_of(d)),
            "shrink_calls": d.get("calls"),
            "one_at_a_time": d.get("one_at_a_time"),
            "bundle": self.bundle,
            "confirmed_alone": sum(v.confirmed for v in self.states),
            "confirmed_by_group": sum(v.by_group for v in self.states),
            "unconfirmed": sum(not v.confirmed and not v.by_group for v in self.states),
            "escalated": self.escalated,
            **({"diagnosis_error": self.diagnosis_error} if self.diagnosis_error else {}),
            **({"why": self.why} if self.why else {}),
            **(
                {
                    "minimized_confirmed": d["minimized_confirmed"],
                    "minimized_alone": d.get("minimized_alone", ""),
                }
                if "minimized_confirmed" in d
                else {}
            ),
            **self.extra,
        }


def group(failures: list[Verdict]) -> list[Group]:
    """Groups by (verdict, reason class), worst verdict first, then the larger group."""
    groups: dict[tuple[str, str], Group] = {}
    for v in failures:
        key = group_key(v)
        groups.setdefault(key, Group(*key)).states.append(v)
    return sorted(
        groups.values(), key=lambda g: (-SEVERITY.index(g.verdict), -len(g.states), g.reason_class)
    )


def diagnose_at(
    place: Place,
    ctx: CheckContext,
    src: LogSource,
    indexes: Sequence[LogIndex],
    disks: Nodes,
    firsts: list[Verdict],
    work: Path,
    *,
    floors: Sequence[int | None],
    budget: int,
    tear_only: bool = False,
) -> list[dict[str, Any]]:
    """Diagnose failing states of N >= 1 disks (``indexes``: their opened logs, node 0 first;
    ``floors``: each disk's floor entry) where ``place`` judges: each a debug/diagnosis.Diagnosis
    as JSON, or with ``tear_only`` (one disk's torn states) ``{"state", "without_tear"}``
    (debug.diagnose.without_tear)."""
    try:
        if not place.on_host:
            return diagnose_vm(
                ctx,
                src,
                firsts,
                work,
                place.vm(),
                floors=floors,
                budget=budget,
                tear_only=tear_only,
                warm=place.warm,
            )
        work.mkdir(parents=True, exist_ok=True)
        cleanup_stale(work)
        ws = Workspace(disks, tuple(indexes), src.size, work, src.initial, "auto", tuple(floors))
        if tear_only:
            return [
                {
                    "state": v.state,
                    "without_tear": without_tear(ctx, ws, disks.state_from_id(v.state).nodes[0], v),
                }
                for v in firsts
            ]
        return [
            diagnose(ctx, ws, disks.state_from_id(v.state), v, budget=budget).to_json()
            for v in firsts
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "state"


def save(outdir: Path, groups: list[Group]) -> Path:
    path = outdir / "diagnoses.json"
    path.write_text(json.dumps({"groups": [g.to_json() for g in groups]}, indent=1) + "\n")
    return path


def write_bundles(
    outdir: Path, groups: list[Group], rec: Recording, ctx: CheckContext, disks: Nodes
) -> None:
    """A bundle per group of N >= 1 disks' states: its first state with its diagnosis when it has
    one (debug/bundle.py, every disk's log cut by ``bundle_cuts``), and the group's words beyond
    one disk's (``group_extras``)."""
    for k, g in enumerate(groups, 1):
        d = Diagnosis.from_json(g.diagnosis) if g.diagnosis and "minimized" in g.diagnosis else None
        first = g.first
        dest = outdir / "bundles" / f"{k:02d}-{slug(first.state)}"
        try:
            bundle.write(
                dest,
                recording=str(rec.dir),
                logs=rec.node_logs,
                cuts=bundle_cuts(disks, first, d),
                data_size=rec.data_size,
                fstype=rec.fstype,
                mount_opts=rec.mount_opts,
                checker=ctx.checker,
                params=ctx.params,
                workload=dict(rec.workload),
                verdict=first,
                diagnosis=d,
                trace=rec.trace_path,
                why=g.why,
                initial=rec.initial_image,
                start=rec.start,
            )
            g.bundle = str(dest)
        except (OSError, PowercutError) as e:
            log.warning("cannot write the repro bundle %s: %s", dest, e)
        g.extra = group_extras(g, d, len(disks))


def bundle_cuts(disks: Nodes, first: Verdict, d: Diagnosis | None) -> list[int]:
    """Per disk, how many of its log's entries a bundle keeps.  One disk's: up to the last entry
    its states need (the first state's cut, the minimized cut, the blamed writes).  Several disks'
    logs: up to the key mark that ends the state's instant (core/judging/nodesshrink.bundle_cuts), so that
    every cut log keeps the same key marks and the logs still make one cluster."""
    if len(disks) > 1:
        return instant_cuts(disks, first.cut)
    need = (
        [parse_id(d.minimized).cut] + [int(c["entry"]) + 1 for c in d.culprits(0)]
        if d is not None
        else []
    )
    return [max([first.cut] + need) + 1]


def group_extras(g: Group, d: Diagnosis | None, nodes: int) -> dict[str, Any]:
    """What a group of N > 1 disks' states says beyond one disk's (nothing for one disk): the nodes
    its states' reasons name, and with a diagnosis the per-node minimization and culprits (the
    group's ``culprits`` are per node here)."""
    if nodes == 1:
        return {}
    named: Counter[int] = Counter(n for v in g.states for n in nodes_named(v.reasons))
    out: dict[str, Any] = {
        "culprits": [],
        "nodes": nodes,
        "named_nodes": {str(n): c for n, c in sorted(named.items())},
        "nodes_note": nodes_note(dict(named), len(g.states)),
    }
    if d is not None:
        out["node_shrink"] = [
            {k: n[k] for k in ("node", "original", "minimized", "calls", "cut", "lost", "torn")}
            for n in d.nodes
        ]
        out["node_culprits"] = [
            blame_lines(sorted(d.culprits(n), key=_first_files)) for n in range(len(d.nodes))
        ]
        out["shrink_exhausted"] = d.exhausted
    return out


def _first_files(c: dict[str, Any]) -> tuple[bool, int]:
    """A node's culprits in the order a reader wants them: the program's files first, then by entry."""
    return not c.get("path") or str(c.get("what", "")) not in (
        "data block",
        "directory block",
    ), int(c.get("entry", 0))

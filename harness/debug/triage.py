"""Triage after a campaign (host): group the failing states by how they fail -- verdict and the class
of the first reason (shrink.reason_class: particulars stripped) -- so 1,000 failing states of one
bug read as one group; minimize and blame the first state of the first ``k`` groups where the
check runs (``diagnose_at``: debug.diagnose on the host, or in a checker VM, by the campaign's
check.place.Place); save each as a repro bundle.  Writes ``diagnoses.json`` and ``bundles/`` into
the campaign's output directory."""
from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from powercut.check.context import CheckContext, LogSource
from powercut.check.host import cleanup_stale
from powercut.check.place import Place
from powercut.check.vm import diagnose_vm
from powercut.core.confirm import group_key, order
from powercut.core.dmlog import LogIndex
from powercut.core.models import CrashSpace
from powercut.core.stateid import parse_id
from powercut.core.verdict import SEVERITY, Verdict
from powercut.debug import bundle
from powercut.debug.diagnose import Diagnosis, Workspace, diagnose, without_tear

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
    escalated: bool = False     # its confirmation sample disagreed: confirmed state by state
    diagnosis_error: str = ""   # why its diagnosis could not be made (the diagnosing VM panicked, ...)
    why: dict[str, Any] | None = None   # its cause in the program's terms (debug/cause.py), with a trace
    extra: dict[str, Any] = field(default_factory=dict)   # N > 1 disks: the nodes it names, per-node blame

    @property
    def first(self) -> Verdict:
        return min(self.states, key=order)

    def to_json(self) -> dict[str, Any]:
        d = self.diagnosis or {}
        return {"verdict": self.verdict, "reason_class": self.reason_class, "count": len(self.states),
                "first": self.first.state, "states": [v.state for v in self.states[:20]],
                "cause": d.get("cause", ""), "minimized": d.get("minimized", ""),
                "culprits": [c.get("text", "") for c in d.get("culprits", ())],
                "shrink_calls": d.get("calls"), "one_at_a_time": d.get("one_at_a_time"), "bundle": self.bundle,
                "confirmed_alone": sum(v.confirmed for v in self.states),
                "confirmed_by_group": sum(v.by_group for v in self.states),
                "unconfirmed": sum(not v.confirmed and not v.by_group for v in self.states),
                "escalated": self.escalated,
                **({"diagnosis_error": self.diagnosis_error} if self.diagnosis_error else {}),
                **({"why": self.why} if self.why else {}),
                **({"minimized_confirmed": d["minimized_confirmed"], "minimized_alone": d.get("minimized_alone", "")}
                   if "minimized_confirmed" in d else {}),
                **self.extra}


def group(failures: list[Verdict]) -> list[Group]:
    """Groups by (verdict, reason class), worst verdict first, then the larger group."""
    groups: dict[tuple[str, str], Group] = {}
    for v in failures:
        key = group_key(v)
        groups.setdefault(key, Group(*key)).states.append(v)
    return sorted(groups.values(), key=lambda g: (-SEVERITY.index(g.verdict), -len(g.states), g.reason_class))


def diagnose_at(place: Place, ctx: CheckContext, src: LogSource, index: LogIndex, sp: CrashSpace, firsts: list[Verdict],
                work: Path, *, floor: int | None, budget: int, tear_only: bool = False) -> list[dict[str, Any]]:
    """Diagnose failing states where ``place`` judges: each a Diagnosis as JSON, or with
    ``tear_only`` ``{"state", "without_tear"}`` (debug.diagnose.without_tear)."""
    try:
        if not place.on_host:
            return diagnose_vm(ctx, src, firsts, work, place.vm(), floor=floor, budget=budget, tear_only=tear_only,
                               warm=place.warm)
        work.mkdir(parents=True, exist_ok=True)
        cleanup_stale(work)
        ws = Workspace(index, src.size, src.initial, work, "auto", floor, sp)
        if tear_only:
            return [{"state": v.state, "without_tear": without_tear(ctx, ws, sp.state_from_id(v.state), v)}
                    for v in firsts]
        return [diagnose(ctx, ws, sp.state_from_id(v.state), v, budget=budget).to_json() for v in firsts]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "state"


def save(outdir: Path, groups: list[Group]) -> Path:
    path = outdir / "diagnoses.json"
    path.write_text(json.dumps({"groups": [g.to_json() for g in groups]}, indent=1) + "\n")
    return path


def write_bundles(outdir: Path, groups: list[Group], rec: Recording, ctx: CheckContext, log_path: Path) -> None:
    """A bundle per diagnosed group (and for a group not diagnosed, its first state as it is)."""

    for k, g in enumerate(groups, 1):
        d = Diagnosis.from_json(g.diagnosis) if g.diagnosis else None
        first = g.first
        cut = max([first.cut] + ([_need(d)] if d else []))
        dest = outdir / "bundles" / f"{k:02d}-{slug(first.state)}"
        try:
            bundle.write(dest, recording=str(rec.dir), log_path=log_path, data_size=rec.data_size,
                         fstype=rec.fstype, mount_opts=rec.mount_opts, checker=ctx.checker, params=ctx.params,
                         workload=dict(rec.workload), verdict=first, diagnosis=d, cut=cut + 1,
                         trace=rec.trace_path, why=g.why)
            g.bundle = str(dest)
        except OSError as e:
            log.warning("cannot write the repro bundle %s: %s", dest, e)


def _need(d: Any) -> int:
    """The last entry a diagnosis's states need (the minimized cut, the blamed writes)."""
    return max([parse_id(d.minimized).cut] + [c.entry + 1 for c in d.culprits])

"""A check campaign over one recording: choose the states, judge them (in a VM or on the host),
journal, summarize.  ``powercut check`` and ``powercut run`` call ``run_campaign``."""
from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .check import CheckerSpec, Journal, Verdict, check_host, select_states
from .errors import UsageError
from .log import open_log
from .record import load_recording
from .report import Summary, summarize, write_outputs

log = logging.getLogger(__name__)

DEFAULT_MODELS = ("flush", "write-cache")


@dataclass(frozen=True, slots=True)
class CampaignSpec:
    models: tuple[str, ...] = DEFAULT_MODELS
    check_in: str = "vm"
    jobs: int = 0                 # host mode: 0 = one walk per core
    checker_command: str = ""     # empty: the workload's registered checker (or fsck only for --cmd)
    seed: int = 0
    bound: int = 10
    samples: int = 64
    max_states: int = 0           # 0 = all
    resume: bool = False
    accel: str = "auto"
    state_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.check_in not in ("vm", "host"):
            raise UsageError(f"--check-in must be vm or host, not {self.check_in!r}")


def checker_for(manifest: dict[str, Any], command: str) -> tuple[CheckerSpec, dict[str, Any]]:
    from . import checker as checkers
    from . import workload as workloads

    wl = manifest["workload"]
    params: dict[str, Any] = {}
    if wl.get("name"):
        params = workloads.get(wl["name"]).params(wl.get("params") or {})
    if command:
        return CheckerSpec(command=command), params
    if wl.get("name"):
        checkers.get(wl["name"])  # a missing checker is a usage error now, not per state
        return CheckerSpec(name=wl["name"]), params
    return CheckerSpec(), params


def run_campaign(rec_dir: str | os.PathLike[str], spec: CampaignSpec, out: str | os.PathLike[str] | None = None,
                 on_start: Callable[[int, int], None] | None = None,
                 on_verdict: Callable[[Verdict], None] | None = None) -> tuple[Summary, dict[str, Path]]:
    rec = load_recording(rec_dir)
    if not rec.ok:
        raise UsageError(f"{rec.dir}: the recording did not finish ({rec.manifest['recording']['status']}); "
                         "record again")
    outdir = Path(out) if out else rec.dir / "check"
    if outdir.exists() and not spec.resume:
        if not (outdir / "journal.jsonl").exists() and any(outdir.iterdir()):
            raise UsageError(f"{outdir} exists and is not a check output")
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    checker, params = checker_for(rec.manifest, spec.checker_command)
    fstype = rec.manifest["fs"]["fstype"]
    mount_opts = rec.manifest["fs"].get("mount_opts", "")
    t0 = time.monotonic()
    with open_log(rec.log_path) as index:
        states = select_states(index, list(spec.models), seed=spec.seed, bound=spec.bound, samples=spec.samples)
        if spec.max_states and len(states) > spec.max_states:
            states = states[:spec.max_states]
        journal = Journal(outdir / "journal.jsonl", resume=spec.resume)
        try:
            if on_start:
                on_start(len(states), sum(1 for s in states if s.id in journal.done))
            if spec.check_in == "host":
                work = outdir / "work"
                check_host(index, rec.data_size, fstype, states, checker, params, journal, str(work),
                           jobs=spec.jobs or os.cpu_count() or 1, on_verdict=on_verdict, mount_opts=mount_opts)
                shutil.rmtree(work, ignore_errors=True)
            else:
                from .checkvm import check_vm
                check_vm(rec.dir, index, rec.data_size, fstype, states, checker, params, journal, outdir,
                         accel=spec.accel, state_timeout=spec.state_timeout_s, on_verdict=on_verdict,
                         mount_opts=mount_opts)
        finally:
            journal.close()
        wanted = {s.id for s in states}
        verdicts = [v for sid, v in journal.done.items() if sid in wanted]
    wl = rec.manifest["workload"]
    summary = summarize(verdicts, recording=str(rec.dir), fstype=fstype, workload=wl.get("name") or "cmd",
                        check_in=spec.check_in, seconds=time.monotonic() - t0)
    return summary, write_outputs(summary, verdicts, outdir)

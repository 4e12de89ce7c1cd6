#!/usr/bin/env python3
"""Checker VM start and per-state cost: "ready" (QEMU start -> the first state begins, host clock,
the host's preparation of the VM included) and the time per state after it, for the checker VM as
it starts now against the classic start, alternated in one run, medians of --rounds.

The classic start (the baseline) is today's code with the start-up cuts undone: the agent started
as ``python -m powercut.guest`` with ``site`` and no bytecode (PYTHONPYCACHEPREFIX pointing at an
empty directory: every module compiled in the guest, as when nothing had written powercut's
bytecode), every module of the image loaded, the scratch disk formatted in the guest, the
dynamically linked e2fsck.  Also printed: the guest's own timeline (kernel -> init -> modules ->
agent -> first state, from /proc/uptime) of the last round of each.

    python bench/bench_vmstart.py                      # records append-fsync n=60 first (~12 s)
    python bench/bench_vmstart.py --recording DIR --states 40 --rounds 3

Figures depend on the machine (under TCG, on the emulation and on what else runs): compare the
ratios, taken in one invocation."""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

from powercut.check.context import LogSource, context_for
from powercut.check.vm import CheckerVm, VmCheckSpec
from powercut.config import FsSpec, WorkloadSpec
from powercut.core.dmlog import open_log
from powercut.core.selection import select
from powercut.linux import filesystems
from powercut.record.recording import load as load_recording
from powercut.record.vm import RecordSpec, record
from powercut.vm import guestjob

CLASSIC_SCRIPT = ("#!/bin/sh\nexec /usr/bin/env -i PATH={path} HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "
                  "PYTHONPYCACHEPREFIX=/tmp/no-bytecode {py} -m powercut.guest {jobdir}/job.json\n")


class Variant:
    """Patches that turn the checker VM's start back into the classic one (None: as it is now)."""

    def __init__(self, name: str, classic: bool) -> None:
        self.name, self.classic = name, classic

    def __enter__(self) -> "Variant":
        self.patches = []
        if self.classic:
            real_vm_spec, real_source = CheckerVm._vm_spec, CheckerVm.source

            def vm_spec(vm: CheckerVm, staged, d, timeout_s, interactive=False):  # type: ignore[no-untyped-def]
                spec = real_vm_spec(vm, staged, d, timeout_s, interactive)
                return spec.__class__(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__},
                                         "modules": ()})   # every module of the image

            def source(vm: CheckerVm) -> guestjob.StateSource:
                src = real_source(vm)
                fields = {f: getattr(src, f) for f in src.__dataclass_fields__}
                return guestjob.StateSource(**{**fields, "scratch_ready": False, "entries": {},
                                               "fsck": filesystems.get(src.fstype).fsck})

            def job_script(tools_dir: str = "") -> str:
                return CLASSIC_SCRIPT.format(path=guestjob.guest_path(tools_dir), py=sys.executable,
                                             jobdir=guestjob.GUEST_JOB_DIR)

            self.patches = [mock.patch.object(CheckerVm, "_vm_spec", vm_spec),
                            mock.patch.object(CheckerVm, "source", source),
                            mock.patch.object(guestjob, "job_script", job_script),
                            mock.patch("powercut.check.hosts.CheckHost.boot", _guest_mkfs_boot())]
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.patches):
            p.stop()


def _guest_mkfs_boot():  # type: ignore[no-untyped-def]
    """CheckHost.boot without the host's mkfs of the scratch disk (the guest formats it)."""
    from powercut.check import hosts
    real = hosts.CheckHost.boot

    def boot(self, make_vm, run, scratch_bytes, watchdog):  # type: ignore[no-untyped-def]
        with mock.patch.object(hosts.process, "run", lambda *a, **k: None):
            return real(self, make_vm, run, scratch_bytes, watchdog)
    return boot


def one(rec, states: list[str], work: Path, variant: Variant) -> dict[str, float]:
    cctx = context_for(rec)
    spec = VmCheckSpec.default()
    stamps: dict[str, float] = {}
    first_begin: list[float] = []
    done = threading.Event()

    vm = CheckerVm(cctx, LogSource.of(rec), spec, work)

    def watch() -> None:   # the first "begin" line, polled every 10 ms
        while not done.is_set():
            for p in work.glob("run*/job/progress.jsonl"):
                try:
                    if '"begin"' in p.read_text():
                        first_begin.append(time.monotonic())
                        return
                except OSError:
                    pass
            time.sleep(0.01)

    verdicts: list[float] = []
    with variant:
        t0 = time.monotonic()
        th = threading.Thread(target=watch, daemon=True)
        th.start()
        job = guestjob.CheckJob(vm.source(), tuple(states), tools_dir=vm.staged().tools_dir)
        out = vm.run(job, steps=len(states) + 1, on_verdict=lambda v: verdicts.append(time.monotonic()))
        done.set()
    if out.failure is not None or not first_begin or len(verdicts) != len(states):
        raise SystemExit(f"bench_vmstart: the {variant.name} VM failed: {out.failure}")
    stamps["ready_s"] = first_begin[0] - t0
    stamps["per_state_s"] = (verdicts[-1] - first_begin[0]) / len(states)
    stamps["wall_s"] = time.monotonic() - t0
    stamps.update(timeline(next(work.glob("run*/console.log")), next(work.glob("run*/job/agent.log"))))
    return stamps


def timeline(console: Path, agent: Path) -> dict[str, float]:
    """The guest's own clock: init's stamps and the agent's."""
    out: dict[str, float] = {}
    text = console.read_text(errors="replace") + agent.read_text(errors="replace")
    for key, pat in (("modules_loaded", r"modules loaded at ([\d.]+)s"), ("job_start", r"job start at ([\d.]+)s"),
                     ("agent_main", r"agent started ([\d.]+) s after"), ("first_state", r"first state begins ([\d.]+) s")):
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1))
    fsck = [float(x) for x in re.findall(r" fsck ([\d.]+) s", text)]
    if fsck:
        out["fsck_s"] = statistics.median(fsck)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recording", help="an ext4 recording (default: record append-fsync n=60)")
    ap.add_argument("--states", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="powercut-bench-vmstart-"))
    try:
        if args.recording:
            rec = load_recording(args.recording)
        else:
            rec = record(RecordSpec(fs=FsSpec(size_mb=64), workload=WorkloadSpec(name="append-fsync",
                                                                                params={"n": 60})), tmp / "rec")
        with open_log(rec.log_path) as index:
            states = [s.id for s in select(index, ["flush"]).states][:args.states]
        results: dict[str, list[dict[str, float]]] = {"classic": [], "now": []}
        for r in range(args.rounds):
            for name in ("classic", "now"):
                results[name].append(one(rec, states, tmp / f"{name}{r}", Variant(name, name == "classic")))
                print(f"round {r + 1} {name:8s} ready {results[name][-1]['ready_s']:5.2f} s, "
                      f"{results[name][-1]['per_state_s'] * 1000:5.0f} ms/state", flush=True)
        med = {n: {k: statistics.median(x[k] for x in rs if k in x) for k in rs[0]} for n, rs in results.items()}
        print(f"\nchecker VM, {len(states)} flush states of {rec.dir.name}, medians of {args.rounds} "
              f"({rec.manifest['recording'].get('accel', '?')} recording; this run's VMs: see the consoles)")
        print(f"{'':28s}{'classic':>10s}{'now':>10s}{'now/classic':>13s}")
        for key, label in (("ready_s", "ready: QEMU start -> 1st state"), ("per_state_s", "per state (s)"),
                           ("fsck_s", "  of which fsck (s)"), ("modules_loaded", "guest: modules loaded at"),
                           ("job_start", "guest: agent's job.sh at"), ("agent_main", "guest: agent main() at"),
                           ("first_state", "guest: first state at")):
            a, b = med["classic"].get(key), med["now"].get(key)
            if a is None or b is None:
                continue
            print(f"{label:28s}{a:10.3f}{b:10.3f}{b / a:13.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checker VM start and per-state cost: "ready" (QEMU start -> the first state begins, host clock,
the host's preparation of the VM included) and the time per state after it, for the checker VM as
it starts now against the classic start, alternated in one run, medians of --rounds.

Three starts: "now" (a checker VM restored from its template, vmstart/template.py), "boot" (the same
VM booted: POWERCUT_VM_START=boot) and "classic".  The classic start (the baseline) is today's code with the start-up cuts undone: the agent started
as ``python -m powercut.guest`` with ``site`` and without powercut's bytecode (its __pycache__
directories moved aside for the round: every powercut module compiled in the guest, as when
PYTHONDONTWRITEBYTECODE kept them from being written; the stdlib's bytecode stays), the modules
of recording and the console loaded too (as before their groups), the scratch disk formatted in the guest, the dynamically linked e2fsck.  Also printed: the guest's own timeline (kernel -> init -> modules ->
agent -> first state, from /proc/uptime) of the last round of each.

    python bench/bench_vmstart.py                      # records append-fsync n=60 first (~12 s)
    python bench/bench_vmstart.py --recording DIR --states 40 --rounds 3
    python bench/bench_vmstart.py --failing-recording DIR   # + a failing campaign with/without the warm VM

``--failing-recording``: a campaign (flush, -j 2, --shrink 3) over a recording with failures, run
with the check's last VM kept booted for the diagnosis (now) and with every phase booting its own
VMs, alternated: campaign wall time and the triage phase's (diagnosis) time.

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
from powercut.core.log.dmlog import open_log
from powercut.core.states.selection import select
from powercut.linux import filesystems
from powercut.record.recording import load as load_recording
from powercut.record.vm import RecordSpec, record
from powercut.vm import agentboot, guestjob

CLASSIC_SCRIPT = (
    "#!/bin/sh\nexec /usr/bin/env -i PATH={path} HOME=/tmp LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 "
    "{py} -m powercut.guest {jobdir}/job.json\n"
)


class Variant:
    """Patches that turn the checker VM's start back into the classic one, or into a boot (as now,
    but without the template: POWERCUT_VM_START=boot), or none (as it is now)."""

    def __init__(self, name: str, classic: bool, boot: bool = False) -> None:
        self.name, self.classic, self.boot = name, classic, boot or classic

    def __enter__(self) -> "Variant":
        self.patches = [
            mock.patch.dict(
                "os.environ", {"POWERCUT_VM_START": "boot" if self.boot else "snapshot"}
            )
        ]
        if self.classic:
            real_vm_spec, real_source = CheckerVm._vm_spec, CheckerVm.source

            def vm_spec(vm: CheckerVm, staged, d, timeout_s, interactive=False):  # type: ignore[no-untyped-def]
                spec = real_vm_spec(vm, staged, d, timeout_s, interactive)
                return spec.__class__(
                    **{
                        **{f: getattr(spec, f) for f in spec.__dataclass_fields__},
                        "modules": spec.modules + ("record", "console"),
                    }
                )  # as before the groups

            def source(vm: CheckerVm) -> guestjob.StateSource:
                src = real_source(vm)
                fields = {f: getattr(src, f) for f in src.__dataclass_fields__}
                return guestjob.StateSource(
                    **{
                        **fields,
                        "scratch_ready": False,
                        "entries": {},
                        "fsck": filesystems.get(src.fstype).fsck,
                    }
                )

            def job_script(tools_dir: str = "") -> str:
                return CLASSIC_SCRIPT.format(
                    path=guestjob.guest_path(tools_dir),
                    py=sys.executable,
                    jobdir=guestjob.GUEST_JOB_DIR,
                )

            self.hidden = [
                d
                for pkg in agentboot.package_dirs().values()
                for d in Path(pkg).rglob("__pycache__")
            ]
            for d in self.hidden:
                d.rename(d.with_name("__pycache__.bench-hidden"))
            self.patches += [
                mock.patch.object(agentboot, "compile_package", lambda: None),
                mock.patch.object(CheckerVm, "_vm_spec", vm_spec),
                mock.patch.object(CheckerVm, "source", source),
                mock.patch.object(guestjob, "job_script", job_script),
                mock.patch("powercut.check.hosts.CheckHost.boot", _guest_mkfs_boot()),
            ]
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.patches):
            p.stop()
        for d in getattr(self, "hidden", []):
            d.with_name("__pycache__.bench-hidden").rename(d)


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

    host: dict[str, float] = {}

    def watch() -> (
        None
    ):  # host clock: QEMU started, restored, agent's log begun, first "begin" (every 10 ms)
        while not done.is_set():
            for key, pattern, needle in (
                ("qemu_started", "run*/qemu.argv", ""),
                ("restored", "run*/console.log", "powercut-restored"),
                ("agent_log", "run*/job/agent.log", ""),
            ):
                if key not in host:
                    for p in work.glob(pattern):
                        try:
                            if not needle or needle in p.read_text(errors="replace"):
                                host[key] = time.monotonic()
                        except OSError:
                            pass
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
        out = vm.run(
            job, steps=len(states) + 1, on_verdict=lambda v: verdicts.append(time.monotonic())
        )
        done.set()
    if out.failure is not None or not first_begin or len(verdicts) != len(states):
        raise SystemExit(f"bench_vmstart: the {variant.name} VM failed: {out.failure}")
    stamps["ready_s"] = first_begin[0] - t0
    for key in ("qemu_started", "restored", "agent_log"):
        if key in host:
            stamps[f"host_{key}"] = host[key] - t0
    stamps["per_state_s"] = (verdicts[-1] - first_begin[0]) / len(states)
    stamps["wall_s"] = time.monotonic() - t0
    stamps.update(
        timeline(next(work.glob("run*/console.log")), next(work.glob("run*/job/agent.log")))
    )
    return stamps


def timeline(console: Path, agent: Path) -> dict[str, float]:
    """The guest's own clock: init's stamps and the agent's."""
    out: dict[str, float] = {}
    text = console.read_text(errors="replace") + agent.read_text(errors="replace")
    for key, pat in (
        ("modules_loaded", r"modules loaded at ([\d.]+)s"),
        ("job_start", r"job start at ([\d.]+)s"),
        ("agent_main", r"agent started ([\d.]+) s after"),
        ("first_state", r"first state begins ([\d.]+) s"),
    ):
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1))
    fsck = [float(x) for x in re.findall(r" fsck ([\d.]+) s", text)]
    if fsck:
        out["fsck_s"] = statistics.median(fsck)
    return out


def warm_campaigns(rec_dir: Path, tmp: Path, rounds: int) -> None:
    from powercut.campaign.run import CampaignSpec, run_campaign
    from powercut.check.place import Place

    got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for r in range(rounds):
        for warm in (False, True):
            cold = mock.patch.object(Place, "with_warm_vms", lambda self: self)
            with mock.MagicMock() if warm else cold:
                t = time.monotonic()
                s, _ = run_campaign(
                    rec_dir,
                    CampaignSpec.of(models=("flush",), check_in="vm", jobs=2, shrink=3),
                    tmp / f"campaign-{warm}-{r}",
                )
                got[warm].append((time.monotonic() - t, s.triage_s))
                print(
                    f"round {r + 1} {'warm' if warm else 'cold'}: {s.total} states, {s.verdict}, "
                    f"{got[warm][-1][0]:.1f} s, diagnosis+bundles {s.triage_s:.1f} s",
                    flush=True,
                )
    cold_w, warm_w = (statistics.median(x[0] for x in got[k]) for k in (False, True))
    cold_t, warm_t = (statistics.median(x[1] for x in got[k]) for k in (False, True))
    print(
        f"failing campaign, medians: wall {cold_w:.1f} -> {warm_w:.1f} s ({warm_w / cold_w:.2f}), "
        f"diagnosis {cold_t:.1f} -> {warm_t:.1f} s ({warm_t / cold_t:.2f}) with the check's VM kept"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--recording", help="an ext4 recording (default: record append-fsync n=60)")
    ap.add_argument("--states", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--failing-recording", help="also time a failing campaign with and without the warm VM"
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="powercut-bench-vmstart-"))
    try:
        if args.recording:
            rec = load_recording(args.recording)
        else:
            rec = record(
                RecordSpec(
                    fs=FsSpec(size_mb=64),
                    workload=WorkloadSpec(name="append-fsync", params={"n": 60}),
                ),
                tmp / "rec",
            )
        with open_log(rec.log_path) as index:
            states = [s.id for s in select(index, ["flush"]).states][: args.states]
        variants = {
            "classic": Variant("classic", True),
            "boot": Variant("boot", False, boot=True),
            "now": Variant("now", False),
        }
        t = (
            time.monotonic()
        )  # the template of "now" is built once, before the rounds (cached after)
        one(rec, states[:1], tmp / "template", variants["now"])
        print(
            f"warm-up of 'now' (its checker VM template built, or found cached): {time.monotonic() - t:.1f} s"
        )
        results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
        for r in range(args.rounds):
            for name, variant in variants.items():
                results[name].append(one(rec, states, tmp / f"{name}{r}", variant))
                print(
                    f"round {r + 1} {name:8s} ready {results[name][-1]['ready_s']:5.2f} s, "
                    f"{results[name][-1]['per_state_s'] * 1000:5.0f} ms/state",
                    flush=True,
                )
        med = {
            n: {k: statistics.median(x[k] for x in rs if k in x) for k in rs[0]}
            for n, rs in results.items()
        }
        print(
            f"\nchecker VM, {len(states)} flush states of {rec.dir.name}, medians of {args.rounds} "
            f"({rec.manifest['recording'].get('accel', '?')} recording; this run's VMs: see the consoles)"
        )
        print(
            f"{'':32s}{'classic':>9s}{'boot':>9s}{'now':>9s}{'now/classic':>12s}{'now/boot':>10s}"
        )
        for key, label in (
            ("ready_s", "ready: QEMU start -> 1st state"),
            ("host_qemu_started", "  host: QEMU started at"),
            ("host_restored", "  host: guest restored at"),
            ("host_agent_log", "  host: agent's log begun at"),
            ("per_state_s", "per state (s)"),
            ("fsck_s", "  of which fsck (s)"),
            ("modules_loaded", "guest: modules loaded at"),
            ("job_start", "guest: agent's job.sh at"),
            ("agent_main", "guest: agent main() at"),
            ("first_state", "guest: first state at"),
        ):
            a, b, c = (med[n].get(key) for n in ("classic", "boot", "now"))
            cells = "".join(f"{x:9.3f}" if x is not None else f"{'-':>9s}" for x in (a, b, c))
            ratios = "".join(
                f"{c / x:{w}.2f}" if c is not None and x else f"{'-':>{w}s}"
                for x, w in ((a, 12), (b, 10))
            )
            print(f"{label:32s}{cells}{ratios}")
        print(
            "(guest timeline rows: a restored VM's clock goes on from its template's, so its stamps are not "
            "comparable with a boot's)"
        )
        if args.failing_recording:
            warm_campaigns(Path(args.failing_recording), tmp, args.rounds)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Crash states judged per second: host mode and VM mode against fstests' generic/482 procedure
(bench/baseline482.py: every FUA point replayed from entry 0 onto one reused device, then mount,
umount and fsck -nf), on the same recording, in one run.  ``--replay-log PATH`` also runs the
procedure with fstests' own replay-log binary (build it from fstests' src/log-writes with one gcc
line; this project does not carry it), and prints both.

Needs root.  Records append-fsync on ext4 (enough commits for >= 400 flush-model states) unless
--recording names one.  Prints rates and ratios; absolute figures depend on the machine (and under
TCG on the emulation), the ratios carry over."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline482

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.core.log.dmlog import open_log
from powercut.core.states.selection import select
from powercut.record.recording import load as load_recording
from powercut.record.vm import RecordSpec, record


def baseline(rec, workdir: Path, max_states: int, replay_log: str = "") -> baseline482.Result:
    """fstests' generic/482 procedure (bench/baseline482.py) over the recording's FUA points, on one
    reused loop device: this re-implementation, or fstests' own replay-log with ``replay_log``."""
    points = baseline482.fua_points(rec.log_path)
    if max_states:
        points = points[:: max(1, len(points) // max_states)][:max_states]
    return baseline482.run_on_scratch(rec, workdir, points, replay_log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--recording", help="an existing recording (default: record append-fsync n=--commits)"
    )
    ap.add_argument("--commits", type=int, default=120)
    ap.add_argument(
        "--keep-recording",
        metavar="DIR",
        help="record into DIR and keep it there (for later runs with --recording DIR)",
    )
    ap.add_argument(
        "--baseline-states",
        type=int,
        default=0,
        help="at most this many FUA points for the generic/482 procedure (default 0: all, as the test)",
    )
    ap.add_argument(
        "--replay-log",
        metavar="PATH",
        default="",
        help="fstests' replay-log binary: also run the procedure with the real tool",
    )
    ap.add_argument(
        "--vm-states", type=int, default=120, help="states for VM mode (0: skip VM mode)"
    )
    ap.add_argument(
        "--host-only",
        action="store_true",
        help="host mode and the generic/482 loop only (no VM mode; with --recording, no VM at all)",
    )
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if args.host_only:
        args.vm_states = 0
    if os.geteuid() != 0:
        print("bench_check: needs root (loop devices, mount)", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="powercut-bench-check-"))
    try:
        if args.recording:
            rec = load_recording(args.recording)
        else:
            t = time.perf_counter()
            rec = record(
                RecordSpec(
                    fs=FsSpec(size_mb=64),
                    workload=WorkloadSpec(name="append-fsync", params={"n": args.commits}),
                ),
                Path(args.keep_recording) if args.keep_recording else tmp / "rec",
            )
            print(
                f"recorded append-fsync n={args.commits} on ext4 64 MiB in {time.perf_counter() - t:.1f} s "
                f"({rec.manifest['recording'].get('accel')})"
            )
        with open_log(rec.log_path) as index:
            states = select(index, ["flush"]).states
        print(f"states: {len(states)} (flush model, distinct, after the mkfs mark)")
        host, _ = run_campaign(
            rec.dir,
            CampaignSpec.of(models=("flush",), check_in="host", jobs=args.jobs, shrink=0),
            tmp / "host",
        )
        host_rate = host.total / host.seconds
        print(
            f"host mode  -j {args.jobs}: {host.total} states in {host.seconds:7.1f} s = {host_rate:7.1f} states/s"
            f"  (all pass: {host.ok})"
        )
        host1, _ = run_campaign(
            rec.dir,
            CampaignSpec.of(models=("flush",), check_in="host", jobs=1, shrink=0),
            tmp / "host1",
        )
        print(
            f"host mode  -j 1: {host1.total} states in {host1.seconds:7.1f} s = "
            f"{host1.total / host1.seconds:7.1f} states/s"
        )
        work = tmp / "baseline"
        work.mkdir()
        base = baseline(rec, work, args.baseline_states)
        print(
            f"baseline: fstests generic/482 procedure, {base.tool} (replay from entry 0 onto one loop device, "
            f"mount, umount, fsck -nf; no checker): {base.states} FUA points, {base.rate:7.1f} states/s"
        )
        rates = [base]
        if args.replay_log:
            real = baseline(rec, work, args.baseline_states, args.replay_log)
            print(
                f"baseline: the same with fstests' replay-log ({real.tool}, a --find and a --replay process per "
                f"state): {real.states} FUA points, {real.rate:7.1f} states/s"
            )
            rates.append(real)
        for b in rates:
            print(
                f"ratio against {b.tool}: host -j {args.jobs} {host_rate / b.rate:6.2f}x   "
                f"host -j 1 {host1.total / host1.seconds / b.rate:6.2f}x"
            )
        for jobs in (
            (1, args.jobs) if args.vm_states and args.jobs > 1 else (1,) if args.vm_states else ()
        ):
            stamps: list[float] = []
            vm, _ = run_campaign(
                rec.dir,
                CampaignSpec.of(
                    models=("flush",), check_in="vm", jobs=jobs, max_states=args.vm_states
                ),
                tmp / f"vm{jobs}",
                on_verdict=lambda v: stamps.append(time.monotonic()),
            )
            steady = (
                (len(stamps) - jobs) / (stamps[-1] - stamps[jobs - 1])
                if len(stamps) > 2 * jobs
                else 0.0
            )
            print(
                f"VM mode -j {jobs} ({jobs} checker VM(s)): {vm.total} states in {vm.seconds:7.1f} s = "
                f"{vm.total / vm.seconds:7.2f} states/s incl. boots; {steady:7.2f} states/s after each VM's "
                f"first verdict  (all pass: {vm.ok})"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

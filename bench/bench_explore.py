#!/usr/bin/env python3
"""How often each grain of slowness catches a race that hides behind a second file's sync (issue 50):
the twofile store replying when its index's sync returns (``reply_on=index``), recorded ``--rounds``
times with no delay, with the whole disk slow (``hdd``), and explored (``run --explore-races``: one
recording with the trace, then one per file it synced before an ack with only that file's syncs
held), each recording judged in host mode (flush and write-cache, at most ``--max-states``).  A
round catches the race when any of its recordings' campaigns says lost-ack.  Also the fixed store
(``reply_on=both``) explored, which must pass every schedule, and what ``--delay-sync`` costs a
recording: the workload time of append-fsync (Python, 20 fsyncs) and of gotwofile (Go, 20 commits)
with a 1 us hold on its file against none, the same invocation, the trace on in both (a held
recording traces with plain ptrace, one without with --seccomp-bpf: guest/tracing.py).

    python bench/bench_explore.py                 # 10 rounds (~30 min under TCG)
    python bench/bench_explore.py --rounds 3
    python bench/bench_explore.py --workload gotwofile   # the same store as a static Go program
    python bench/bench_explore.py --cost-only            # only what a hold costs a recording

Needs what `powercut record` needs (root, QEMU, the guest image) and loop devices.  Absolute times
under TCG say little about real machines; the ratios and catch rates are the figures."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
from pathlib import Path

from powercut.campaign.explore import explore
from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Schedule, run_one
from powercut.config import WorkloadSpec
from powercut.core.recording.latency import NodesLatency
from powercut.record.vm import RecordSpec, record

CAUGHT = "lost-ack"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--max-states", type=int, default=150)
    ap.add_argument("--commits", type=int, default=8)
    ap.add_argument("--workload", choices=("twofile", "gotwofile"), default="twofile")
    ap.add_argument(
        "--cost-only", action="store_true", help="only what --delay-sync costs a recording"
    )
    args = ap.parse_args()
    cspec = CampaignSpec.of(
        models=("flush", "write-cache"),
        check_in="host",
        jobs=2,
        max_states=args.max_states,
        shrink=0,
        confirm=False,
    )
    wl = WorkloadSpec(name=args.workload, params={"n": args.commits, "reply_on": "index"})
    rspec = RecordSpec(workload=wl)
    caught = {"none": 0, "hdd": 0, "explored": 0, "fixed, explored (must stay 0)": 0}
    recordings = {k: 0 for k in caught}
    with tempfile.TemporaryDirectory(prefix="powercut-bench-explore-") as tmp:
        root = Path(tmp)
        for r in range(0 if args.cost_only else args.rounds):
            for setting in ("none", "hdd"):
                o = run_one(
                    Schedule(NodesLatency.parse(setting), r, r),
                    rspec,
                    cspec,
                    root / f"{setting}-{r}",
                )
                caught[setting] += o.verdict == CAUGHT
                recordings[setting] += 1
            ex = explore(
                [Schedule(NodesLatency.parse("none"), r, r)], rspec, cspec, root / f"explore-{r}"
            )
            runs = ex.runs
            caught["explored"] += any(o.verdict == CAUGHT for o in runs)
            recordings["explored"] += len(runs)
            fixed = dataclasses.replace(
                rspec, workload=dataclasses.replace(wl, params={**wl.params, "reply_on": "both"})
            )
            fx = explore(
                [Schedule(NodesLatency.parse("none"), r, r)], fixed, cspec, root / f"fixed-{r}"
            )
            fruns = fx.runs
            caught["fixed, explored (must stay 0)"] += any(o.verdict != "pass" for o in fruns)
            recordings["fixed, explored (must stay 0)"] += len(fruns)
            print(
                f"round {r + 1}: " + ", ".join(f"{k} {v}/{r + 1}" for k, v in caught.items()),
                flush=True,
            )
        if not args.cost_only:
            print_rates(args, caught, recordings)
        for name, params, held in (
            ("append-fsync", {}, "append.log"),
            ("gotwofile", {"n": 20}, "store.log"),
        ):
            cost = {"without": [], "with": []}
            for r in range(3):
                for label, rules in (("without", ()), ("with", (f"{held}=1us",))):
                    spec = RecordSpec(
                        workload=WorkloadSpec(name=name, params=params, delay_sync=rules)
                    )
                    rec = record(spec, root / f"cost-{name}-{r}-{label}")
                    cost[label].append(float(rec.manifest["result"]["workload_s"]))
            a, b = (statistics.median(v) for v in cost.values())
            print(
                f"  --delay-sync's cost, {name}: workload {a:.2f} s without, {b:.2f} s with a 1 us hold on "
                f"{held} ({b / a:.2f}x, median of 3, the trace on in both)"
            )
    return 0


def print_rates(
    args: argparse.Namespace, caught: dict[str, int], recordings: dict[str, int]
) -> None:
    print(
        f"\n{args.workload} reply_on=index, {args.commits} commits, {args.rounds} rounds (this machine; TCG if no KVM):"
    )
    for k, v in caught.items():
        print(f"  {k:32} caught in {v} of {args.rounds} rounds ({recordings[k]} recordings)")
    print(
        f"  the exploration: {recordings['explored'] / args.rounds:.1f} recordings a round "
        f"(the base one and one per file synced before an ack)"
    )


if __name__ == "__main__":
    raise SystemExit(main())

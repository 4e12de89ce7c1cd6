#!/usr/bin/env python3
"""The race exploration on a real group-commit program (issue 50 item 4): PostgreSQL with several
psql sessions committing at once (workload ``pggroup``: commit_delay/commit_siblings group the
sessions' commits into one WAL flush), explored with ``run --explore-races``: one recording with the
syscall trace, then one per file the server synced before an ack with only that file's syncs held
(``--delay-sync``), each judged in host mode (flush and write-cache, at most ``--max-states``).
Prints each exploration's table (schedule, states, verdicts, first failure, its cause), its coverage
line, how many recordings each synced file got and the wall times.

Configurations (``--configs``, comma-separated):
  on   -- synchronous_commit=on, fsync on: PostgreSQL's documented durable setting (every schedule
          should pass);
  off  -- synchronous_commit=off: acks before the WAL flush, documented to lose recent commits after
          a crash (the exploration should catch it).

    python bench/bench_explore_real.py                      # both (~40 min under TCG)
    python bench/bench_explore_real.py --configs off --budget 2

Needs what `powercut record` needs (root, QEMU, the guest image), PostgreSQL on the host (the
workload's prepared cluster: python -m powercut.workloads.postgres --prepare) and loop devices.
Absolute times under TCG say little about real machines."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from powercut.campaign.explore import explore, markdown
from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Schedule
from powercut.config import WorkloadSpec
from powercut.core.recording.latency import NodesLatency
from powercut.record.vm import RecordSpec

CONFIGS = {"on": {"synchronous_commit": "on"}, "off": {"synchronous_commit": "off"}}


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--configs", default="on,off", help="comma-separated: on, off (default both)")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--commits", type=int, default=4, help="transactions per session")
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--delay", default="200ms")
    ap.add_argument("--max-states", type=int, default=150)
    ap.add_argument(
        "-o", "--out", default="", help="keep the recordings here (default: a tmp dir, removed)"
    )
    args = ap.parse_args()
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        print(
            f"bench_explore_real: --configs takes {', '.join(CONFIGS)}, not {args.configs!r}",
            file=sys.stderr,
        )
        return 2
    cspec = CampaignSpec.of(
        models=("flush", "write-cache"),
        check_in="host",
        jobs=2,
        max_states=args.max_states,
        shrink=0,
        confirm=False,
    )
    with tempfile.TemporaryDirectory(prefix="powercut-bench-explore-real-") as tmp:
        root = Path(args.out or tmp)
        for name in configs:
            params = {"sessions": args.sessions, "n": args.commits, **CONFIGS[name]}
            rspec = RecordSpec(workload=WorkloadSpec(name="pggroup", params=params))
            began = time.monotonic()
            ex = explore(
                Schedule(NodesLatency.parse("none")),
                rspec,
                cspec,
                root / f"pggroup-{name}",
                delay=args.delay,
                budget=args.budget,
                on_done=lambda o: print(
                    f"  {o.schedule.setting}: {o.verdict} ({o.record_s:.0f} s recording, "
                    f"{o.check_s:.0f} s check)",
                    flush=True,
                ),
            )
            took = time.monotonic() - began
            print(
                f"\npggroup {' '.join(f'{k}={v}' for k, v in params.items())}, --explore-delay {args.delay}, "
                f"--budget {args.budget}, at most {args.max_states} states (this machine; TCG if no KVM):\n"
            )
            print(markdown(ex))
            print(
                "recordings per synced file: one each -- "
                + (
                    ", ".join(f"{f}: {o.verdict}" for f, o in zip(ex.explored, ex.outcomes))
                    or "none explored"
                )
                + (f"; {len(ex.left_out)} left out by --budget" if ex.left_out else "")
            )
            print(
                f"recordings: {len(ex.runs)} (the base one + one per explored file); wall {took:.0f} s "
                f"(recording {sum(o.record_s for o in ex.runs):.0f} s, checks {sum(o.check_s for o in ex.runs):.0f} s)"
                + ("" if ex.ok else "; a schedule has a finding"),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

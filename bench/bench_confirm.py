#!/usr/bin/env python3
"""What confirmation costs on a mass-failure campaign: every failing state judged again alone
(``--confirm all``) against confirmation by failure group (``--confirm group``: a sample of each
large group, core/judging/confirm.py), in one run, on the same recording and states.

Needs root.  Records append-fsync with ``fsync=false`` (most states lose acked commits, for one
cause) on ext4 unless --recording names one.  For each mode and place prints the judging seconds,
the confirmation seconds, their ratio (the goal: at most 0.25 by group), the states judged again,
and checks that both modes reach the same verdict for every state.  Absolute seconds depend on the
machine (and under TCG on the emulation); the ratios carry over."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.recording import load as load_recording
from powercut.record.vm import RecordSpec, record


def verdicts(out: Path) -> dict[str, str]:
    """The final verdict per state (later journal lines win)."""
    got: dict[str, str] = {}
    for line in (out / "journal.jsonl").read_text().splitlines():
        d = json.loads(line)
        got[d["state"]] = d["verdict"]
    return got


def one(
    rec_dir: Path, out: Path, place: str, mode: str, jobs: int, max_states: int, sample: int
) -> dict:
    s, _ = run_campaign(
        rec_dir,
        CampaignSpec.of(
            models=("flush", "write-cache"),
            check_in=place,
            jobs=jobs,
            max_states=max_states,
            confirm_mode=mode,
            confirm_sample=sample,
            shrink=1,
        ),
        out,
    )
    judging = s.seconds - s.confirm_s - s.triage_s
    row = {
        "place": place,
        "mode": mode,
        "states": s.total,
        "failing": len(s.failures) + len(s.flaky),
        "groups": len(s.groups),
        "rejudged": s.rejudged,
        "by_group": s.by_group,
        "flaky": len(s.flaky),
        "judging_s": judging,
        "confirm_s": s.confirm_s,
        "ratio": s.confirm_s / judging if judging else 0.0,
    }
    print(
        f"{place:4} --confirm {mode:5}: {row['states']:5} states, {row['failing']:5} failing in {row['groups']} "
        f"group(s); judging {judging:7.1f} s, confirmation {s.confirm_s:7.1f} s = {row['ratio']:5.2f} of judging; "
        f"{s.rejudged} judged again alone, {s.by_group} confirmed by group, {len(s.flaky)} flaky",
        flush=True,
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--recording",
        help="an existing recording (default: record append-fsync fsync=false n=--commits)",
    )
    ap.add_argument("--commits", type=int, default=60)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--sample", type=int, default=8, help="--confirm-sample for the group mode (default 8)"
    )
    ap.add_argument(
        "--vm-states",
        type=int,
        default=120,
        help="distinct states for VM mode, each mode (0: skip VM mode; default 120)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_confirm: needs root (loop devices, mount)", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="powercut-bench-confirm-"))
    try:
        if args.recording:
            rec_dir = load_recording(args.recording).dir
        else:
            t = time.perf_counter()
            rec = record(
                RecordSpec(
                    fs=FsSpec(size_mb=64),
                    workload=WorkloadSpec(
                        name="append-fsync", params={"n": args.commits, "fsync": False}
                    ),
                ),
                tmp / "rec",
            )
            rec_dir = rec.dir
            print(
                f"recorded append-fsync fsync=false n={args.commits} on ext4 64 MiB in "
                f"{time.perf_counter() - t:.1f} s ({rec.manifest['recording'].get('accel')})"
            )
        rows = []
        places = [("host", 0)] + ([("vm", args.vm_states)] if args.vm_states else [])
        for place, cap in places:
            for mode in ("all", "group"):
                rows.append(
                    one(rec_dir, tmp / f"{place}-{mode}", place, mode, args.jobs, cap, args.sample)
                )
            same = verdicts(tmp / f"{place}-all") == verdicts(tmp / f"{place}-group")
            a, g = rows[-2], rows[-1]
            print(
                f"{place}: the same verdict for every state in both modes: {same}; confirmation by group costs "
                f"{g['confirm_s'] / a['confirm_s'] if a['confirm_s'] else 0:.2f}x of confirming every failure "
                f"({g['ratio']:.2f} vs {a['ratio']:.2f} of judging)",
                flush=True,
            )
            if not same:
                print(
                    "bench_confirm: the modes disagree on a verdict: that is a bug", file=sys.stderr
                )
                return 1
        print(json.dumps(rows, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

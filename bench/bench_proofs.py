#!/usr/bin/env python3
"""What the read-set rule (issue #64; core/judging/readset.py) saves, and whether it ever says more
than a judge would: each recording checked twice in host mode, in this one invocation -- every
state judged (``--judge-all``, the baseline) and with the rule -- the same states, -j 1.

Prints per recording and model: distinct states, how many the rule proved (share), and how many
proven states got another verdict than their own judge gave in the baseline run (must be 0: a
proof is a claim about the state's own judge); then each run's wall time and the ratio.  Confirmation
samples are counted in "judged": a proven state judged anyway is not a proof.

Recordings: ``--recording DIR`` (repeat), or made here (a VM each): append-fsync n=120, wal n=40,
wal variant=no-fsync n=40 (failing states: a proof of a failure is checked too), sqlite n=30 (WAL,
synchronous=FULL), all ext4.  Needs root (host mode, tracefs).  Figures, not assertions."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from powercut.linux import process

TIMEOUT_S = 3600.0  # one record or check
MADE = {
    "append-fsync": ["--workload", "append-fsync", "--param", "n=120"],
    "wal": ["--workload", "wal", "--param", "n=40"],
    "wal-no-fsync": ["--workload", "wal", "--param", "n=40", "--param", "variant=no-fsync"],
    "sqlite": ["--workload", "sqlite", "--param", "n=30"],
}


def powercut(*args: str) -> float:
    """Its seconds; exit 0, 1 (not ok) and 3 (failing states) are answers, anything else an error."""
    t = time.perf_counter()
    res = process.run(["powercut", *args], timeout=TIMEOUT_S, check=False)
    if res.returncode not in (0, 1, 3):
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        raise SystemExit(f"bench_proofs: powercut {' '.join(args)} exited {res.returncode}: {tail}")
    return time.perf_counter() - t


def verdicts(out: Path) -> dict[str, dict]:
    """state -> its journal line (the last one: confirmation's replaces none of these fields)."""
    got = {}
    with open(out / "journal.jsonl") as f:
        for line in f:
            d = json.loads(line)
            if "state" in d:
                got.setdefault(d["state"], d)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--recording", action="append", default=[], help="a recording (repeat)")
    ap.add_argument("--models", default="flush,write-cache,torn-4k")
    ap.add_argument("--max-states", default="3000")
    ap.add_argument(
        "--work", default="", help="where recordings and checks go (default a temp dir)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_proofs: needs root (host mode: loop devices, mount, tracefs)", file=sys.stderr)
        return 1
    work = Path(args.work or tempfile.mkdtemp(prefix="powercut-proofs-"))
    recs = [(Path(r).name, Path(r)) for r in args.recording]
    if not recs:
        for name, how in MADE.items():
            rec = work / name
            if not (rec / "manifest.toml").exists():
                powercut("record", *how, "-o", str(rec), "--force")
            recs.append((name, rec))
    models = [m for m in args.models.split(",") if m]
    flags = [a for m in models for a in ("--model", m)]
    print(f"host mode, -j 1, models {', '.join(models)}, --max-states {args.max_states}")
    print(
        f"{'recording':14s} {'model':12s} {'states':>7s} {'proven':>7s} {'share':>6s} {'wrong':>6s}"
    )
    for name, rec in recs:
        runs = {}
        for how, extra in (("all", ["--judge-all"]), ("rule", [])):
            out = work / f"{name}.{how}"
            runs[how] = powercut(
                "check", str(rec), "--check-in", "host", "-j", "1", *flags,
                "--max-states", args.max_states, "-o", str(out), "--force", *extra,
            )  # fmt: skip
        every, some = verdicts(work / f"{name}.all"), verdicts(work / f"{name}.rule")
        summary = json.loads((work / f"{name}.rule" / "summary.json").read_text())
        for model in models:
            states = [s for s, d in some.items() if d["model"] == model]
            proven = [s for s in states if some[s].get("proof")]
            wrong = [s for s in proven if every[s]["verdict"] != some[s]["verdict"]]
            share = 100 * len(proven) / max(1, len(states))
            print(
                f"{name:14s} {model:12s} {len(states):7d} {len(proven):7d} {share:5.1f}% {len(wrong):6d}"
            )
            for s in wrong[:3]:
                print(f"  WRONG {s}: proven {some[s]['verdict']}, judged {every[s]['verdict']}")
        failing = sum(1 for d in every.values() if d["verdict"] != "pass")
        print(
            f"{name:14s} every state judged {runs['all']:.1f} s, with the rule {runs['rule']:.1f} s: "
            f"{runs['all'] / runs['rule']:.2f}x; {failing} failing states; "
            f"mismatch: {summary.get('readset_mismatch') or 'none'}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What ``torn-4k`` adds to the default model set's cost (issue #37 item 7: add it to the defaults
if it costs at most 1.5x).  For each of the three named workloads (filestorage, wal, osync; each with
its default parameters, recorded once on ext4), ``powercut check`` with the default models and again
with ``torn-4k`` added, in the same invocation of this script, alternating, ``--repeat`` times each.
Prints per workload and selection preset: the distinct states judged, the wall time and the CPU time
(the check and every process it waited for: less disturbed by other load than wall time) of both,
and their ratios (the least of the runs of each: the machine may be shared).

Presets: ``check`` (the check command's and the library's selection: bound 10, samples 64) and
``run`` (the quick default campaign's: bound 4, samples 8).  The states judged are chosen by pure
code (core/states/selection.py) before any is judged, so the state counts -- and their ratio -- are the same
whether the check runs on the host or in checker VMs; ``--check-in vm`` measures the time ratio there
too (slow under TCG).

Needs root (host mode: loop devices, mount).  Absolute times depend on the machine (and under TCG on
the emulation); the ratios carry over."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from powercut.errors import PowercutError
from powercut.linux import process
from powercut.record import recording

WORKLOADS = ("filestorage", "wal", "osync")
PRESETS = {"check": [], "run": ["--bound", "4", "--samples", "8"]}
TORN = "torn-4k"
CLI = [sys.executable, "-m", "powercut.cli"]


def record(workload: str, dest: Path) -> None:
    try:
        recording.load(dest).require_ok()
        return
    except PowercutError:
        pass
    t = time.perf_counter()
    process.run(CLI + ["record", "--workload", workload, "-o", str(dest), "--force"], timeout=1800)
    print(
        f"recorded {workload} (its default parameters) on ext4 in {time.perf_counter() - t:.0f} s",
        flush=True,
    )


def check(
    rec: Path, out: Path, models: list[str] | None, extra: list[str], where: str, jobs: int
) -> dict:
    """One check campaign; its distinct states judged, seconds and per-model counts (summary.json)."""
    argv = CLI + ["check", str(rec), "-o", str(out), "--force", "--check-in", where, *extra]
    argv += ["-j", str(jobs)] if jobs else []
    for m in models or ():
        argv += ["--model", m]
    t, ru = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    r = process.run(argv, timeout=6 * 3600, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - ru.ru_utime) + (
        after.ru_stime - ru.ru_stime
    )  # the check and what it waited for
    try:
        s = json.loads((out / "summary.json").read_text())
        used = json.loads((out / "campaign.json").read_text())["models"]
    except (OSError, ValueError, KeyError) as e:
        raise SystemExit(
            f"bench_torn: {' '.join(argv)} exited {r.returncode} without a summary:\n{r.stderr[-2000:]}"
        ) from e
    if s.get("status") != "complete":
        raise SystemExit(f"bench_torn: {' '.join(argv)}: campaign {s.get('status')}")
    return {
        "models": used,
        "states": int(s["total"]),
        "seconds": float(s["seconds"]),
        "wall": wall,
        "cpu": cpu,
        "verdict": s.get("verdict", ""),
        "per_model": {m: c.get("distinct", 0) for m, c in s.get("states", {}).items()},
        "owned": {m: c.get("owned", 0) for m, c in s.get("states", {}).items()},
    }


def one(rec: Path, tmp: Path, extra: list[str], where: str, jobs: int, repeat: int) -> dict:
    """The default models and the same plus torn-4k, alternating; the least disturbed run of each."""
    base: list[dict] = []
    torn: list[dict] = []
    for k in range(repeat):
        base.append(check(rec, tmp / f"base{k}", None, extra, where, jobs))
        models = [m for m in base[0]["models"] if m != TORN] + [TORN]
        torn.append(check(rec, tmp / f"torn{k}", models, extra, where, jobs))
    b, t = min(base, key=lambda r: r["wall"]), min(torn, key=lambda r: r["wall"])
    cpu = (min(r["cpu"] for r in base), min(r["cpu"] for r in torn))
    return {
        "defaults": b["models"],
        "states": (b["states"], t["states"]),
        "wall": (b["wall"], t["wall"]),
        "cpu": cpu,
        "seconds": (b["seconds"], t["seconds"]),
        "verdicts": (b["verdict"], t["verdict"]),
        "torn_distinct": t["per_model"].get(TORN, 0),
        "torn_owned": t["owned"].get(TORN, 0),
        "walls": ([round(r["wall"], 1) for r in base], [round(r["wall"], 1) for r in torn]),
    }


def _line(workload: str, preset: str, *pairs: tuple[float, float]) -> str:
    (sb, st), (wb, wt), (cb, ct) = pairs
    return (
        f"{workload:<12} {preset:<6} {sb:>7} {st:>7} {st / sb:>5.2f}   {wb:>7.1f} {wt:>7.1f} {wt / wb:>5.2f}"
        f"   {cb:>7.1f} {ct:>7.1f} {ct / cb:>5.2f}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help="comma-separated (default: the three named)",
    )
    ap.add_argument(
        "--recordings",
        default="",
        help="a directory holding (or to hold) one recording per workload",
    )
    ap.add_argument(
        "--presets", default="check,run", help="comma-separated: check, run (default both)"
    )
    ap.add_argument("--check-in", choices=("host", "vm"), default="host")
    ap.add_argument(
        "-j", "--jobs", type=int, default=0, help="as check's -j (default: one per core)"
    )
    ap.add_argument(
        "--torn-samples",
        type=int,
        default=None,
        help="check's --torn-samples in every run (default: the preset's): what fewer tears save",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=2,
        help="runs of each configuration (default 2; the fastest counts)",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_torn: needs root (loop devices, mount)", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="powercut-bench-torn-"))
    recs = Path(args.recordings) if args.recordings else tmp / "rec"
    rows = []
    torn_samples = [] if args.torn_samples is None else ["--torn-samples", str(args.torn_samples)]
    try:
        for w in args.workloads.split(","):
            record(w, recs / w)
            for preset in args.presets.split(","):
                r = one(
                    recs / w,
                    tmp / w / preset,
                    PRESETS[preset] + torn_samples,
                    args.check_in,
                    args.jobs,
                    max(1, args.repeat),
                )
                r.update(workload=w, preset=preset)
                rows.append(r)
                (sb, st), (wb, wt), (cb, ct) = r["states"], r["wall"], r["cpu"]
                print(
                    f"{w:<12} {preset:<6} {'+'.join(r['defaults'])}: {sb} states, {wb:.1f} s wall, "
                    f"{cb:.1f} s CPU; +{TORN}: {st} states ({r['torn_distinct']} distinct torn-4k, "
                    f"{r['torn_owned']} its own), {wt:.1f} s wall, {ct:.1f} s CPU; states x{st / sb:.2f}, "
                    f"wall x{wt / wb:.2f}, CPU x{ct / cb:.2f}  (walls {r['walls']})",
                    flush=True,
                )
        print()
        print(
            f"{'workload':<12} {'preset':<6} {'states':>7} {'+torn':>7} {'x':>5}   {'wall s':>7} {'+torn':>7} "
            f"{'x':>5}   {'CPU s':>7} {'+torn':>7} {'x':>5}   verdicts ({args.check_in})"
        )
        for r in rows:
            print(
                _line(r["workload"], r["preset"], r["states"], r["wall"], r["cpu"])
                + f"   {r['verdicts'][0]} / {r['verdicts'][1]}"
            )
        for preset in dict.fromkeys(r["preset"] for r in rows):
            mine = [r for r in rows if r["preset"] == preset]
            total = [
                tuple(sum(r[k][i] for r in mine) for i in (0, 1)) for k in ("states", "wall", "cpu")
            ]
            worst = {k: max(r[k][1] / r[k][0] for r in mine) for k in ("states", "wall", "cpu")}
            print(
                _line("all", preset, *total)
                + "   worst workload: "
                + ", ".join(f"{k} x{v:.2f}" for k, v in worst.items())
                + f"; at most 1.5x (states and CPU): "
                f"{'yes' if max(worst['states'], worst['cpu']) <= 1.5 else 'no'}"
            )
        print(json.dumps(rows))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

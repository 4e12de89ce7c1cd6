#!/usr/bin/env python3
"""What the system-call trace costs a recording (issue #38): each named workload recorded with the
trace (strace, the default) and without (``--no-trace``), alternately, ``--rounds`` times; prints
the median workload time (the guest's own clock around the workload) and the recording's wall
time (VM boot included) per setting, and their ratios with/without, measured in this invocation.

    python bench/bench_trace.py                       # append-fsync, wal, filestorage; 3 rounds
    python bench/bench_trace.py --rounds 5 --workload wal --param variant=correct

Needs what `powercut record` needs (root, QEMU, the guest image).  Absolute times on a TCG guest
say nothing about real machines: read the ratios."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import tomllib
from pathlib import Path

from powercut.linux import process

RECORD_TIMEOUT_S = 3600.0  # one recording, TCG included
NAMED = (("append-fsync", []), ("wal", ["variant=correct"]), ("filestorage", ["fsync=2"]))


def record(workload: str, params: list[str], trace: bool, out: Path) -> tuple[float, float, int]:
    argv = [
        sys.executable,
        "-m",
        "powercut.cli",
        "record",
        "--workload",
        workload,
        "-o",
        str(out),
        "--force",
    ]
    for p in params:
        argv += ["--param", p]
    if not trace:
        argv.append("--no-trace")
    process.run(argv, timeout=RECORD_TIMEOUT_S)
    m = tomllib.loads((out / "manifest.toml").read_text())
    return (
        float(m["result"]["workload_s"]),
        float(m["recording"]["wall_s"]),
        int(m.get("trace", {}).get("bytes", 0)),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", help="one workload instead of the three named ones")
    ap.add_argument("--param", action="append", default=[])
    args = ap.parse_args()
    cases = [(args.workload, args.param)] if args.workload else list(NAMED)
    print(
        f"{'workload':<28} {'workload s (no trace / trace)':>30} {'x':>6} {'recording s':>22} {'x':>6} {'trace KiB':>10}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        for name, params in cases:
            times: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
            for _ in range(args.rounds):
                for trace in (False, True):
                    times[trace].append(record(name, params, trace, Path(tmp) / "rec"))
            w = {t: statistics.median(x[0] for x in times[t]) for t in times}
            r = {t: statistics.median(x[1] for x in times[t]) for t in times}
            kib = max(x[2] for x in times[True]) >> 10
            label = name + (" " + " ".join(params) if params else "")
            print(
                f"{label:<28} {w[False]:>13.2f} / {w[True]:<14.2f} {w[True] / w[False]:>6.2f} "
                f"{r[False]:>9.2f} / {r[True]:<10.2f} {r[True] / r[False]:>6.2f} {kib:>10}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""What the test suite costs: its total and its slowest tests, from pytest's JUnit XML.

    python3 ci/suite_times.py runs/tests/junit.xml                  total, 25 slowest, slowest files
    python3 ci/suite_times.py NEW.xml --before OLD.xml               ... and what changed against OLD
    python3 ci/suite_times.py NEW.xml --top 40 --budget 1800         exit 1 past 1800 s of tests

ci/test.sh writes the JUnit file of every run (runs/tests/junit.xml) and prints this at its end, so
the next change can see what it costs.  Times are this machine's: compare runs of one machine
(a ratio carries over, an absolute figure does not)."""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def load(path: Path) -> tuple[dict[str, float], dict[str, str], float]:
    """(test id -> seconds, test id -> outcome, the run's wall time as pytest measured it)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise SystemExit(f"suite_times: cannot read {path}: {e}") from None
    times: dict[str, float] = {}
    outcome: dict[str, str] = {}
    wall = 0.0
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    for suite in suites:
        wall += float(suite.get("time") or 0)
        for case in suite.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            times[name] = times.get(name, 0.0) + float(case.get("time") or 0)
            kind = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
            outcome[name] = kind
    return times, outcome, wall


def module_of(test: str) -> str:
    return test.split("::")[0].rsplit(".", 1)[0] if "::" in test else test


def fmt(s: float) -> str:
    return f"{int(s // 60)} min {s % 60:4.1f} s" if s >= 60 else f"{s:.1f} s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", type=Path)
    ap.add_argument("--before", type=Path, help="an earlier run's JUnit XML to compare with")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument(
        "--budget", type=float, default=0, help="exit 1 when the tests took longer (seconds)"
    )
    args = ap.parse_args(argv)
    times, outcome, wall = load(args.junit)
    total = sum(times.values())
    counts: dict[str, int] = defaultdict(int)
    for kind in outcome.values():
        counts[kind] += 1
    print(
        f"suite: {len(times)} tests ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}) "
        f"in {fmt(wall or total)} (tests alone {fmt(total)})"
    )
    slow = sorted(times.items(), key=lambda kv: -kv[1])[: args.top]
    share = sum(t for _, t in slow) / total if total else 0
    print(f"the {len(slow)} slowest ({100 * share:.0f} % of the tests' time):")
    for name, t in slow:
        print(f"  {t:8.1f} s  {name}")
    per_module: dict[str, float] = defaultdict(float)
    for name, t in times.items():
        per_module[module_of(name)] += t
    print("the slowest modules:")
    for name, t in sorted(per_module.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {t:8.1f} s  {name}")
    if args.before:
        old, _, old_wall = load(args.before)
        old_total = sum(old.values())
        print(
            f"against {args.before}: {fmt(old_wall or old_total)} -> {fmt(wall or total)} "
            f"({(wall or total) / (old_wall or old_total or 1):.2f}x)"
        )
        gone = sorted(set(old) - set(times), key=lambda n: -old[n])
        moved = sorted(
            ((n, times.get(n, 0.0) - old[n]) for n in old if n in times), key=lambda kv: kv[1]
        )
        for name, d in moved[:10]:
            if d < -1:
                print(f"  {d:+8.1f} s  {name}")
        for name in gone[:10]:
            print(f"  {-old[name]:+8.1f} s  {name} (not in this run)")
        for name, t in sorted(
            ((n, t) for n, t in times.items() if n not in old), key=lambda kv: -kv[1]
        )[:5]:
            print(f"  {t:+8.1f} s  {name} (new)")
    if args.budget and (wall or total) > args.budget:
        print(
            f"suite_times: {fmt(wall or total)} is over the budget of {fmt(args.budget)}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

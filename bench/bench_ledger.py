#!/usr/bin/env python3
"""Coverage night after night (issue #37): the distinct write-cache states judged over N simulated
nights of ONE recording, against one night, for three ways of running a nightly:

* ``fixed seed``      -- ``--seed 0`` every night, no ledger: every night judges the same states;
* ``seed auto``       -- a new seed each night, no ledger: new samples, but the structured picks
  (keep all, drop all, drop each, keep each) and any sample drawn again are judged every night;
* ``seed auto+ledger``-- a new seed each night and ``--ledger``: states that passed on an earlier
  night are skipped, so each night judges only states never judged before.

Judging is simulated (every state passes): the figures are counts of distinct states (their
``core.imagekey.state_key``), not times, so they are the same on any machine.  With ``--max-states
N`` each night judges at most N states, and the ledger sends the cap to new states.

    python bench/bench_ledger.py                        # a synthetic 3000-entry log, 7 nights
    python bench/bench_ledger.py --recording runs/latest --nights 7 --bound 10 --samples 64
    python bench/bench_ledger.py --max-states 200

The log: ``--recording DIR`` / ``--log FILE``, else bench_scale's synthetic filesystem-shaped log
(a FLUSH every 20-30 writes: write-cache windows above the default bound, so they are sampled)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import synthetic_log

from powercut.core.log.dmlog import open_log
from powercut.core.states.imagekey import state_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.selection import SelectionSpec, select


def nights(
    sp: CrashSpace, spec: SelectionSpec, n: int, *, auto: bool, ledger: bool
) -> list[tuple[int, int]]:
    """Per night: (states judged that night, distinct states judged so far)."""
    union: set[str] = set()
    passed: set[str] = set()
    out = []
    for night in range(1, n + 1):
        sel = select(
            sp,
            spec.with_(seed=night if auto else 0),
            earlier=frozenset(passed) if ledger else frozenset(),
        )
        keys = {state_key(sp, s) for s in sel.states}
        union |= keys
        passed |= keys
        out.append((len(sel.states), len(union)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recording", default="", help="a recording directory (its log.bin)")
    p.add_argument("--log", default="", help="a dm-log-writes log file")
    p.add_argument("--entries", type=int, default=3000, help="synthetic log size (default 3000)")
    p.add_argument("--nights", type=int, default=7)
    p.add_argument("--bound", type=int, default=10)
    p.add_argument("--samples", type=int, default=64)
    p.add_argument("--max-states", type=int, default=0, help="per night (0: all)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = (
            Path(a.log)
            if a.log
            else Path(a.recording) / "log.bin"
            if a.recording
            else Path(tmp) / "log.bin"
        )
        if not a.log and not a.recording:
            synthetic_log(log, a.entries)
        spec = SelectionSpec(
            models=("write-cache",), bound=a.bound, samples=a.samples, max_states=a.max_states
        )
        with open_log(log) as index:
            sp = CrashSpace(index)
            runs = {
                "fixed seed": nights(sp, spec, a.nights, auto=False, ledger=False),
                "seed auto": nights(sp, spec, a.nights, auto=True, ledger=False),
                "seed auto+ledger": nights(sp, spec, a.nights, auto=True, ledger=True),
            }
            print(
                f"log: {log if a.log or a.recording else f'synthetic, {a.entries} entries'} "
                f"({len(index.entries)} entries); write-cache, bound {a.bound}, samples {a.samples}, "
                f"max-states {a.max_states or 'all'} per night; judging simulated (every state passes)"
            )
    print(f"{'night':>5} " + " ".join(f"{name + ' judged/total':>30}" for name in runs))
    for k in range(a.nights):
        print(
            f"{k + 1:>5} "
            + " ".join(f"{runs[name][k][0]:>14} / {runs[name][k][1]:<13}" for name in runs)
        )
    for name, r in runs.items():
        one, last = r[0][1], r[-1][1]
        judged = sum(x for x, _ in r)
        print(
            f"{name:>17}: {last} distinct states after {a.nights} nights = {last / one:.2f}x one night's {one}; "
            f"{judged} judgings, {judged - last} of them repeats"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How many late flushes (core/log/markorder.late_writes: the in-flight note) the system-call trace
clears (core/trace/latetrace.quiet), on recordings already made: no VM, no judging.

    python bench/late_cleared.py RECORDING...

Per recording (one disk, with its trace): the late flushes and FUA writes after ``mkfs``, how many
the trace cleared, and why each other one is kept; then the totals."""

from __future__ import annotations

import argparse
import collections
import gzip
import sys
from pathlib import Path

from powercut.core.log.dmlog import MARK, open_log
from powercut.core.log.markorder import late_writes
from powercut.core.trace import syscalls as sc
from powercut.core.trace.latetrace import quiet, why_kept

ROOT = "/run/powercut/mnt"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recordings", nargs="+", type=Path)
    args = ap.parse_args(argv)
    total: collections.Counter[str] = collections.Counter()
    for d in args.recordings:
        log, trace = d / "log.bin", d / "job" / "syscalls.txt.gz"
        if not (log.is_file() and trace.is_file()):
            print(f"{d}: no log.bin or no trace: skipped")
            continue
        with (
            open_log(log, quiet=True) as idx,
            gzip.open(trace, "rt", errors="surrogateescape") as fh,
        ):
            es = idx.entries
            tr = sc.parse(fh, ROOT)
            floor = next((e.index for e in es if e.flags & MARK and e.mark == "mkfs"), -1)
            late = late_writes(es)
            got = quiet(es, late, tr, ROOT)
            reasons = why_kept(es, late, tr, ROOT)
            mine = collections.Counter(reasons[f] for f in got.kept if f > floor)
            mine["cleared"] = sum(f > floor for f in got.cleared)
        total.update(mine)
        print(f"{d}: " + ", ".join(f"{n} {k}" for k, n in sorted(mine.items())))
    print(
        f"all: {sum(total.values())} late flushes after mkfs: "
        + ", ".join(f"{n} {k}" for k, n in sorted(total.items()))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

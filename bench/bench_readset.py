#!/usr/bin/env python3
"""How much judging a read-set rule could save (issue #42 item 3), measured, not shipped.

The rule: a state S needs no judging of its own if an already judged state J had the same checker
input (acks, begun keys) and S's image equals J's on every block J's judge read from the device
(recovery mount, checker, umount, fsck): the judge is a deterministic function of what it reads,
so it would read the same blocks in the same order and answer the same.  Two states' images differ
only where the log entries one keeps and the other does not wrote, so "equal on J's reads" is
"no entry in the symmetric difference of their kept sets touches a block J read".

This script judges every selected state of a recording in host mode (-j 1, one write-through loop
device), captures each state's reads with the kernel's ``block:block_rq_issue`` tracepoint (a
tracefs instance filtered on that loop device), then counts for each state whether one of the
``--lookback`` states judged before it (in walk order) matches by the rule, and whether the
matched state's verdict equals the state's own: a mismatch would disprove the rule.

Needs root and tracefs.  Prints per model: states, how many the rule would have skipped, and the
mismatches.  On append-fsync n=120 (ext4) it found 0 of 490 flush states and 1,668 of 5,974
write-cache states (28 %), with no mismatch: each flush state adds a journal block that recovery
reads (it probes the block after the journal's end, and reads ahead), so prefixes never match."""

from __future__ import annotations

import argparse
import bisect
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from powercut.check.context import LogSource, context_for
from powercut.check.judge import judge
from powercut.core.log.dmlog import open_log
from powercut.core.states.selection import select
from powercut.errors import PowercutError
from powercut.linux import process
from powercut.linux.loopdev import LoopDevice
from powercut.record.recording import load
from powercut.replay.materialize import materialize

TRACEFS = Path("/sys/kernel/tracing")
EVENT = re.compile(r"block_rq_issue: (\d+),(\d+) (\S+) \d+ \(\S*\s*\) (\d+) \+ (\d+)")


class Reads:
    """A tracefs instance of block_rq_issue on one device; ``take()``: the reads since the last take."""

    def __init__(self, dev: str) -> None:
        if not (TRACEFS / "instances").is_dir():
            process.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], timeout=60, check=False)
        if not (TRACEFS / "events/block/block_rq_issue").is_dir():
            raise SystemExit(
                "bench_readset: no tracefs with block:block_rq_issue here (mount -t tracefs nodev "
                f"{TRACEFS}; a kernel with CONFIG_BLK_DEV_IO_TRACE)"
            )
        self.dir = TRACEFS / "instances" / f"powercut-readset-{os.getpid()}"
        self.dir.mkdir()
        self.device = dev
        rdev = os.stat(dev).st_rdev
        self.major, self.minor = os.major(rdev), os.minor(rdev)
        ev = self.dir / "events/block/block_rq_issue"
        (ev / "filter").write_text(f"dev == {(self.major << 20) | self.minor}")
        (ev / "enable").write_text("1")
        self.pipe = os.open(self.dir / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)

    def take(self) -> list[tuple[int, int]]:
        chunks = []
        while True:
            try:
                b = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                break
            if not b:
                break
            chunks.append(b)
        out = []
        for m in EVENT.finditer(b"".join(chunks).decode(errors="replace")):
            if (int(m.group(1)), int(m.group(2))) == (self.major, self.minor) and "R" in m.group(3):
                out.append((int(m.group(4)), int(m.group(4)) + int(m.group(5))))  # 512-byte sectors
        return out

    def close(self) -> None:
        os.close(self.pipe)
        (self.dir / "events/block/block_rq_issue/enable").write_text("0")
        self.dir.rmdir()


def touches(reads: list[tuple[int, int]], lo: int, hi: int) -> bool:
    k = bisect.bisect_left(reads, (hi, hi))
    return any(a < hi and lo < b for a, b in reads[max(0, k - 64) : k])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("recording")
    ap.add_argument("--models", default="flush,write-cache")
    ap.add_argument(
        "--lookback", type=int, default=64, help="earlier judged states compared with (default 64)"
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_readset: needs root (loop devices, mount, tracefs)", file=sys.stderr)
        return 1
    try:
        rec = load(args.recording)
    except PowercutError as e:
        print(f"bench_readset: {e.one_line()}", file=sys.stderr)
        return 1
    ctx, src = context_for(rec), LogSource.of(rec)
    ws = Path(tempfile.mkdtemp(prefix="powercut-readset-"))
    try:
        with open_log(rec.log_path) as index:
            dummy = ws / "dummy.img"
            dummy.write_bytes(bytes(4096))
            with LoopDevice(dummy) as first:
                reads = Reads(first)  # tracing from before any state's image is bound
            reads.take()
            es, unit = index.entries, index.sectorsize // 512
            changes = [e.changes_device for e in es]

            def kept(st) -> frozenset:  # the (entry, torn sectors) a state keeps: CrashState's rule
                return frozenset(st.kept(changes))

            for model in args.models.split(","):
                states = list(select(index, [model]).states)
                judged: list[tuple] = []
                skipped = mismatched = 0
                t0 = time.perf_counter()
                (ws / model).mkdir()
                walk = materialize(index, src.initial, src.size, states, ws / model)
                with contextlib.closing(walk):
                    for st, img in walk:
                        with LoopDevice(img) as dev:  # as check/host judges a state
                            if (
                                dev != reads.device
                            ):  # another device than the last: trace the new one
                                reads.close()  # (from before this state's judge: nothing reads it before)
                                reads = Reads(dev)
                            v = judge(ctx, dev, st, str(ws / "mnt"))
                        r = sorted(reads.take())
                        ks = kept(st)
                        key = (tuple(st.acks), st.begun)
                        match = None
                        for j_key, j_kept, j_reads, j_verdict in reversed(judged[-args.lookback :]):
                            if j_key == key and not any(
                                touches(
                                    j_reads,
                                    es[i].sector * unit,
                                    (es[i].sector + es[i].nr_sectors) * unit,
                                )
                                for i, _ in ks ^ j_kept
                            ):
                                match = j_verdict
                                break
                        if match is not None:
                            skipped += 1
                            mismatched += match != v.verdict
                        else:
                            judged.append((key, ks, r, v.verdict))
                dt = time.perf_counter() - t0
                share = 100 * skipped / max(1, len(states))
                print(
                    f"{model:12s} {len(states):6d} states: the rule would skip {skipped} ({share:.0f} %), "
                    f"verdict mismatches {mismatched}; {1000 * dt / max(1, len(states)):.1f} ms per state with tracing",
                    flush=True,
                )
            reads.close()
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Fuzz the dm-log-writes reader: build random valid logs with LogWriter, mutate or truncate them,
and run each through open_log (lenient and strict).  Only BadLog or a clean early stop is allowed;
any other exception, or an index whose entries point outside the file, is a failure (exit 1).

    python bench/fuzz_log.py --inputs 20000 --seed 1
"""

from __future__ import annotations

import argparse
import logging
import random
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from powercut.core.log.dmlog import FLUSH, FUA, METADATA, open_log
from powercut.core.log.dmlog_writer import LogWriter
from powercut.errors import BadLog

INTERESTING = [
    0,
    1,
    2,
    7,
    8,
    16,
    31,
    32,
    255,
    256,
    511,
    512,
    4096,
    65536,
    2**31,
    2**32 - 1,
    2**32,
    2**55,
    2**63 - 1,
    2**63,
    2**64 - 1,
]


def base_log(rng: random.Random, path: Path) -> tuple[int, list[int]]:
    """Write a random valid log; returns (sectorsize, byte offsets of its entry headers)."""
    ss = rng.choice([512, 512, 4096])
    headers = []
    with LogWriter(path, ss) as w:
        pos = ss
        for _ in range(rng.randint(0, 40)):
            headers.append(pos)
            kind = rng.random()
            if kind < 0.5:
                nr = rng.randint(1, 4)
                w.write(
                    rng.randrange(2**20),
                    bytes([rng.randrange(256)]) * (nr * ss),
                    rng.choice([0, 0, FUA, FLUSH, FLUSH | FUA, METADATA]),
                )
                pos += ss * (nr + 1)
                continue
            if kind < 0.65:
                w.flush()
            elif kind < 0.75:
                w.discard(rng.randrange(2**20), rng.randint(1, 4096))
            else:
                w.mark(
                    rng.choice(
                        ["mkfs", "ack:" + str(rng.randrange(100)), "begin:x", "dm-log-writes-end"]
                    )
                )
            pos += ss
        w.close(stale_super=rng.random() < 0.3)
    return ss, headers


def mutate(rng: random.Random, data: bytearray, ss: int, headers: list[int]) -> tuple[str, bytes]:
    how = rng.choice(["truncate", "flip", "header", "super", "zero", "shift", "garbage", "empty"])
    if how == "truncate":
        return how, bytes(data[: rng.randrange(len(data) + 1)])
    if how == "flip":
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(data))
            data[at] ^= 1 << rng.randrange(8)
    elif how == "header" and headers:
        at = rng.choice(headers) + 8 * rng.randrange(4)
        struct.pack_into("<Q", data, at, rng.choice(INTERESTING + [rng.getrandbits(64)]))
    elif how == "super":
        at, fmt = rng.choice([(0, "<Q"), (8, "<Q"), (16, "<Q"), (24, "<I")])
        value = rng.choice(INTERESTING + [rng.getrandbits(64)])
        struct.pack_into(fmt, data, at, value & (0xFFFFFFFF if fmt == "<I" else 2**64 - 1))
    elif how == "zero":
        at = rng.randrange(len(data))
        n = min(rng.randint(1, 2 * ss), len(data) - at)
        data[at : at + n] = bytes(n)
    elif how == "shift":
        at = rng.randrange(len(data))
        if rng.random() < 0.5:
            del data[at : at + rng.randint(1, 64)]
        else:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif how == "garbage":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 3 * ss)))
    elif how == "empty":
        return how, b""
    return how, bytes(data)


def check(path: Path, size: int) -> str:
    """'badlog', 'early' or 'clean'; raises AssertionError on an inconsistent index."""
    try:
        idx = open_log(path)
    except BadLog:
        return "badlog"
    with idx:
        for i, e in enumerate(idx.entries):
            assert e.index == i, f"entry {i} has index {e.index}"
            if e.is_write:
                assert e.data_offset + e.nr_sectors * idx.sectorsize <= size, (
                    f"entry {i} data past EOF"
                )
                assert len(idx.data(e)) == e.nr_sectors * idx.sectorsize
        clean = idx.clean
    try:
        open_log(path, strict=True).close()
        assert clean, "strict accepted a log with a corrupt stop"
    except BadLog:
        assert not clean, "strict rejected a cleanly ending log"
    return "clean" if clean else "early"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--inputs", type=int, default=2000, help="number of mutated logs to run (default 2000)"
    )
    ap.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = ap.parse_args(argv)
    logging.getLogger("powercut").setLevel(
        logging.ERROR
    )  # early-stop warnings are the expected outcome
    rng = random.Random(args.seed)
    outcomes: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    failures = 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        base, victim = Path(d) / "base.log", Path(d) / "victim.log"
        for n in range(args.inputs):
            if n % 8 == 0:
                ss, headers = base_log(rng, base)
                original = base.read_bytes()
            how, blob = mutate(rng, bytearray(original), ss, headers)
            victim.write_bytes(blob)
            kinds[how] += 1
            try:
                outcomes[check(victim, len(blob))] += 1
            except Exception:  # noqa: BLE001 - the point of a fuzzer
                failures += 1
                keep = Path(f"fuzz-failure-{args.seed}-{n}.log")
                keep.write_bytes(blob)
                print(f"input {n} ({how}) raised; saved as {keep}:", file=sys.stderr)
                traceback.print_exc()
    took = time.monotonic() - start
    print(
        f"ran {args.inputs} inputs (seed {args.seed}) in {took:.1f} s: BadLog {outcomes['badlog']}, "
        f"stopped early {outcomes['early']}, clean {outcomes['clean']}, other exceptions {failures}"
    )
    print("mutations: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

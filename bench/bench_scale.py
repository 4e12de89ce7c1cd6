"""Scaling bench (issue #23 item 3): time and peak memory of each stage of the pure pipeline against
the log's length, for logs of 10^3, 10^4, 10^5 and 10^6 entries.

    python bench/bench_scale.py                    # 10^3 .. 10^6, synthetic and real
    python bench/bench_scale.py --quick            # 10^3 .. 10^4
    python bench/bench_scale.py --max 100000 --sources synthetic --out /tmp/scale

Phases, each in a fresh child process per (log, size, phase) so that its peak memory is its own
(``os.wait4``'s ``ru_maxrss`` of that child, minus that of a baseline child that only imports):

* ``read``         -- ``open_log``: scan the log into its index;
* ``enum:MODEL``   -- build the ``CrashSpace`` and enumerate every state of one model (no-cache,
  flush, write-cache, torn, torn-4k), with the campaign's defaults (seed 0, bound 10, samples 64);
* ``select``       -- ``core.selection.select`` with the models a campaign uses by default
  (flush, write-cache): floor, each distinct image once;
* ``walk``         -- ``replay.materialize`` (the pristine walk plus one clone per state) over a
  bounded, evenly spread sample of the selected states (``--walk-states``, default 64, the same
  number at every size: the pristine walk covers the log up to the last sampled state, i.e. the
  whole log, so the phase's time is the walk's; the per-state cost -- clone, extras, release -- is
  reported apart, and is bounded by the data device, not the log).  The sample is rebuilt in the
  child from the selection's state ids (a state's id alone rebuilds it).  Snapshot provider:
  reflink if the workspace has it, else the sparse copy (no root tricks: no loop-mounted XFS).

Each child but ``read`` first reads the log (untimed); its memory includes the index it needs.

**Logs.**  *synthetic*: ``LogWriter``, shaped like a filesystem's log -- a ``mkfs`` mark, mostly
4 KiB writes over a 256 MiB device (some 8/16 KiB), a FLUSH every 20-30 writes followed by a FUA
commit block and the ``ack:K`` / ``begin:K+1`` marks a workload's commit makes, 3 % FUA data
writes, 1 % 1 MiB discards (about 4.9 KB of log per entry: 4.9 GB at 10^6).  *real*: the entry
sequence of a real recording, tiled.  The host kernel here has no device-mapper
(``dmsetup targets``: no /dev/mapper/control; ``modprobe dm-log-writes``: not found), so a real
ext4 workload cannot be recorded on the host at these sizes (option (a)); instead (option (b)) the
script records one cheap real log with the project's CLI (``powercut record --workload
append-fsync --param n=200`` in a VM, ~12 s under TCG: ~3250 entries, ext4 with ordered ack marks)
or takes ``--real-recording DIR`` / ``--real-log FILE``, then repeats its workload section (from
the first key mark to the teardown mark, byte for byte, key marks renamed so that each tile's
keys are new) after its mkfs prefix until the target count, and ends with the teardown mark.  The
tiled log has the recording's exact entry mix, flush/FUA/mark cadence and sector addresses.

**Output**: a table (entries -> seconds and MiB per phase, entries/s, states), each figure as a
ratio against the 10^3 run of the same log normalised by size (time per entry at N / time per
entry at 10^3: ~1 is linear), a phase flagged SUPERLINEAR when its time per entry grows more than
2x from 10^4 to the largest size; a log-log plot (PNG + SVG) of time and memory against entries,
with a linear reference; results.json.  Figures, never timed assertions (tests/README.md).
``--from-results FILE`` prints the table and draws the plot of an earlier run again.

**Findings** (2 cores, Python 3.11, ext4 workspace: sparse-copy provider; full tables in the #23
report).  Superlinear before this bench and fixed in the core (cProfile, tracemalloc):

* ``enum:no-cache`` / ``enum:flush`` on the real log: time per entry x2.5 / x3.2 from 10^4 to 10^5
  entries (would be ~x25 at 10^6).  ``CrashSpace.keys`` built one tuple of every ack so far per key
  version (k acks: O(k^2) time and memory).  Now a state's acks are a ``KeyPrefix`` of one shared
  list: x1.07 / x1.26.
* Memory: reading or walking a log made every mapped page of it resident (RSS = the log's size,
  4.6 GB at 10^6); the scan and the walk now drop the pages they are done with (madvise).  The
  image key of ``select`` cost ~720 B per state (722 -> 142); enumeration kept the equivalence key
  of every state ever generated (now forgotten below an epoch's floor: write-cache 518 -> 321 B
  per state); a torn state's sector offsets were fresh ints (36 B each, hundreds for a large
  write); the space's prefix tables one int per entry.

Now every phase is linear in time: time per entry from 10^4 to 10^6 within x0.87..x1.41 and
x0.89..x1.85 in two full runs on this shared 2-core machine (the second beside another engineer's
VM tests, load ~5), no phase over 2x.  ``walk``'s time per entry falls: the pristine walk is
linear in the bytes written (0.4-1 GB/s here), the 64 clones a constant, each bounded by the data
device (a sparse copy of up to 256 MiB), not by the log.

**Memory at 10^6 entries** (peak RSS above an import-only child; synthetic / real, 2026-11-25, on
this 2-core machine beside a TCG matrix run): read 207 / 208 MiB (the Entry index, ~180 B per
entry), enum:no-cache 321 / 332, flush 321 / 332, write-cache 359 / 354, torn 407 / 382, torn-4k
357 / 349, select 660 / 535, walk 342 / 313 -- all under 1 GiB.  Before (objects for every state):
write-cache 2633 / 1300, torn 4020 / 1400, select 4629 / 2100.  What changed: a model's states are
streamed (``CrashSpace.iter_states``: one cut's states and one epoch's equivalence keys at a time;
the enum phases count the stream), and ``select`` takes all models a key version at a time (two
states of different key versions are never one image) and keeps its representatives as ids
(``StateList``: the id after ``MODEL@``, a model byte and a 4-byte offset, ~25 B a state; a state
is rebuilt from its id when judged).  The states a campaign still has to judge are objects again
(``--max-states`` caps them; a campaign over 3-7.6 M states would take days anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from powercut.core.log.dmlog import (
    END_MARK,
    HEADER,
    MAGIC,
    MARK,
    METADATA,
    SUPER,
    VERSION,
    open_log,
)
from powercut.core.log.dmlog_writer import LogWriter
from powercut.core.states.models import MODELS, CrashSpace
from powercut.core.states.selection import (
    SelectionSpec,  # `powercut check` uses its default models
    select,
    spread,
)
from powercut.linux import process
from powercut.linux.imageio import probe_reflink
from powercut.replay.materialize import ReplayStats, materialize

SIZES = (10**3, 10**4, 10**5, 10**6)
ENUM_MODELS = tuple(
    m for m in ("no-cache", "flush", "write-cache", "torn", "torn-4k") if m in MODELS
)
PHASES = ("read", *(f"enum:{m}" for m in ENUM_MODELS), "select", "walk")
DEVICE_BYTES = 256 << 20
MIB = 1 << 20
SUPERLINEAR = 2.0


# -- logs --------------------------------------------------------------------------------------------------
def synthetic_log(path: Path, n: int, seed: int = 1, device_bytes: int = DEVICE_BYTES) -> None:
    """Exactly ``n`` entries shaped like a filesystem's log (see the module docstring)."""
    with LogWriter(path, 512) as w:
        for op in _fs_ops(random.Random(seed), device_bytes // 4096):
            if w.count == n - 1:
                break
            op(w)
        w.mark(END_MARK)


def _fs_ops(r: random.Random, units: int):  # noqa: ANN202 - an endless iterator of LogWriter calls
    blocks = [r.randbytes(4096) for _ in range(64)]
    k, since, gap = 0, 0, r.randint(20, 30)
    yield lambda w: w.mark("mkfs")
    yield lambda w: w.mark("begin:0")
    while True:
        x = r.random()
        if (
            since >= gap
        ):  # a commit: the flush, the FUA commit block, its ack, the next commit begins
            at, key = r.randrange(units) * 8, k
            yield lambda w: w.flush()
            yield lambda w: w.fua(at, blocks[key % 64], METADATA)
            yield lambda w: w.mark(f"ack:{key}")
            yield lambda w: w.mark(f"begin:{key + 1}")
            k, since, gap = k + 1, 0, r.randint(20, 30)
        elif x < 0.01:
            at = r.randrange(units - 256) * 8
            yield lambda w: w.discard(at, 2048)
        elif x < 0.04:
            at, data = r.randrange(units) * 8, blocks[r.randrange(64)]
            yield lambda w: w.fua(at, data)
        else:
            nb = 1 if x < 0.9 else r.choice((2, 4))
            at, data = (
                r.randrange(units - 4) * 8,
                b"".join(blocks[r.randrange(64)] for _ in range(nb)),
            )
            yield lambda w: w.write(at, data)
            since += 1


def tile_log(src: Path, dst: Path, n: int) -> dict[str, int]:
    """A log of ``n`` entries: ``src``'s entries before its first key mark once, then its workload
    section (first key mark .. before the teardown mark) repeated byte for byte, ack/begin keys
    renamed per tile (``<tile>.<key>``), then the teardown mark."""
    with open_log(src) as idx, open(src, "rb") as raw, open(dst, "wb") as out:
        es = idx.entries
        ss = idx.sectorsize
        body = [e for e in es if e.mark != END_MARK]
        start = next(
            (i for i, e in enumerate(body) if e.ack_key is not None or e.begin_key is not None),
            None,
        )
        if start is None or start == len(body):
            raise SystemExit(f"{src}: no ack:/begin: mark to tile from")
        prefix, unit = body[:start], body[start:]
        out.write(SUPER.pack(MAGIC, VERSION, 0, ss).ljust(ss, b"\0"))
        count, tile = 0, 0

        def put(e, text: str | None = None) -> None:
            nonlocal count
            if e.is_mark:
                txt = (text if text is not None else e.mark).encode()
                out.write((HEADER.pack(e.sector, 0, MARK, len(txt)) + txt).ljust(ss, b"\0"))
            else:
                out.write(
                    os.pread(raw.fileno(), ss, e.data_offset - ss)
                )  # the header as logged (data_len too)
                if not e.is_discard and e.nr_sectors:
                    out.write(idx.data(e))
            count += 1

        for e in prefix[: n - 1]:
            put(e)
        while count < n - 1:
            for e in unit:
                if count >= n - 1:
                    break
                key = e.ack_key if e.ack_key is not None else e.begin_key
                put(
                    e,
                    None
                    if key is None or tile == 0
                    else f"{e.mark[: len(e.mark) - len(key)]}{tile}.{key}",
                )
            tile += 1
        out.write((HEADER.pack(0, 0, MARK, len(END_MARK)) + END_MARK.encode()).ljust(ss, b"\0"))
        count += 1
        out.seek(16)
        out.write(count.to_bytes(8, "little"))
    return {"entries": count, "tiles": tile, "prefix": len(prefix), "unit": len(unit)}


def record_real(out: Path, n: int = 200, timeout: float = 900) -> Path:
    """Record append-fsync (n commits) on ext4 with the project's CLI; returns the log path."""
    argv = [
        "powercut",
        "record",
        "--workload",
        "append-fsync",
        "--param",
        f"n={n}",
        "-o",
        str(out),
        "--force",
    ]
    print("recording a real log: " + " ".join(argv), flush=True)
    process.run(argv, timeout=timeout)
    return out / "log.bin"


def data_size(log_path: Path) -> int:
    """The data device's size: the recording's (manifest next to the log), else DEVICE_BYTES."""
    manifest = log_path.parent / "manifest.toml"
    if manifest.is_file():
        from powercut.record.recording import load  # noqa: PLC0415 - only for real recordings

        try:
            return load(log_path.parent).data_size
        except Exception:  # noqa: BLE001 - a bare log next to an unrelated file
            pass
    return DEVICE_BYTES


# -- children: one phase of one log ---------------------------------------------------------------
def child(
    phase: str, log_path: Path, ids_path: Path, workspace: Path, size: int, walk_states: int
) -> dict:
    if phase == "baseline":
        return {"seconds": 0.0}
    if phase == "read":
        t = time.perf_counter()
        idx = open_log(log_path)
        dt = time.perf_counter() - t
        return {"seconds": dt, "entries": len(idx), "states": 0, **_rss()}
    idx = open_log(log_path)
    if phase.startswith("enum:"):
        t = time.perf_counter()
        sp = CrashSpace(idx)
        t_space = time.perf_counter() - t
        count = sum(1 for _ in sp.iter_states(phase[5:]))  # streamed: what select consumes
        dt = time.perf_counter() - t
        return {"seconds": dt, "space_s": t_space, "entries": len(idx), "states": count, **_rss()}
    if phase == "select":
        t = time.perf_counter()
        sel = select(idx, SelectionSpec())
        dt = time.perf_counter() - t
        sample = [sel.states[i].id for i in spread(len(sel.states), walk_states)]
        ids_path.write_text(json.dumps(sample))
        return {
            "seconds": dt,
            "entries": len(idx),
            "states": len(sel.states),
            "aliases": sum(map(len, sel.aliases.values())),
            **_rss(),
        }
    if phase == "walk":
        sp = CrashSpace(idx)
        states = [sp.state_from_id(i) for i in json.loads(ids_path.read_text())]
        del sp
        prov = "reflink" if probe_reflink(workspace) is None else "copy"
        st = ReplayStats()
        t = time.perf_counter()
        for _ in materialize(idx, None, size, states, workspace, prov, stats=st):
            pass
        dt = time.perf_counter() - t
        per = (st.clone_s + st.extras_s + st.release_s) / max(st.states, 1)
        return {
            "seconds": dt,
            "entries": len(idx),
            "states": st.states,
            "provider": st.provider,
            "walk_s": st.walk_s,
            "walk_mib": st.walk_bytes / MIB,
            "per_state_ms": per * 1e3,
            **_rss(),
        }
    raise SystemExit(f"unknown phase {phase!r}")


def _rss() -> dict[str, float]:
    """The child's memory at the end, split (its peak is the parent's wait4)."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "RssFile", "VmHWM"):
                got[k.lower() + "_mib"] = int(v.split()[0]) / 1024
    return got


@dataclass
class Run:
    """What the parent got from one child."""

    seconds: float
    peak_mib: float  # ru_maxrss of the child minus the baseline child's
    data: dict = field(default_factory=dict)


def run_child(
    phase: str, log_path: Path, a: argparse.Namespace, size: int, baseline_mib: float
) -> Run:
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        phase,
        "--log",
        str(log_path),
        "--ids",
        str(log_path.with_suffix(".ids.json")),
        "--workspace",
        str(a.workspace),
        "--size",
        str(size),
        "--walk-states",
        str(a.walk_states),
    ]
    # not the runner: the peak memory is os.wait4's rusage of this very child, which process.run does not give
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, env={**os.environ, "PYTHONHASHSEED": "0"})
    timer = threading.Timer(a.timeout, p.kill)
    timer.start()
    try:
        out = p.stdout.read() if p.stdout else b""
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        timer.cancel()
        if p.stdout:
            p.stdout.close()
    if p.returncode != 0:
        raise RuntimeError(
            f"phase {phase} on {log_path.name} failed (exit {p.returncode}; timeout {a.timeout:g} s)"
        )
    data = json.loads(out.decode().strip().splitlines()[-1])
    return Run(data["seconds"], ru.ru_maxrss / 1024 - baseline_mib, data)


# -- the table ------------------------------------------------------------------------------------------
def per_entry(results: dict, source: str, phase: str, key: str) -> dict[int, float]:
    return {int(n): r[phase][key] / int(n) for n, r in results[source].items() if phase in r}


def growth(results: dict, source: str, phase: str, key: str) -> tuple[float, int, int] | None:
    """(per-entry growth, from size, to size): from 10^4 (or the smallest size, if 10^4 is the
    largest or was not run) to the largest size run."""
    pe = per_entry(results, source, phase, key)
    if len(pe) < 2:
        return None
    lo = 10**4 if 10**4 in pe and max(pe) > 10**4 else min(pe)
    hi = max(pe)
    return (pe[hi] / pe[lo] if pe[lo] > 0 else float("inf")), lo, hi


def verdicts(results: dict, source: str) -> dict[str, str]:
    """Per phase: linear, or SUPERLINEAR when its time (or memory) per entry grew more than 2x
    from 10^4 to the largest size."""
    out = {}
    for phase in PHASES:
        t, m = growth(results, source, phase, "seconds"), growth(results, source, phase, "peak_mib")
        if t is None or m is None:
            continue
        bad = [what for what, (g, _, _) in (("time", t), ("memory", m)) if g > SUPERLINEAR]
        out[phase] = (
            f"{'SUPERLINEAR (' + ' and '.join(bad) + ')' if bad else 'linear'}: per entry, time x{t[0]:.2f}, "
            f"memory x{m[0]:.2f} from {t[1]:,} to {t[2]:,} entries"
        )
    return out


def table(results: dict) -> str:
    lines = []
    for source, runs in results.items():
        sizes = sorted(int(n) for n in runs)
        base = str(sizes[0])
        lines.append(
            f"\n== {source} log (ratios: per entry, against the {sizes[0]:,}-entry run; ~1 = linear)"
        )
        lines.append(
            f"{'phase':17} {'entries':>9} {'seconds':>9} {'MiB':>8} {'entries/s':>11} {'states':>9} "
            f"{'B/state':>8} {'t/entry ratio':>13} {'MiB/entry ratio':>15}"
        )
        for phase in PHASES:
            for n in sizes:
                r = runs[str(n)].get(phase)
                if r is None:
                    continue
                b = runs[base][phase]
                tr = (
                    (r["seconds"] / n) / (b["seconds"] / sizes[0])
                    if b["seconds"] > 0
                    else float("nan")
                )
                mr = (
                    (r["peak_mib"] / n) / (b["peak_mib"] / sizes[0])
                    if b["peak_mib"] > 0.5
                    else float("nan")
                )
                eps = n / r["seconds"] if r["seconds"] > 0 else float("inf")
                states = r.get("states", 0)
                bps = (
                    f"{r['peak_mib'] * MIB / states:8.0f}"
                    if states and phase != "walk"
                    else f"{'-':>8}"
                )
                lines.append(
                    f"{phase:17} {n:>9,} {r['seconds']:>9.3f} {r['peak_mib']:>8.1f} {eps:>11,.0f} "
                    f"{states:>9,} {bps} {tr:>13.2f} {mr:>15.2f}"
                )
            if phase == "walk":
                for n in sizes:
                    r = runs[str(n)].get(phase)
                    if r:
                        lines.append(
                            f"{'':17} {n:>9,} pristine walk {r['walk_s']:.3f} s for {r['walk_mib']:,.0f} "
                            f"MiB; {r['states']} states ({r['provider']}): {r['per_state_ms']:.2f} ms/state "
                            f"beyond the walk"
                        )
        for phase, v in verdicts(results, source).items():
            lines.append(f"  {phase:17} {v}")
        top = runs[str(sizes[-1])]
        lines.append(
            f"  peak memory at {sizes[-1]:,} entries (MiB above an import-only child): "
            + ", ".join(f"{ph} {r['peak_mib']:.0f}" for ph, r in top.items())
            + f"; over 1 GiB: {', '.join(ph for ph, r in top.items() if r['peak_mib'] > 1024) or 'none'}"
        )
    return "\n".join(lines)


def plot(results: dict, out: Path) -> list[Path]:
    import matplotlib  # noqa: PLC0415 - optional dependency, only for the plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    sources = list(results)
    fig, axes = plt.subplots(len(sources), 2, figsize=(13, 5 * len(sources)), squeeze=False)
    for row, source in enumerate(sources):
        runs = results[source]
        sizes = sorted(int(n) for n in runs)
        for col, (key, label) in enumerate(
            (("seconds", "seconds"), ("peak_mib", "peak RSS above baseline (MiB)"))
        ):
            ax = axes[row][col]
            tops = []
            for phase in PHASES:
                xs = [n for n in sizes if phase in runs[str(n)] and runs[str(n)][phase][key] > 0]
                ys = [runs[str(n)][phase][key] for n in xs]
                if xs:
                    ax.plot(
                        xs,
                        ys,
                        marker="o",
                        ls="-" if phase.startswith(("read", "select", "walk")) else "-.",
                        label=phase,
                    )
                    tops.append(ys[-1] / xs[-1])
            if tops and len(sizes) > 1:  # through the top phase's point at the largest size
                k = max(tops)
                ax.plot(
                    sizes, [k * n for n in sizes], "k--", lw=1, alpha=0.6, label="linear (slope 1)"
                )
            if key == "peak_mib":
                ax.axhline(1024, color="r", lw=1, ls=":", label="1 GiB")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("log entries")
            ax.set_ylabel(label)
            ax.set_title(f"{source} log: {label.split(' (')[0]} per phase")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    paths = [out / "scale.png", out / "scale.svg"]
    for p in paths:
        fig.savefig(p, dpi=110)
    plt.close(fig)
    return paths


# -- main -------------------------------------------------------------------------------------------------
def make_log(source: str, n: int, logs: Path, real_src: Path | None) -> Path:
    p = logs / f"{source}-{n}.log"
    t = time.perf_counter()
    if source == "synthetic":
        synthetic_log(p, n)
        info = ""
    else:
        assert real_src is not None
        got = tile_log(real_src, p, n)
        info = f" ({got['prefix']} prefix entries + {got['tiles']} tiles of {got['unit']})"
    print(
        f"  {source} log of {n:,} entries: {p.stat().st_size / MIB:,.0f} MiB{info}, made in "
        f"{time.perf_counter() - t:.1f} s",
        flush=True,
    )
    return p


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--max", type=int, default=SIZES[-1], help="largest log size (entries), default 10^6"
    )
    ap.add_argument("--quick", action="store_true", help="10^3 and 10^4 only")
    ap.add_argument(
        "--sources", default="synthetic,real", help="synthetic, real or both (comma separated)"
    )
    ap.add_argument("--real-recording", type=Path, help="a recording directory whose log to tile")
    ap.add_argument(
        "--real-log", type=Path, help="a log file to tile (default: record one with the CLI)"
    )
    ap.add_argument("--phases", default=",".join(PHASES), help="subset of the phases")
    ap.add_argument(
        "--walk-states", type=int, default=64, help="states the walk phase replays (spread)"
    )
    ap.add_argument("--out", type=Path, help="output directory (default: a new temporary one)")
    ap.add_argument("--workspace", type=Path, help="replay workspace (default: OUT/ws)")
    ap.add_argument("--keep-logs", action="store_true", help="keep the generated logs in OUT/logs")
    ap.add_argument("--timeout", type=float, default=3600, help="per child, seconds")
    ap.add_argument(
        "--from-results", type=Path, help="only print the table and plot of an earlier results.json"
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--ids", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=DEVICE_BYTES, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.child:
        print(json.dumps(child(a.child, a.log, a.ids, a.workspace, a.size, a.walk_states)))
        return 0
    if a.from_results:
        out = a.out or a.from_results.parent
        out.mkdir(parents=True, exist_ok=True)
        return report(json.loads(a.from_results.read_text())["results"], out)
    sizes = [n for n in SIZES if n <= (10**4 if a.quick else a.max)]
    sources = [s for s in a.sources.split(",") if s]
    phases = [p for p in a.phases.split(",") if p]
    if not sizes or not set(sources) <= {"synthetic", "real"} or not set(phases) <= set(PHASES):
        raise SystemExit(f"nothing to do: sizes {sizes}, sources {sources}, phases {phases}")
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    a.workspace = a.workspace or out / "ws"
    a.workspace.mkdir(parents=True, exist_ok=True)
    print(
        f"bench_scale: sizes {', '.join(f'{n:,}' for n in sizes)}; sources {', '.join(sources)}; "
        f"cpus {os.cpu_count()}; python {sys.version.split()[0]}; out {out}",
        flush=True,
    )
    real_src = None
    if "real" in sources:
        real_src = a.real_log or (a.real_recording / "log.bin" if a.real_recording else None)
        if real_src is None:
            real_src = record_real(out / "real-recording")
    baseline = run_child("baseline", logs, a, 0, 0.0).peak_mib
    print(f"baseline child (imports only): {baseline:.1f} MiB peak RSS", flush=True)
    results: dict[str, dict[str, dict[str, dict]]] = {}
    for source in sources:
        results[source] = {}
        size = data_size(real_src) if source == "real" and real_src else DEVICE_BYTES
        for n in sizes:
            p = make_log(source, n, logs, real_src)
            got = results[source][str(n)] = {}
            for phase in phases:
                r = run_child(phase, p, a, size, baseline)
                got[phase] = {"seconds": r.seconds, "peak_mib": r.peak_mib, **r.data}
                print(
                    f"    {phase:17} {r.seconds:9.3f} s  {r.peak_mib:8.1f} MiB  {r.data.get('states', 0):>9,} states",
                    flush=True,
                )
            (out / "results.json").write_text(
                json.dumps({"baseline_mib": baseline, "results": results}, indent=1)
            )
            if not a.keep_logs:
                p.unlink()
                p.with_suffix(".ids.json").unlink(missing_ok=True)
    shutil.rmtree(a.workspace, ignore_errors=True)
    print(f"results: {out / 'results.json'}")
    return report(results, out)


def report(results: dict, out: Path) -> int:
    text = table(results)
    print(text)
    (out / "table.txt").write_text(text + "\n")
    paths = plot(results, out)
    print(f"\ntable: {out / 'table.txt'}; plot: {', '.join(map(str, paths))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

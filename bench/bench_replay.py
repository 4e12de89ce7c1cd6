"""Incremental replay bench: log read rate, pristine-walk throughput, cost per materialized state
for every snapshot provider that works here, and the ratio against replaying every state from
entry 0 (fstests generic/482 style) on the same states.

    python bench/bench_replay.py --recording DIR
    python bench/bench_replay.py --synthetic-mb 256       # also runs a 4x longer synthetic log

Goals reported against: replay >= 1 GB/s; cost per state independent of the log length (shown as
the per-state cost for states early vs late in the log, and for two synthetic log lengths)."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from powercut.core.log.dmlog import FUA, LogIndex, open_log
from powercut.core.log.dmlog_writer import LogWriter
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import enumerate_states
from powercut.errors import PowercutError
from powercut.linux.dm import dm_available as dm_supported
from powercut.linux.imageio import probe_reflink
from powercut.linux.mounts import fs_type
from powercut.record.recording import load_recording
from powercut.replay.materialize import ReplayStats, materialize, reference_image, replay_into
from powercut.replay.providers import choose_provider

MB = 1 << 20


def synthetic_log(path: Path, mb: int, device_bytes: int, seed: int = 1) -> None:
    """Writes of 4 KiB..1 MiB (mostly small, like a filesystem's), a FLUSH every ~24 writes, some
    FUA writes, discards and ack marks, until ``mb`` MiB of data are logged."""
    r = random.Random(seed)
    sizes = [4096] * 6 + [8192, 16384, 65536, 262144, 1 << 20]
    nsect = device_bytes // 512
    written = 0
    k = 0
    with LogWriter(path, 512) as w:
        w.mark("mkfs")
        while written < mb * MB:
            n = r.choice(sizes)
            sector = r.randrange(0, nsect - n // 512) & ~7
            w.write(sector, r.randbytes(64) * (n // 64), FUA if r.random() < 0.04 else 0)
            written += n
            k += 1
            if r.random() < 0.01:
                w.discard(r.randrange(0, nsect - 2048) & ~7, 2048)
            if k % 24 == 0:
                w.flush()
                w.mark(f"ack:{k}")
        w.flush()
        w.mark("dm-log-writes-end")


def spread(states: Sequence[CrashState], n: int) -> list[CrashState]:
    if len(states) <= n:
        return list(states)
    return [states[round(i * (len(states) - 1) / (n - 1))] for i in range(n)]


def pick_states(idx: LogIndex, n: int) -> list[CrashState]:
    """A mix like a campaign's: flush cuts, write-cache states (some with drops), torn writes."""
    flush = spread(enumerate_states(idx, "flush"), n // 2)
    wc = spread(enumerate_states(idx, "write-cache", exhaustive_bound=3, samples=2), n // 3)
    torn = spread(enumerate_states(idx, "torn", torn_samples=0), n - len(flush) - len(wc))
    return flush + wc + torn


def run_provider(
    idx: LogIndex, size: int, states: list[CrashState], ws: Path, name: str
) -> ReplayStats | str:
    try:
        prov = choose_provider(ws, name, image_bytes=2 * size + 256 * MB)
    except PowercutError as e:
        return e.one_line()
    st = ReplayStats()
    try:
        t = time.perf_counter()
        for _state, _img in materialize(idx, None, size, states, ws, prov, stats=st):
            pass
        st.per_state_s.append(time.perf_counter() - t)  # last item: total wall time
    finally:
        prov.close()
    return st


def state_cost(st: ReplayStats) -> float:
    """Seconds per state beyond the walk: clone + extras + release."""
    return (st.clone_s + st.extras_s + st.release_s) / max(st.states, 1)


def bench_log(
    label: str, log_path: Path, size: int, ws: Path, nstates: int, nref: int, providers: list[str]
) -> dict:
    print(
        f"\n== {label}: {log_path} ({os.path.getsize(log_path) / MB:.1f} MiB file), data device {size / MB:.0f} MiB"
    )
    t = time.perf_counter()
    idx = open_log(log_path)
    dt = time.perf_counter() - t
    scanned = idx.stop_offset
    print(
        f"log read:   {len(idx)} entries in {dt * 1e3:.1f} ms = {len(idx) / dt:,.0f} entries/s, "
        f"{scanned / MB / dt:,.0f} MB/s of log"
    )
    out: dict = {"entries": len(idx)}
    with idx:
        # the pristine walk alone (one state at the end of the log), best of 3 after a sync: fresh
        # page-cache pages cost very different amounts from one run to the next in a VM
        last = enumerate_states(idx, "no-cache")[-1:]
        best: dict[str, ReplayStats] = {}
        for name in [p for p in providers if p in ("copy", "xfs", "reflink")]:
            try:
                prov = choose_provider(ws, name, image_bytes=2 * size + 256 * MB)
            except PowercutError:
                continue
            try:
                for _ in range(3):
                    os.sync()
                    st = ReplayStats()
                    for _ in materialize(idx, None, size, last, ws, prov, stats=st):
                        pass
                    if name not in best or st.walk_s < best[name].walk_s:
                        best[name] = st
            finally:
                prov.close()
        for name, st in best.items():
            print(
                f"walk ({name:4}): {st.walk_bytes / MB:.1f} MiB over {st.walk_entries} entries in "
                f"{st.walk_s * 1e3:.1f} ms = {st.walk_bytes / MB / st.walk_s:,.0f} MB/s (goal >= 1000; "
                f"{'dense pristine, written back' if name != 'copy' else 'sparse pristine, page cache'}); "
                f"pristine setup {st.setup_s * 1e3:.0f} ms"
            )
            out[f"walk_mbs_{name}"] = st.walk_bytes / MB / st.walk_s
        states = pick_states(idx, nstates)
        half = len(idx) // 2
        early = {s.id for s in states if s.cut <= half}
        for name in providers:
            os.sync()
            res = run_provider(idx, size, states, ws, name)
            if isinstance(res, str):
                print(f"{name:12} unavailable: {res}")
                continue
            total = res.per_state_s.pop()
            per = list(res.per_state_s)  # walk order
            costs = state_cost(res)
            order = _walk_order(idx, states)
            early_c = [c for s, c in zip(order, per) if s.id in early]
            late_c = [c for s, c in zip(order, per) if s.id not in early]
            print(
                f"{name:12} {res.states} states in {total:.3f} s ({total / res.states * 1e3:.2f} ms/state incl. "
                f"walk); per state beyond the walk {costs * 1e3:.2f} ms (clone {res.clone_s / res.states * 1e3:.2f}, "
                f"extras {res.extras_s / res.states * 1e3:.2f}, release {res.release_s / res.states * 1e3:.2f}); "
                f"median state {statistics.median(per) * 1e3:.2f} ms: early half {_med(early_c)}, "
                f"late half {_med(late_c)}; walk in this run {res.walk_s:.3f} s for {res.walk_bytes / MB:.0f} MiB "
                f"({res.walk_bytes / MB / max(res.walk_s, 1e-9):,.0f} MB/s)   [{res.provider_reason}]"
            )
            out[name] = {
                "total_s": total,
                "states": res.states,
                "per_state_ms": costs * 1e3,
                "median_ms": statistics.median(per) * 1e3,
            }
        # replay from scratch on a subset of the same states: the plain reference (zeros written
        # for discards, like replay-log without discard support) and the same fast path as the walk
        sub = spread(sorted(states, key=lambda s: s.cut), nref)
        ref = ws / "ref.img"
        for what, fn in (
            ("plain reference", reference_image),
            ("fast path", lambda *a: replay_into(*a, fsync=False)),
        ):
            times = []
            for s in sub:
                t = time.perf_counter()
                fn(idx, s, size, ref)
                times.append(time.perf_counter() - t)
                ref.unlink()
            per_s = statistics.mean(times)
            print(
                f"from scratch, {what} ({len(sub)} states spread over the log): {per_s * 1e3:.1f} ms/state "
                f"(earliest cut {times[0] * 1e3:.1f} ms, latest {times[-1] * 1e3:.1f} ms)"
            )
            out[f"ref_ms_{what}"] = per_s * 1e3
            for name in providers:
                if name in out:
                    inc = out[name]["total_s"] / out[name]["states"]
                    print(
                        f"  ratio from-scratch ({what}) / incremental ({name}, walk included): {per_s / inc:,.1f}x"
                    )
    return out


def _walk_order(idx: LogIndex, states: list[CrashState]) -> list[CrashState]:
    from powercut.replay.materialize import plan

    return [p.state for p in sorted((plan(idx, s) for s in states), key=lambda p: p.base)]


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:.2f} ms" if xs else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--recording", type=Path, help="a recording directory")
    src.add_argument(
        "--synthetic-mb", type=int, help="data MiB of a synthetic log (and a 4x longer one)"
    )
    ap.add_argument("--workspace", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--states", type=int, default=200, help="states per provider run")
    ap.add_argument(
        "--ref-states", type=int, default=12, help="states rebuilt from scratch for the ratio"
    )
    ap.add_argument("--device-mb", type=int, default=1024, help="synthetic data device size")
    ap.add_argument("--providers", default="reflink,xfs,copy,dm-snapshot")
    a = ap.parse_args(argv)
    ws = a.workspace
    print(
        f"workspace {ws}: filesystem {fs_type(ws)}, reflink: "
        f"{'yes' if probe_reflink(ws) is None else 'no'}; root: {os.geteuid() == 0}; "
        f"device-mapper: {dm_supported()}; cpus {os.cpu_count()}"
    )
    providers = [p for p in a.providers.split(",") if p]
    if "reflink" in providers and "xfs" in providers and probe_reflink(ws) is not None:
        providers.remove(
            "reflink"
        )  # without native reflink, 'reflink' would set up the XFS workspace again
    try:
        if a.recording:
            rec = load_recording(a.recording)
            bench_log(
                f"recording ({rec.manifest['fs']['fstype']})",
                rec.log_path,
                rec.data_size,
                ws,
                a.states,
                a.ref_states,
                providers,
            )
        else:
            with tempfile.TemporaryDirectory(dir=ws) as d:
                results = []
                for mult in (1, 4):
                    p = Path(d) / f"synthetic-{mult}.log"
                    synthetic_log(p, a.synthetic_mb * mult, a.device_mb << 20)
                    results.append(
                        bench_log(
                            f"synthetic {a.synthetic_mb * mult} MiB",
                            p,
                            a.device_mb << 20,
                            ws,
                            a.states,
                            a.ref_states,
                            providers,
                        )
                    )
                    p.unlink()
                print("\n== cost per state vs log length (beyond the walk)")
                for name in providers:
                    if all(name in r for r in results):
                        print(
                            f"{name:12} "
                            + "  vs  ".join(
                                f"{r['entries']} entries: {r[name]['per_state_ms']:.2f} ms"
                                for r in results
                            )
                        )
                for what in ("plain reference", "fast path"):
                    print(
                        f"from scratch ({what}) "
                        + "  vs  ".join(
                            f"{r['entries']} entries: {r[f'ref_ms_{what}']:.1f} ms" for r in results
                        )
                    )
    except PowercutError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

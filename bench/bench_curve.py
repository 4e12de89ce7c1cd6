#!/usr/bin/env python3
"""Cost per crash state against the log's length (issue #42 item 2): fstests' generic/482 procedure
(bench/baseline482.py, and fstests' own replay-log with ``--replay-log PATH``) replays every state
from entry 0, so its cost per state grows with the log; powercut's host mode replays incrementally
(one walk, a clone per state), so its should not.

Both judge the same logs: a real recording's log (append-fsync on ext4; ``--recording`` or a fresh
one) tiled to 10^3, 10^4 and 10^5 entries as ``bench_scale.py`` does it (its workload section
repeated byte for byte, key marks renamed per tile).  Per size each procedure judges ``--states``
states spread evenly over the log: the baseline ``--states`` of its FUA points, powercut
``--states`` of its flush-model states (``max_states``), at -j 1, with the checker replaced by
one that accepts every state, in-process like a registered checker (``baseline482.accept``: a
tiled log's later tiles rename the keys their data still names, so the workload's checker would
fail them).  powercut's figure is
its whole campaign's wall time (log scan, selection, the walk, every state's clone, mount, checker,
umount, fsck, the report) divided by its states: the walk's cost is shared by ``--states`` states,
so the figure at 10^5 entries depends on ``--states``; judging every state would make it smaller.
powercut also runs with twice the states, and the table splits its time into a fixed part (log
scan, selection, the walk, the report: O(log)) and a marginal cost per state (clone, mount,
checker, umount, fsck: O(1)): ``fixed + states x marginal``.

``--every flush,write-cache`` also runs powercut on every state of those models (at most
``--every-cap``), once with the read-set rule (issue #64: a state equal to a judged one on every
sector that judge read is proven, not judged) and once with every state judged, and prints ms per
state judged or proven against the baseline's ms per state (the baseline replays FUA points only:
it has no write-cache states).  With the accept checker (it reads nothing) the rule proves more
than with a checker that reads the program's files.

Needs root.  Prints a table (entries, states, ms per state for each procedure, the ratio) and draws
``curve.png`` in ``--out`` (log-log, ms per state against entries).  Figures, not assertions."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline482
import bench_scale

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.recording import load as load_recording
from powercut.record.recording import pin_log, write
from powercut.record.vm import RecordSpec, record


def tiled_recording(rec, entries: int, out: Path) -> Path:
    """A recording directory like ``rec`` whose log is ``rec``'s tiled to ``entries`` entries (no
    trace: the program's calls would not line up with the tiles)."""
    out.mkdir(parents=True)
    bench_scale.tile_log(rec.log_path, out / "log.bin", entries)
    m = json.loads(json.dumps(rec.manifest))
    node = m["node"][0]
    node.update(pin_log(out / "log.bin"), log="log.bin")
    node.pop("logged_entries", None)
    m["node"] = [node]
    m.pop("trace", None)
    m["workload"]["trace"] = False
    if rec.initial_image is not None:
        os.symlink(rec.initial_image, out / rec.initial_image.name)
    write(out, m)
    return out


def baseline(rec, work: Path, states: int, replay_log: str = "") -> baseline482.Result:
    points = baseline482.fua_points(rec.log_path)
    step = max(1, len(points) // states)
    points = points[step - 1 :: step][:states]
    return baseline482.run_on_scratch(rec, work, points, replay_log)


def powercut(rec_dir: Path, work: Path, states: int) -> tuple[int, float]:
    t = time.perf_counter()
    accept = f"{Path(baseline482.__file__).resolve()}::accept"
    res, _ = run_campaign(
        rec_dir,
        CampaignSpec.of(
            models=("flush",),
            check_in="host",
            jobs=1,
            shrink=0,
            max_states=states,
            checker_function=accept,
        ),
        work,
    )
    return res.total, time.perf_counter() - t


def powercut_every(
    rec_dir: Path, work: Path, models: tuple[str, ...], cap: int, prove: bool
) -> tuple[int, int, float]:
    """(states, of them proven, seconds): every state of ``models`` (at most ``cap``, spread),
    judged or proven by the read-set rule (``prove``), -j 1, the accept checker."""
    t = time.perf_counter()
    accept = f"{Path(baseline482.__file__).resolve()}::accept"
    res, _ = run_campaign(
        rec_dir,
        CampaignSpec.of(
            models=models,
            check_in="host",
            jobs=1,
            shrink=0,
            max_states=cap,
            checker_function=accept,
            prove=prove,
        ),
        work,
    )
    return res.total, sum(res.proven.values()), time.perf_counter() - t


def plot(rows: list[dict], out: Path) -> Path:
    import matplotlib  # noqa: PLC0415 - optional dependency (the bench extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [r["entries"] for r in rows]
    for key, label, style in (
        ("fstests_py_ms", "generic/482 procedure (bench/baseline482.py)", "o-"),
        ("fstests_tool_ms", "generic/482 with fstests' replay-log", "s--"),
        ("powercut_ms", "powercut host mode, -j 1 (campaign time / states)", "^-"),
        ("powercut_marginal_ms", "powercut host mode, marginal cost per state", "v:"),
        ("every_ms", "powercut, --every models' states judged or proven (read-set rule)", "D-"),
        ("every_ms_all", "powercut, --every models' states all judged", "x:"),
    ):
        if all(r.get(key) for r in rows):
            ax.plot(xs, [r[key] for r in rows], style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("log entries (append-fsync on ext4, tiled)")
    ax.set_ylabel("ms per crash state (mount, umount, fsck -nf included)")
    ax.set_title("Cost per crash state against the log's length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "curve.png"
    fig.savefig(path, dpi=110)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--recording", help="the recording to tile (default: record append-fsync n=120)"
    )
    ap.add_argument(
        "--sizes", default="1000,10000,100000", help="log lengths in entries (default 10^3..10^5)"
    )
    ap.add_argument(
        "--states", type=int, default=40, help="states per procedure and size (default 40)"
    )
    ap.add_argument(
        "--replay-log",
        metavar="PATH",
        default="",
        help="fstests' replay-log binary: also run the procedure with the real tool",
    )
    ap.add_argument(
        "--every",
        metavar="MODELS",
        default="",
        help="also judge or prove every state of these models (e.g. flush,write-cache), with the "
        "read-set rule and with every state judged (--judge-all), at most --every-cap states",
    )
    ap.add_argument("--every-cap", type=int, default=40000, help="states for --every (spread)")
    ap.add_argument("--out", default="bench-curve", help="directory for curve.png and results.json")
    ap.add_argument(
        "--from-results", metavar="FILE", help="draw the plot and print the table of an earlier run"
    )
    args = ap.parse_args()
    if args.from_results:
        rows = json.loads(Path(args.from_results).read_text())["rows"]
        for r in rows:
            print(
                f"{r['entries']:8d} {r['fstests_py_ms']:13.1f} {r['fstests_tool_ms'] or 0:11.1f} {r['powercut_ms']:9.1f} "
                f"{r['ratio']:6.1f}x   {r['powercut_fixed_s']:.2f} s + {r['powercut_states']} x "
                f"{r['powercut_marginal_ms']:.1f} ms"
            )
        print(f"plot: {plot(rows, Path(args.out))}")
        return 0
    if os.geteuid() != 0:
        print("bench_curve: needs root (loop devices, mount)", file=sys.stderr)
        return 1
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        print(
            f"bench_curve: --sizes wants comma-separated entry counts, not {args.sizes!r}",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="powercut-bench-curve-"))
    rows: list[dict] = []
    try:
        if args.recording:
            src = load_recording(args.recording)
        else:
            src = record(
                RecordSpec(
                    fs=FsSpec(size_mb=64),
                    workload=WorkloadSpec(name="append-fsync", params={"n": 120}),
                ),
                tmp / "src",
            )
        print(
            f"source: {src.dir} ({src.manifest['workload'].get('name')}, {src.fstype}, "
            f"{src.data_size >> 20} MiB); baseline: fstests generic/482 procedure"
            f"{' and fstests replay-log ' + args.replay_log if args.replay_log else ''}; {args.states} states each"
        )
        print(
            f"{'entries':>8} {'482 ms/state':>13} {'replay-log':>11} {'powercut':>9} {'ratio':>7}   "
            f"powercut = fixed + states x marginal"
        )
        for n in sizes:
            d = tmp / f"n{n}"
            rec = load_recording(tiled_recording(src, n, d / "rec"))
            (d / "base").mkdir()
            b = baseline(rec, d / "base", args.states)
            real = (
                baseline(rec, d / "base", args.states, args.replay_log) if args.replay_log else None
            )
            total, secs = powercut(rec.dir, d / "pc", args.states)
            total2, secs2 = powercut(rec.dir, d / "pc2", 2 * args.states)
            marginal = max(0.0, (secs2 - secs) / max(1, total2 - total))
            row = {
                "entries": n,
                "fstests_states": b.states,
                "fstests_py_ms": 1000 * b.seconds / b.states,
                "fstests_tool_ms": 1000 * real.seconds / real.states if real else None,
                "powercut_states": total,
                "powercut_ms": 1000 * secs / total,
                "powercut_marginal_ms": 1000 * marginal,
                "powercut_fixed_s": secs - total * marginal,
            }
            row["ratio"] = row["fstests_py_ms"] / row["powercut_ms"]
            if args.every:
                models = tuple(m for m in args.every.split(",") if m)
                n_all, _, s_all = powercut_every(
                    rec.dir, d / "every-all", models, args.every_cap, False
                )
                n_rule, proven, s_rule = powercut_every(
                    rec.dir, d / "every-rule", models, args.every_cap, True
                )
                row.update(
                    every_states=n_rule,
                    every_proven=proven,
                    every_ms_all=1000 * s_all / max(1, n_all),
                    every_ms=1000 * s_rule / max(1, n_rule),
                )
                base_ms = row["fstests_tool_ms"] or row["fstests_py_ms"]
                print(
                    f"{'':8s} every {args.every} state: {n_rule} states, {proven} proven "
                    f"({100 * proven / max(1, n_rule):.0f} %): {row['every_ms']:.2f} ms a state judged or "
                    f"proven, {row['every_ms_all']:.2f} ms every state judged; against "
                    f"{'replay-log' if real else 'the 482 procedure'}: "
                    f"{base_ms / row['every_ms']:.1f}x (judged only: {base_ms / row['every_ms_all']:.1f}x)",
                    flush=True,
                )
            rows.append(row)
            tool = f"{row['fstests_tool_ms']:11.1f}" if real else f"{'-':>11}"
            print(
                f"{n:8d} {row['fstests_py_ms']:13.1f} {tool} {row['powercut_ms']:9.1f} {row['ratio']:6.1f}x   "
                f"{row['powercut_fixed_s']:.2f} s + {total} x {row['powercut_marginal_ms']:.1f} ms",
                flush=True,
            )
            shutil.rmtree(d, ignore_errors=True)
        (out / "results.json").write_text(
            json.dumps({"source": str(src.dir), "states": args.states, "rows": rows}, indent=1)
        )
        try:
            print(f"plot: {plot(rows, out)}")
        except ImportError:
            print(
                "plot: matplotlib is not installed (pip install 'powercut[bench]'); results.json written"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

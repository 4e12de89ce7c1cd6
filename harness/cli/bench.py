"""The command line's later commands (host): ``matrix``, ``report``, ``repro`` and ``bench`` -- they
print like cli.py (which dispatches to them; the grammar is in cliargs.py), kept apart to keep each
module small.  Every error is one line on stderr, raised as a PowercutError and printed by cli.main."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from powercut.errors import PowercutError, UsageError


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from powercut.bench import results as benchresults
    from powercut.campaign.matrix import Timing, measure
    from powercut.report import cost as costreport
    from powercut.report import matrix

    mdir = Path(args.matrix)
    doc = costreport.load_matrix(mdir)
    ran = {c["row"] for c in doc.get("cells", [])}
    rows = [r for r in matrix.load(args.file or None) if r.id in ran]
    out = Path(args.out) if args.out else (mdir if mdir.is_dir() else mdir.parent) / "report"
    out.mkdir(parents=True, exist_ok=True)
    benches = [benchresults.load(p) for p in args.bench]
    if args.measure:
        benches += measure(rows, out, Timing(quick=args.quick, accel=args.accel))
    lines = costreport.join(rows, doc, benches)
    meta = costreport.where(benches)
    console = Console()
    (console if console.is_terminal else Console(width=170)).print(costreport.table(lines))
    for sentence in costreport.findings(lines):
        print(f"- {sentence}")
    if meta:
        print(meta)
    (out / "report.md").write_text(costreport.markdown(lines, meta))
    plots = costreport.plot(lines, out)
    from powercut.report import html

    cells = [matrix.Cell.from_json(c) for c in doc.get("cells", [])]
    svg = next((p for p in plots if p.suffix == ".svg"), None)
    page = html.write_matrix(
        out,
        rows,
        cells,
        list(doc.get("rows", [])),
        cost=costreport.view(lines, meta, svg),
        title="durability vs cost",
        kind="durability vs cost report",
        rows_dir=mdir if mdir.is_dir() else mdir.parent,
    )
    print(f"report: {page}; {out / 'report.md'}" + "".join(f", {p}" for p in plots))
    return 0


def _bench_request(args: argparse.Namespace):
    from powercut.bench.plan import SUITES
    from powercut.bench.run import BenchRequest, BenchVmSpec
    from powercut.config import BENCH_SUITE, FsSpec
    from powercut.workload import parse_params

    suites = tuple(args.suites or (() if args.profile or args.workload else (BENCH_SUITE,)))
    suites = SUITES if "all" in suites else suites
    if args.dry_run and args.on_host:
        raise UsageError("--dry-run shows the VM's QEMU argv; --on-host runs no VM")
    if (args.toggle_write_cache or args.raw) and not args.on_host:
        raise UsageError(
            "--toggle-write-cache and --raw go with --on-host (the VM mode always toggles the cache)"
        )
    fs = FsSpec(
        fstype=args.fs,
        mkfs_opts=tuple(args.mkfs_opts),
        mount_opts=args.mount_opts,
        size_mb=args.size,
    )
    vm = BenchVmSpec(
        fs=fs,
        qemu_cache=args.qemu_cache,
        accel=args.accel,
        memory_mb=args.memory,
        timeout_s=args.vm_timeout,
        disk_dir=args.disk_dir,
        image={"kernel_package": args.kernel_package},
    )
    caches = {"both": (True, False), "on": (True,), "off": (False,)}[args.cache]
    return BenchRequest(
        suites=suites,
        profiles=tuple(args.profile),
        workload=args.workload,
        params=parse_params(args.param),
        quick=args.quick,
        caches=caches,
        vm=vm,
        on_host=args.on_host,
        toggle=args.toggle_write_cache,
        raw_ok=args.raw,
        out=args.out,
        plots=not args.no_plot,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    """Time the guarantees in a VM (or --on-host), cache on and off; tables, seed comparisons, plots."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from powercut.bench.run import dry_run_argv, plan_request, run_bench
    from powercut.report import bench as benchreport
    from powercut.report import seeds as benchseeds

    if args.list:
        from powercut.bench.plan import __doc__ as suites_doc
        from powercut.bench.profiles import profiles

        print((suites_doc or "").split("Suites", 1)[-1].split("\n\n", 1)[-1].strip())
        print(
            "\nfio profiles: "
            + " ".join(p.name for p in profiles())
            + "\n(--quick: "
            + " ".join(p.name for p in profiles(quick=True))
            + "; also group-commit-N-SIZE, pg-METHOD-8k)"
        )
        return 0
    req = _bench_request(args)
    if args.dry_run:
        with tempfile.TemporaryDirectory(prefix="powercut-dry-run-") as tmp:  # nothing left behind
            print(shlex.join(dry_run_argv(req.vm, plan_request(req), Path(tmp) / "run")))
        return 0
    with Progress(
        TextColumn("[bold]bench"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("bench", total=None, info="planning")

        def on_progress(done: int, total: int, label: str) -> None:
            progress.update(task, total=total, completed=done, info=label)

        results, out, warnings = run_bench(req, on_progress)
    if req.plots:
        try:
            benchreport.plot(results, out)
        except PowercutError as err:
            warnings.append(f"no plots: {err.one_line()}")
    if args.json:
        print(json.dumps(benchreport.summary_json(results), indent=1))
    else:
        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(benchreport.main_table(results))
        for table in benchseeds.tables(results):
            console.print(table)
        print("\n".join(benchreport.describe(results)))
    for w in warnings:
        print(f"powercut: warning: {w}", file=sys.stderr)
    plots = [p for p in (out / "latency.png", out / "latency.svg") if p.exists()]
    from powercut.report import html

    page = html.write_bench(results, out)
    print(
        f"results: {out / 'results.json'}"
        + (f"\nplots: {', '.join(map(str, plots))}" if plots else "")
        + f"\nreport: {page}",
        file=sys.stderr if args.json else sys.stdout,
    )
    failed = [e for e in results.entries if e.error]
    for e in failed[:10]:
        print(f"FAILED {e.name} (cache {e.cache}): {e.error}", file=sys.stderr)
    return 1 if failed else 0

"""The commands that judge (host): ``check`` (and its summary and failure groups), ``repro``,
``matrix`` and ``corpus``."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from powercut.errors import UsageError

log = logging.getLogger("powercut")


def campaign_spec(args: argparse.Namespace, preset: str = "check") -> Any:
    """The CampaignSpec the check options ask for (check, run, and each schedule of run)."""
    from powercut.campaign.run import CampaignSpec
    from powercut.check.place import Place
    from powercut.cli.parser import selection_from
    from powercut.core.states.shard import Shard

    place = Place(
        args.check_in,
        args.accel,
        state_timeout_s=args.state_timeout,
        uris=tuple(args.check_uris),
        jobs=args.jobs,
    )
    return CampaignSpec(
        selection=selection_from(args, preset),
        place=place,
        checker_command=args.checker,
        resume=args.resume,
        confirm=not args.no_confirm,
        prove=not args.judge_all,
        confirm_mode=args.confirm_mode,
        confirm_sample=args.confirm_sample,
        shrink=args.shrink,
        shrink_budget=args.shrink_budget,
        checker_timeout_s=args.checker_timeout,
        allow_no_acks=args.allow_no_acks,
        force=args.force,
        shard=args.shard or Shard(),
        require_exhaustive=args.require_exhaustive or "",
        ledger=args.ledger,
        **({"node_bound": args.node_bound} if getattr(args, "node_bound", None) else {}),
    )


def cmd_check(args: argparse.Namespace, preset: str = "check") -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from powercut.campaign.run import run_campaign

    spec = campaign_spec(args, preset)
    console = Console(stderr=True)
    failed = 0
    # the bar appears once judging starts: a refusal before it is one line, with no bar around it
    progress = Progress(
        TextColumn("[bold]checking"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task("check", total=None, info="")
    started: list[bool] = []  # rich's stop() writes a newline even when the bar never started

    def on_start(total: int, done: int) -> None:
        started.append(True)
        progress.start()
        progress.update(task, total=total, completed=done, info=f"in {args.check_in}")

    def on_verdict(v: Any) -> None:
        nonlocal failed
        failed += v.failed
        progress.update(task, advance=1, info=f"{failed} failing" if failed else "")

    try:
        summary, paths = run_campaign(
            args.path, spec, args.out, on_start=on_start, on_verdict=on_verdict
        )
    finally:
        if started:
            progress.stop()
    return _finish(summary, paths)


def _finish(summary: Any, paths: dict[str, Path]) -> int:
    print(summary.headline())
    _print_summary(summary, paths)
    for note in summary.notes():
        print(f"powercut: {note}", file=sys.stderr)
    if summary.failures:
        return 3
    return 0 if summary.ok else 1


def cmd_merge(args: argparse.Namespace) -> int:
    from rich.console import Console

    from powercut.campaign.merge import is_matrix, merge, merge_matrix

    if is_matrix(args.shards):
        rows, results, paths, missing = merge_matrix(args.shards, args.out)
        from powercut.report import matrix

        Console().print(matrix.table(rows, results))
        bad = [c for c in results if not c.ok]
        print(
            f"{len(results) - len(bad)} of {len(results)} cells as expected; results: {paths['json']}, {paths['md']}"
        )
        print(f"report: {paths['html']}")
        if missing:
            print(
                f"powercut: matrix shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing from the "
                "merge: not a pass",
                file=sys.stderr,
            )
        if bad:
            return 3
        elif missing:
            return 1
        else:
            return 0
    summary, paths = merge(args.shards, args.out)
    return _finish(summary, paths)


def _print_summary(summary: Any, paths: dict[str, Path]) -> None:
    """The table, then the failures by cause (each group: count, confirmation, minimized state,
    repro), then a few of the states themselves."""
    from rich.console import Console

    from powercut.report.summary import repro, table

    Console().print(table(summary))
    if summary.disks.get("node_states"):  # N > 1 disks: what each node contributes to the instants
        print(
            f"over {summary.disks.get('instants', '?')} instants; distinct states per node: "
            + "; ".join(
                f"node {n}: " + ", ".join(f"{m} {k}" for m, k in per.items())
                for n, per in enumerate(summary.disks["node_states"])
            )
        )
    left = {m: c.get("left_out", 0) for m, c in summary.counts.items() if c.get("left_out")}
    if left:
        print(
            "--max-states left out "
            + ", ".join(f"{n} distinct {m} states" for m, n in left.items())
        )
    for note in summary.coverage.notes if summary.coverage is not None else ():
        print(f"weakened: {note}")
    if summary.anatomy.get("commits"):
        print(
            f"what a commit costs: {summary.anatomy['phrase']}, over {summary.anatomy['commits']} acked commits"
        )
    if summary.failures and summary.trace_note:
        print(f"note: {summary.trace_note}")
    _print_groups(summary)
    for line in (summary.proofs_line(), summary.confirmation_line()):
        if line:
            print(line)
    for f in summary.flaky[:10]:
        print(f"FLAKY {f.state}: {f.reasons[0]}")
    shown = 3 if summary.groups else 10
    for f in summary.failures[:shown]:
        print(
            f"FAIL {f.state}: {f.verdict} ({f.confirmation}): {f.reasons[0] if f.reasons else ''}\n"
            + (f"  {summary.doubtful[f.state]}\n" if f.state in summary.doubtful else "")
            + f"  repro: {repro(summary.recording, f)}"
        )
    if len(summary.failures) > shown:
        print(
            f"... and {len(summary.failures) - shown} more failing states (see {paths['summary']})"
        )
    print(
        f"verdicts: {paths['summary'].parent / 'journal.jsonl'}\nsummary: {paths['summary']}\njunit: {paths['junit']}"
    )
    if paths.get("html"):
        print(f"report: {paths['html']}")


def proofs_words(proofs: dict[str, Any]) -> str:
    """How the groups' causes were proven, after the groups' count ("" when none was checked)."""
    if not proofs or not proofs.get("groups"):
        return ""
    parts = [f"{proofs.get('verified', 0) + proofs.get('replaced', 0)} proven by counterfactual"]
    if proofs.get("recovery"):
        parts.append(f"{proofs['recovery']} a recovery bug (a process kill fails too)")
    if proofs.get("unproven"):
        parts.append(f"{proofs['unproven']} not proven")
    return "; causes: " + ", ".join(parts)


def _print_groups(summary: Any) -> None:
    """Failures grouped by cause, each with its confirmation, minimized state, blame and repro."""
    from powercut.debug.cause import group_lines
    from powercut.report.summary import group_confirmation

    if not summary.groups:
        return
    print(
        f"{len(summary.failures)} failing states in {len(summary.groups)} group(s) by cause"
        f" (triage {summary.triage_s:.1f} s){proofs_words(summary.proofs)}:"
    )
    for k, g in enumerate(summary.groups, 1):
        print("\n".join(group_lines(f"GROUP {k}", g)))  # the cause in the program's terms leads
        conf = group_confirmation(g)
        if conf:
            print(f"  {conf}")
        if g.get("nodes"):
            print(f"  nodes: {g['nodes_note']}")
        if g.get("minimized") and g.get("nodes"):
            _print_node_shrink(g)
        elif g.get("minimized"):
            print(
                f"  minimized: {g['first']} -> {g['minimized']} ({g['shrink_calls']} checks; one write at a "
                f"time: at least {g['one_at_a_time']})"
            )
            for c in g.get("culprits", [])[:6]:
                print(f"  {c}")
        else:
            print(f"  first state: {g['first']}")
        if g.get("bundle"):
            print(f"  repro: powercut repro {shlex.quote(g['bundle'])}")
        else:
            print(
                f"  repro: powercut repro {shlex.quote(summary.recording)} --state {shlex.quote(g['first'])}"
            )


def _print_node_shrink(g: dict[str, Any]) -> None:
    """A group of N > 1 disks' states, minimized node by node: each node's cut and lost writes
    before and after, and its blamed writes."""
    same = (
        " (already minimal: no node's state fails alike with less)"
        if g["minimized"] == g["first"]
        else ""
    )
    print(
        f"  minimized: {g['first']} -> {g['minimized']}{same} ({g['shrink_calls']} checks over "
        f"{g['nodes']} nodes{', budget exhausted' if g.get('shrink_exhausted') else ''})"
    )
    for n, (sh, blamed) in enumerate(zip(g.get("node_shrink", []), g.get("node_culprits", []))):
        print(
            f"    node {n}: cut {sh['cut'][0]} -> {sh['cut'][1]}, lost writes {sh['lost'][0]} -> "
            f"{sh['lost'][1]}" + ("" if blamed or g.get("blame_note") else " (no write blamed)")
        )
        for c in blamed[:3]:
            print(f"      {c}")


def cmd_repro(args: argparse.Namespace) -> int:
    from powercut.check.place import Place
    from powercut.debug import repro

    target = repro.resolve(args.path, args.state)
    place = Place("vm" if args.shell else args.check_in, args.accel)
    if args.shell:
        print(
            f"booting a checker VM on {target.state}: a shell opens on the recovered state; exit powers it off",
            file=sys.stderr,
        )
        shell_v = repro.shell(target, place)
        if shell_v is None:
            raise UsageError(f"state {target.state} was not judged")
        print("\n".join(repro.describe(target, shell_v)))
        return repro.exit_status(shell_v)
    v = repro.run(target, place, keep_image=args.keep_image)
    print("\n".join(repro.describe(target, v)))
    if args.keep_image:
        kept = repro.image_paths(args.keep_image, target.nodes)
        print(
            f"image (as the crash left it, before recovery): {kept[0]}"
            if len(kept) == 1
            else f"images, one per node (as the crash left them, before recovery): {', '.join(kept)}"
        )
    return repro.exit_status(v)


def cmd_matrix(args: argparse.Namespace) -> int:
    from rich.console import Console

    from powercut.campaign.matrix import MatrixRun, run_rows
    from powercut.check.place import Place
    from powercut.cli.parser import selection_from
    from powercut.core.states.shard import Shard
    from powercut.report import matrix

    chosen = matrix.choose(matrix.load(args.file or None), args.rows, ci=args.ci)
    shard = args.shard or Shard()
    rows = list(shard.take(chosen))
    if not rows:
        raise UsageError(
            f"matrix shard {shard} is empty: {len(chosen)} rows for {shard.total} shards"
        )
    if args.list:
        for r in rows:
            cells = ", ".join(f"{m} {r.expect[m]}" for m in r.models)
            print(f"{r.id:44} {cells}" + (f"   [CI: {r.ci}]" if r.ci else ""))
        return 0
    # refused before any row is recorded, not once per row
    place = Place(args.check_in or "vm", args.accel, uris=tuple(args.check_uris), jobs=args.jobs)
    out = Path(args.out)
    how = MatrixRun(
        out=out,
        check_in=args.check_in or "",
        selection=selection_from(args, "matrix"),
        place=place,
        resume=args.resume,
        require_exhaustive=args.require_exhaustive or "",
    )
    console = Console(stderr=True)
    results, infos = [], []

    def done(row: matrix.Row, cells: list[matrix.Cell], info: dict) -> None:
        results.extend(cells)
        infos.append(info)
        for c in cells:
            print(
                f"{c.mark:4} {row.id} {c.model}: expected {c.expected}, seen {c.describe()}",
                flush=True,
            )

    with console.status(
        f"{len(rows)} rows: each recorded in a VM (the next while this one is checked), "
        "then checked"
    ):
        run_rows(rows, how, done)
    paths = matrix.write_results(
        out,
        rows,
        results,
        infos,
        shard="" if shard.whole else str(shard),
        chosen=[r.id for r in chosen],
        file=str(Path(args.file).absolute()) if args.file else "",
    )
    Console().print(matrix.table(rows, results))
    bad = [c for c in results if not c.ok]
    print(
        f"{len(results) - len(bad)} of {len(results)} cells as expected; results: {paths['json']}, {paths['md']}"
    )
    print(f"report: {paths['html']}")
    return 3 if bad else 0


def _said(name: str) -> Any:
    """The line printed as each of an entry's releases is judged."""

    def said(role: str, r: Any) -> None:
        from powercut.report.corpus import describe

        print(f"     {name} {role} {r.version}: {describe(r)}", flush=True)

    return said


def cmd_corpus(args: argparse.Namespace) -> int:
    """Build, record and judge the chosen corpus entries; exit 0 when every entry gave what the
    corpus records for it, 1 when one did not."""
    import json

    from powercut.campaign import corpus as run
    from powercut.check.place import Place
    from powercut.report import corpus

    entries = corpus.choose(corpus.load(args.file or None), args.names)
    if args.list:
        for e in entries:
            why = " ".join(e.why.split())
            outcome = e.outcome if e.outcome == "reproduced" else f"{e.outcome}: {why[:120]}"
            print(
                f"{e.name:28} {e.buggy} -> {e.fixed}  {', '.join(e.kinds)}; buggy: {e.expect}; {outcome}"
            )
        return 0
    cache = Path(args.cache) if args.cache else run.CACHE
    if args.build_only:
        for e in entries:
            for _, version in e.releases():
                print(f"{e.program} {version}: {run.build(e.program, version, cache)}", flush=True)
        return 0
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    place = Place("host", args.accel)
    results = []
    for e in entries:
        res = run.run_entry(e, out, cache=cache, place=place, on_release=_said(e.name))
        results.append(res)
        print(res.line(), flush=True)
        (out / "corpus.json").write_text(
            json.dumps({"results": [r.to_json() for r in results]}, indent=1) + "\n"
        )
    (out / "corpus.md").write_text(corpus.markdown(results))
    bad = [r for r in results if not r.as_recorded]
    spent = sum(x.seconds for r in results for _, x in r.runs())
    print(
        f"corpus: {corpus.count_line(results)}; {len(bad)} not as the corpus records; "
        f"{corpus.minutes(spent)}; table: {out / 'corpus.md'}"
    )
    return 1 if bad else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job: six showcase rows checked and timed; one line per workload; report.html."""
    from powercut.campaign.demo import DemoSpec, run_demo
    from powercut.cli.parser import selection_from
    from powercut.report import matrix

    def done(row: matrix.Row, cells: list[matrix.Cell], info: dict) -> None:
        for c in cells:
            print(
                f"{c.mark:4} {row.id} {c.model}: expected {c.expected}, seen {c.describe()}",
                flush=True,
            )

    res = run_demo(
        DemoSpec(
            out=Path(args.out),
            check_in=args.check_in,
            jobs=args.jobs,
            selection=selection_from(args, "demo"),
            accel=args.accel,
            cost=not args.no_cost,
        ),
        done,
    )
    print()
    for line in res.lines:
        print(line)
    bad = res.surprises
    print(
        f"{len(res.cells) - len(bad)} of {len(res.cells)} cells as expected"
        + (f"; surprises: {', '.join(f'{c.row} {c.model}' for c in bad)}" if bad else "")
    )
    print(f"report: {res.paths['html']}")
    return 3 if bad else 0

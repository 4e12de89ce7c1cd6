"""powercut command line (host): dispatch to the commands and print their results -- the one place
that prints.  The grammar is in cliargs.py.  Every error is one line on stderr, never a traceback."""
from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from . import interrupt
from .cliargs import RUN_BOUND, RUN_COMMITS, RUN_SAMPLES, build_parser
from .errors import PowercutError, UsageError

log = logging.getLogger("powercut")



def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    try:
        with interrupt.handled():
            return COMMANDS[args.command](args)
    except PowercutError as e:
        print(f"powercut: error: {e.one_line()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"powercut: {interrupt.note(e)}; stopped every VM and cleaned up", file=sys.stderr)
        return interrupt.exit_status(e)
    except BrokenPipeError:  # output piped into head & co. (before OSError, its base class)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # an unwritable or missing path, a full disk, a permission: one line
        print(f"powercut: error: {os_error(e)}", file=sys.stderr)
        return 1


def os_error(e: OSError) -> str:
    what = e.strerror or type(e).__name__
    if e.errno in (28, 122):
        what = "no space left on the device"
    where = " -> ".join(str(f) for f in (e.filename, e.filename2) if f)
    hint = " (this needs root)" if e.errno in (1, 13) and os.geteuid() != 0 else ""
    return f"{where}: {what}{hint}" if where else f"{what}{hint}"


# ------------------------------------------------------------------------------------------ commands

def _record_spec(args: argparse.Namespace, default_workload: str | None = None):
    from .config import FsSpec, WorkloadSpec
    from .record import RecordSpec
    from .workload import parse_params

    fs = FsSpec(fstype=args.fs, mkfs_opts=tuple(shlex.split(args.mkfs_opts)), mount_opts=args.mount_opts,
                size_mb=args.size)
    name = args.workload or ("" if args.cmd else default_workload)
    if not name and not args.cmd:
        raise UsageError("give --workload NAME or --cmd 'COMMAND'")
    wl = WorkloadSpec(name=name or "", cmd=args.cmd or "", params=parse_params(args.param),
                      timeout_s=args.workload_timeout)
    if args.cmd and args.param:
        raise UsageError("--param goes with --workload, not --cmd")
    return RecordSpec(fs=fs, workload=wl, log_size_mb=args.log_size, memory_mb=args.memory, cpus=args.cpus,
                      bus=args.bus, transport=args.transport, accel=args.accel, timeout_s=args.vm_timeout,
                      backend=args.backend, libvirt_uri=args.libvirt_uri,
                      image={"kernel_package": args.kernel_package})


def _dry_run(spec: Any, out: str) -> int:
    """The exact QEMU argv (qemu backend) or domain XML (libvirt backend) the recording would run."""
    from powercut.images.build import ImageSpec, build_image

    from . import process
    from .record import vm_spec
    from .vm.accel import resolve_accel
    from .vm.qemu import QEMU, build_argv

    image = build_image(ImageSpec(**spec.image))
    o = Path(out).absolute()
    vs = vm_spec(spec, image, o, o / "job")
    if spec.backend == "libvirt":
        from .vm.libvirt import is_local_uri
        from .vm.libvirt_xml import domain_xml
        if spec.accel == "auto" and not is_local_uri(spec.libvirt_uri):
            print(f"powercut: --accel auto on {spec.libvirt_uri} is probed on that host at run time; "
                  "showing the kvm domain", file=sys.stderr)
            accel = "kvm"
        else:
            accel = resolve_accel(spec.accel, image.kernel, image.initrd)
        print(domain_xml(vs, accel))
        return 0
    qemu = process.require(QEMU, "qemu-system-x86")
    print(shlex.join(build_argv(vs, resolve_accel(spec.accel, image.kernel, image.initrd), qemu=qemu)))
    return 0


def cmd_record(args: argparse.Namespace, default_workload: str | None = None) -> int:
    from .record import record

    spec = _record_spec(args, default_workload)
    if args.dry_run:
        return _dry_run(spec, args.out)
    try:
        rec = record(spec, args.out, force=args.force)
    except (PowercutError, KeyboardInterrupt) as e:
        if isinstance(e, KeyboardInterrupt):
            print(f"powercut: {interrupt.note(e)}: the VM was stopped", file=sys.stderr)
        else:
            print(f"powercut: error: {e.one_line()}", file=sys.stderr)
        if (Path(args.out) / "manifest.toml").exists():
            print(f"powercut: recording kept for inspection (console.log, job/): {Path(args.out).absolute()}",
                  file=sys.stderr)
        return interrupt.exit_status(e) if isinstance(e, KeyboardInterrupt) else 1
    m = rec.manifest
    r = m["recording"]
    print(f"recorded {m['workload'].get('name') or 'cmd'} on {m['fs']['fstype']} into {rec.dir}")
    print(f"  VM {r.get('accel')}, boot to workload {r.get('boot_to_workload_s')} s, VM wall {r.get('vm_wall_s')} s,"
          f" workload {m['result'].get('workload_s')} s")
    _print_stats(str(rec.log_path))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """record + check + report with embedded defaults."""
    if args.dry_run:
        return cmd_record(args, default_workload="append-fsync")
    # embedded defaults of the main job: small enough to finish in minutes under TCG
    if not args.workload and not args.cmd and not args.param:
        args.param = [f"n={RUN_COMMITS}"]
    args.bound = RUN_BOUND if args.bound is None else args.bound
    args.samples = RUN_SAMPLES if args.samples is None else args.samples
    rec = Path(args.out)
    if args.resume and (rec / "manifest.toml").exists():
        print(f"resuming the check of {rec}")
    else:
        if not args.force and rec.exists() and (rec / "manifest.toml").exists():
            args.force = True  # the default campaign's output directory is replaced each run
        rc = cmd_record(args, default_workload="append-fsync")
        if rc:
            return rc
    args.path = str(rec)
    args.out = None
    return cmd_check(args)


def cmd_check(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from .campaign import DEFAULT_MODELS, CampaignSpec, run_campaign

    spec = CampaignSpec(models=tuple(args.models or DEFAULT_MODELS), check_in=args.check_in, jobs=args.jobs,
                        checker_command=args.checker, seed=args.seed,
                        bound=10 if args.bound is None else args.bound,
                        samples=64 if args.samples is None else args.samples,
                        max_states=args.max_states, resume=args.resume, accel=args.accel,
                        state_timeout_s=args.state_timeout, confirm=not args.no_confirm, shrink=args.shrink,
                        shrink_budget=args.shrink_budget)
    console = Console(stderr=True)
    failed = 0
    with Progress(TextColumn("[bold]checking"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                  TimeRemainingColumn(), console=console, transient=True) as progress:
        task = progress.add_task("check", total=None, info="")

        def on_start(total: int, done: int) -> None:
            progress.update(task, total=total, completed=done, info=f"in {args.check_in}")

        def on_verdict(v: Any) -> None:
            nonlocal failed
            failed += v.verdict != "pass"
            progress.update(task, advance=1, info=f"{failed} failing" if failed else "")

        summary, paths = run_campaign(args.path, spec, args.out, on_start=on_start, on_verdict=on_verdict)
    _print_summary(summary, paths)
    if summary.failures:
        return 3
    return 1 if summary.flaky else 0


def _print_summary(summary: Any, paths: dict[str, Path]) -> None:
    from rich.console import Console

    from .report import repro, table

    Console().print(table(summary))
    left = {m: c.get("left_out", 0) for m, c in summary.counts.items() if c.get("left_out")}
    if left:
        print("--max-states left out " + ", ".join(f"{n} distinct {m} states" for m, n in left.items()))
    if summary.rejudged:
        print(f"confirmation: {summary.rejudged} failing states judged again alone in {summary.confirm_s:.1f} s: "
              f"{summary.confirmed} confirmed, {len(summary.flaky)} flaky")
    for f in summary.flaky[:10]:
        print(f"FLAKY {f.state}: {f.reasons[0]}")
    _print_groups(summary)
    for f in summary.failures[:10]:
        print(f"FAIL {f.state}: {f.verdict}: {f.reasons[0] if f.reasons else ''}\n  repro: {repro(summary.recording, f)}")
    if len(summary.failures) > 10:
        print(f"... and {len(summary.failures) - 10} more failing states (see {paths['summary']})")
    print(f"verdicts: {paths['summary'].parent / 'journal.jsonl'}\nsummary: {paths['summary']}\njunit: {paths['junit']}")


def _print_groups(summary: Any) -> None:
    """Failures grouped by how they fail, each with its minimized state, its blame and its bundle."""
    if not summary.groups:
        return
    print(f"{len(summary.failures)} failing states in {len(summary.groups)} group(s) by how they fail"
          f" (triage {summary.triage_s:.1f} s):")
    for k, g in enumerate(summary.groups, 1):
        print(f"GROUP {k}: {g['verdict']} x {g['count']}: {g['reason_class']}")
        if g.get("minimized"):
            print(f"  minimized: {g['first']} -> {g['minimized']} ({g['shrink_calls']} checks; one write at a "
                  f"time: at least {g['one_at_a_time']})")
            for c in g.get("culprits", [])[:6]:
                print(f"  {c}")
        if g.get("bundle"):
            print(f"  repro: powercut repro {shlex.quote(g['bundle'])}")


def cmd_image(args: argparse.Namespace) -> int:
    from powercut.images.build import ImageSpec, build_image

    if args.image_command == "build":
        image = build_image(ImageSpec(kernel_package=args.kernel_package, kernel=args.kernel,
                                      modules_dir=args.modules), force=args.force)
        print(f"image {image.hash}: {image.source}, kernel {image.kernel_release}, "
              f"{len(image.modules)} modules, initramfs {image.initrd_bytes >> 10} KiB\n  {image.dir}")
        return 0
    if args.image_command == "info":
        image = build_image(ImageSpec(kernel_package=args.kernel_package))
        info = image.info()
        if args.json:
            print(json.dumps(info, indent=1))
        else:
            for k, v in info.items():
                print(f"{k:15} {' '.join(v) if isinstance(v, list) else v}")
        return 0
    raise UsageError("powercut image: give an action: build or info")


def _open(path: str):
    from .log import open_log
    from .recording import load

    p = Path(path)
    if p.is_dir():
        return open_log(load(p).log_path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or directory")
    return open_log(p)


def _print_stats(path: str, as_json: bool = False) -> None:
    from .log import stats

    with _open(path) as index:
        s = stats(index)
    if as_json:
        print(json.dumps(s.to_dict()))
        return
    print(f"  log: {s.entries} entries: {s.writes} writes ({s.bytes_written / 1e6:.1f} MB), {s.flushes} flushes, "
          f"{s.fuas} FUAs, {s.discards} discards, {s.marks} marks ({s.acks} acks)")
    if not index.clean or s.stale_super:
        print(f"  scan: {s.stop_reason}" + (f"; super says {s.super_nr_entries} entries" if s.stale_super else ""))


def cmd_log(args: argparse.Namespace) -> int:
    if args.log_command == "stats":
        _print_stats(args.path, args.json)
        return 0
    if args.log_command == "show":
        with _open(args.path) as index:
            for e in index.entries:
                if args.marks_only and not (e.is_mark or e.is_flush or e.is_fua):
                    continue
                if args.json:
                    print(json.dumps({"index": e.index, "flags": e.flags, "sector": e.sector,
                                      "nr_sectors": e.nr_sectors, "mark": e.mark, "data_offset": e.data_offset}))
                else:
                    print(e.describe())
        return 0
    raise UsageError("powercut log: give an action: stats or show")


def cmd_states(args: argparse.Namespace) -> int:
    from .models import describe, enumerate_states, state_to_json

    with _open(args.path) as index:
        states = enumerate_states(index, args.model, seed=args.seed, exhaustive_bound=args.bound,
                                  samples=args.samples)
        if args.json:
            for s in states:
                print(json.dumps(state_to_json(s)))
            return 0
        d = describe(states)
    print(json.dumps(d, indent=1) if args.verbose else _describe_text(args.model, d))
    return 0


def _describe_text(model: str, d: dict[str, Any]) -> str:
    lines = [f"{model}: {d.get('total')} crash states at {d.get('cuts')} cuts ({d.get('sampled', 0)} sampled)",
             f"  {'epoch':>5} {'cuts':>11} {'states':>7} {'sampled':>7} {'max dropped':>11}"]
    for e in d.get("epochs", []):
        lines.append(f"  {e['epoch']:>5} {str(e['first_cut']) + '..' + str(e['last_cut']):>11} {e['states']:>7} "
                     f"{e['sampled']:>7} {e['max_dropped']:>11}")
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    from .replay import replay_state

    out = replay_state(args.path, args.state, args.out, size=args.size or None)
    print(f"state {args.state} -> {out}")
    return 0


def cmd_workloads(args: argparse.Namespace) -> int:
    from .workload import get, names

    for name in names():
        w = get(name)
        print(f"{name:16} {w.description}\n{'':16} params: " + ", ".join(f"{k}={v}" for k, v in w.defaults.items()))
    return 0


from .clicommands import cmd_bench, cmd_matrix, cmd_report, cmd_repro  # noqa: E402 (after the helpers they use)

COMMANDS = {"run": cmd_run, "check": cmd_check, "record": cmd_record, "image": cmd_image, "log": cmd_log, "states": cmd_states, "matrix": cmd_matrix, "repro": cmd_repro, "report": cmd_report,
            "replay": cmd_replay, "workloads": cmd_workloads, "bench": cmd_bench}

if __name__ == "__main__":
    sys.exit(main())

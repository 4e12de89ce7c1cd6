"""powercut command line: argument parsing and dispatch only."""
from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from .errors import PowercutError, UsageError
from . import interrupt

log = logging.getLogger("powercut")

MAIN_DEFAULT_OUT = "runs/latest"
RUN_COMMITS, RUN_BOUND, RUN_SAMPLES = 8, 4, 8


class Parser(argparse.ArgumentParser):
    """argparse that reports a wrong option as one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"powercut: error: {message} (see '{self.prog} --help')\n")


def _vm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("VM")
    g.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="auto probes KVM once (cached) and falls back to TCG (default: auto)")
    g.add_argument("--backend", choices=("qemu", "libvirt"), default="qemu", help="run QEMU directly or via libvirt")
    g.add_argument("--libvirt-uri", default="qemu:///system", help="libvirt connection URI (default qemu:///system)")
    g.add_argument("--memory", type=int, default=1024, metavar="MB", help="guest memory (default 1024)")
    g.add_argument("--cpus", type=int, default=1, help="guest CPUs (default 1)")
    g.add_argument("--bus", choices=("virtio", "ahci"), default="virtio", help="disk bus (ahci for hdparm -W)")
    g.add_argument("--transport", choices=("9p", "virtiofs"), default="9p", help="how the host root is shared")
    g.add_argument("--vm-timeout", type=float, default=900.0, metavar="S", help="kill the VM after S seconds")


def _record_options(p: argparse.ArgumentParser, required_out: bool = True) -> None:
    w = p.add_mutually_exclusive_group()
    w.add_argument("--workload", help="a built-in or registered workload (see 'powercut workloads')")
    w.add_argument("--cmd", help="any shell command, run in the guest with its cwd on the filesystem under test")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="workload parameter (repeat)")
    p.add_argument("--fs", default="ext4", help="filesystem under test: ext4, xfs or btrfs (default ext4)")
    p.add_argument("--mkfs-opts", default="", help="extra mkfs options, as one shell-quoted string")
    p.add_argument("--mount-opts", default="", help="mount options (-o)")
    p.add_argument("--size", type=int, default=0, metavar="MB",
                   help="data disk size (default: the filesystem's, ext4/btrfs 256, xfs 300)")
    p.add_argument("--log-size", type=int, default=0, metavar="MB", help="log disk size (default 4x data + 64)")
    p.add_argument("--workload-timeout", type=float, default=300.0, metavar="S", help="kill the workload after S s")
    p.add_argument("-o", "--out", required=required_out, default=None if required_out else MAIN_DEFAULT_OUT,
                   help="recording directory" + ("" if required_out else f" (default {MAIN_DEFAULT_OUT})"))
    p.add_argument("--force", action="store_true", help="replace an existing recording directory")
    p.add_argument("--dry-run", action="store_true", help="print the exact QEMU argv and stop")
    p.add_argument("--kernel-package", default="", help="pin the guest kernel package (default: linux-image-amd64's)")
    _vm_options(p)


def _check_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("checking")
    g.add_argument("--model", action="append", dest="models", metavar="MODEL",
                   help="crash model to check (repeat; default: flush and write-cache)")
    g.add_argument("--check-in", choices=("vm", "host"), default="vm",
                   help="vm (default): a checker VM judges the states, corrupt images never touch the host kernel;"
                        " host: loop devices on this machine, in parallel (trusted, disposable machines only)")
    g.add_argument("-j", "--jobs", type=int, default=0,
                   help="checker VMs (vm) or parallel walks (host) at once (default: one per core)")
    g.add_argument("--checker", default="", metavar="COMMAND",
                   help="your own checker: gets the input as JSON on stdin, exits 0 (pass) or 1 (fail)")
    g.add_argument("--seed", type=int, default=0, help="seed for sampled crash states")
    g.add_argument("--bound", type=int, default=None,
                   help="write-cache: all subsets up to this many writes (default 10; run: 4)")
    g.add_argument("--samples", type=int, default=None,
                   help="write-cache: seeded samples beyond the bound (default 64; run: 8)")
    g.add_argument("--max-states", type=int, default=0, help="judge at most this many states (0: all)")
    g.add_argument("--state-timeout", type=float, default=300.0, metavar="S", help="VM mode: one state's limit")
    g.add_argument("--resume", action="store_true", help="continue a campaign: skip the states already judged")
    g.add_argument("--no-confirm", action="store_true",
                   help="do not judge each failing state a second time, alone (flaky states then go unnoticed)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="powercut", description="Crash-consistency testing: record a workload's block writes with "
               "dm-log-writes in a VM, replay every crash state, check that acknowledged commits survive.")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more console output (-vv: debug)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    r = sub.add_parser("run", help="the default campaign: record append-fsync on ext4, check every crash state "
                       "under flush and write-cache, report")
    _record_options(r, required_out=False)
    _check_options(r)

    r = sub.add_parser("record", help="record a workload's block writes in a VM")
    _record_options(r)

    c = sub.add_parser("check", help="judge every crash state of a recording (recover, checker, fsck)")
    c.add_argument("path", help="a recording directory")
    c.add_argument("--out", help="output directory (default RECORDING/check)")
    _check_options(c)
    c.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto", help="checker VM acceleration")

    img = sub.add_parser("image", help="build or inspect the guest image")
    isub = img.add_subparsers(dest="image_command", metavar="ACTION", parser_class=Parser)
    b = isub.add_parser("build", help="build (or find cached) the guest kernel + initramfs")
    b.add_argument("--kernel-package", default="", help="Debian kernel package (default: what linux-image-amd64 resolves to)")
    b.add_argument("--kernel", default="", help="a kernel image of your own (with --modules)")
    b.add_argument("--modules", default="", help="its lib/modules/<release> directory (with modules.dep)")
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    i = isub.add_parser("info", help="print what is inside the guest image")
    i.add_argument("--kernel-package", default="")
    i.add_argument("--json", action="store_true")

    lg = sub.add_parser("log", help="read a dm-log-writes log")
    lsub = lg.add_subparsers(dest="log_command", metavar="ACTION", parser_class=Parser)
    for name, helptext in (("stats", "counts: entries, writes, flushes, FUAs, discards, marks"),
                           ("show", "one line per entry")):
        x = lsub.add_parser(name, help=helptext)
        x.add_argument("path", help="a recording directory or a log file")
        x.add_argument("--json", action="store_true")
        if name == "show":
            x.add_argument("--marks-only", action="store_true", help="only marks, flushes and FUAs")

    st = sub.add_parser("states", help="list the crash states of a recording under a crash model")
    st.add_argument("path", help="a recording directory or a log file")
    st.add_argument("--model", default="flush", help="no-cache, flush, write-cache or torn (default flush)")
    st.add_argument("--seed", type=int, default=0)
    st.add_argument("--bound", type=int, default=10, help="write-cache: enumerate all subsets up to this many writes")
    st.add_argument("--samples", type=int, default=64, help="write-cache: seeded samples beyond the bound")
    st.add_argument("--json", action="store_true", help="one JSON object per state")

    rp = sub.add_parser("replay", help="rebuild one crash state's disk image")
    rp.add_argument("path", help="a recording directory (or a log file with --size)")
    rp.add_argument("--state", required=True, help="a state id from 'powercut states'")
    rp.add_argument("-o", "--out", required=True, help="output image file")
    rp.add_argument("--size", type=int, default=0, help="data device size in bytes (only for a bare log file)")

    sub.add_parser("workloads", help="list the registered workloads")
    return p


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
    except OSError as e:  # an unwritable or missing path, a full disk, a permission: one line
        print(f"powercut: error: {os_error(e)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


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
                        state_timeout_s=args.state_timeout, confirm=not args.no_confirm)
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
    for f in summary.failures[:10]:
        print(f"FAIL {f.state}: {f.verdict}: {f.reasons[0] if f.reasons else ''}\n  repro: {repro(summary.recording, f)}")
    if len(summary.failures) > 10:
        print(f"... and {len(summary.failures) - 10} more failing states (see {paths['summary']})")
    print(f"verdicts: {paths['summary'].parent / 'journal.jsonl'}\nsummary: {paths['summary']}\njunit: {paths['junit']}")


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


COMMANDS = {"run": cmd_run, "check": cmd_check, "record": cmd_record, "image": cmd_image, "log": cmd_log, "states": cmd_states,
            "replay": cmd_replay, "workloads": cmd_workloads}

if __name__ == "__main__":
    sys.exit(main())

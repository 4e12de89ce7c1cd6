"""The commands that make recordings (host): ``run`` (record + check + report), ``record`` (with --dry-run) and ``image``."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from powercut.cli.check import cmd_check
from powercut.cli.inspect import print_stats
from powercut.cli.parser import MAIN_DEFAULT_OUT, RUN_COMMITS
from powercut.core.recording.latency import recorded_phrase
from powercut.core.recording.syncdelay import held_phrase
from powercut.errors import OptionError, PowercutError, UsageError
from powercut.linux import interrupt

log = logging.getLogger("powercut")


def json_value(text: str) -> Any:
    """A command's --param value: a JSON number, true, false or null as that, anything else the
    text itself (``n=40`` is 40, ``name=db`` is "db", ``flag=true`` is true)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (int, float, bool)) or value is None else text


def _record_spec(args: argparse.Namespace, default_workload: str | None = None):
    from powercut import workload as workloads
    from powercut.config import FsSpec, WorkloadSpec, disk_latency_for, fault_for
    from powercut.record.vm import RecordSpec, Start
    from powercut.workload import parse_params

    try:  # an unknown --fs is a bad option value (exit 2)
        fs = FsSpec(
            fstype=args.fs,
            mkfs_opts=tuple(args.mkfs_opts),
            mount_opts=args.mount_opts,
            size_mb=args.size,
        )
    except UsageError as e:
        raise OptionError(str(e)) from None
    name = args.workload or ("" if args.cmd else default_workload)
    if not name and not args.cmd:
        raise UsageError("give --workload NAME or --cmd 'COMMAND'")
    try:  # a bad --param is a bad option value: refused here (exit 2), before any VM or --dry-run
        params = parse_params(args.param)
        if name:
            workloads.get(name).params(params)
        else:  # a command's: its $POWERCUT_PARAMS and its checker's "params", as JSON values
            params = {k: json_value(v) for k, v in params.items()}
    except OptionError:
        raise
    except UsageError as e:
        raise OptionError(str(e)) from None
    try:  # a bad --fault (a node beyond --nodes, a cluster's plan without a node) is a bad option value (exit 2)
        fault = fault_for(args.fault, getattr(args, "nodes", 1) or 1)
    except UsageError as e:
        raise OptionError(str(e)) from None
    try:  # a bad --delay-sync glob or time is a bad option value (exit 2)
        wl = WorkloadSpec(
            name=name or "",
            cmd=args.cmd or "",
            params=params,
            timeout_s=args.workload_timeout,
            fault=fault,
            trace=not args.no_trace,
            delay_sync=tuple(getattr(args, "delay_sync", ()) or ()),
        )
    except UsageError as e:
        raise OptionError(str(e)) from None
    try:  # a bad --disk-latency (or a node it names beyond --nodes) is a bad option value (exit 2)
        latency = disk_latency_for(args.disk_latency, getattr(args, "nodes", 1) or 1)
    except UsageError as e:
        raise OptionError(str(e)) from None
    start = None
    if bool(args.start_from) != bool(args.start_state):
        raise OptionError("--from RECORDING and --state ID go together")
    if args.start_from:
        if not (Path(args.start_from) / "manifest.toml").is_file():
            raise OptionError(f"--from {args.start_from}: not a recording (no manifest.toml)")
        start = Start(Path(args.start_from).absolute(), args.start_state)
    return RecordSpec(
        start=start,
        latency=latency,
        fs=fs,
        workload=wl,
        log_size_mb=args.log_size,
        memory_mb=args.memory,
        cpus=args.cpus,
        bus=args.bus,
        transport=args.transport,
        accel=args.accel,
        timeout_s=args.vm_timeout,
        backend=args.backend,
        libvirt_uri=args.libvirt_uri,
        image={"kernel_package": args.kernel_package},
    )


def _dry_run(spec: Any, out: str, nodes: int) -> int:
    """The exact QEMU argv (qemu backend) or domain XML (libvirt backend) the recording would run."""
    from powercut.linux import process
    from powercut.record.vm import check_nodes, ready, vm_disks, vm_spec
    from powercut.vm.accel import resolve_accel
    from powercut.vm.qemu import QEMU, build_argv

    check_nodes(nodes)
    spec, image = ready(spec, nodes)
    o = Path(out).absolute()
    vs = vm_spec(spec, image, o, o / "job", vm_disks(spec, o, nodes)[0])
    if spec.backend == "libvirt":
        from powercut.vm.libvirt import is_local_uri
        from powercut.vm.libvirt_xml import domain_xml

        if spec.accel == "auto" and not is_local_uri(spec.libvirt_uri):
            print(
                f"powercut: --accel auto on {spec.libvirt_uri} is probed on that host at run time; "
                "showing the kvm domain",
                file=sys.stderr,
            )
            accel = "kvm"
        else:
            accel = resolve_accel(spec.accel, image.kernel, image.initrd)
        print(domain_xml(vs, accel))
        return 0
    qemu = process.require(QEMU, "qemu-system-x86")
    print(
        shlex.join(build_argv(vs, resolve_accel(spec.accel, image.kernel, image.initrd), qemu=qemu))
    )
    return 0


def cmd_record(args: argparse.Namespace, default_workload: str | None = None) -> int:
    from powercut.record.vm import check_nodes, record
    from powercut.replay.materialize import replay_state

    spec = _record_spec(args, default_workload)
    nodes = getattr(args, "nodes", 1)
    try:
        check_nodes(nodes)
    except UsageError as e:
        raise OptionError(str(e)) from None
    if args.dry_run:
        return _dry_run(spec, args.out, nodes)
    try:
        rec = record(spec, args.out, nodes=nodes, force=args.force, replayer=replay_state)
    except (PowercutError, KeyboardInterrupt) as e:
        if isinstance(e, KeyboardInterrupt):
            print(f"powercut: {interrupt.note(e)}: the VM was stopped", file=sys.stderr)
        else:
            print(f"powercut: error: {e.one_line()}", file=sys.stderr)
        if (
            not isinstance(e, UsageError) and (Path(args.out) / "manifest.toml").exists()
        ):  # it had started
            print(
                f"powercut: recording kept for inspection (console.log, job/): {Path(args.out).absolute()}",
                file=sys.stderr,
            )
        return interrupt.exit_status(e) if isinstance(e, KeyboardInterrupt) else 1
    m = rec.manifest
    r = m["recording"]
    print(f"recorded {m['workload'].get('name') or 'cmd'} on {m['fs']['fstype']} into {rec.dir}")
    print(
        f"  VM {r.get('accel')}, boot to workload {r.get('boot_to_workload_s')} s, VM wall {r.get('vm_wall_s')} s,"
        f" workload {m['result'].get('workload_s')} s"
    )
    lat = m.get("latency", {})
    if lat.get("setting", "none") != "none":
        print(f"  disk latency {recorded_phrase(lat)}")
    tr = m.get("trace", {})
    if tr:
        print(
            f"  trace: {tr['file']} ({tr.get('bytes', 0) >> 10} KiB of strace)"
            if tr.get("file")
            else f"  trace: none ({tr.get('error')})"
        )
    if (ds := m["result"].get("delay_sync")) is not None:
        print(f"  delay-sync {held_phrase(ds)}")
    print_stats(str(rec.log_path))
    return 0


def _schedules(args: argparse.Namespace) -> list[Any]:
    """The run's schedules (campaign/schedules.py): one unless --disk-latency names several or --repeat > 1."""
    from powercut.campaign.schedules import plan
    from powercut.cli.parser import selection_from
    from powercut.core.recording.latency import LatencyError, parse_schedules

    try:
        latencies = parse_schedules(args.disk_latency)
    except LatencyError as e:
        raise OptionError(f"--disk-latency: {e}") from None
    return plan(latencies, args.repeat, selection_from(args, "run").seed)


def cmd_schedules(args: argparse.Namespace, schedules: list[Any]) -> int:
    """run with several schedules: each recorded and judged, one line each, then the table."""
    from rich.console import Console

    from powercut.campaign import schedules as sched

    if args.resume or args.shard or args.dry_run:
        raise UsageError(
            "--resume, --shard and --dry-run take one schedule: give one --disk-latency and no --repeat"
        )
    rspec, cspec, out = _schedule_specs(args, schedules)
    print(
        f"{len(schedules)} schedules: {', '.join(dict.fromkeys(s.setting for s in schedules))}"
        f"{f' x {args.repeat}' if args.repeat > 1 else ''}, each recorded and judged into {out}/<setting>-<k>"
    )

    def done(o: Any) -> None:
        s = o.schedule
        print(
            f"{'ok' if o.ok else 'FAIL':4} {s.setting} #{s.repeat + 1} (seed {s.seed}): {o.verdict}"
            f"{': ' + o.error if o.error else ''}  [record {o.record_s:.1f} s, check {o.check_s:.1f} s] {o.dir}",
            flush=True,
        )

    outcomes, paths = sched.run_schedules(schedules, rspec, cspec, out, done, nodes=args.nodes)
    Console().print(_schedule_table(sched.compare(outcomes)))
    print(f"schedules: {paths['json']}, {paths['md']}")
    return _schedules_status(outcomes, complete=True)


def _schedule_specs(args: argparse.Namespace, schedules: list[Any]) -> tuple[Any, Any, Path]:
    """What every schedule of a run shares: the recording's spec (the first schedule's disk latency;
    each schedule sets its own), the campaign's, the output directory."""
    from powercut.cli.check import campaign_spec

    args.disk_latency = str(schedules[0].latency)
    return (
        _record_spec(args, default_workload="append-fsync"),
        campaign_spec(args, "run"),
        Path(args.out),
    )


def _schedules_status(outcomes: list[Any], *, complete: bool) -> int:
    """3 if any schedule has a finding, else 1 if any did not finish (or ``complete`` is false), else 0."""
    from powercut.campaign.schedules import ERROR

    if any(
        o.verdict not in ("pass", ERROR, "incomplete", "no-acks") and not o.ok for o in outcomes
    ):
        return 3
    return 0 if complete and all(o.ok for o in outcomes) else 1


def cmd_explore(args: argparse.Namespace, schedules: list[Any]) -> int:
    """run --explore-races: the base schedule, one per file its trace synced before an ack, the table."""
    from rich.console import Console
    from rich.table import Table

    from powercut.campaign import explore

    if args.resume or args.shard or args.dry_run or args.repeat > 1:
        raise OptionError(
            "--explore-races starts from each --disk-latency setting once: no --repeat, "
            "--resume, --shard or --dry-run"
        )
    try:
        explore.delay_of(args.explore_delay)
    except UsageError as e:
        raise OptionError(str(e)) from None
    rspec, cspec, out = _schedule_specs(args, schedules)
    per = (
        f" per disk latency ({', '.join(s.setting for s in schedules)})"
        if len(schedules) > 1
        else ""
    )
    print(
        f"exploring races: one recording with the trace, then one per file it synced before an ack with only "
        f"that file's syncs held {args.explore_delay} (at most {args.budget}){per}, each judged into "
        f"{out}/<schedule>"
    )

    def done(o: Any) -> None:
        print(
            f"{'ok' if o.ok else 'FAIL':4} {o.schedule.setting}: {o.verdict}{': ' + o.error if o.error else ''}"
            f"  [{o.total} states; record {o.record_s:.1f} s, check {o.check_s:.1f} s] {o.dir}",
            flush=True,
        )

    ex = explore.explore(
        schedules,
        rspec,
        cspec,
        out,
        delay=args.explore_delay,
        budget=args.budget,
        on_done=done,
        nodes=args.nodes,
    )
    rows, notes = explore.table(ex)
    t = Table(title="races explored: schedules chosen from the trace", min_width=72)
    for col in explore.COLUMNS:
        t.add_column(col)
    for r in rows:
        t.add_row(*r)
    Console().print(t)
    for n in notes:  # each erring schedule's error in full, numbered as its verdicts cell
        print(n)
    print(ex.coverage())
    print(f"exploration: {out / 'explore.json'}, {out / 'explore.md'}")
    return _schedules_status(ex.runs, complete=ex.complete)


def _schedule_table(rows: list[Any]) -> Any:
    """campaign/schedules.compare's rows as a rich Table."""
    from rich.table import Table

    from powercut.campaign.schedules import counts

    t = Table(title="schedules: the same workload under each disk latency", min_width=72)
    for col in (
        "disk latency",
        "recordings",
        "recordings' verdicts",
        "crash states' verdicts",
        "mean rec s",
        "differs from the first",
    ):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r.setting,
            str(r.recordings),
            counts(r.verdicts, r.recordings),
            ", ".join(f"{v} {c}" for v, c in sorted(r.states.items())) or "-",
            f"{r.record_s:.1f}",
            r.differs or "(first)",
        )
    return t


def cmd_run(args: argparse.Namespace) -> int:
    """record + check + report with embedded defaults; several schedules: cmd_schedules."""
    # embedded defaults of the main job: small enough to finish in minutes under TCG
    if not args.workload and not args.cmd and not args.param and not args.dry_run:
        args.param = [f"n={RUN_COMMITS}"]
    schedules = _schedules(args)
    if args.start_from and (getattr(args, "explore_races", False) or len(schedules) > 1):
        raise OptionError(
            "--from records once, from one crash state: not with --explore-races, --repeat or "
            "several --disk-latency settings"
        )
    if getattr(args, "explore_races", False):
        return cmd_explore(args, schedules)
    if len(schedules) > 1:
        return cmd_schedules(args, schedules)
    if args.dry_run:
        return cmd_record(args, default_workload="append-fsync")
    rec = Path(args.out)
    if args.shard and not args.shard.whole and not (rec / "manifest.toml").exists():
        raise UsageError(
            f"run --shard {args.shard} checks one shard of a recording that every shard shares: record "
            f"it first (powercut record ... -o {args.out}) and give each shard that directory (each "
            "shard's own recording would make them shards of different recordings)"
        )
    if (args.resume or (args.shard and not args.shard.whole)) and (rec / "manifest.toml").exists():
        print(f"{'resuming the check' if args.resume else f'checking shard {args.shard}'} of {rec}")
    else:
        if (
            not args.force
            and str(args.out) == MAIN_DEFAULT_OUT
            and (rec / "manifest.toml").exists()
        ):
            args.force = (
                True  # the default campaign's own directory is replaced each run (never a -o DIR)
            )
        _prewarm_checker(args)
        rc = cmd_record(args, default_workload="append-fsync")
        if rc:
            return rc
    args.path = str(rec)
    args.out = None
    return cmd_check(args, preset="run")


def _prewarm_checker(args: argparse.Namespace) -> None:
    """The check's checker-VM template built while ``run`` records (check/checkervm.prewarm): one
    disk, checked in VMs here; anything else, or an error, leaves it to the check."""
    from powercut.check.checkervm import prewarm
    from powercut.check.place import Place
    from powercut.config import FsSpec
    from powercut.linux import filesystems

    if (
        args.check_in == "host"
        or getattr(args, "check_uris", None)
        or (getattr(args, "nodes", 1) or 1) > 1
    ):
        return
    try:
        fs = FsSpec(
            fstype=args.fs,
            mkfs_opts=tuple(args.mkfs_opts),
            mount_opts=args.mount_opts,
            size_mb=args.size,
        )
        prewarm(
            Place(args.check_in or "vm", args.accel).vm(),
            filesystems.get(args.fs),
            fs.size_mb << 20,
        )
    except (PowercutError, OSError):
        return


def cmd_image(args: argparse.Namespace) -> int:
    from powercut.images.build import ImageSpec, build_image

    if args.image_command == "build":
        image = build_image(
            ImageSpec(
                kernel_package=args.kernel_package, kernel=args.kernel, modules_dir=args.modules
            ),
            force=args.force,
        )
        print(
            f"image {image.hash}: {image.source}, kernel {image.kernel_release}, "
            f"{len(image.modules)} modules, initramfs {image.initrd_bytes >> 10} KiB\n  {image.dir}"
        )
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

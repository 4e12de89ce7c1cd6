"""The command line's grammar (host): every subcommand, its options, their defaults and help.
Parsing only -- cli/__init__.py dispatches and prints.  Every numeric option has a type that refuses
a value out of its range, so a bad value exits 2 like a bad option, before anything runs.

A default the library has too is read from the one place it is written (config, checker, core, the
filesystems table), never repeated here; the defaults that are the parser's own are named in
tests/unit/cli/test_parser.py, which holds every option to one or the other."""

from __future__ import annotations

import argparse

from powercut import config
from powercut.checker import DEFAULT_TIMEOUT_S as CHECKER_TIMEOUT_S
from powercut.cli.argtypes import (
    at_least,
    non_negative_float,
    positive_float,
    seed,
    shard,
    shell_words,
)
from powercut.core.judging.confirm import DEFAULT_SAMPLE as CONFIRM_SAMPLE
from powercut.core.recording import syncdelay
from powercut.core.states.nodes import DEFAULT_NODE_BOUND
from powercut.linux import filesystems

MAIN_DEFAULT_OUT = "runs/latest"
RUN_COMMITS = 8


class Parser(argparse.ArgumentParser):
    """argparse that reports a wrong option as one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"powercut: error: {message} (see '{self.prog} --help')\n")


def exhaustive_options(g: argparse.ArgumentParser | argparse._ArgumentGroup, what: str) -> None:
    """--require-exhaustive (the commit windows: COMMITS) and --require-exhaustive=all (every window,
    the set-up ones before the first key mark too), one option string each: a bare flag never takes
    the next word as its value."""
    g.add_argument(
        "--require-exhaustive",
        dest="require_exhaustive",
        action="store_const",
        const="commits",
        help=what,
    )
    g.add_argument(
        "--require-exhaustive=all",
        dest="require_exhaustive",
        action="store_const",
        const="all",
        help="as --require-exhaustive, for the set-up windows before the program's first key mark too",
    )


def accel_option(g: argparse.ArgumentParser | argparse._ArgumentGroup, what: str = "VM") -> None:
    """--accel, defined once for every command that boots a VM."""
    g.add_argument(
        "--accel",
        choices=("auto", "kvm", "tcg"),
        default=config.DEFAULT_ACCEL,
        help=f"{what} acceleration: auto probes KVM once (cached) and falls back to TCG "
        f"(default {config.DEFAULT_ACCEL})",
    )


def _preset(command: str):  # -> SelectionSpec
    from powercut.core.states.selection import DEMO_SELECTION, RUN_SELECTION, SelectionSpec

    return {"run": RUN_SELECTION, "demo": DEMO_SELECTION}.get(command, SelectionSpec())


def selection_options(
    g: argparse.ArgumentParser | argparse._ArgumentGroup,
    preset: str,
    *,
    models: bool = True,
    cap: bool = True,
) -> None:
    """The state-selection options (core.selection.SelectionSpec's fields), each defaulting to None:
    ``selection_from`` fills in the preset's value, so every default is written once, there."""
    d = _preset(preset)
    if models:
        g.add_argument(
            "--model",
            action="append",
            dest="models",
            metavar="MODEL",
            help=f"crash model to check (repeat, or a,b; default: {' and '.join(d.models)}; the "
            "lying-disk models: docs/lying-disks.md)",
        )
    g.add_argument(
        "--seed",
        type=seed,
        default=None,
        metavar="N|auto",
        help=f"seed for sampled crash states; auto: a new seed each run, printed with the result "
        f"(default {d.seed})",
    )
    g.add_argument(
        "--bound",
        type=at_least(0),
        default=None,
        help=f"write-cache: all subsets up to this many writes (default {d.bound})",
    )
    g.add_argument(
        "--samples",
        type=at_least(0),
        default=None,
        help=f"write-cache: seeded samples beyond the bound (default {d.samples})",
    )
    g.add_argument(
        "--setup-samples",
        type=at_least(0),
        default=None,
        help="write-cache: seeded samples beyond the bound in a set-up window (before the first key "
        "mark: nothing acknowledged yet; default: "
        + ("as --samples)" if d.setup_samples is None else f"{d.setup_samples})"),
    )
    g.add_argument(
        "--torn-samples",
        type=at_least(0),
        default=None,
        help=f"torn models: seeded tears per torn write (default {d.torn_samples})",
    )
    if models:
        g.add_argument(
            "--lie-file",
            default=None,
            metavar="PATH",
            help="the lying-disk models lie only about this file of the program (relative to its "
            "filesystem; its blocks from the recording's file map), e.g. --model unreadable-sector "
            "--lie-file app.db: reads of app.db fail at recovery (docs/lying-disks.md)",
        )
    if cap:
        g.add_argument(
            "--max-states",
            type=at_least(0),
            default=None,
            help=f"judge at most this many distinct states{' per row' if preset in ('demo', 'matrix') else ''}"
            f", spread over the models ({d.max_states or 'default: all'}; 0: all)",
        )


def selection_from(args: argparse.Namespace, preset: str):  # -> SelectionSpec (imported lazily)
    """The SelectionSpec the options ask for: the preset's, with each option given replacing its field."""
    got = {
        k: getattr(args, k, None)
        for k in (
            "models",
            "seed",
            "bound",
            "samples",
            "torn_samples",
            "max_states",
            "lie_file",
            "setup_samples",
        )
    }
    if got[
        "models"
    ]:  # --model a,b (the lying-disk models come in families) as well as --model a --model b
        got["models"] = [m.strip() for spec in got["models"] for m in spec.split(",") if m.strip()]
    return _preset(preset).with_(**got)


def memory_option(g: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--memory of a recording or bench VM, defined once."""
    g.add_argument(
        "--memory",
        type=at_least(64),
        default=config.DEFAULT_MEMORY_MB,
        metavar="MB",
        help=f"guest memory (default {config.DEFAULT_MEMORY_MB})",
    )


def fs_option(p: argparse.ArgumentParser, what: str) -> None:
    """--fs of a recording or a bench run, defined once."""
    p.add_argument(
        "--fs",
        default=filesystems.DEFAULT_FS,
        help=f"{what}: {', '.join(filesystems.names())} (default {filesystems.DEFAULT_FS})",
    )


def size_help() -> str:
    """Each filesystem's data disk size when --size is not given (linux/filesystems.py's table)."""
    return ", ".join(f"{n} {filesystems.get(n).default_mb}" for n in filesystems.names())


def _vm_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("VM")
    accel_option(g)
    g.add_argument(
        "--backend",
        choices=("qemu", "libvirt"),
        default=config.DEFAULT_BACKEND,
        help=f"run QEMU directly or via libvirt (default {config.DEFAULT_BACKEND})",
    )
    g.add_argument(
        "--libvirt-uri",
        default=config.DEFAULT_LIBVIRT_URI,
        help=f"libvirt connection URI (default {config.DEFAULT_LIBVIRT_URI})",
    )
    memory_option(g)
    g.add_argument(
        "--cpus",
        type=at_least(1),
        default=config.DEFAULT_CPUS,
        help=f"guest CPUs (default {config.DEFAULT_CPUS})",
    )
    g.add_argument(
        "--bus",
        choices=("virtio", "ahci"),
        default=config.DEFAULT_BUS,
        help=f"disk bus (ahci for hdparm -W; default {config.DEFAULT_BUS})",
    )
    g.add_argument(
        "--transport",
        choices=("9p", "virtiofs"),
        default=config.DEFAULT_TRANSPORT,
        help=f"how the host root is shared (default {config.DEFAULT_TRANSPORT})",
    )
    g.add_argument(
        "--vm-timeout",
        type=positive_float,
        default=config.RECORD_TIMEOUT_S,
        metavar="S",
        help=f"kill the VM after S seconds (default {config.RECORD_TIMEOUT_S:g})",
    )


def _record_options(p: argparse.ArgumentParser, required_out: bool = True) -> None:
    w = p.add_mutually_exclusive_group()
    w.add_argument(
        "--workload", help="a built-in or registered workload (see 'powercut workloads')"
    )
    w.add_argument(
        "--cmd",
        help="any shell command, run in the guest with its cwd on the filesystem under test",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="workload parameter (repeat); with --cmd: the command's $POWERCUT_PARAMS and its "
        "checker's params (JSON numbers and true/false as such, anything else as text)",
    )
    p.add_argument(
        "--fault",
        default="",
        metavar="KIND[,KEY=VALUE...]",
        help="inject I/O errors during the recording: eio-writes or eio-range (file=PATH | "
        "sectors=S+N), on at mark=GLOB[,nth=N] | p=P[,seed=S] | writes=N | after=SECONDS "
        "(default: from the start), off at until=GLOB (see README, Faults); with --nodes, "
        "one node's: NODE=PLAN, joined by + (1=eio-writes,mark=ack:3: node 1's disk fails)",
    )
    p.add_argument(
        "--delay-sync",
        action="append",
        default=[],
        metavar="GLOB=TIME",
        help="hold every fsync, fdatasync, sync_file_range, msync and syncfs of the workload on a "
        "file matching GLOB for TIME (e.g. '*.wal=200ms'; relative to the filesystem under "
        "test, or absolute; repeat for more files): opens the window a reply can race one "
        "file's sync in (docs/races.md)",
    )
    fs_option(p, "filesystem under test")
    p.add_argument(
        "--mkfs-opts",
        type=shell_words,
        default="",
        help="extra mkfs options, as one shell-quoted string",
    )
    p.add_argument("--mount-opts", default="", help="mount options (-o)")
    p.add_argument(
        "--size",
        type=at_least(0),
        default=0,
        metavar="MB",
        help=f"data disk size (default: the filesystem's, {size_help()})",
    )
    p.add_argument(
        "--disk-latency",
        default=str(config.DEFAULT_DISK_LATENCY),
        metavar="SETTING",
        help="the data disk's latency while recording: none (default), nvme, sata-ssd, hdd, or "
        "write=TIME,flush=TIME (e.g. write=0.1ms,flush=8ms); each at least that slow (dm-delay "
        "above dm-log-writes; docs/races.md); with --nodes, one node's: NODE=SETTING, joined by + "
        "(1=hdd: node 1 only; nvme+1=hdd: node 1 hdd, the others nvme)"
        + (
            "; run: several, comma-separated (none,hdd), each recorded and judged: a schedule "
            "table says which verdicts differ"
            if not required_out
            else ""
        ),
    )
    p.add_argument(
        "--log-size",
        type=at_least(0),
        default=0,
        metavar="MB",
        help="log disk size (default 4x data + 64)",
    )
    if not required_out:  # run only
        p.add_argument(
            "--repeat",
            type=at_least(1),
            default=1,
            metavar="N",
            help="record and judge each --disk-latency setting N times, repeat k sampling with seed+k "
            "(default 1); with N > 1 or several settings: the schedule table, exit 3 if any fails",
        )
        p.add_argument(
            "--explore-races",
            action="store_true",
            help="record once with the trace, then once per file the program synced before an ack with "
            "only that file's syncs held (--explore-delay), judge every recording: the schedule "
            "table, exit 3 if any fails; each --disk-latency setting is explored so (docs/races.md)",
        )
        p.add_argument(
            "--explore-delay",
            default=syncdelay.EXPLORE_DELAY,
            metavar="TIME|auto",
            help=f"how long --explore-races holds each file's syncs (default auto: {syncdelay.EXPLORE_COMMITS}x "
            f"a commit's median, at least {syncdelay.EXPLORE_FLOOR}, at most {syncdelay.EXPLORE_CEILING}: "
            "long against one commit; the coverage line says how many commits it is)",
        )
        p.add_argument(
            "--budget",
            type=at_least(0),
            default=syncdelay.EXPLORE_BUDGET,
            metavar="N",
            help=f"--explore-races: at most N held recordings per disk latency (default "
            f"{syncdelay.EXPLORE_BUDGET}; the files left out are named)",
        )
    p.add_argument(
        "--from",
        dest="start_from",
        default="",
        metavar="RECORDING",
        help="crash, recover, crash again: start from a crash state (--state) of this recording "
        "(one disk's) instead of an empty disk; its filesystem, size and options are taken; the "
        "state's acks must survive this recording too (docs/corpus.md)",
    )
    p.add_argument(
        "--state",
        dest="start_state",
        default="",
        metavar="ID",
        help="with --from: the crash state to start from (a state id, as 'powercut states' or a "
        "check's journal names it)",
    )
    p.add_argument(
        "--no-trace",
        action="store_true",
        help="do not trace the workload's system calls (strace; the cause of a failure is then given in blocks only)",
    )
    p.add_argument(
        "--workload-timeout",
        type=positive_float,
        default=config.WORKLOAD_TIMEOUT_S,
        metavar="S",
        help=f"kill the workload after S s (default {config.WORKLOAD_TIMEOUT_S:g})",
    )
    p.add_argument(
        "-o",
        "--out",
        required=required_out,
        default=None if required_out else MAIN_DEFAULT_OUT,
        help="recording directory" + ("" if required_out else f" (default {MAIN_DEFAULT_OUT})"),
    )
    p.add_argument("--force", action="store_true", help="replace an existing recording directory")
    p.add_argument("--dry-run", action="store_true", help="print the exact QEMU argv and stop")
    p.add_argument(
        "--kernel-package",
        default="",
        help="pin the guest kernel package (default: linux-image-amd64's)",
    )
    _vm_options(p)


def _check_options(p: argparse.ArgumentParser, preset: str) -> None:
    g = p.add_argument_group("checking")
    selection_options(g, preset)
    g.add_argument(
        "--check-in",
        choices=("vm", "host"),
        default=config.DEFAULT_CHECK_IN,
        help="vm: a checker VM judges the states, corrupt images never touch the host kernel; host: loop "
        "devices on this machine, in parallel (trusted, disposable machines only) (default "
        f"{config.DEFAULT_CHECK_IN})",
    )
    g.add_argument(
        "-j",
        "--jobs",
        type=at_least(0),
        default=0,
        help="checker VMs (vm) or parallel walks (host) at once (default: one per core)",
    )
    g.add_argument(
        "--check-uri",
        action="append",
        dest="check_uris",
        default=[],
        metavar="URI",
        help="a libvirt host for the checker VMs, e.g. qemu+ssh://user@host/system (repeat: the states are spread over the hosts, -j VMs on each; the image and recording are shipped there by hash)",
    )
    g.add_argument(
        "--checker",
        default="",
        metavar="COMMAND",
        help='your own checker: gets the input as JSON on stdin, answers {"verdict": ..., "reasons": [...]} '
        "as the last line of stdout, or exits 0 (pass) / 1 (fail)",
    )
    g.add_argument(
        "--state-timeout",
        type=positive_float,
        default=config.STATE_TIMEOUT_S,
        metavar="S",
        help=f"VM mode: one state's limit (default {config.STATE_TIMEOUT_S:g})",
    )
    g.add_argument(
        "--checker-timeout",
        type=positive_float,
        default=CHECKER_TIMEOUT_S,
        metavar="S",
        help=f"the checker's limit per state (default {CHECKER_TIMEOUT_S:g}); a checker that times out or crashes on each "
        "of the first 3 states stops the check",
    )
    exhaustive_options(
        g,
        "a pass whose commit windows are not exhaustive (sampled windows, --max-states cap, "
        "weakened: ambiguous ordering windows, no checker) exits 1 instead of 0; its coverage is "
        "printed either way",
    )
    g.add_argument(
        "--ledger",
        default="",
        metavar="FILE",
        help="a ledger of states that passed in earlier runs of the same recording: skip them, then add "
        "this run's passes (with --seed auto, N runs judge about N times the samples of one)",
    )
    g.add_argument(
        "--allow-no-acks",
        action="store_true",
        help="a recording without any ack: mark may pass (it proves nothing: by default that is exit 1)",
    )
    g.add_argument(
        "--resume", action="store_true", help="continue a campaign: skip the states already judged"
    )
    g.add_argument(
        "--shard",
        type=shard,
        default=None,
        metavar="I/N",
        help="judge only shard I of N of the distinct states (1-based; deterministic, no coordination); "
        "'powercut merge' joins the shards' outputs",
    )
    g.add_argument(
        "--confirm",
        choices=("group", "all"),
        default=config.DEFAULT_CONFIRM_MODE,
        dest="confirm_mode",
        help="judge failing states a second time, alone: 'group' a sample of each failure group (the "
        "whole group when it is small or its sample disagrees), 'all' every failing state (default "
        f"{config.DEFAULT_CONFIRM_MODE})",
    )
    g.add_argument(
        "--confirm-sample",
        type=at_least(2),
        default=CONFIRM_SAMPLE,
        metavar="K",
        help="states of a large failure group judged alone: its first, its last and seeded others, K in "
        f"all (default {CONFIRM_SAMPLE})",
    )
    g.add_argument(
        "--no-confirm",
        action="store_true",
        help="do not judge failing states a second time (flaky states then go unnoticed)",
    )
    g.add_argument(
        "--judge-all",
        action="store_true",
        help="judge every state: no read-set proofs (by default a state whose image equals a "
        "judged state's on every sector that state's judge read, with the same acks, gets its "
        "verdict; for a checker that reads the clock or anything outside the mounts)",
    )
    g.add_argument(
        "--shrink",
        type=at_least(0),
        default=config.DEFAULT_SHRINK,
        metavar="K",
        help="minimize and blame the first state of the first K failure groups, each saved as a repro "
        f"bundle (default {config.DEFAULT_SHRINK}; 0: off)",
    )
    g.add_argument(
        "--shrink-budget",
        type=at_least(1),
        default=config.DEFAULT_SHRINK_BUDGET,
        metavar="N",
        help=f"checks per minimization (default {config.DEFAULT_SHRINK_BUDGET})",
    )


BENCH_SUITES = ("guarantees", "tlpi", "zodb-fsync", "commit", "flush-cost", "pg", "overhead", "all")


def _bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--suite",
        action="append",
        dest="suites",
        metavar="NAME",
        help=f"a seed suite (repeat): {', '.join(BENCH_SUITES)} (default: {config.BENCH_SUITE}, "
        "unless --profile or --workload is given)",
    )
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME",
        help="a fio profile by name (repeat)",
    )
    p.add_argument(
        "--workload",
        default="",
        help="time a registered workload (timing mode: its acks are timestamps)",
    )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="workload parameter (repeat)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="few profiles, small sizes: seconds per run under TCG (CI)",
    )
    p.add_argument(
        "--cache",
        choices=("both", "on", "off"),
        default="both",
        help="the disk write cache settings to time (default both)",
    )
    fs_option(p, "filesystem made fresh for each run set")
    p.add_argument(
        "--mkfs-opts",
        type=shell_words,
        default="",
        help="extra mkfs options, as one shell-quoted string",
    )
    p.add_argument("--mount-opts", default="", help="mount options (-o)")
    p.add_argument(
        "--size",
        type=at_least(0),
        default=0,
        metavar="MB",
        help="data disk size (default: the filesystem's)",
    )
    p.add_argument(
        "-o",
        "--out",
        default=config.BENCH_OUT,
        help=f"a run directory is made under it (default {config.BENCH_OUT})",
    )
    p.add_argument(
        "--json", action="store_true", help="print the results as JSON instead of tables"
    )
    p.add_argument("--no-plot", action="store_true", help="no PNG/SVG plots")
    p.add_argument("--list", action="store_true", help="list the suites and fio profiles and stop")
    p.add_argument("--dry-run", action="store_true", help="print the exact QEMU argv and stop")
    g = p.add_argument_group(
        "VM (default: the disk is an emulated AHCI drive, so hdparm -W reaches it)"
    )
    g.add_argument(
        "--qemu-cache",
        default=config.BENCH_QEMU_CACHE,
        metavar="MODE",
        help=f"QEMU cache mode of the disk: {', '.join(m for m in config.CACHE_MODES if m != 'unsafe')} "
        f"(default {config.BENCH_QEMU_CACHE}; never unsafe: it drops the flushes being timed)",
    )
    g.add_argument(
        "--disk-dir",
        default="",
        metavar="DIR",
        help="where the disk image goes (default: the run directory)",
    )
    accel_option(g, "bench VM")
    memory_option(g)
    g.add_argument(
        "--vm-timeout",
        type=non_negative_float,
        default=0.0,
        metavar="S",
        help="kill the VM after S s (default: estimated)",
    )
    g.add_argument("--kernel-package", default="", help="pin the guest kernel package")
    h = p.add_argument_group("host mode (no VM: time this machine's own disk)")
    h.add_argument(
        "--on-host",
        default="",
        metavar="DIR_OR_DEVICE",
        help="run fio here: a directory, or a block device written raw (with --raw; refused if mounted)",
    )
    h.add_argument(
        "--toggle-write-cache",
        action="store_true",
        help="set the cache on and off (hdparm for ATA, sdparm for SCSI, nvme set-feature -f 6 for NVMe), "
        "read it back, restore it afterwards",
    )
    h.add_argument(
        "--raw",
        action="store_true",
        help="allow fio to overwrite the block device named by --on-host",
    )


def _nodes_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nodes",
        type=at_least(1),
        default=1,
        metavar="N",
        help="a cluster recording: N data disks, each on its own dm-log-writes device, in one VM; "
        "every mark goes to every node's log (docs/clusters.md)",
    )


def _node_bound_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--node-bound",
        "--cluster-bound",  # its name before one word per idea: kept for users' scripts
        dest="node_bound",
        type=at_least(1),
        default=DEFAULT_NODE_BOUND,
        metavar="N",
        help="a cluster recording: all combinations of the nodes' states of an instant up to N, "
        "else structured picks and --samples seeded ones (docs/clusters.md)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="powercut",
        description="Crash-consistency testing: record a workload's block writes with "
        "dm-log-writes in a VM, replay every crash state, check that acknowledged commits survive.",
    )
    p.add_argument(
        "-v", "--verbose", action="count", default=0, help="more console output (-vv: debug)"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    r = sub.add_parser(
        "run",
        help="the default campaign: record append-fsync on ext4, check every crash state "
        "under flush, write-cache and torn-4k, report",
    )
    _record_options(r, required_out=False)
    _nodes_option(r)
    _check_options(r, "run")
    _node_bound_option(r)

    r = sub.add_parser("record", help="record a workload's block writes in a VM")
    _record_options(r)
    _nodes_option(r)

    c = sub.add_parser(
        "check", help="judge every crash state of a recording (recover, checker, fsck)"
    )
    c.add_argument("path", help="a recording directory")
    c.add_argument("-o", "--out", help="output directory (default RECORDING/check)")
    c.add_argument(
        "--force", action="store_true", help="replace an earlier check in the output directory"
    )
    _check_options(c, "check")
    accel_option(c, "checker VM")
    _node_bound_option(c)

    img = sub.add_parser("image", help="build or inspect the guest image")
    isub = img.add_subparsers(dest="image_command", metavar="ACTION", parser_class=Parser)
    b = isub.add_parser("build", help="build (or find cached) the guest kernel + initramfs")
    b.add_argument(
        "--kernel-package",
        default="",
        help="Debian kernel package (default: what linux-image-amd64 resolves to)",
    )
    b.add_argument("--kernel", default="", help="a kernel image of your own (with --modules)")
    b.add_argument(
        "--modules", default="", help="its lib/modules/<release> directory (with modules.dep)"
    )
    b.add_argument("--force", action="store_true", help="rebuild even if cached")
    i = isub.add_parser("info", help="print what is inside the guest image")
    i.add_argument("--kernel-package", default="")
    i.add_argument("--json", action="store_true")

    su = sub.add_parser(
        "setup",
        help="make this machine ready for crash tests (Debian/Ubuntu, root): install the "
        "missing Debian packages with apt-get, build the guest image, probe KVM",
    )
    su.add_argument(
        "--no-image", action="store_true", help="only the Debian packages, no guest image"
    )
    su.add_argument(
        "--dry-run",
        action="store_true",
        help="print what it would install and build; change nothing",
    )
    su.add_argument(
        "--dev",
        action="store_true",
        help="also the packages of powercut's own test suite (libvirt, PostgreSQL, Chromium...)",
    )
    dr = sub.add_parser(
        "doctor",
        help="can a crash test run here? one line per check (ok, missing, warn) with the "
        "command that fixes it; exit 0 when a crash test can run, 1 when not",
    )
    dr.add_argument("--json", action="store_true", help="the checks as one JSON object")

    lg = sub.add_parser("log", help="read a dm-log-writes log")
    lsub = lg.add_subparsers(dest="log_command", metavar="ACTION", parser_class=Parser)
    for name, helptext in (
        ("stats", "counts: entries, writes, flushes, FUAs, discards, marks"),
        ("show", "one line per entry"),
    ):
        x = lsub.add_parser(name, help=helptext)
        x.add_argument("path", help="a recording directory or a log file")
        x.add_argument("--json", action="store_true")
        if name == "show":
            x.add_argument("--marks-only", action="store_true", help="only marks, flushes and FUAs")

    st = sub.add_parser("states", help="list the crash states of a recording under a crash model")
    st.add_argument("path", help="a recording directory or a log file")
    st.add_argument(
        "--model",
        default="flush",
        help="no-cache, flush, write-cache, torn, torn-4k or a lying-disk "
        "model (docs/lying-disks.md; default flush)",
    )
    selection_options(st, "check", models=False, cap=False)
    st.add_argument("--json", action="store_true", help="one JSON object per state")

    rp = sub.add_parser("replay", help="rebuild one crash state's disk image")
    rp.add_argument("path", help="a recording directory (or a log file with --size)")
    rp.add_argument("--state", required=True, help="a state id from 'powercut states'")
    rp.add_argument("-o", "--out", required=True, help="output image file")
    rp.add_argument(
        "--size",
        type=at_least(0),
        default=0,
        help="data device size in bytes (only for a bare log file)",
    )

    _bench_options(
        sub.add_parser(
            "bench",
            help="what each durability guarantee costs: fio profiles, seed suites "
            "and timed workloads, disk write cache on and off",
        )
    )
    sub.add_parser("workloads", help="list the registered workloads")

    rp2 = sub.add_parser(
        "report",
        help="durability vs cost: each verdict-matrix row's verdicts next to its "
        "commits/s and p99 with the disk write cache on and off",
    )
    rp2.add_argument(
        "matrix", help="a matrix output directory (powercut matrix -o DIR) or its matrix.json"
    )
    rp2.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="RESULTS",
        help="bench results.json with the rows timed (repeat); default: --measure them",
    )
    rp2.add_argument(
        "--measure", action="store_true", help="time the rows now (a bench VM per filesystem)"
    )
    rp2.add_argument("--quick", action="store_true", help="fewer commits per timed run (CI)")
    rp2.add_argument(
        "--file", default="", help="the matrix file the results came from (default: the built-in)"
    )
    rp2.add_argument(
        "-o", "--out", default="", help="where the report goes (default: MATRIX/report)"
    )
    accel_option(rp2, "bench VM")

    rr = sub.add_parser(
        "repro",
        help="rebuild a failing state (a repro bundle, or a recording + --state) and judge "
        "it again in a checker VM: exit 3 if it still fails, 0 if not",
    )
    rr.add_argument(
        "path", help="a repro bundle directory (check/bundles/NN-...) or a recording directory"
    )
    rr.add_argument(
        "--state",
        default="",
        help="the state id (required for a recording; a bundle: its minimized state)",
    )
    rr.add_argument(
        "--keep-image",
        default="",
        metavar="FILE",
        help="also write the state's image (unrecovered) to FILE",
    )
    rr.add_argument(
        "--check-in",
        choices=("vm", "host"),
        default=config.DEFAULT_CHECK_IN,
        help=f"where to judge it (default {config.DEFAULT_CHECK_IN})",
    )
    rr.add_argument(
        "--shell",
        action="store_true",
        help="then open a shell on this terminal in a checker VM, the state recovered and mounted",
    )
    accel_option(rr, "checker VM")

    mx = sub.add_parser(
        "matrix",
        help="run the verdict matrix (or part of it): expected vs seen verdicts per "
        "workload variant, filesystem and crash model",
    )
    mx.add_argument(
        "rows",
        nargs="*",
        metavar="PATTERN",
        help="glob(s) on row ids, e.g. 'wal/*' or '*/ext4*' (default: every row)",
    )
    mx.add_argument("--ci", action="store_true", help="only CI's part (the rows with a 'ci' key)")
    mx.add_argument(
        "--list",
        action="store_true",
        help="print the chosen rows and their expectations; run nothing",
    )
    mx.add_argument(
        "--file",
        default="",
        help="another matrix file (default: the built-in checkers/matrix.toml)",
    )
    mx.add_argument(
        "-o",
        "--out",
        default="runs/matrix",
        help="where recordings and results go (default runs/matrix)",
    )
    mx.add_argument(
        "--check-in",
        choices=("vm", "host"),
        default=None,
        help="judge every row here (default: a CI row where its 'ci' says, the others in checker VMs)",
    )
    mx.add_argument(
        "-j",
        "--jobs",
        type=at_least(0),
        default=0,
        help="checker VMs or host walks at once (default: one per core)",
    )
    mx.add_argument(
        "--check-uri",
        action="append",
        dest="check_uris",
        default=[],
        metavar="URI",
        help="a libvirt host for the checker VMs, e.g. qemu+ssh://user@host/system (repeat: the states are spread over the hosts, -j VMs on each; the image and recording are shipped there by hash)",
    )
    selection_options(mx, "matrix", models=False)
    exhaustive_options(
        mx,
        "a cell expecting pass whose commit windows' states were sampled, capped or weakened is "
        "a surprise",
    )
    accel_option(mx)
    mx.add_argument(
        "--resume", action="store_true", help="reuse the recordings and verdicts already in --out"
    )
    mx.add_argument(
        "--shard",
        type=shard,
        default=None,
        metavar="I/N",
        help="run only shard I of N of the chosen rows (round-robin, 1-based); 'powercut merge' joins them",
    )

    cp = sub.add_parser(
        "corpus",
        help="the corpus of published durability bugs: build each entry's buggy and fixed release "
        "once, record and judge both, say which bugs are caught (docs/corpus.md)",
    )
    cp.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="entries (or programs) to run (default: every entry)",
    )
    cp.add_argument(
        "--list", action="store_true", help="print the entries and what each expects; run nothing"
    )
    cp.add_argument(
        "--build-only",
        action="store_true",
        help="build the chosen entries' releases into the cache (the only step that needs the "
        "network) and stop",
    )
    cp.add_argument(
        "--file", default="", help="another corpus file (default: workloads/corpus/corpus.toml)"
    )
    cp.add_argument(
        "-o",
        "--out",
        default="runs/corpus",
        help="where recordings and results go (default runs/corpus)",
    )
    cp.add_argument(
        "--cache",
        default="",
        help="where the releases are built (by default the cache under /var/cache/powercut)",
    )
    accel_option(cp)

    dm = sub.add_parser(
        "demo",
        help="the main job: the three named workloads, each durable and broken, checked in "
        "checker VMs and timed with the cache on and off; one report.html",
    )
    dm.add_argument(
        "-o",
        "--out",
        default="runs/demo",
        help="where recordings and results go (default runs/demo)",
    )
    dm.add_argument(
        "--check-in",
        choices=("vm", "host"),
        default=config.DEFAULT_CHECK_IN,
        help=f"where to judge the states (default {config.DEFAULT_CHECK_IN})",
    )
    dm.add_argument(
        "-j",
        "--jobs",
        type=at_least(0),
        default=0,
        help="checker VMs at once (default: one per core)",
    )
    selection_options(dm, "demo", models=False)
    dm.add_argument("--no-cost", action="store_true", help="skip the timings (no bench VM)")
    accel_option(dm)

    mg = sub.add_parser(
        "merge",
        help="join the outputs of a check's shards (--shard i/n) into the one summary, "
        "JUnit and failure groups of the whole campaign (or a matrix's shards into one matrix)",
    )
    mg.add_argument(
        "shards",
        nargs="+",
        metavar="SHARD_OUT",
        help="each shard's check output directory (or each matrix shard's -o directory)",
    )
    mg.add_argument("-o", "--out", required=True, help="the merged output directory")
    return p

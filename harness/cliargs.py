"""The command line's grammar (host): every subcommand, its options, their defaults and help.
Parsing only -- cli.py dispatches and prints."""
from __future__ import annotations

import argparse

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
                   help="your own checker: gets the input as JSON on stdin, answers {\"verdict\": ..., \"reasons\": [...]} "
                        "on stdout, or exits 0 (pass) / 1 (fail)")
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
    st.add_argument("--model", default="flush", help="no-cache, flush, write-cache, torn or torn-4k (default flush)")
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

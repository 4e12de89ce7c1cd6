#!/usr/bin/env python3
"""What holding a program's sync calls per file costs, by mechanism, and what the strace trace costs
in each mode (issue 60): the old LD_PRELOAD shim (powercut_delaysync.c of commit cdea912), the
seccomp supervisor (vm-images/powercut_holdsync.c), strace as powercut takes the trace today
(--seccomp-bpf) and with plain ptrace (the mode a hold needs: with --seccomp-bpf the supervisor's
USER_NOTIF action wins over strace's TRACE and every sync call vanishes from the trace), and the
supervisor around each strace.

The same workload in every mode, a C program and a static Go one (skipped without `go`): thread A
writes 4 KiB to a.log and fdatasyncs it --n times (--tmpfs-n times on the tmpfs); thread B, while A
runs, writes and fsyncs b.log and makes 16 cheap untraced system calls (getppid) an iteration.  Per
mode: A's time a commit and B's iterations a second, each against `bare` (the program alone) of the
same invocation, medians of --rounds; the sync calls the program made, those the strace trace shows
(a call interrupted and restarted counted once) and those the shim or the supervisor logged (sums
over the rounds).  The supervisor's rule holds nothing the program syncs (pure overhead); then one
more run a mode and round holds a.log 50 ms: how many of A's calls were held, and how long A's
fdatasync took as the program timed it and as the trace's -T shows it.  Figures, not assertions:
ratios of this machine.  On a tmpfs (a sync ~free: the overhead shows) and on an ext4 on a loop
device over a file in /var/tmp (the disk's sync time dominates, and varies).

    python bench/bench_holdsync.py                 # 3 rounds, both filesystems (~3 min)
    python bench/bench_holdsync.py --rounds 5 --n 400
    python bench/bench_holdsync.py --only-tmpfs

Needs root (mount, losetup, a seccomp filter), cc, strace and the tree at git commit cdea912 (the
shim's source)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import platform
import re
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from powercut.core.trace.syscalls import TRACED
from powercut.errors import CommandFailed
from powercut.linux import process

REPO = Path(__file__).resolve().parents[1]
SHIM_COMMIT = "cdea912"
SHIM_SOURCE = "vm-images/powercut_delaysync.c"
SUPERVISOR_SOURCE = REPO / "vm-images" / "powercut_holdsync.c"
MODES = (
    "bare",
    "shim",
    "seccomp",
    "strace-bpf",
    "strace-ptrace",
    "seccomp+strace-ptrace",
    "seccomp+strace-bpf",
)
HOLD_MODES = ("shim", "seccomp", "seccomp+strace-ptrace", "seccomp+strace-bpf")
NOTHING = (1000, "nomatch.file")  # a rule that holds nothing the program syncs
HOLD_NS = 50_000_000
RUN_TIMEOUT = 300.0
SYNC_CALL = re.compile(r"^(\d+)\s+\S+\s+(fsync|fdatasync)\(\d+<([^>]*)>(.*)$")
SYNC_RESUMED = re.compile(r"^(\d+)\s+\S+\s+<\.\.\. (?:fsync|fdatasync) resumed>(.*)$")
DURATION = re.compile(r"<([\d.]+)>$")

C_PROGRAM = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define CHEAP 16

static atomic_int done;
static int n, afd, bfd;
static long long a_ns, b_ns, b_iters;
static long long *a_sync_ns;

static long long now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void fail(const char *what) {
    perror(what);
    exit(1);
}

static void *thread_a(void *arg) {
    char buf[BLOCK];
    memset(buf, 'a', sizeof buf);
    long long start = now();
    for (int i = 0; i < n; i++) {
        if (pwrite(afd, buf, BLOCK, (off_t)i * BLOCK) != BLOCK)
            fail("pwrite a.log");
        long long t = now();
        if (fdatasync(afd) != 0)
            fail("fdatasync a.log");
        a_sync_ns[i] = now() - t;
    }
    a_ns = now() - start;
    atomic_store(&done, 1);
    return arg;
}

static void *thread_b(void *arg) {
    char buf[BLOCK];
    memset(buf, 'b', sizeof buf);
    long long start = now();
    long long k = 0;
    while (!atomic_load(&done)) {
        if (pwrite(bfd, buf, BLOCK, (off_t)(k % 256) * BLOCK) != BLOCK)
            fail("pwrite b.log");
        if (fsync(bfd) != 0)
            fail("fsync b.log");
        for (int j = 0; j < CHEAP; j++)
            syscall(SYS_getppid);
        k++;
    }
    b_ns = now() - start;
    b_iters = k;
    return arg;
}

static int open_in(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fail(path);
    return fd;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DIR N\n", argv[0]);
        return 2;
    }
    n = atoi(argv[2]);
    afd = open_in(argv[1], "a.log");
    bfd = open_in(argv[1], "b.log");
    a_sync_ns = calloc((size_t)n, sizeof *a_sync_ns);
    pthread_t ta, tb;
    pthread_create(&tb, NULL, thread_b, NULL);
    pthread_create(&ta, NULL, thread_a, NULL);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    printf("a_ns=%lld a_syncs=%d b_iters=%lld b_ns=%lld a_sync_ns=", a_ns, n, b_iters, b_ns);
    for (int i = 0; i < n; i++)
        printf(i ? ",%lld" : "%lld", a_sync_ns[i]);
    printf("\n");
    return 0;
}
"""

GO_PROGRAM = r"""
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const block = 4096
const cheap = 16

func must(err error, what string) {
	if err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(1)
	}
}

func openIn(dir, name string) int {
	flags := syscall.O_CREAT | syscall.O_WRONLY | syscall.O_TRUNC | syscall.O_CLOEXEC
	fd, err := syscall.Open(filepath.Join(dir, name), flags, 0o644)
	must(err, name)
	return fd
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: prog DIR N")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[2])
	must(err, "N")
	afd := openIn(os.Args[1], "a.log")
	bfd := openIn(os.Args[1], "b.log")
	var done atomic.Bool
	var wg sync.WaitGroup
	var aNs, bNs, bIters int64
	syncs := make([]string, n)
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, block)
		start := time.Now()
		k := int64(0)
		for !done.Load() {
			_, err := syscall.Pwrite(bfd, buf, (k%256)*block)
			must(err, "pwrite b.log")
			must(syscall.Fsync(bfd), "fsync b.log")
			for j := 0; j < cheap; j++ {
				syscall.Getppid()
			}
			k++
		}
		bNs = int64(time.Since(start))
		bIters = k
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, block)
		start := time.Now()
		for i := 0; i < n; i++ {
			_, err := syscall.Pwrite(afd, buf, int64(i)*block)
			must(err, "pwrite a.log")
			t := time.Now()
			must(syscall.Fdatasync(afd), "fdatasync a.log")
			syncs[i] = strconv.FormatInt(int64(time.Since(t)), 10)
		}
		aNs = int64(time.Since(start))
		done.Store(true)
	}()
	wg.Wait()
	fmt.Printf("a_ns=%d a_syncs=%d b_iters=%d b_ns=%d a_sync_ns=%s\n",
		aNs, n, bIters, bNs, strings.Join(syncs, ","))
}
"""


@dataclasses.dataclass(frozen=True)
class Tools:
    shim: Path
    supervisor: Path
    strace: str
    programs: dict[str, Path]  # "C", "Go" -> the workload binary


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of the workload in one mode."""

    a_ns: int
    a_syncs: int
    b_iters: int
    b_ns: int
    a_sync_ns: tuple[int, ...]  # each of A's fdatasync calls as the program timed it
    traced: int | None  # sync calls in the strace trace (None: no trace)
    traced_a_ns: tuple[int, ...]  # the trace's -T of A's fdatasync calls
    logged: int | None  # sync calls the shim or the supervisor logged (None: neither)
    held: int | None  # of which held (a non-zero hold)
    wall_s: float

    @property
    def made(self) -> int:
        return self.a_syncs + self.b_iters


# ---- building -------------------------------------------------------------------------------------


def build_shim(out: Path) -> Path:
    src = out / "powercut_delaysync.c"
    shown = process.run(
        ["git", "-C", str(REPO), "show", f"{SHIM_COMMIT}:{SHIM_SOURCE}"], timeout=60
    )
    src.write_text(shown.stdout)
    lib = out / "libpowercut-delaysync.so"
    process.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], timeout=120)
    return lib


def build_supervisor(out: Path) -> Path:
    exe = out / "powercut-holdsync"
    process.run(["cc", "-O2", "-o", str(exe), str(SUPERVISOR_SOURCE)], timeout=120)
    return exe


def build_c(out: Path) -> Path:
    src = out / "holdsync_c.c"
    src.write_text(C_PROGRAM)
    exe = out / "workload-c"
    process.run(["cc", "-O2", "-pthread", "-o", str(exe), str(src)], timeout=120)
    return exe


def build_go(out: Path) -> Path:
    src = out / "gosrc"
    src.mkdir()
    (src / "go.mod").write_text("module holdsyncbench\n\ngo 1.21\n")
    (src / "main.go").write_text(GO_PROGRAM)
    exe = out / "workload-go"
    env = {**os.environ, "CGO_ENABLED": "0"}
    process.run(["go", "build", "-o", str(exe), "."], timeout=600, env=env, cwd=str(src))
    return exe


def build(out: Path) -> Tools:
    programs = {"C": build_c(out)}
    if shutil.which("go"):
        programs["Go"] = build_go(out)
    else:
        print("note: `go` is not on PATH: no Go rows")
    return Tools(
        build_shim(out), build_supervisor(out), process.require("strace", "strace"), programs
    )


# ---- one run --------------------------------------------------------------------------------------


def strace_argv(strace: str, out: Path, bpf: bool) -> list[str]:
    """The trace powercut takes (guest/tracing.py), with or without --seccomp-bpf."""
    argv = [strace, "-f", "-y", "-T", "-qq", "-ttt", "-s", "512"]
    argv += ["--seccomp-bpf"] if bpf else []
    argv += ["-e", "abbrev=none", "-e", "signal=none", "-e", "trace=" + ",".join(TRACED)]
    return argv + ["-o", str(out), "--"]


def supervisor_argv(tools: Tools, log: Path, mount: Path, rule: tuple[int, str]) -> list[str]:
    return [
        str(tools.supervisor),
        "-l",
        str(log),
        "-m",
        str(mount),
        "-r",
        f"{rule[0]}:{rule[1]}",
        "--",
    ]


def shim_env(tools: Tools, log: Path, mount: Path, rule: tuple[int, str]) -> dict[str, str]:
    return {
        **os.environ,
        "LD_PRELOAD": str(tools.shim),
        "POWERCUT_DELAY_SYNC": f"{rule[0]}\t{rule[1]}",
        "POWERCUT_MOUNT": str(mount),
        "POWERCUT_DELAY_SYNC_LOG": str(log),
    }


def command(
    mode: str, tools: Tools, program: list[str], files: Path, mount: Path, rule: tuple[int, str]
) -> tuple[list[str], dict[str, str] | None]:
    """The argv and the environment (None: this one) of ``program`` in ``mode``."""
    trace = files / "trace.txt"
    log = files / "sync.log"
    if mode == "shim":
        return program, shim_env(tools, log, mount, rule)
    prefix: list[str] = []
    if mode.startswith("seccomp"):
        prefix += supervisor_argv(tools, log, mount, rule)
    if "strace" in mode:
        prefix += strace_argv(tools.strace, trace, mode.endswith("bpf"))
    return prefix + program, None


def parse_output(out: str) -> dict[str, str]:
    line = next(ln for ln in out.splitlines() if ln.startswith("a_ns="))
    return dict(field.split("=", 1) for field in line.split())


def trace_syncs(trace: Path) -> tuple[int, tuple[int, ...]]:
    """The sync calls a trace shows (one interrupted and restarted, ERESTART*, counted once), and the
    -T (ns) of those on a.log."""
    count = 0
    durations: list[int] = []
    pending: dict[str, str] = {}  # pid -> the path of its unfinished sync call
    for line in trace.read_text(errors="replace").splitlines():
        call = SYNC_CALL.match(line)
        resumed = None if call else SYNC_RESUMED.match(line)
        if call and call.group(4).endswith("<unfinished ...>"):
            pending[call.group(1)] = call.group(3)
            continue
        if call:
            path, rest = call.group(3), call.group(4)
        elif resumed and resumed.group(1) in pending:
            path, rest = pending.pop(resumed.group(1)), resumed.group(2)
        else:
            continue
        if "ERESTART" in rest:
            continue
        count += 1
        took = DURATION.search(rest)
        if path.endswith("/a.log") and took:
            durations.append(round(float(took.group(1)) * 1e9))
    return count, tuple(durations)


def log_counts(log: Path) -> tuple[int, int]:
    """The sync calls a shim's or the supervisor's log holds, and how many of them were held."""
    if not log.exists():
        return 0, 0
    lines = [ln.split("\t") for ln in log.read_text().splitlines() if ln and not ln.startswith("#")]
    return len(lines), sum(1 for f in lines if len(f) > 1 and f[1] != "0")


def run_once(
    mode: str, tools: Tools, lang: str, workdir: Path, files: Path, n: int, rule: tuple[int, str]
) -> Run:
    for stale in files.iterdir():
        stale.unlink()
    program = [str(tools.programs[lang]), str(workdir), str(n)]
    argv, env = command(mode, tools, program, files, workdir, rule)
    res = process.run(argv, timeout=RUN_TIMEOUT, env=env)
    got = parse_output(res.stdout)
    traced, traced_a = trace_syncs(files / "trace.txt") if "strace" in mode else (None, ())
    logs = mode == "shim" or mode.startswith("seccomp")
    logged, held = log_counts(files / "sync.log") if logs else (None, None)
    return Run(
        int(got["a_ns"]),
        int(got["a_syncs"]),
        int(got["b_iters"]),
        int(got["b_ns"]),
        tuple(int(x) for x in got["a_sync_ns"].split(",") if x),
        traced,
        traced_a,
        logged,
        held,
        res.duration_s,
    )


# ---- rounds ---------------------------------------------------------------------------------------

Key = tuple[str, str]  # (program, mode)


@dataclasses.dataclass
class Measured:
    runs: dict[Key, list[Run]] = dataclasses.field(default_factory=dict)
    failed: dict[Key, str] = dataclasses.field(default_factory=dict)


def one_round(
    modes: tuple[str, ...],
    tools: Tools,
    workdir: Path,
    files: Path,
    n: int,
    rule: tuple[int, str],
    into: Measured,
) -> None:
    for lang in tools.programs:
        for mode in modes:
            key = (lang, mode)
            if key in into.failed:
                continue
            try:
                into.runs.setdefault(key, []).append(
                    run_once(mode, tools, lang, workdir, files, n, rule)
                )
            except (CommandFailed, StopIteration, KeyError, ValueError) as e:
                into.failed[key] = f"{type(e).__name__}: {e}"


def measure(
    tools: Tools, workdir: Path, files: Path, n: int, args: argparse.Namespace, label: str
) -> tuple[Measured, Measured]:
    """Every mode --rounds times with the rule that holds nothing, then with a.log held."""
    overhead = Measured()
    held = Measured()
    for r in range(args.rounds):
        one_round(MODES, tools, workdir, files, n, NOTHING, overhead)
        one_round(HOLD_MODES, tools, workdir, files, args.hold_n, (HOLD_NS, "a.log"), held)
        print(f"  {label}: round {r + 1} of {args.rounds} done", flush=True)
    return overhead, held


# ---- tables ---------------------------------------------------------------------------------------


def per_commit_ms(run: Run) -> float:
    return run.a_ns / run.a_syncs / 1e6


def b_rate(run: Run) -> float:
    return run.b_iters / (run.b_ns / 1e9) if run.b_ns else 0.0


def total(runs: list[Run], field: str) -> str:
    values = [getattr(r, field) for r in runs]
    return "-" if values[0] is None else str(sum(values))


def ms3(ns: list[int]) -> str:
    """min/median/max in ms."""
    if not ns:
        return "-"
    return f"{min(ns) / 1e6:.2f}/{statistics.median(ns) / 1e6:.2f}/{max(ns) / 1e6:.2f}"


OVERHEAD_HEAD = (
    f"{'mode':22} {'A ms/commit':>11} {'A xbare':>8} {'B it/s':>9} {'B xbare':>8} "
    f"{'syncs made':>10} {'in trace':>9} {'logged':>7} {'held':>5} {'run s':>6}"
)


def overhead_row(mode: str, base: list[Run], runs: list[Run]) -> str:
    a = statistics.median(per_commit_ms(r) for r in runs)
    b = statistics.median(b_rate(r) for r in runs)
    a0 = statistics.median(per_commit_ms(r) for r in base)
    b0 = statistics.median(b_rate(r) for r in base)
    wall = statistics.median(r.wall_s for r in runs)
    made = sum(r.made for r in runs)
    return (
        f"{mode:22} {a:11.4f} {a / a0:8.2f} {b:9.0f} {b / b0 if b0 else 0:8.2f} {made:10d} "
        f"{total(runs, 'traced'):>9} {total(runs, 'logged'):>7} {total(runs, 'held'):>5} {wall:6.2f}"
    )


HOLD_HEAD = (
    f"{'mode':22} {'A held/made':>11} {'A sync ms min/med/max (program)':>32} "
    f"{'A sync ms in trace (-T)':>24} {'syncs in trace/made':>19}"
)


def hold_row(mode: str, runs: list[Run]) -> str:
    a_made = sum(r.a_syncs for r in runs)
    held = total(runs, "held")
    timed = [ns for r in runs for ns in r.a_sync_ns]
    in_trace = [ns for r in runs for ns in r.traced_a_ns]
    traced = total(runs, "traced")
    seen = "-" if traced == "-" else f"{traced}/{sum(r.made for r in runs)}"
    return (
        f"{mode:22} {held + '/' + str(a_made):>11} {ms3(timed):>32} {ms3(in_trace):>24} {seen:>19}"
    )


def print_tables(
    title: str, tools: Tools, n: int, measured: tuple[Measured, Measured], args: argparse.Namespace
) -> None:
    overhead, held = measured
    for lang in tools.programs:
        print(
            f"\n{title}, {lang}: A {n} commits a run, medians of {args.rounds} rounds "
            f"(x: against bare; counts: sums over the rounds; rule {NOTHING[0]}:{NOTHING[1]})"
        )
        print(OVERHEAD_HEAD)
        base = overhead.runs.get((lang, "bare"), [])
        for mode in MODES:
            print(row_or_failure(mode, lang, overhead, functools.partial(overhead_row, mode, base)))
        print(
            f"\n{title}, {lang}: a.log held {HOLD_NS // 1_000_000} ms (-r {HOLD_NS}:a.log), "
            f"A {args.hold_n} commits a run, {args.rounds} rounds pooled"
        )
        print(HOLD_HEAD)
        for mode in HOLD_MODES:
            print(row_or_failure(mode, lang, held, functools.partial(hold_row, mode)))


def row_or_failure(
    mode: str, lang: str, measured: Measured, row: Callable[[list[Run]], str]
) -> str:
    key = (lang, mode)
    if key in measured.failed:
        return f"{mode:22} FAILED: {measured.failed[key]}"
    try:
        return row(measured.runs[key])
    except (KeyError, statistics.StatisticsError, ZeroDivisionError):
        return f"{mode:22} no figures (bare failed?)"


# ---- filesystems ----------------------------------------------------------------------------------


@contextlib.contextmanager
def mounted(argv: list[str], mnt: Path) -> Iterator[Path]:
    """``argv`` + [mnt] mounted, unmounted on the way out."""
    mnt.mkdir()
    process.run([*argv, str(mnt)], timeout=60)
    try:
        yield mnt
    finally:
        process.run(["umount", str(mnt)], timeout=60, check=False)


@contextlib.contextmanager
def tmpfs(root: Path) -> Iterator[Path]:
    argv = ["mount", "-t", "tmpfs", "-o", "size=256m", "powercut-bench-holdsync"]
    with mounted(argv, root / "tmpfs") as mnt:
        yield mnt


@contextlib.contextmanager
def loop_ext4(root: Path) -> Iterator[Path]:
    """A fresh 256 MiB ext4 on a loop device over a file in /var/tmp."""
    fd, name = tempfile.mkstemp(prefix="powercut-bench-holdsync-", suffix=".img", dir="/var/tmp")
    os.close(fd)
    image = Path(name)
    try:
        os.truncate(image, 256 << 20)
        process.run(["mkfs.ext4", "-q", "-F", str(image)], timeout=120)
        dev = process.run(["losetup", "-f", "--show", str(image)], timeout=60).stdout.strip()
        try:
            with mounted(["mount", dev], root / "ext4") as mnt:
                yield mnt
        finally:
            process.run(["losetup", "-d", dev], timeout=60, check=False)
    finally:
        image.unlink()


def describe(mnt: Path) -> str:
    """The filesystem type and source of the mount at ``mnt`` (from /proc/self/mounts)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, point, fstype = line.split()[:3]
        if point == str(mnt):
            return f"{fstype} ({source})"
    return "?"


def bench_on(
    title: str, mnt: Path, tools: Tools, files: Path, n: int, args: argparse.Namespace
) -> None:
    workdir = mnt / "work"
    workdir.mkdir()
    print(f"{title}: {mnt}, {describe(mnt)}", flush=True)
    measured = measure(tools, workdir, files, n, args, title)
    print_tables(f"{title}, {describe(mnt)}", tools, n, measured, args)
    print(flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=200, help="A's commits a run on ext4 (default 200)")
    ap.add_argument(
        "--tmpfs-n",
        type=int,
        default=20000,
        help="A's commits a run on the tmpfs, where a sync is ~free (default 20000)",
    )
    ap.add_argument(
        "--hold-n",
        type=int,
        default=10,
        help="A's commits a run with a.log held 50 ms (default 10)",
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="repetitions; the figures are medians (default 3)"
    )
    ap.add_argument("--only-tmpfs", action="store_true", help="skip the ext4 on a loop device")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (mount, losetup)")
        return 2
    print(
        f"kernel {platform.release()}, {platform.machine()}, {os.cpu_count()} CPUs; "
        f"{'; '.join(k + ' ' + v for k, v in versions().items())}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="powercut-bench-holdsync-") as tmp:
        root = Path(tmp)
        bin_dir = root / "bin"
        bin_dir.mkdir()
        files = root / "files"
        files.mkdir()
        tools = build(bin_dir)
        with tmpfs(root) as mnt:
            bench_on("tmpfs", mnt, tools, files, args.tmpfs_n, args)
        if not args.only_tmpfs:
            with loop_ext4(root) as mnt:
                bench_on("ext4 on loop", mnt, tools, files, args.n, args)
    return 0


def versions() -> dict[str, str]:
    out = {"strace": process.run(["strace", "-V"], timeout=30).stdout.splitlines()[0].split()[-1]}
    if shutil.which("go"):
        out["go"] = process.run(["go", "version"], timeout=30).stdout.split()[2]
    return out


if __name__ == "__main__":
    raise SystemExit(main())

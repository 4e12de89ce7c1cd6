"""``--check-in vm`` (the default; host side): checker VMs judge the states, so corrupt images never
touch the host kernel.  ``jobs`` VMs run side by side, each over its own contiguous chunk of the
walk order (one kernel each, so clones of one filesystem never meet in one kernel).

Each VM rebuilds its states with dm-snapshot over an incrementally replayed pristine (no boot per
state) and streams a "begin" line and then the verdict of each state to ``progress.jsonl`` in its
job share; the host hands each verdict to the sink as it arrives.  A state that panics the guest
kernel, or hangs longer than the per-state timeout, is that state's finding (kernel-panic /
timeout): that VM is restarted and goes on with its next state.

``CheckerVm`` only boots one VM on a job and follows its progress; its three callers are
``check_vm`` (judge states, restarting after a panic or hang), ``diagnose_vm`` (minimize and blame
in the guest) and ``shell_vm`` (``repro --shell``)."""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from powercut.check import template
from powercut.check.context import CheckContext, LogSource
from powercut.check.host import split_by_base
from powercut.check.hosts import CheckHost, Staged
from powercut.check.vmprogress import Outcome, Progress
from powercut.config import DEFAULT_ACCEL, STATE_TIMEOUT_S, DiskSpec, ShareSpec, VmSpec
from powercut.core.crashstate import CrashState
from powercut.core.disks import DisksState
from powercut.core.dmlog import LogIndex
from powercut.core.verdict import Verdict
from powercut.errors import GuestHang, GuestPanic, PowercutError, UsageError, VmError, VmKilled
from powercut.images.build import build_image, tools_dir
from powercut.linux import filesystems, interrupt
from powercut.vm import guestjob
from powercut.vm.cmdline import keep_visible

log = logging.getLogger(__name__)

MAX_FAILED_BOOTS = 2
CHECKER_MEMORY_MB = 768   # one checker VM's memory (check.place.Place, VmCheckSpec)
SCRATCH_FS = "ext4"  # the guest agent's work filesystem (guest.check)
Sink = Callable[[Verdict], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class VmCheckSpec:
    kernel: str
    initrd: str
    accel: str = DEFAULT_ACCEL
    memory_mb: int = CHECKER_MEMORY_MB
    state_timeout_s: float = STATE_TIMEOUT_S
    tools_dir: str = ""
    uris: tuple[str, ...] = ()     # libvirt hosts the VMs boot on (--check-uri); none: QEMU here

    @staticmethod
    def default(*, accel: str = DEFAULT_ACCEL, memory_mb: int = CHECKER_MEMORY_MB,
                state_timeout_s: float = STATE_TIMEOUT_S,
                uris: tuple[str, ...] = ()) -> "VmCheckSpec":
        """The checker VM on the default guest image (built, or found cached)."""
        image = build_image()
        return VmCheckSpec(image.kernel, image.initrd, accel=accel, memory_mb=memory_mb,
                           state_timeout_s=state_timeout_s, tools_dir=tools_dir(image) or "", uris=uris)

    def hosts(self) -> list[CheckHost]:
        return [CheckHost(u) for u in self.uris] or [CheckHost()]


def check_vm(ctx: CheckContext, src: LogSource, index: LogIndex, states: list[CrashState], sink: Sink,
             workdir: Path, spec: VmCheckSpec, *, jobs: int = 1, warm: "WarmVms | None" = None) -> None:
    """Judge ``states`` in ``jobs`` checker VMs on each of the spec's hosts (contiguous chunks of the
    walk order, dealt to the hosts in turn); every verdict goes to ``sink`` (under a lock).  With
    ``warm``, a VM that ends its chunk normally stays booted there for the run's next phase."""
    hosts = spec.hosts()
    locked = locked_sink(sink)

    def one(i: int, chunk: list[CrashState]) -> None:
        vm = CheckerVm(ctx, src, spec, workdir / f"vm{i}", hosts[i % len(hosts)], serve=warm is not None)
        try:
            Judging(vm, chunk, locked).run()
        except BaseException:
            vm.close(force=True)
            raise
        if warm is not None:
            warm.park(vm)

    in_parallel(split_by_base(index, states, jobs * len(hosts)), one)


def locked_sink(sink: Sink) -> Sink:
    """``sink`` called under a lock (the VMs' threads hand in verdicts at once)."""
    lock = threading.Lock()

    def locked(v: Verdict) -> None:
        with lock:
            sink(v)
    return locked


def in_parallel(chunks: Sequence[T], one: Callable[[int, T], None]) -> None:
    """``one(i, chunk)`` for every chunk, each on its own thread (one VM each) when there are several."""
    if len(chunks) <= 1:
        for i, chunk in enumerate(chunks):
            one(i, chunk)
        return
    with ThreadPoolExecutor(max_workers=len(chunks), thread_name_prefix="powercut-vm") as pool:
        for f in [pool.submit(one, i, c) for i, c in enumerate(chunks)]:
            f.result()


class WarmVms:
    """Checker VMs of one run kept booted between its phases: the check's last VM to finish runs the
    diagnosis next (one boot saved, ~4-6 s under TCG).  Confirmation never takes one: it judges in
    fresh kernels.  ``close`` (the run's end, or before confirmation) stops the ones left."""

    KEEP = 1   # the diagnosis runs in one VM

    def __init__(self) -> None:
        self._vms: list[CheckerVm] = []
        self._lock = threading.Lock()
        self.closed = False

    def park(self, vm: "CheckerVm") -> None:
        with self._lock:
            keep = not self.closed and vm.live() and len(self._vms) < self.KEEP
            if keep:
                self._vms.append(vm)
        if not keep:
            vm.close()

    def take(self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec) -> "CheckerVm | None":
        with self._lock:
            for vm in self._vms:
                if vm.ctx == ctx and vm.src == src and vm.spec == spec and vm.live():
                    self._vms.remove(vm)
                    return vm
        return None

    def close(self, force: bool = False) -> None:
        with self._lock:
            self.closed = True
            vms, self._vms = self._vms, []
        for vm in vms:
            vm.close(force=force)


class CheckerVm:
    """Boots a checker VM on one job and follows its progress stream: each verdict goes to
    ``on_verdict`` as it arrives; a state that runs past the per-state timeout ends the VM."""

    def __init__(self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec, workdir: Path,
                 host: CheckHost | None = None, *, serve: bool = False, scratch_bytes: int = 0) -> None:
        self.ctx, self.src, self.spec, self.workdir = ctx, src, spec, workdir
        self.scratch_bytes = scratch_bytes or 3 * src.size + (512 << 20)   # the pristine and the COWs
        self.host = host or CheckHost()
        template.enabled()   # a bad POWERCUT_VM_START is one line here, not a dead boot thread later
        keep_visible(ctx.checker.host_paths())   # a checker function's file and sys.path, even under /tmp
        self.boots = 0
        # serve: the VM stays booted after a job and takes the next one (QEMU on this machine only:
        # a remote host's files are mirrored, not shared)
        self.serve = serve and not self.host.uri
        self._live: _Live | None = None

    def live(self) -> bool:
        """A booted VM waiting for its next job."""
        return self._live is not None and self._live.thread.is_alive()

    def close(self, force: bool = False) -> None:
        """End a serving VM: the STOP file (the agent exits, the guest powers off), killed if it has
        not ended within 30 s (at once with ``force``)."""
        live, self._live = self._live, None
        if live is None:
            return
        (live.jobdir / guestjob.STOP).touch()
        live.kill_after = time.monotonic() + (0.0 if force else 30.0)
        live.thread.join(90)

    def staged(self) -> Staged:
        """The image, tools and recording as the booting host sees them (shipped there once)."""
        return self.host.stage(self.src, self.spec.kernel, self.spec.initrd, self.spec.tools_dir,
                               self.ctx.checker.host_paths())

    def source(self) -> guestjob.StateSource:
        return guestjob.StateSource(log=f"{guestjob.GUEST_REC_DIR}/{self.src.path.name}", size=self.src.size,
                                    fstype=self.ctx.fs.name, mount_opts=self.ctx.mount_opts,
                                    checker=self.ctx.checker, disks={"scratch": "pcscratch"},
                                    params=self.ctx.params,
                                    entries=guestjob.StateSource.entries_for(self.ctx.checker),
                                    fsck=filesystems.fsck_program(self.ctx.fs), scratch_ready=not self.host.remote)

    def run(self, job: guestjob.Job, *, steps: int, on_verdict: Sink = lambda v: None,
            interactive: bool = False) -> Outcome:
        """One boot on ``job`` (serving: the booted VM's next job, or a boot that stays up after it);
        ``steps``: how many per-state timeouts the whole job may take."""
        if self.serve and not interactive:
            return self._serve(job, on_verdict, 60 + self.spec.state_timeout_s * steps)
        run, jobdir = self._new_run(job, serve=False)
        staged = self.staged()
        progress = Progress(jobdir / "progress.jsonl")

        def drain() -> None:
            for v in progress.poll():
                if not interrupt.stopping():
                    on_verdict(v)

        def watchdog() -> str | None:
            drain()
            return progress.overdue(self.spec.state_timeout_s)

        failure: VmError | None = None
        try:
            if interactive and self.host.remote:
                raise UsageError("an interactive shell needs a checker VM on this machine, not on a --check-uri host")
            timeout = 24 * 3600 if interactive else 60 + self.spec.state_timeout_s * steps
            self.host.boot(lambda d: self._vm_spec(staged, d, timeout, interactive), run,
                           self.scratch_bytes, watchdog)
        except VmError as e:
            failure = e
        drain()
        if failure is None:
            result = guestjob.read_result(jobdir)
            if not result.ok:
                raise PowercutError(f"the checker VM failed: {result.error} (see {jobdir}/agent.log)")
        return Outcome(failure, progress.current, progress.since, progress.diagnoses)

    def _new_run(self, job: guestjob.Job, *, serve: bool) -> tuple[Path, Path]:
        self.boots += 1
        run = self.workdir / f"run{self.boots}"
        if run.exists():
            shutil.rmtree(run)
        jobdir = run / "job"
        jobdir.mkdir(parents=True)
        guestjob.write(jobdir, job, seq=1, serve=serve)
        return run, jobdir

    def _vm_spec(self, staged: Staged, d: str, timeout_s: float, interactive: bool = False) -> VmSpec:
        """The VM, ``d`` being the run directory on the host that boots it."""
        return VmSpec(kernel=staged.kernel, initrd=staged.initrd, memory_mb=self.spec.memory_mb,
                      disks=(DiskSpec(f"{d}/scratch.img", "pcscratch", cache="unsafe"),),
                      shares=(ShareSpec("hostroot", "/"), ShareSpec("job", f"{d}/job", readonly=False),
                              ShareSpec("rec", staged.rec_dir)),
                      accel=self.spec.accel,  # type: ignore[arg-type]
                      timeout_s=timeout_s, console_path=f"{d}/console.log",
                      name=f"powercut-check-{os.getpid()}-{self.workdir.name}",
                      # the scratch disk holding the pristine and the COWs is ext4, whatever is judged
                      modules=tuple(dict.fromkeys((self.ctx.fs.module_group, SCRATCH_FS))),
                      cmdline=("powercut.mount=rec",), interactive=interactive)

    def _serve(self, job: guestjob.Job, on_verdict: Sink, limit_s: float) -> Outcome:
        """``run`` for a serving VM: hand ``job`` to the booted VM, or boot one on it that stays up
        after it; return once its result is there or the VM has ended.  ``limit_s``: the job's own
        limit (a VM that hangs outside any state, e.g. before its first, is ended by it)."""
        live = self._live if self.live() else None
        if live is not None:
            live.next(job, on_verdict, limit_s)
            log.debug("%s: job %d handed to the booted VM", self.workdir.name, live.seq)
        else:
            run, jobdir = self._new_run(job, serve=True)
            staged = self.staged()
            live = _Live(jobdir, Progress(jobdir / "progress.jsonl"), on_verdict, limit_s)

            def watchdog() -> str | None:
                live.drain()
                now = time.monotonic()
                if now > live.kill_after:
                    return "stopped by the host"
                if now > live.job_deadline and not live.answered():   # waiting for a next job: no limit
                    return f"job {live.seq} did not finish within {live.job_limit_s:g} s"
                return live.progress.overdue(self.spec.state_timeout_s)

            def boot() -> None:
                try:   # the VM's own limit: its idle agent ends itself; hangs are the watchdog's
                    self.host.boot(lambda d: self._vm_spec(staged, d, guestjob.IDLE_S + 24 * 3600), run,
                                   self.scratch_bytes, watchdog)
                except VmError as e:
                    live.failure = e

            live.thread = threading.Thread(target=boot, name=f"powercut-{self.workdir.name}", daemon=True)
            live.thread.start()
            self._live = live
        while True:
            live.drain()
            answered = live.answered()
            if answered or not live.thread.is_alive():
                live.drain()
                if not answered:
                    self._live = None
                    if live.failure is not None:
                        return live.outcome(live.failure)
                result = guestjob.read_result(live.jobdir, live.seq)   # failed, or none for this job
                if not result.ok:
                    raise PowercutError(f"the checker VM failed: {result.error} (see {live.jobdir}/agent.log)")
                return live.outcome(None)
            if interrupt.stopping():
                self.close(force=True)
                interrupt.raise_if_stopping()
            time.sleep(0.05)


class _Live:
    """A serving checker VM: its boot thread, its job share, the job in progress."""

    def __init__(self, jobdir: Path, progress: Progress, on_verdict: Sink, limit_s: float) -> None:
        self.thread = threading.Thread()
        self.jobdir, self.progress, self.on_verdict = jobdir, progress, on_verdict
        self.seq = 1
        self.job_limit_s, self.job_deadline = limit_s, time.monotonic() + limit_s
        self.lock = threading.Lock()
        self.failure: VmError | None = None
        self.kill_after = float("inf")

    def drain(self) -> None:
        with self.lock:
            for v in self.progress.poll():
                if not interrupt.stopping():
                    self.on_verdict(v)

    def next(self, job: guestjob.Job, on_verdict: Sink, limit_s: float) -> None:
        """Job seq+1: the last one's result and progress go, then the new job.json (atomically)."""
        with self.lock:
            self.seq += 1
            self.job_limit_s, self.job_deadline = limit_s, time.monotonic() + limit_s
            for name in ("result.json", "progress.jsonl"):
                (self.jobdir / name).unlink(missing_ok=True)
            self.progress, self.on_verdict = Progress(self.jobdir / "progress.jsonl"), on_verdict
            guestjob.write(self.jobdir, job, seq=self.seq, serve=True)

    def answered(self) -> bool:
        """This job's result is there (a failed one too)."""
        return guestjob.peek_result_seq(self.jobdir) == self.seq

    def outcome(self, failure: VmError | None) -> Outcome:
        p = self.progress
        return Outcome(failure, p.current, p.since, p.diagnoses)


class Judging:
    """Judges one chunk of states in one checker VM, booted again after a panic or a hang (which
    becomes the finding of the state in progress).  ``job``: the job for the ids still to judge
    (default: a one-disk CheckJob; check/clustervm.py's for cluster states, whose "cut" is the
    instant)."""

    def __init__(self, vm: CheckerVm, states: Sequence[Any], sink: Sink,
                 job: Callable[[tuple[str, ...]], guestjob.Job] | None = None) -> None:
        self.vm, self.states, self.sink = vm, states, sink
        self.job = job or (lambda ids: guestjob.CheckJob(vm.source(), ids, tools_dir=vm.staged().tools_dir))
        self.by_id = {s.id: s for s in states}
        self.done: set[str] = set()

    def run(self) -> None:
        failed_boots = 0
        while todo := [s for s in self.states if s.id not in self.done]:
            interrupt.raise_if_stopping()
            before = len(self.done)
            out = self.vm.run(self.job(tuple(s.id for s in todo)), steps=len(todo) + 1, on_verdict=self._verdict)
            interrupt.raise_if_stopping()
            if out.failure is None:
                left = [s.id for s in todo if s.id not in self.done]
                if left:
                    raise PowercutError(f"the checker VM ended without judging {len(left)} state(s), e.g. {left[0]} "
                                        f"(see {self.vm.workdir}/run{self.vm.boots}/job/agent.log)")
                return
            # a VM killed from outside (or one that failed before any state) blames no state: it
            # boots again on the states left, as long as each boot makes progress
            if isinstance(out.failure, VmKilled) or out.current is None or out.current not in self.by_id:
                failed_boots = 0 if len(self.done) > before else failed_boots + 1
                if failed_boots >= MAX_FAILED_BOOTS:
                    raise PowercutError(f"the checker VM failed {MAX_FAILED_BOOTS} times before judging any state: "
                                        f"{out.failure.one_line()}")
                continue
            self._blame(self.by_id[out.current], out.failure, out.since)

    def _verdict(self, v: Verdict) -> None:
        if v.state in self.by_id and v.state not in self.done:
            self.done.add(v.state)
            self.sink(v)

    def _blame(self, s: Any, failure: VmError, since: float) -> None:
        kind = "timeout" if isinstance(failure, GuestHang) else "kernel-panic"
        lines = [line for line in failure.console_tail.splitlines() if line.strip()]
        if isinstance(failure, GuestPanic) and failure.panic_line:
            detail = [failure.panic_line, *lines[1:3]]
        else:
            detail = lines[-3:]
        cut = s.cut if isinstance(s, CrashState) else s.instant   # a cluster state's "cut" is its instant
        v = Verdict(s.id, s.model, cut, kind, (failure.one_line(), *detail), len(s.acks), len(s.begun),
                    round(time.monotonic() - since, 3))
        self.done.add(s.id)
        self.sink(v)
        log.warning("state %s: %s; restarting its checker VM", s.id, kind)


def diagnose_vm(ctx: CheckContext, src: LogSource, firsts: list[Verdict], workdir: Path, spec: VmCheckSpec, *,
                floor: int | None, budget: int, tear_only: bool = False,
                warm: WarmVms | None = None) -> list[dict[str, Any]]:
    """Minimize and blame failing states in one checker VM (debug.diagnose runs in the guest): the
    run's check VM still booted in ``warm``, or a new one; ``tear_only``: only find out whether each
    (torn) failure needs its tear."""
    vm = (warm.take(ctx, src, spec) if warm else None) or CheckerVm(ctx, src, spec, workdir)
    job = guestjob.DiagnoseJob(vm.source(), tuple(v.to_json() for v in firsts), floor=-1 if floor is None else floor,
                               budget=budget, tear_only=tear_only, tools_dir=vm.staged().tools_dir)
    try:
        out = vm.run(job, steps=1 + budget * len(firsts) // 10)
    finally:
        vm.close()
    if out.failure is not None:
        raise PowercutError(f"the checker VM diagnosing {len(firsts)} failure(s) failed: {out.failure.one_line()}")
    return out.diagnoses


def shell_vm(ctx: CheckContext, src: LogSource, state: CrashState | DisksState, workdir: Path, spec: VmCheckSpec, *,
             logs: Sequence[str] = ()) -> Verdict | None:
    """Judge one state in a checker VM, then open an interactive shell in it on the recovered, mounted
    state, on this terminal (``powercut repro --shell``).  ``logs``: for a cluster state, every node's
    log file name in ``src``'s directory, node 0 first (every node rebuilt and mounted, as
    guest/clustercheck.py judges it); none for one disk."""
    got: list[Verdict] = []
    scratch = len(logs) * 2 * src.size + (512 << 20) if logs else 0   # per node a pristine and its COWs
    vm = CheckerVm(ctx, src, spec, workdir, scratch_bytes=scratch)
    job: guestjob.Job
    if logs:
        job = guestjob.ClusterShellJob(vm.source(), tuple(f"{guestjob.GUEST_REC_DIR}/{name}" for name in logs),
                                       state.id, tools_dir=vm.staged().tools_dir)
    else:
        job = guestjob.ShellJob(vm.source(), state.id, tools_dir=vm.staged().tools_dir)
    out = vm.run(job, steps=2, on_verdict=got.append, interactive=True)
    if out.failure is not None:
        raise PowercutError(f"the shell's checker VM failed: {out.failure.one_line()}")
    return got[0] if got else None

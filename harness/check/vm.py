"""``--check-in vm`` (the default; host side): checker VMs judge the states, so corrupt images never
touch the host kernel.  ``jobs`` VMs run side by side on each host (this machine, or each
``--check-uri``), each over its own contiguous chunk of the walk order (one kernel each, so clones
of one filesystem never meet in one kernel).  States of N > 1 disks (core/states/nodes.NodesState) come in
product order and are cut into contiguous chunks too (a node's state changes rarely inside one, so
its walks stay few); the VM rebuilds every disk of a state (guest/check.py).

Each VM rebuilds its states with dm-snapshot over an incrementally replayed pristine (no boot per
state) and streams a "begin" line and then the verdict of each state to ``progress.jsonl`` in its
job share; the host hands each verdict to the sink as it arrives.  A state that panics the guest
kernel, or hangs longer than the per-state timeout, is that state's finding (kernel-panic /
timeout): that VM is restarted and goes on with its next state.

check/checkervm.CheckerVm boots one VM on a job and follows its progress; its three callers here
are ``check_vm`` (judge states, restarting after a panic or hang), ``diagnose_vm`` (minimize and
blame in the guest) and ``shell_vm`` (``repro --shell``).  ``WarmVms`` keeps a run's last VM booted
for its next phase (check/vmpool.VmPool, a matrix's VMs across its rows)."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from powercut.check.checkervm import CheckerVm, Sink, VmCheckSpec
from powercut.check.context import CheckContext, LogSource
from powercut.check.host import chunks, split_by_base
from powercut.check.proving import Report
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import NodesState
from powercut.errors import GuestHang, GuestPanic, PowercutError, VmError, VmKilled
from powercut.linux import interrupt
from powercut.vm import guestjob

log = logging.getLogger(__name__)

MAX_FAILED_BOOTS = 2
T = TypeVar("T")


def check_vm(
    ctx: CheckContext,
    src: LogSource,
    index: LogIndex | None,
    states: Sequence[Any],
    sink: Sink,
    workdir: Path,
    spec: VmCheckSpec,
    *,
    jobs: int = 1,
    warm: "WarmVms | None" = None,
    prove: bool = False,
) -> Report | None:
    """Judge ``states`` in ``jobs`` checker VMs on each of the spec's hosts (contiguous chunks of the
    walk order, dealt to the hosts in turn); every verdict goes to ``sink`` (under a lock).  ``index``:
    one disk's opened log (its states are chunked by the pristine they need); None for N > 1 disks.
    With ``warm``, a VM that ends its chunk normally stays booted there for the run's next phase, and
    a lone chunk on this machine takes the VM a phase before left booted (a cluster's minimization
    judges its candidates one call at a time: one boot, not one per call); with a matrix's pool
    (check/vmpool.VmPool) every chunk takes a booted VM that fits, whichever run booted it.
    ``prove``: each VM's walk may prove states by the read-set rule (one disk; check/proving.py);
    what it did that the verdicts do not say is returned (a mismatch: that VM's states it had
    proven were judged for real)."""
    hosts = spec.hosts()
    found: list[Report] = []
    locked = locked_sink(sink)
    n = jobs * len(hosts)
    parts = (
        split_by_base(index, list(states), n)
        if index is not None and src.disks == 1
        else chunks(states, n)
    )

    def one(i: int, chunk: list[Any]) -> None:
        host = hosts[i % len(hosts)]
        taken = warm.lend(ctx, src, spec, host, lone=len(parts) == 1) if warm is not None else None
        vm = taken or (
            warm.boot(ctx, src, spec, workdir / f"vm{i}", host)
            if warm is not None
            else CheckerVm(ctx, src, spec, workdir / f"vm{i}", host)
        )
        try:
            judging = Judging(vm, chunk, locked, prove=prove and src.disks == 1)
            judging.run()
            if judging.report is not None:
                found.append(judging.report)
        except BaseException:
            vm.close(force=True)
            raise
        if warm is not None:
            warm.park(vm)

    in_parallel(parts, one)
    if not found:
        return None
    report = found[0]
    for other in found[1:]:
        report = report.merged(other)
    return report


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
    fresh kernels.  ``close`` (the run's end, or before confirmation) stops the ones left.
    (check/vmpool.VmPool keeps them across the runs of a matrix.)"""

    KEEP = 1  # the diagnosis runs in one VM
    shared = False  # True: not the run's own (its owner closes it; Place.close_warm leaves it)

    def __init__(self) -> None:
        self._vms: list[CheckerVm] = []
        self._lock = threading.Lock()
        self.closed = False

    def lend(
        self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec, host: Any, *, lone: bool
    ) -> "CheckerVm | None":
        """A booted VM for one chunk of a check: the run's last one, for a lone chunk on this machine."""
        return self.take(ctx, src, spec) if lone and not host.uri else None

    def boot(
        self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec, workdir: Path, host: Any
    ) -> CheckerVm:
        """A new serving VM for one chunk of a check (parked here after it)."""
        return CheckerVm(ctx, src, spec, workdir, host, serve=True)

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
                # a judge that traces what recovery read is the same VM, told so by its next job
                same = dataclasses.replace(vm.ctx, trace_reads=ctx.trace_reads) == ctx
                if same and vm.src == src and vm.spec == spec and vm.live():
                    self._vms.remove(vm)
                    vm.rebind(ctx, src)
                    return vm
        return None

    def close(self, force: bool = False) -> None:
        with self._lock:
            self.closed = True
            vms, self._vms = self._vms, []
        for vm in vms:  # all told to stop first: they power off side by side
            vm.close(force=force, wait=False)
        for vm in vms:
            vm.wait()


class Judging:
    """Judges one chunk of states (of one disk or of N) in one checker VM, booted again after a panic
    or a hang (which becomes the finding of the state in progress; a state of N disks has its
    instant for a cut)."""

    def __init__(
        self, vm: CheckerVm, states: Sequence[Any], sink: Sink, *, prove: bool = False
    ) -> None:
        self.vm = vm
        self.states = states
        self.sink = sink
        self.prove = prove
        self.by_id = {s.id: s for s in states}
        self.done: set[str] = set()
        self.report: Report | None = None  # what the guest's rule did (check/proving.py)

    def run(self) -> None:
        failed_boots = 0
        while todo := [s for s in self.states if s.id not in self.done]:
            interrupt.raise_if_stopping()
            before = len(self.done)
            out = self.vm.run(
                self.vm.check_job(tuple(s.id for s in todo), self.prove),
                steps=len(todo) + 1,
                on_verdict=self._verdict,
            )
            interrupt.raise_if_stopping()
            if out.rule is not None:
                self.report = out.rule.merged(self.report)
            if out.failure is None:
                left = [s.id for s in todo if s.id not in self.done]
                if left and self.prove and self.report and self.report.mismatch:
                    self.prove = False  # the guest disproved the rule: judge what it had proven
                    continue
                if left:
                    raise PowercutError(
                        f"the checker VM ended without judging {len(left)} state(s), e.g. {left[0]} "
                        f"(see {self.vm.workdir}/run{self.vm.boots}/job/agent.log)"
                    )
                return
            # a VM killed from outside (or one that failed before any state) blames no state: it
            # boots again on the states left, as long as each boot makes progress
            if (
                isinstance(out.failure, VmKilled)
                or out.current is None
                or out.current not in self.by_id
            ):
                failed_boots = 0 if len(self.done) > before else failed_boots + 1
                if failed_boots >= MAX_FAILED_BOOTS:
                    raise PowercutError(
                        f"the checker VM failed {MAX_FAILED_BOOTS} times before judging any state: "
                        f"{out.failure.one_line()}"
                    )
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
        cut = (
            s.cut if isinstance(s, CrashState) else s.instant
        )  # a cluster state's "cut" is its instant
        v = Verdict(
            s.id,
            s.model,
            cut,
            kind,
            (failure.one_line(), *detail),
            len(s.acks),
            len(s.begun),
            round(time.monotonic() - since, 3),
        )
        self.done.add(s.id)
        self.sink(v)
        log.warning("state %s: %s; restarting its checker VM", s.id, kind)


def diagnose_vm(
    ctx: CheckContext,
    src: LogSource,
    firsts: list[Verdict],
    workdir: Path,
    spec: VmCheckSpec,
    *,
    floors: Sequence[int | None],
    budget: int,
    tear_only: bool = False,
    warm: WarmVms | None = None,
) -> list[dict[str, Any]]:
    """Minimize and blame failing states of the source's disks in one checker VM (debug.diagnose
    runs in the guest; ``floors``: each disk's floor entry): the run's check VM still booted in
    ``warm``, or a new one; ``tear_only``: only find out whether each (torn) failure needs its tear."""
    vm = (warm.take(ctx, src, spec) if warm else None) or CheckerVm(ctx, src, spec, workdir)
    job = guestjob.DiagnoseJob(
        vm.source(),
        tuple(v.to_json() for v in firsts),
        floors=tuple(-1 if f is None else f for f in floors),
        budget=budget,
        tear_only=tear_only,
        tools_dir=vm.staged().tools_dir,
        logs=vm.guest_logs(),
    )
    try:
        out = vm.run(job, steps=1 + budget * len(firsts) // 10)
    finally:
        vm.close()
    if out.failure is not None:
        raise PowercutError(
            f"the checker VM diagnosing {len(firsts)} failure(s) failed: {out.failure.one_line()}"
        )
    return out.diagnoses


def shell_vm(
    ctx: CheckContext,
    src: LogSource,
    state: CrashState | NodesState,
    workdir: Path,
    spec: VmCheckSpec,
) -> Verdict | None:
    """Judge one state in a checker VM, then open an interactive shell in it on the recovered, mounted
    state, on this terminal (``powercut repro --shell``): one disk's, or every disk's of ``src``
    rebuilt and mounted as the check job judges them (guest/check.py)."""
    got: list[Verdict] = []
    vm = CheckerVm(ctx, src, spec, workdir)
    job = guestjob.ShellJob(
        vm.source(), state.id, tools_dir=vm.staged().tools_dir, logs=vm.guest_logs()
    )
    out = vm.run(job, steps=2, on_verdict=got.append, interactive=True)
    if out.failure is not None:
        raise PowercutError(f"the shell's checker VM failed: {out.failure.one_line()}")
    return got[0] if got else None

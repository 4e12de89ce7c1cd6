"""``--check-in vm`` (the default; host side): checker VMs judge the states, so corrupt images never
touch the host kernel.  ``jobs`` VMs run side by side, each over its own contiguous chunk of the
walk order (one kernel each, so clones of one filesystem never meet in one kernel).

Each VM rebuilds its states with dm-snapshot over an incrementally replayed pristine (no boot per
state) and streams a "begin" line and then the verdict of each state to ``progress.jsonl`` in its
job share; the host hands each verdict to the sink as it arrives.  A state that panics the guest
kernel, or hangs longer than the per-state timeout, is that state's finding (kernel-panic /
timeout): that VM is restarted and goes on with its next state."""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext
from powercut.check.host import split_by_base
from powercut.config import DiskSpec, ShareSpec, VmSpec
from powercut.core.models import CrashState
from powercut.core.verdict import Verdict
from powercut.errors import GuestHang, GuestPanic, PowercutError, VmError
from powercut.images.build import build_image, tools_dir
from powercut.linux import interrupt
from powercut.linux.jsonlines import read_lines
from powercut.vm import guestjob
from powercut.vm.qemu import run_vm

log = logging.getLogger(__name__)

MAX_FAILED_BOOTS = 2
SCRATCH_FS = "ext4"  # the guest agent's work filesystem (guest.check)
Sink = Callable[[Verdict], None]


@dataclass(frozen=True, slots=True)
class VmCheckSpec:
    kernel: str
    initrd: str
    accel: str = "auto"
    memory_mb: int = 768
    state_timeout_s: float = 300.0
    tools_dir: str = ""

    @staticmethod
    def default(*, accel: str = "auto", memory_mb: int = 768, state_timeout_s: float = 300.0) -> "VmCheckSpec":
        """The checker VM on the default guest image (built, or found cached)."""
        image = build_image()
        return VmCheckSpec(image.kernel, image.initrd, accel=accel, memory_mb=memory_mb,
                           state_timeout_s=state_timeout_s, tools_dir=tools_dir(image))


class _Progress:
    """Follows one VM's progress.jsonl: which state is in progress, new verdicts."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos = path, 0
        self.current: str | None = None
        self.since = time.monotonic()
        self.diagnoses: list[dict[str, Any]] = []

    def poll(self) -> list[Verdict]:
        objs, self.pos = read_lines(self.path, self.pos)
        new = []
        for obj in objs:
            if "begin" in obj:
                self.current, self.since = obj["begin"], time.monotonic()
            elif "verdict" in obj:
                new.append(Verdict.from_json(obj["verdict"]))
                self.current = None
            elif "diagnosis" in obj:
                self.diagnoses.append(obj["diagnosis"])
        return new


def check_vm(ctx: CheckContext, log_path: Path, index: Any, data_size: int, states: list[CrashState], sink: Sink,
             workdir: Path, spec: VmCheckSpec, *, jobs: int = 1) -> None:
    """Judge ``states`` in ``jobs`` checker VMs; every verdict goes to ``sink`` (under a lock)."""
    chunks = split_by_base(index, states, jobs)
    lock = threading.Lock()

    def locked(v: Verdict) -> None:
        with lock:
            sink(v)

    if len(chunks) <= 1:
        for chunk in chunks:
            _Worker(ctx, log_path, data_size, chunk, locked, workdir / "vm0", spec).run()
        return
    with ThreadPoolExecutor(max_workers=len(chunks), thread_name_prefix="powercut-vm") as pool:
        futures = [pool.submit(_Worker(ctx, log_path, data_size, c, locked, workdir / f"vm{i}", spec).run)
                   for i, c in enumerate(chunks)]
        for f in futures:
            f.result()


class _Worker:
    """One checker VM (restarted after a panic or hang) over one chunk of states."""

    def __init__(self, ctx: CheckContext, log_path: Path, data_size: int, states: list[CrashState], sink: Sink,
                 workdir: Path, spec: VmCheckSpec, diagnose: tuple[dict[str, Any], ...] = (), floor: int = -1,
                 budget: int = 60, tear_only: bool = False, shell: bool = False) -> None:
        self.ctx, self.log_path, self.size, self.states = ctx, log_path, data_size, states
        self.sink, self.workdir, self.spec = sink, workdir, spec
        self.diagnose, self.floor, self.budget, self.tear_only = diagnose, floor, budget, tear_only
        self.shell = shell
        self.diagnoses: list[dict[str, Any]] = []
        self.by_id = {s.id: s for s in states}
        self.done: set[str] = set()

    def run(self) -> None:
        failed_boots = 0
        attempt = 0
        while todo := [s for s in self.states if s.id not in self.done]:
            interrupt.check()
            attempt += 1
            progressed, failure, culprit, since = self._boot(todo, attempt)
            interrupt.check()
            if failure is None:
                left = [s.id for s in todo if s.id not in self.done]
                if left:
                    raise PowercutError(f"the checker VM ended without judging {len(left)} state(s), e.g. {left[0]} "
                                        f"(see {self.workdir}/run{attempt}/job/agent.log)")
                return
            if culprit is None or culprit not in self.by_id:
                failed_boots = 0 if progressed else failed_boots + 1
                if failed_boots >= MAX_FAILED_BOOTS:
                    raise PowercutError(f"the checker VM failed {MAX_FAILED_BOOTS} times before judging any state: "
                                        f"{failure.one_line()}")
                continue
            self._blame(self.by_id[culprit], failure, since)

    def _boot(self, todo: list[CrashState], attempt: int) -> tuple[bool, VmError | None, str | None, float]:
        run = self.workdir / f"run{attempt}"
        if run.exists():
            shutil.rmtree(run)
        jobdir = run / "job"
        scratch = run / "scratch.img"
        jobdir.mkdir(parents=True)
        with open(scratch, "wb") as f:
            f.truncate(3 * self.size + (512 << 20))
        guestjob.write(jobdir, guestjob.CheckJob(
            log=f"{guestjob.GUEST_REC_DIR}/{self.log_path.name}", size=self.size, fstype=self.ctx.fs.name,
            mount_opts=self.ctx.mount_opts, checker=self.ctx.checker, states=tuple(s.id for s in todo),
            disks={"scratch": "pcscratch"}, params=self.ctx.params, tools_dir=self.spec.tools_dir,
            diagnose=self.diagnose, floor=self.floor, budget=self.budget, tear_only=self.tear_only,
            shell=self.shell))
        vm = VmSpec(kernel=self.spec.kernel, initrd=self.spec.initrd, memory_mb=self.spec.memory_mb,
                    disks=(DiskSpec(str(scratch), "pcscratch", cache="unsafe"),),
                    shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(jobdir), readonly=False),
                            ShareSpec("rec", str(self.log_path.parent))),
                    accel=self.spec.accel,  # type: ignore[arg-type]
                    timeout_s=(24 * 3600 if self.shell else
                               60 + self.spec.state_timeout_s * (len(todo) + 1 + self.budget * len(self.diagnose) // 10)),
                    console_path=str(run / "console.log"), name=f"powercut-check-{os.getpid()}-{run.parent.name}",
                    # the scratch disk holding the pristine and the COWs is ext4, whatever is judged
                    modules=tuple(dict.fromkeys((self.ctx.fs.module_group, SCRATCH_FS))),
                    cmdline=("powercut.mount=rec",), interactive=self.shell)
        progress = _Progress(jobdir / "progress.jsonl")
        progressed = False

        def drain() -> None:
            nonlocal progressed
            for v in progress.poll():
                if v.state in self.by_id and v.state not in self.done and not interrupt.stopping():
                    self.done.add(v.state)
                    self.sink(v)
                    progressed = True

        def watchdog() -> str | None:
            drain()
            if progress.current and time.monotonic() - progress.since > self.spec.state_timeout_s:
                return f"state {progress.current} did not finish within {self.spec.state_timeout_s:g} s"
            return None

        failure: VmError | None = None
        try:
            run_vm(vm, rundir=run, watchdog=watchdog)
        except VmError as e:
            failure = e
        drain()
        self.diagnoses = progress.diagnoses
        if failure is None:
            result = guestjob.read_result(jobdir)
            if not result.ok:
                raise PowercutError(f"the checker VM failed: {result.error} (see {jobdir}/agent.log)")
        return progressed, failure, progress.current, progress.since

    def _blame(self, s: CrashState, failure: VmError, since: float) -> None:
        kind = "timeout" if isinstance(failure, GuestHang) else "kernel-panic"
        lines = [line for line in failure.console_tail.splitlines() if line.strip()]
        if isinstance(failure, GuestPanic) and failure.panic_line:
            detail = [failure.panic_line, *lines[1:3]]
        else:
            detail = lines[-3:]
        v = Verdict(s.id, s.model, s.cut, kind, (failure.one_line(), *detail), len(s.acks), len(s.begun),
                    round(time.monotonic() - since, 3))
        self.done.add(s.id)
        self.sink(v)
        log.warning("state %s: %s; restarting its checker VM", s.id, kind)


def diagnose_vm(ctx: CheckContext, log_path: Path, data_size: int, firsts: list[Verdict], workdir: Path,
                spec: VmCheckSpec, *, floor: int | None, budget: int, tear_only: bool = False) -> list[dict[str, Any]]:
    """Minimize and blame failing states in one checker VM (diagnose.py runs in the guest);
    ``tear_only``: only find out whether each (torn) failure needs its tear."""
    w = _Worker(ctx, log_path, data_size, [], lambda v: None, workdir, spec,
                diagnose=tuple(v.to_json() for v in firsts), floor=-1 if floor is None else floor, budget=budget,
                tear_only=tear_only)
    _, failure, _, _ = w._boot([], 1)
    if failure is not None:
        raise PowercutError(f"the checker VM diagnosing {len(firsts)} failure(s) failed: {failure.one_line()}")
    return w.diagnoses


def shell_vm(ctx: CheckContext, log_path: Path, data_size: int, state: CrashState, workdir: Path,
             spec: VmCheckSpec) -> Verdict | None:
    """Judge one state in a checker VM, then open an interactive shell in it on the recovered, mounted
    state, on this terminal (``powercut repro --shell``)."""
    got: list[Verdict] = []
    w = _Worker(ctx, log_path, data_size, [state], got.append, workdir, spec, shell=True)
    _, failure, _, _ = w._boot([state], 1)
    if failure is not None:
        raise PowercutError(f"the shell's checker VM failed: {failure.one_line()}")
    return got[0] if got else None

"""One checker VM (host side): ``VmCheckSpec`` (its kernel, memory, accel, per-state timeout, the
libvirt hosts it may boot on) and ``CheckerVm``, which boots a VM on one job -- a check, a
diagnosis, a shell -- and follows its progress stream, handing each verdict on as it arrives; a
*serving* VM stays booted after its job and takes the next one (check/vm.WarmVms keeps one between a
run's phases).  What runs the jobs and blames a panic or a hang on a state is check/vm.py."""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from powercut.check.context import CheckContext, LogSource
from powercut.check.hosts import CheckHost, Staged
from powercut.check.vmprogress import Outcome, Progress
from powercut.config import DEFAULT_ACCEL, STATE_TIMEOUT_S, DiskSpec, ShareSpec, VmSpec
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import open_log
from powercut.errors import PowercutError, UsageError, VmError
from powercut.images.build import build_image, tools_dir
from powercut.linux import filesystems, interrupt, process
from powercut.replay.zeros import ZeroRuns, zero_writes
from powercut.vm import guestjob
from powercut.vm.cmdline import host_paths_to_keep, keep_visible
from powercut.vmstart import template

log = logging.getLogger(__name__)

CHECKER_MEMORY_MB = 768  # one checker VM's memory (check.place.Place, VmCheckSpec)
SCRATCH_FS = "ext4"  # the guest agent's work filesystem (guest.check)
Sink = Callable[[Verdict], None]


@dataclass(frozen=True, slots=True)
class VmCheckSpec:
    kernel: str
    initrd: str
    accel: str = DEFAULT_ACCEL
    memory_mb: int = CHECKER_MEMORY_MB
    state_timeout_s: float = STATE_TIMEOUT_S
    tools_dir: str = ""
    uris: tuple[str, ...] = ()  # libvirt hosts the VMs boot on (--check-uri); none: QEMU here

    @staticmethod
    def default(
        *,
        accel: str = DEFAULT_ACCEL,
        memory_mb: int = CHECKER_MEMORY_MB,
        state_timeout_s: float = STATE_TIMEOUT_S,
        uris: tuple[str, ...] = (),
    ) -> "VmCheckSpec":
        """The checker VM on the default guest image (built, or found cached)."""
        image = build_image()
        return VmCheckSpec(
            image.kernel,
            image.initrd,
            accel=accel,
            memory_mb=memory_mb,
            state_timeout_s=state_timeout_s,
            tools_dir=tools_dir(image) or "",
            uris=uris,
        )

    def hosts(self) -> list[CheckHost]:
        return [CheckHost(u) for u in self.uris] or [CheckHost()]


def shared_under(root: Path, src: LogSource) -> bool:
    """Whether a recording share of ``root`` (resolved) holds every log of ``src``; a source that
    starts from an image never is (the image is not in the share)."""
    return src.initial is None and all(p.resolve().is_relative_to(root) for p in src.logs)


def log_zeros(src: LogSource) -> tuple[ZeroRuns, ...]:
    """Per disk, its log's all-zero writes before its first mark (mkfs's zeroed inode tables and
    journal), found here where the log is local, so a checker VM's first walk skips them instead of
    reading them over 9p (none when the disks start from an image: only a zeroed start may skip)."""
    return () if src.initial is not None else tuple(_zeros_of(p) for p in src.logs)


def _zeros_of(p: Path) -> ZeroRuns:
    """One log's all-zero writes; none when it cannot be read here (the guest reads it and says why)."""
    try:
        st = p.stat()
        return _zeros(p, st.st_size, st.st_mtime_ns)
    except (OSError, PowercutError):
        return ()


@functools.lru_cache(maxsize=64)
def _zeros(
    p: Path, size: int, mtime_ns: int
) -> ZeroRuns:  # size and mtime: a rewritten log is read again
    with open_log(p) as index:
        return zero_writes(index)


def checker_vm(
    spec: VmCheckSpec,
    fs: filesystems.Filesystem,
    staged: Staged,
    d: str,
    *,
    timeout_s: float,
    name: str,
    interactive: bool = False,
) -> VmSpec:
    """A checker VM judging ``fs``, ``d`` being the run directory on the host that boots it."""
    return VmSpec(
        kernel=staged.kernel,
        initrd=staged.initrd,
        memory_mb=spec.memory_mb,
        disks=(DiskSpec(f"{d}/scratch.img", "pcscratch", cache="unsafe"),),
        shares=(
            ShareSpec("hostroot", "/"),
            ShareSpec("job", f"{d}/job", readonly=False),
            ShareSpec("rec", staged.rec_dir),
        ),
        accel=spec.accel,  # type: ignore[arg-type]
        timeout_s=timeout_s,
        console_path=f"{d}/console.log",
        name=f"powercut-check-{os.getpid()}-{name}",
        # the scratch disk holding the pristine and the COWs is ext4, whatever is judged
        modules=tuple(dict.fromkeys((fs.module_group, SCRATCH_FS))),
        cmdline=("powercut.mount=rec",),
        interactive=interactive,
    )


def scratch_need(disks: int, size: int) -> int:
    """A checker VM's scratch disk for ``disks`` data disks of ``size`` bytes: the pristine and the
    COWs -- one disk's, or a pristine and COW files per disk."""
    return (3 if disks == 1 else 2 * disks) * size + (512 << 20)


def prewarm(spec: VmCheckSpec, fs: filesystems.Filesystem, data_bytes: int) -> threading.Thread:
    """Build, in a thread, the template the checker VMs of a one-disk check of a ``data_bytes``
    disk of ``fs`` will start from (vmstart/template.py), while something else runs (the matrix and
    the main job: the first row's recording, which keeps one core busy): on a fresh machine the
    first check then starts at once instead of after the template's ~8 s boot under TCG.  A
    template that exists already, or cannot be built here, costs nothing more than asking."""

    def build() -> None:
        d = Path(tempfile.mkdtemp(prefix="powercut-prewarm-"))  # never in an output directory
        try:
            with open(d / "scratch.img", "wb") as f:  # sparse: the template's key has its size only
                f.truncate(template.scratch_bytes(scratch_need(1, data_bytes)))
            vm = checker_vm(
                spec,
                fs,
                Staged(spec.kernel, spec.initrd, spec.tools_dir, str(d)),
                str(d),
                timeout_s=STATE_TIMEOUT_S,
                name="prewarm",
            )
            if not spec.uris and template.eligible(vm):
                template.template_for(vm)
        except (PowercutError, OSError) as e:  # the check builds it (or boots) and says why
            log.debug("checker VM template not built ahead: %s", e)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    # a process that ends while the build runs (an error after the prewarm began) must not leave
    # the template's QEMU behind, waiting for a save that never comes: every child still live at
    # exit is killed (the next builder starts over)
    atexit.register(process.kill_all)
    t = threading.Thread(target=build, name="powercut-prewarm", daemon=True)
    t.start()
    return t


class CheckerVm:
    """Boots a checker VM on one job and follows its progress stream: each verdict goes to
    ``on_verdict`` as it arrives; a state that runs past the per-state timeout ends the VM."""

    def __init__(
        self,
        ctx: CheckContext,
        src: LogSource,
        spec: VmCheckSpec,
        workdir: Path,
        host: CheckHost | None = None,
        *,
        serve: bool = False,
        scratch_bytes: int = 0,
        rec_root: Path | None = None,
    ) -> None:
        self.ctx = ctx
        self.src = src
        self.spec = spec
        self.workdir = workdir
        # the pristine and the COWs: one disk's, or a pristine and COW files per disk
        self.scratch_bytes = scratch_bytes or scratch_need(src.disks, src.size)
        self.host = host or CheckHost()
        template.enabled()  # a bad POWERCUT_VM_START is one line here, not a dead boot thread later
        keep_visible(
            ctx.checker.host_paths()
        )  # a checker function's file and sys.path, even under /tmp
        self.kept = host_paths_to_keep()  # what its guests see under /tmp (fixed at its boot)
        self.boots = 0
        # serve: the VM stays booted after a job and takes the next one (QEMU on this machine only:
        # a remote host's files are mirrored, not shared)
        self.serve = serve and not self.host.uri
        # the directory shared as the recording: the recording's own, or (rec_root, on this machine:
        # check/vmpool.VmPool) one above the recordings of several runs, so that the booted VM can
        # take another run's states (rebind)
        self.rec_root = rec_root.resolve() if rec_root is not None and not self.host.uri else None
        if self.rec_root is not None and not self.can_read(src):
            raise ValueError(f"{src.path} is not under the VM's recording root {self.rec_root}")
        self._live: _Live | None = None
        self._ending: _Live | None = None

    def can_read(self, src: LogSource) -> bool:
        """Whether this VM's recording share holds every log of ``src`` (one disk's image start
        is not shipped: such a source has a VM of its own)."""
        return src == self.src if self.rec_root is None else shared_under(self.rec_root, src)

    def rebind(self, ctx: CheckContext, src: LogSource) -> None:
        """Judge another run's states from the next job on (check/vmpool.VmPool.lend has checked that
        the VM fits: its filesystem's modules, its scratch disk, its share)."""
        if not self.can_read(src):
            raise ValueError(f"{src.path} is not under the VM's recording root {self.rec_root}")
        self.ctx, self.src = ctx, src

    def live(self) -> bool:
        """A booted VM waiting for its next job."""
        return self._live is not None and self._live.thread.is_alive()

    def close(self, force: bool = False, *, wait: bool = True) -> None:
        """End a serving VM: the STOP file (the agent exits, the guest powers off), killed if it has
        not ended within 30 s (at once with ``force``); ``wait=False``: ``wait`` for it later (several
        VMs end side by side)."""
        live, self._live = self._live, None
        if live is None:
            return
        (live.jobdir / guestjob.STOP).touch()
        live.kill_after = time.monotonic() + (0.0 if force else 30.0)
        self._ending = live
        if wait:
            self.wait()

    def wait(self) -> None:
        """Until the VM ``close`` ended has gone."""
        live, self._ending = self._ending, None
        if live is not None:
            live.thread.join(90)

    def staged(self) -> Staged:
        """The image, tools and recording as the booting host sees them (shipped there once)."""
        if self.rec_root is not None:
            return Staged(
                self.spec.kernel, self.spec.initrd, self.spec.tools_dir, str(self.rec_root)
            )
        return self.host.stage(
            self.src,
            self.spec.kernel,
            self.spec.initrd,
            self.spec.tools_dir,
            self.ctx.checker.host_paths(),
        )

    def guest_path(self, log: Path) -> str:
        """Where the guest reads one of the source's logs (in the recording share)."""
        name = log.resolve().relative_to(self.rec_root).as_posix() if self.rec_root else log.name
        return f"{guestjob.GUEST_REC_DIR}/{name}"

    def source(self) -> guestjob.StateSource:
        return guestjob.StateSource(
            log=self.guest_path(self.src.path),
            size=self.src.size,
            fstype=self.ctx.fs.name,
            mount_opts=self.ctx.mount_opts,
            checker=self.ctx.checker,
            disks={"scratch": "pcscratch"},
            params=self.ctx.params,
            entries=guestjob.StateSource.entries_for(self.ctx.checker),
            fsck=filesystems.fsck_program(self.ctx.fs),
            scratch_ready=not self.host.remote,
            zeros=log_zeros(self.src),
            trace_reads=self.ctx.trace_reads,
            initial=self.guest_path(self.src.initial) if self.src.initial is not None else "",
        )

    def guest_logs(self) -> tuple[str, ...]:
        """Every disk's log as the guest sees it (the recording share) when there are several; none
        for one disk, whose log is the source's (a job's ``logs``)."""
        return tuple(self.guest_path(p) for p in self.src.logs) if self.src.disks > 1 else ()

    def check_job(self, ids: tuple[str, ...], prove: bool = False) -> guestjob.Job:
        """The job that judges the states ``ids`` of the source's disks (``prove``: the read-set
        rule may prove some)."""
        return guestjob.CheckJob(
            self.source(),
            ids,
            tools_dir=self.staged().tools_dir,
            logs=self.guest_logs(),
            prove=prove,
        )

    def run(
        self,
        job: guestjob.Job,
        *,
        steps: int,
        on_verdict: Sink = lambda v: None,
        interactive: bool = False,
    ) -> Outcome:
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
                raise UsageError(
                    "an interactive shell needs a checker VM on this machine, not on a --check-uri host"
                )
            timeout = 24 * 3600 if interactive else 60 + self.spec.state_timeout_s * steps
            self.host.boot(
                lambda d: self._vm_spec(staged, d, timeout, interactive),
                run,
                self.scratch_bytes,
                watchdog,
            )
        except VmError as e:
            failure = e
        drain()
        if failure is None:
            result = guestjob.read_result(jobdir)
            if not result.ok:
                raise PowercutError(
                    f"the checker VM failed: {result.error} (see {jobdir}/agent.log)"
                )
        return Outcome(failure, progress.current, progress.since, progress.diagnoses, progress.rule)

    def _new_run(self, job: guestjob.Job, *, serve: bool) -> tuple[Path, Path]:
        self.boots += 1
        run = self.workdir / f"run{self.boots}"
        if run.exists():
            shutil.rmtree(run)
        jobdir = run / "job"
        jobdir.mkdir(parents=True)
        guestjob.write(jobdir, job, seq=1, serve=serve)
        return run, jobdir

    def _vm_spec(
        self, staged: Staged, d: str, timeout_s: float, interactive: bool = False
    ) -> VmSpec:
        """The VM, ``d`` being the run directory on the host that boots it."""
        return checker_vm(
            self.spec,
            self.ctx.fs,
            staged,
            d,
            timeout_s=timeout_s,
            name=self.workdir.name,
            interactive=interactive,
        )

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
                if (
                    now > live.job_deadline and not live.answered()
                ):  # waiting for a next job: no limit
                    return f"job {live.seq} did not finish within {live.job_limit_s:g} s"
                return live.progress.overdue(self.spec.state_timeout_s)

            def boot() -> None:
                try:  # the VM's own limit: its idle agent ends itself; hangs are the watchdog's
                    self.host.boot(
                        lambda d: self._vm_spec(staged, d, guestjob.IDLE_S + 24 * 3600),
                        run,
                        self.scratch_bytes,
                        watchdog,
                    )
                except VmError as e:
                    live.failure = e

            live.thread = threading.Thread(
                target=boot, name=f"powercut-{self.workdir.name}", daemon=True
            )
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
                result = guestjob.read_result(live.jobdir, live.seq)  # failed, or none for this job
                if not result.ok:
                    raise PowercutError(
                        f"the checker VM failed: {result.error} (see {live.jobdir}/agent.log)"
                    )
                return live.outcome(None)
            if interrupt.stopping():
                self.close(force=True)
                interrupt.raise_if_stopping()
            time.sleep(0.05)


class _Live:
    """A serving checker VM: its boot thread, its job share, the job in progress."""

    def __init__(self, jobdir: Path, progress: Progress, on_verdict: Sink, limit_s: float) -> None:
        self.thread = threading.Thread()
        self.jobdir = jobdir
        self.progress = progress
        self.on_verdict = on_verdict
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
        return Outcome(failure, p.current, p.since, p.diagnoses, p.rule)

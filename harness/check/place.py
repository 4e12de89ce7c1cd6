"""Where states are judged (host side): the one value that decides host or checker VM, with the
checker VM's settings, and the one dispatch over the two, for states of one disk or of N.
Campaigns, confirmation, a cluster's minimization, repro and the matrix's tear checks all judge
through ``Place.judge``; diagnoses go through
``debug.triage.diagnose_at``, which takes the same value."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from powercut.check.checkervm import CHECKER_MEMORY_MB, VmCheckSpec
from powercut.check.context import CheckContext, LogSource
from powercut.check.host import check_host, require_root
from powercut.check.hosts import validate_uri
from powercut.check.proving import Report
from powercut.check.vm import WarmVms, check_vm
from powercut.config import DEFAULT_ACCEL, DEFAULT_CHECK_IN, STATE_TIMEOUT_S
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.nodes import NodesState
from powercut.errors import UsageError

PLACES = ("vm", "host")


@dataclass(frozen=True, slots=True)
class Place:
    """``vm`` (the default: checker VMs, a corrupt image never meets the host kernel) or ``host``
    (loop devices on this machine: root, fast, for trusted disposable machines)."""

    check_in: str = DEFAULT_CHECK_IN
    accel: str = DEFAULT_ACCEL
    memory_mb: int = CHECKER_MEMORY_MB  # per checker VM
    state_timeout_s: float = STATE_TIMEOUT_S
    uris: tuple[
        str, ...
    ] = ()  # --check-uri: libvirt hosts the checker VMs boot on (none: QEMU here)
    jobs: int = 0  # parallel walks (host) or checker VMs (vm, on each URI); 0: one per core
    # one run's checker VMs kept booted between its phases (check -> diagnosis); None: every phase boots
    warm: WarmVms | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.jobs < 0:
            raise UsageError(f"-j must be 0 (one per core) or more, not {self.jobs}")
        if self.state_timeout_s <= 0:
            raise UsageError(
                f"the state timeout must be more than 0 s, not {self.state_timeout_s:g}"
            )
        if self.check_in not in PLACES:
            raise UsageError(f"--check-in must be vm or host, not {self.check_in!r}")
        if self.uris and self.on_host:
            raise UsageError(
                "--check-uri boots checker VMs on libvirt hosts: it needs --check-in vm, not host"
            )
        if len(set(self.uris)) != len(self.uris):
            raise UsageError("--check-uri: a host given twice (use -j for more VMs on one host)")
        for uri in self.uris:
            validate_uri(uri)

    def workers(self) -> int:
        """Parallel walks or checker VMs: ``jobs``, or one per core."""
        return self.jobs or os.cpu_count() or 1

    @property
    def on_host(self) -> bool:
        return self.check_in == "host"

    def require(self) -> None:
        """Fail before any work when this place cannot judge here (host mode needs root)."""
        if self.on_host:
            require_root()

    def vm(self) -> VmCheckSpec:
        """The checker VM on the default guest image (built, or found cached)."""
        return VmCheckSpec.default(
            accel=self.accel,
            memory_mb=self.memory_mb,
            state_timeout_s=self.state_timeout_s,
            uris=self.uris,
        )

    def alone(self, jobs: int) -> int:
        """How many workers judge states that must be judged alone (confirmation): one host worker
        (one kernel); every checker VM is a kernel of its own (``jobs`` on each --check-uri host)."""
        return 1 if self.on_host else jobs

    def judge(
        self,
        ctx: CheckContext,
        src: LogSource,
        index: LogIndex | Sequence[LogIndex],
        states: Sequence[CrashState] | Sequence[NodesState],
        sink: Callable[[Verdict], None],
        work: Path,
        *,
        jobs: int = 1,
        prove: bool = False,
    ) -> Report | None:
        """Judge ``states`` of the disks whose logs are ``src`` (opened: ``index``, one disk's log or
        every disk's); each verdict goes to ``sink``.  ``prove``: the read-set rule may prove
        states of one disk instead (check/proving.py, here or in the checker VMs); what it did that
        the verdicts do not say is returned (a mismatch: every state it had proven was judged for
        real then; a stop: tracing did not pay)."""
        if not states:
            return None
        logs = [index] if isinstance(index, LogIndex) else list(index)
        if len(logs) != src.disks:
            raise ValueError(f"{len(logs)} opened logs for a source of {src.disks} disks")
        if self.on_host:
            report = check_host(ctx, src, logs, states, sink, work, jobs=jobs, prove=prove)
            shutil.rmtree(
                work, ignore_errors=True
            )  # only after a clean end: nothing is mounted under it
            return report
        else:
            return check_vm(
                ctx,
                src,
                logs[0] if src.disks == 1 else None,
                states,
                sink,
                work,
                self.vm(),
                jobs=jobs,
                warm=self.warm,
                prove=prove,
            )

    def with_warm_vms(self) -> "Place":
        """This place keeping a run's checker VMs booted between phases (close_warm ends them); one
        given VMs kept across runs (check/vmpool.VmPool) keeps those."""
        if self.on_host or (self.warm is not None and self.warm.shared):
            return self
        return dataclasses.replace(self, warm=WarmVms())

    def close_warm(self, force: bool = False) -> None:
        """Stop the run's checker VMs kept for a next phase; later phases boot their own.  VMs kept
        across runs stay booted: their owner closes them."""
        if self.warm is not None and not self.warm.shared:
            self.warm.close(force=force)

    def fresh(self) -> "Place":
        """This place judging in fresh kernels from now on (confirmation): a VM per phase, none kept
        (the run's kept VMs closed first)."""
        self.close_warm()
        return dataclasses.replace(self, warm=None)

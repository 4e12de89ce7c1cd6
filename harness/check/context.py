"""What a state is judged against (host and guest): the frozen CheckContext (filesystem, checker,
params, mount options, timeouts), built once for a recording, its checker, and the LogSource (log,
data size, initial image) the states are rebuilt from."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from powercut import checker as checkers
from powercut import workload as workloads
from powercut.checker import DEFAULT_TIMEOUT_S, CheckerSpec
from powercut.core.log.faultwindows import Faults
from powercut.errors import UsageError
from powercut.linux import filesystems
from powercut.linux.filesystems import Filesystem

if TYPE_CHECKING:  # the checker VM's agent never loads a recording: it does not import that module
    from powercut.core.log.dmlog import LogIndex
    from powercut.record import recording

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckContext:
    """Everything that is the same for every state of a campaign."""

    fs: Filesystem
    checker: CheckerSpec = CheckerSpec()
    params: dict[str, Any] = field(default_factory=dict)
    mount_opts: str = ""  # the recording's own mount options
    mount_timeout_s: float = 120.0
    fsck_timeout_s: float = 300.0
    faults: Faults = Faults()  # injected I/O errors in the log (set where the log is opened)
    node_faults: tuple[
        Faults, ...
    ] = ()  # a cluster's: each node's log's, node order (with_node_faults)
    trace_reads: bool = (
        False  # each verdict says what its checker opened and read (check/readtrace.py)
    )

    @property
    def state_mount_opts(self) -> str:
        return self.fs.check_mount_opts(self.mount_opts)

    def trusted_acks(self, acks: Sequence[str]) -> tuple[tuple[str, ...], str, str] | None:
        """(the acks of a state, in ack order, before its first ack made after an injected I/O
        error; whose device failed: ``the device``, a cluster's ``node 1's device``; that error's
        fault window), or None when no ack of the state came after an error.  A cluster's acks are
        cut at the first error any node's disk gave: the program as a whole stopping there."""
        if not self.node_faults:
            trusted = self.faults.trusted(acks)
            if trusted is None:
                return None
            return (
                trusted,
                "the device",
                (self.faults.why or {}).get(acks[len(trusted)], "a fault window"),
            )
        cuts = [len(t) for f in self.node_faults if (t := f.trusted(acks)) is not None]
        if not cuts:
            return None
        key = acks[min(cuts)]
        hit = [(i, f.why[key]) for i, f in enumerate(self.node_faults) if f.why and key in f.why]
        who = (
            f"node {hit[0][0]}'s device"
            if len(hit) == 1
            else "the devices of nodes " + ", ".join(str(i) for i, _ in hit)
        )
        why = hit[0][1] if len(hit) == 1 else "; ".join(f"node {i}: {w}" for i, w in hit)
        return tuple(acks[: min(cuts)]), who, why


@dataclass(frozen=True, slots=True)
class LogSource:
    """The recorded logs a state is rebuilt from: the first disk's log, the data devices' size (every
    disk's), the image the log starts from (None: zeros; a repro bundle has none) and every disk's
    log in disk order (``nodes``, ``path`` first; empty means ``path`` alone: ``logs`` reads both).
    Every log of a source lies in one directory (the recording's, or a bundle's)."""

    path: Path
    size: int
    initial: Path | None = None
    nodes: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if self.nodes and (
            self.nodes[0] != self.path or any(p.parent != self.path.parent for p in self.nodes)
        ):
            raise UsageError(
                f"{self.path.parent}: every disk's log must be a file of one directory, the first "
                "disk's first"
            )

    @staticmethod
    def of(rec: recording.Recording) -> "LogSource":
        logs = rec.node_logs
        return LogSource(logs[0], rec.data_size, rec.initial_image, logs)

    @property
    def logs(self) -> tuple[Path, ...]:
        """Every disk's log, the first disk's first."""
        return self.nodes or (self.path,)

    @property
    def disks(self) -> int:
        return len(self.logs)


def checker_for(
    workload: dict[str, Any],
    command: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    function: str = "",
    path: tuple[str, ...] = (),
) -> tuple[CheckerSpec, dict[str, Any]]:
    """The checker of a recording's workload (or ``command``, or the Python ``function``) and its
    parameters (typed for a named workload; as recorded for a command)."""
    params: dict[str, Any] = dict(workload.get("params") or {})
    if workload.get("name"):
        params = workloads.get(workload["name"]).params(params)
    if command and function:
        raise UsageError("give a checker command or a checker function, not both")
    if command or function:
        spec = CheckerSpec(
            command=command, timeout_s=timeout_s, function=function, path=tuple(path)
        )
        spec.validate()  # a checker that cannot start is a usage error now, not every state's finding
        return spec, params
    if workload.get("name"):
        checkers.get(workload["name"])  # a missing checker is a usage error now, not per state
        return CheckerSpec(name=workload["name"], timeout_s=timeout_s), params
    return CheckerSpec(), params


def with_faults(ctx: CheckContext, index: LogIndex) -> CheckContext:
    """``ctx`` knowing the fault windows of the opened log ``index`` (a malformed fault mark: one line)."""
    try:
        faults = Faults.from_marks(index.marks())
    except ValueError as e:
        raise UsageError(f"the log's fault marks are malformed: {e}") from None
    return dataclasses.replace(ctx, faults=faults) if faults else ctx


def with_node_faults(ctx: CheckContext, indexes: Sequence[LogIndex]) -> CheckContext:
    """``ctx`` knowing the fault windows of N >= 1 disks' opened logs (``indexes``, node order), for
    the judge's ``acked-after-error``; ``ctx`` itself when no log has a fault window.  One disk's
    context is ``with_faults``'s (its windows in ``faults``, its device called "the device", its
    errors without a node); several disks' windows are ``node_faults``, one per node, named by it."""
    if len(indexes) == 1:
        return with_faults(ctx, indexes[0])
    nodes = []
    for i, index in enumerate(indexes):
        try:
            nodes.append(Faults.from_marks(index.marks()))
        except ValueError as e:
            raise UsageError(f"node {i}: the log's fault marks are malformed: {e}") from None
    return dataclasses.replace(ctx, node_faults=tuple(nodes)) if any(nodes) else ctx


def context_for(
    rec: recording.Recording,
    command: str = "",
    checker_timeout_s: float = DEFAULT_TIMEOUT_S,
    function: str = "",
    path: tuple[str, ...] = (),
) -> CheckContext:
    """How a recording's states are judged: its filesystem, mount options, checker and parameters."""
    checker, params = checker_for(rec.workload, command, checker_timeout_s, function, path)
    return CheckContext(filesystems.get(rec.fstype), checker, params, rec.mount_opts)

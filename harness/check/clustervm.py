"""``--check-in vm`` for cluster recordings (host side; issue 40): the cluster states judged in
checker VMs, never on the host kernel.  One VM per worker gets every node's log (the recording
directory is its ``rec`` share) and a contiguous chunk of the states in product order; inside it
(guest/clustercheck.py) each state's node images are rebuilt with dm-snapshot over per-node
pristines walked forward, all mounted, the checker given every mount, every node fsck'd -- the
verdicts and reasons of ``--check-in host`` (check/cluster.py).  ``-j N``: N VMs, each its own
chunk (contiguous: a node's state changes rarely inside one, so its walks stay few).

A state that panics the guest kernel or hangs past the per-state timeout is that state's finding
(kernel-panic / timeout), as for one disk (check/vm.Judging), and the VM boots again on the rest."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from powercut.check.context import CheckContext, LogSource
from powercut.check.vm import CheckerVm, Judging, Sink, VmCheckSpec, in_parallel, locked_sink
from powercut.core.disks import DisksState
from powercut.errors import UsageError
from powercut.vm import guestjob

__all__ = ["check_cluster_vm", "chunks"]


def chunks(states: Sequence[DisksState], n: int) -> list[list[DisksState]]:
    """``states`` cut into at most ``n`` contiguous chunks whose sizes differ by at most one."""
    n = max(1, min(n, len(states)))
    return [list(states[k * len(states) // n:(k + 1) * len(states) // n]) for k in range(n) if states]


def check_cluster_vm(ctx: CheckContext, src: LogSource, logs: Sequence[str], states: Sequence[DisksState],
                     sink: Sink, workdir: Path, spec: VmCheckSpec, *, jobs: int = 1) -> None:
    """Judge ``states`` in ``jobs`` checker VMs on this machine.  ``src``: node 0's log and the data
    size (every node's); ``logs``: every node's log file name in the recording directory, node 0
    first.  Each verdict goes to ``sink`` (under a lock)."""
    if spec.uris:
        raise UsageError("a cluster recording's checker VMs boot on this machine: --check-uri is for one-disk "
                         "recordings for now")
    if any(Path(name).name != name or not (src.path.parent / name).is_file() for name in logs):
        raise UsageError(f"{src.path.parent}: every node's log must be a file of the recording directory")
    locked = locked_sink(sink)
    guest_logs = tuple(f"{guestjob.GUEST_REC_DIR}/{name}" for name in logs)
    scratch = len(logs) * 2 * src.size + (512 << 20)   # per node a pristine and its COW files

    def one(i: int, chunk: list[DisksState]) -> None:
        vm = CheckerVm(ctx, src, spec, workdir / f"vm{i}", scratch_bytes=scratch)

        def job(ids: tuple[str, ...]) -> guestjob.Job:
            return guestjob.ClusterCheckJob(vm.source(), guest_logs, ids, tools_dir=vm.staged().tools_dir)

        try:
            Judging(vm, chunk, locked, job).run()
        finally:
            vm.close(force=True)

    in_parallel(chunks(states, jobs), one)

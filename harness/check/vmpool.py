"""Checker VMs kept booted across the runs of a matrix (host side; the main job and ``powercut
matrix``): a row's check takes the VMs the previous row's check left booted instead of starting
its own, so each VM starts, and warms up, once per matrix rather than once per row.

A VM booted for a run's check shares one directory above every row's recording as its recording
share (``root``: the matrix's output directory; the guest reads a row's log by its path under it),
so a booted VM can judge another row's states: ``lend`` gives it to a check whose recording lies
under that root and whose VM would be the same (the checker VM spec, the filesystem's kernel
modules, a scratch disk at least as large, the same host paths kept visible under /tmp), rebound to
that run (check/checkervm.CheckerVm.rebind).  A recording outside the root, one that starts from
an image, or a --check-uri host gets a VM of its own, closed after its check as before.

What stays per run: confirmation judges in fresh kernels (the campaign judges it without the pool,
check/place.Place.fresh), and a run's end leaves the pool open (Place.close_warm); the matrix
closes it when its last row is checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from powercut.check.checkervm import CheckerVm, VmCheckSpec, scratch_need, shared_under
from powercut.check.context import CheckContext, LogSource
from powercut.check.vm import WarmVms
from powercut.vm.cmdline import host_paths_to_keep, keep_visible


class VmPool(WarmVms):
    """Up to ``keep`` serving checker VMs (one per parallel chunk of a check), their run
    directories under ``workdir``, their recording share ``root``."""

    shared = True

    def __init__(self, root: Path, workdir: Path, keep: int) -> None:
        super().__init__()
        self.root = Path(root).resolve()
        self.workdir = Path(workdir)
        self.KEEP = max(1, keep)
        self.booted = 0
        self.lent = 0  # how many chunks took a booted VM (the saving, for the timeline and tests)

    def fits(self, vm: CheckerVm, ctx: CheckContext, src: LogSource, spec: VmCheckSpec) -> bool:
        """Whether booted ``vm`` is the VM a check of ``src`` with ``ctx`` and ``spec`` would boot."""
        keep_visible(ctx.checker.host_paths())  # as CheckerVm does for a new VM
        return (
            vm.live()
            and vm.rec_root is not None
            and vm.spec == spec
            and vm.can_read(src)
            and vm.ctx.fs.module_group == ctx.fs.module_group
            and vm.scratch_bytes >= scratch_need(src.disks, src.size)
            and vm.kept == host_paths_to_keep()
        )

    def take(self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec) -> CheckerVm | None:
        with self._lock:
            vm = next((v for v in self._vms if self.fits(v, ctx, src, spec)), None)
            if vm is None:
                return None
            self._vms.remove(vm)
            self.lent += 1
        vm.rebind(ctx, src)
        return vm

    def lend(
        self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec, host: Any, *, lone: bool
    ) -> CheckerVm | None:
        return None if host.uri else self.take(ctx, src, spec)

    def boot(
        self, ctx: CheckContext, src: LogSource, spec: VmCheckSpec, workdir: Path, host: Any
    ) -> CheckerVm:
        if host.uri or not shared_under(self.root, src):
            return super().boot(ctx, src, spec, workdir, host)  # a VM of its own: park closes it
        with self._lock:
            self.booted += 1
            n = self.booted
        return CheckerVm(
            ctx, src, spec, self.workdir / f"vm{n}", host, serve=True, rec_root=self.root
        )

    def park(self, vm: CheckerVm) -> None:
        if vm.rec_root is None:
            vm.close()
            return
        super().park(vm)

"""check/vmpool.VmPool: checker VMs kept booted across the runs of a matrix.  The 'VM' is the real
guest agent loop run as a process (tests/unit/guest/test_warm_vms.ProcessHost): a second run's check
takes the booted VMs (no boot), reads its log under the shared root, and a VM that would differ
(another filesystem's modules, another spec, a smaller scratch disk, a log outside the root or one
starting from an image) is never lent; a run's end leaves the pool open, confirmation judges
without it, and the owner's close stops every VM."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from powercut.check.checkervm import CheckerVm, VmCheckSpec
from powercut.check.context import CheckContext, LogSource
from powercut.check.place import Place
from powercut.check.vm import WarmVms, check_vm
from powercut.check.vmpool import VmPool
from powercut.checker import CheckerSpec
from powercut.core.judging.verdict import Verdict
from powercut.linux import filesystems
from powercut.vm import guestjob
from tests.unit.guest.test_warm_vms import ProcessHost

EXT4 = CheckContext(filesystems.get("ext4"), CheckerSpec(command="true"))
SPEC = VmCheckSpec("/k", "/i", state_timeout_s=5.0)


@dataclass(frozen=True)
class State:
    id: str


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(VmCheckSpec, "hosts", lambda self: [ProcessHost()])
    ProcessHost.boots = 0
    for row in ("a", "b", "outside"):
        (tmp_path / row / "rec").mkdir(parents=True)
        (tmp_path / row / "rec" / "log.bin").write_bytes(b"")
    return tmp_path


def src(root: Path, row: str, size: int = 1 << 20) -> LogSource:
    return LogSource(root / row / "rec" / "log.bin", size)


def check(
    pool: WarmVms | None,
    s: LogSource,
    root: Path,
    n: int,
    ctx: CheckContext = EXT4,
    spec: VmCheckSpec = SPEC,
) -> list[str]:
    got: list[Verdict] = []
    check_vm(
        ctx,
        s,
        None,
        [State(f"flush@{i}") for i in range(n)],
        got.append,
        root / "work",
        spec,
        jobs=2,
        warm=pool,
    )
    return sorted(v.state for v in got)


def jobs_of(pool: VmPool) -> list[dict]:
    """Every job.json the pool's VMs were handed last (one per VM)."""
    return [json.loads(p.read_text()) for p in sorted(pool.workdir.glob("vm*/run1/job/job.json"))]


def test_the_second_runs_check_takes_the_booted_vms_and_reads_its_log_under_the_root(
    root: Path,
) -> None:
    pool = VmPool(root, root / "checker-vms", keep=2)
    try:
        assert check(pool, src(root, "a"), root, 6) == [f"flush@{i}" for i in range(6)]
        assert ProcessHost.boots == 2 and pool.booted == 2 and pool.lent == 0
        assert check(pool, src(root, "b"), root, 4) == [f"flush@{i}" for i in range(4)]
        assert ProcessHost.boots == 2 and pool.lent == 2  # no boot for the second run
        logs = {j["src"]["log"] for j in jobs_of(pool)}
        assert logs == {
            f"{guestjob.GUEST_REC_DIR}/b/rec/log.bin"
        }  # by its path under the shared root
        assert all(j["seq"] == 2 for j in jobs_of(pool))
    finally:
        pool.close()
    assert pool.closed and not any(vm.live() for vm in pool._vms)


@pytest.mark.parametrize("why", ["xfs", "spec", "bigger disk", "outside", "image start"])
def test_a_vm_that_would_differ_is_never_lent(root: Path, why: str) -> None:
    pool = VmPool(root / "a", root / "checker-vms", keep=2)  # the root: row a only
    try:
        check(pool, src(root, "a"), root, 4)
        assert ProcessHost.boots == 2
        ctx, spec, s = EXT4, SPEC, src(root, "a")
        if why == "xfs":
            ctx = CheckContext(filesystems.get("xfs"), CheckerSpec(command="true"))
        elif why == "spec":
            spec = VmCheckSpec("/k", "/i", state_timeout_s=9.0)
        elif why == "bigger disk":
            s = src(root, "a", size=1 << 30)
        elif why == "outside":
            s = src(root, "outside")
        else:
            s = LogSource(s.path, s.size, root / "a" / "initial.img")
        for vm in pool._vms:
            assert not pool.fits(vm, ctx, s, spec)
        assert check(pool, s, root, 2, ctx, spec) == ["flush@0", "flush@1"]
        assert ProcessHost.boots == 4 and pool.lent == 0
        if why in ("outside", "image start"):  # their VMs are their own: closed after the check
            assert len(pool._vms) == 2 and all(vm.rec_root is not None for vm in pool._vms)
    finally:
        pool.close()


def test_a_runs_end_leaves_the_pool_open_and_confirmation_judges_without_it(root: Path) -> None:
    pool = VmPool(root, root / "checker-vms", keep=2)
    place = Place(warm=pool)
    try:
        assert place.with_warm_vms().warm is pool  # a run keeps the matrix's pool
        check(pool, src(root, "a"), root, 4)
        place.close_warm()
        assert not pool.closed and len(pool._vms) == 2 and all(vm.live() for vm in pool._vms)
        fresh = place.fresh()
        assert fresh.warm is None and not pool.closed  # fresh kernels: no VM of the pool
        own = Place().with_warm_vms()
        assert own.warm is not None and not own.warm.shared
        own.fresh()
        assert own.warm.closed  # a run's own VMs are closed for confirmation
    finally:
        pool.close()
    assert all(not vm.live() for vm in pool._vms)


def test_a_rebind_outside_the_share_is_refused(root: Path) -> None:
    vm = CheckerVm(
        EXT4, src(root, "a"), SPEC, root / "vm", ProcessHost(), serve=True, rec_root=root / "a"
    )
    with pytest.raises(ValueError, match="not under the VM's recording root"):
        vm.rebind(EXT4, src(root, "b"))
    assert vm.guest_path(src(root, "a").path) == f"{guestjob.GUEST_REC_DIR}/rec/log.bin"
    plain = CheckerVm(EXT4, src(root, "a"), SPEC, root / "vm2", ProcessHost(), serve=True)
    assert plain.guest_path(src(root, "a").path) == f"{guestjob.GUEST_REC_DIR}/log.bin"
    with pytest.raises(ValueError):
        plain.rebind(EXT4, src(root, "b"))

"""The libvirt backend against a real libvirtd (started by ci/start-libvirtd.sh) and the real guest
image, under TCG: exit status, hang, panic, a crash of the QEMU process, the guest-visible write
cache of virtio and AHCI disks, virtiofs on microvm."""

from __future__ import annotations

import glob
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from powercut.config import DiskSpec, ShareSpec, VmSpec
from powercut.errors import GuestHang, GuestPanic, QemuCrashed
from powercut.linux import process
from powercut.vm.libvirt import run_vm_libvirt
from tests.margins import EXIT_WAIT, VM_WAIT

pytestmark = [pytest.mark.vm, pytest.mark.libvirt]

URI = "qemu:///system"
REPO = Path(__file__).resolve().parents[2]
SKIP = 77  # ci/start-libvirtd.sh: this machine cannot run libvirtd at all


@pytest.fixture(scope="session")
def libvirtd() -> str:
    res = process.run(["sh", str(REPO / "ci" / "start-libvirtd.sh")], timeout=120, check=False)
    line = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
    if res.returncode == SKIP:
        pytest.skip(line)
    if res.returncode != 0:
        pytest.fail(f"ci/start-libvirtd.sh failed: {line}")
    pytest.importorskip("libvirt", reason="libvirt-python is not installed")
    return URI


@pytest.fixture(scope="session")
def image():
    from powercut.images.build import build_image

    return build_image()


def make_spec(tmp_path: Path, image, script: str, name: str, **kw) -> VmSpec:
    job = tmp_path / "job"
    job.mkdir()
    (job / "job.sh").write_text(script)
    return VmSpec(
        kernel=image.kernel,
        initrd=image.initrd,
        memory_mb=512,
        name=name,
        shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(job), readonly=False)),
        console_path=str(tmp_path / "console.log"),
        timeout_s=kw.pop("timeout_s", 120),
        **kw,
    )


def domains_named(uri: str, name: str) -> list[str]:
    import libvirt

    conn = libvirt.open(uri)
    try:
        return [d.name() for d in conn.listAllDomains() if d.name().startswith(name + "-")]
    finally:
        conn.close()


def test_exit_status_console_and_boot_time(libvirtd, image, tmp_path):
    # the host's own python (root-owned, e.g. under /root/.pyenv) must be readable through the share
    script = f"touch /run/powercut/job/started\necho hi\n{sys.executable} -c 'import powercut; print(42 * 2)'\nexit 3\n"
    spec = make_spec(tmp_path, image, script, "pctest-exit")
    res = run_vm_libvirt(
        spec,
        uri=libvirtd,
        accel="tcg",
        rundir=tmp_path / "run",
        start_marker=tmp_path / "job" / "started",
    )
    assert res.exit_status == 3 and res.accel == "tcg"
    console = Path(res.console_path).read_text(errors="replace")
    assert "hi\n84\n" in console and "powercut-exit=3" in console
    assert res.boot_s is not None and 0 < res.boot_s <= res.wall_s
    assert (tmp_path / "job" / "exit-status").read_text().strip() == "3"
    assert "<on_reboot>destroy</on_reboot>" in (tmp_path / "run" / "domain.xml").read_text()
    assert "qemu-system-x86_64" in (tmp_path / "run" / "libvirt-qemu.log").read_text()
    assert domains_named(libvirtd, spec.name) == []


def test_hang_is_destroyed_at_timeout(libvirtd, image, tmp_path):
    spec = make_spec(tmp_path, image, "sleep 600\n", "pctest-hang", timeout_s=20)
    start = time.monotonic()
    with pytest.raises(GuestHang, match="within 20 s") as exc:
        run_vm_libvirt(spec, uri=libvirtd, accel="tcg", rundir=tmp_path / "run")
    assert time.monotonic() - start < 20 + EXIT_WAIT  # destroyed at its timeout, not left running
    assert exc.value.console_path == spec.console_path
    assert domains_named(libvirtd, spec.name) == []


def test_panic(libvirtd, image, tmp_path):
    spec = make_spec(tmp_path, image, "echo c > /proc/sysrq-trigger\nsleep 600\n", "pctest-panic")
    with pytest.raises(
        GuestPanic, match="Kernel panic - not syncing: sysrq triggered crash"
    ) as exc:
        run_vm_libvirt(spec, uri=libvirtd, accel="tcg", rundir=tmp_path / "run")
    assert exc.value.console_path == spec.console_path and exc.value.console_tail.strip()
    assert domains_named(libvirtd, spec.name) == []


def test_qemu_process_killed_is_qemu_crashed(libvirtd, image, tmp_path):
    spec = make_spec(
        tmp_path, image, "touch /run/powercut/job/started\nsleep 600\n", "pctest-crash"
    )
    marker = tmp_path / "job" / "started"
    killed: list[int] = []

    def kill_qemu() -> (
        None
    ):  # the QEMU process libvirt started for this test's domain, by its pid file
        deadline = time.monotonic() + VM_WAIT
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pidfile in glob.glob(f"/run/libvirt/qemu/{spec.name}-*.pid"):
            pid = int(Path(pidfile).read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    killer = threading.Thread(target=kill_qemu, daemon=True)
    killer.start()
    with pytest.raises(QemuCrashed, match="ended abnormally") as exc:
        run_vm_libvirt(
            spec, uri=libvirtd, accel="tcg", rundir=tmp_path / "run", start_marker=marker
        )
    killer.join(5)
    assert len(killed) == 1
    assert "powercut-exit" not in Path(spec.console_path).read_text(errors="replace")
    assert exc.value.console_path == spec.console_path
    assert domains_named(libvirtd, spec.name) == []


WC_SCRIPT = r"""
for b in /sys/block/vd* /sys/block/sd*; do
    [ -e "$b/queue/write_cache" ] || continue
    serial=$(cat "$b/serial" 2>/dev/null || echo ahci)
    echo "wc $serial $(cat $b/queue/write_cache)"
done
exit 0
"""


def test_guest_write_cache_is_independent_of_cache_mode(libvirtd, image, tmp_path):
    # each disk asks for the opposite of what libvirt derives from its cache mode on its own
    paths = []
    for n in ("a", "b", "c"):
        paths.append(str(tmp_path / f"{n}.img"))
        with open(paths[-1], "wb") as f:
            f.truncate(64 << 20)
    disks = (
        DiskSpec(paths[0], "data0", bus="virtio", cache="unsafe", write_cache=False),
        DiskSpec(paths[1], "log0", bus="virtio", cache="writethrough", write_cache=True),
        DiskSpec(paths[2], "sata0", bus="ahci", cache="none", write_cache=False),
    )
    spec = make_spec(tmp_path, image, WC_SCRIPT, "pctest-wc", disks=disks)
    res = run_vm_libvirt(spec, uri=libvirtd, accel="tcg", rundir=tmp_path / "run")
    assert res.exit_status == 0
    lines = [
        line.split(None, 2)[1:]
        for line in Path(res.console_path).read_text().splitlines()
        if line.startswith("wc ")
    ]
    assert sorted(lines) == [
        ["ahci", "write through"],
        ["data0", "write through"],
        ["log0", "write back"],
    ]
    qemu_log = (tmp_path / "run" / "libvirt-qemu.log").read_text()
    assert '"driver":"ide-hd"' in qemu_log and '"serial":"sata0","write-cache":"off"' in qemu_log


def test_virtiofs_on_microvm(libvirtd, image, tmp_path):
    spec = make_spec(tmp_path, image, "echo hi\nexit 3\n", "pctest-vfs", transport="virtiofs")
    assert spec.resolved_machine() == "microvm"
    res = run_vm_libvirt(spec, uri=libvirtd, accel="tcg", rundir=tmp_path / "run")
    assert res.exit_status == 3 and "hi\n" in Path(res.console_path).read_text(errors="replace")
    assert "vhost-user-fs-device" in (tmp_path / "run" / "libvirt-qemu.log").read_text()

"""VmSpec -> libvirt domain XML (powercut.vm.libvirt.domain_xml), parsed back with ElementTree; the
URI locality rule, the boot timeout, the console watch.  No libvirtd needed (the domain's lifetime
with fake libvirt objects: tests/unit/test_accel.py)."""

from __future__ import annotations

import builtins
import sys
import xml.etree.ElementTree as ET

import pytest

from powercut.config import DiskSpec, ShareSpec, VmSpec
from powercut.errors import EnvironmentNotReady, UsageError
from powercut.vm import libvirt as lv
from powercut.vm.cmdline import kernel_cmdline

Q = "{http://libvirt.org/schemas/domain/qemu/1.0}"


def spec(**kw) -> VmSpec:
    base: dict = {
        "kernel": "/img/vmlinuz",
        "initrd": "/img/initrd.cpio",
        "memory_mb": 768,
        "cpus": 2,
        "shares": (ShareSpec("hostroot", "/"), ShareSpec("job", "/tmp/job", readonly=False)),
        "console_path": "/runs/r1/console.log",
        "cmdline": ("quiet",),
        "name": "rec",
    }
    base.update(kw)
    return VmSpec(**base)


def render(s: VmSpec, accel: str = "tcg", name: str | None = None) -> ET.Element:
    return ET.fromstring(lv.domain_xml(s, accel, name=name))


def disk_by_serial(root: ET.Element, serial: str) -> ET.Element:
    (disk,) = [d for d in root.iter("disk") if d.findtext("serial") == serial]
    return disk


def write_cache(root: ET.Element, alias: str) -> str:
    (prop,) = [
        p
        for dev in root.iter(f"{Q}device")
        if dev.get("alias") == alias
        for p in dev.iter(f"{Q}property")
        if p.get("name") == "write-cache"
    ]
    assert prop.get("type") == "string"
    return prop.get("value")


VIRTIO_DISKS = (
    DiskSpec("/d/data.img", "data", cache="unsafe", write_cache=False),
    DiskSpec("/d/log.img", "log", cache="writethrough", write_cache=True, discard=False),
)


def test_kernel_boot_memory_cpus_and_lifecycle():
    root = render(spec())
    assert root.tag == "domain" and root.findtext("name") == "rec"
    assert root.find("memory").get("unit") == "MiB" and root.findtext("memory") == "768"
    assert root.findtext("vcpu") == "2"
    os_el = root.find("os")
    assert os_el.findtext("type") == "hvm" and os_el.find("type").get("arch") == "x86_64"
    assert (
        os_el.findtext("kernel") == "/img/vmlinuz"
        and os_el.findtext("initrd") == "/img/initrd.cpio"
    )
    assert os_el.findtext("cmdline") == kernel_cmdline(spec())
    assert "powercut.transport=9p" in os_el.findtext("cmdline") and os_el.findtext(
        "cmdline"
    ).endswith("quiet")
    # the guest's reset (init.sh: reboot -f) must end the domain, like QEMU's -no-reboot
    for event in ("on_reboot", "on_poweroff", "on_crash"):
        assert root.findtext(event) == "destroy"
    assert root.find("features/acpi") is not None


def test_domain_type_and_cpu_follow_accel():
    kvm, tcg = render(spec(), "kvm"), render(spec(), "tcg")
    assert kvm.get("type") == "kvm" and kvm.find("cpu").get("mode") == "host-passthrough"
    assert tcg.get("type") == "qemu" and tcg.find("cpu").get("mode") == "maximum"


def test_machine_type_microvm_uses_virtio_mmio_addresses():
    root = render(spec(disks=VIRTIO_DISKS))
    assert root.find("os/type").get("machine") == "microvm"
    for el in list(root.iter("disk")) + list(root.iter("filesystem")):
        assert el.find("address").get("type") == "virtio-mmio"


def test_explicit_machine_q35_has_pci_devices():
    root = render(spec(disks=VIRTIO_DISKS, machine="q35"))
    assert root.find("os/type").get("machine") == "q35"
    assert all(d.find("address") is None for d in root.iter("disk"))


def test_virtio_disks_cache_discard_serial_and_write_cache():
    root = render(spec(disks=VIRTIO_DISKS))
    data, logd = disk_by_serial(root, "data"), disk_by_serial(root, "log")
    for d in (data, logd):
        assert d.get("type") == "file" and d.get("device") == "disk"
        assert d.find("target").get("bus") == "virtio"
        assert d.find("driver").get("type") == "raw" and d.find("driver").get("io") == "threads"
    assert data.find("source").get("file") == "/d/data.img"
    assert data.find("target").get("dev") == "vda" and logd.find("target").get("dev") == "vdb"
    assert (
        data.find("driver").get("cache") == "unsafe"
        and logd.find("driver").get("cache") == "writethrough"
    )
    assert (
        data.find("driver").get("discard") == "unmap"
        and logd.find("driver").get("discard") == "ignore"
    )
    # the guest-visible cache is independent of the host cache mode (libvirt would couple them)
    assert data.find("alias").get("name") == "ua-disk0" and write_cache(root, "ua-disk0") == "off"
    assert logd.find("alias").get("name") == "ua-disk1" and write_cache(root, "ua-disk1") == "on"


def test_ahci_disks_are_sata_on_q35_with_controller():
    disks = (
        DiskSpec("/d/a.img", "sata0", bus="ahci", cache="none", write_cache=True),
        DiskSpec("/d/b.img", "virt0", bus="virtio", cache="directsync", write_cache=False),
        DiskSpec(
            "/d/c.img", "sata1", bus="ahci", cache="writeback", write_cache=False, readonly=True
        ),
    )
    root = render(spec(disks=disks))
    assert root.find("os/type").get("machine") == "q35"
    assert [c.get("type") for c in root.iter("controller")].count("sata") == 1
    a, v, c = (disk_by_serial(root, s) for s in ("sata0", "virt0", "sata1"))
    assert a.find("target").attrib == {"dev": "sda", "bus": "sata"}
    assert c.find("target").attrib == {"dev": "sdb", "bus": "sata"}
    assert v.find("target").attrib == {"dev": "vda", "bus": "virtio"}
    assert a.find("driver").get("cache") == "none" and c.find("driver").get("cache") == "writeback"
    assert c.find("readonly") is not None and a.find("readonly") is None
    assert [write_cache(root, f"ua-disk{i}") for i in range(3)] == ["on", "off", "off"]


def test_9p_shares():
    root = render(spec())
    hostroot, job = root.findall("devices/filesystem")
    for fs in (hostroot, job):
        assert fs.get("type") == "mount" and fs.get("accessmode") == "passthrough"
        assert fs.get("multidevs") == "remap" and fs.find("driver").get("type") == "path"
    assert (
        hostroot.find("source").get("dir") == "/"
        and hostroot.find("target").get("dir") == "hostroot"
    )
    assert hostroot.find("readonly") is not None
    assert job.find("source").get("dir") == "/tmp/job" and job.find("target").get("dir") == "job"
    assert job.find("readonly") is None
    assert root.find("memoryBacking") is None


def test_virtiofs_shares_shared_memfd_and_modern_mmio():
    root = render(spec(transport="virtiofs"))
    mb = root.find("memoryBacking")
    assert mb.find("source").get("type") == "memfd" and mb.find("access").get("mode") == "shared"
    hostroot, job = root.findall("devices/filesystem")
    for fs in (hostroot, job):
        assert fs.find("driver").get("type") == "virtiofs"
    assert (
        hostroot.find("binary/cache").get("mode") == "always"
        and job.find("binary/cache").get("mode") == "none"
    )
    assert [fs.find("binary/sandbox").get("mode") for fs in (hostroot, job)] == ["chroot", "chroot"]
    assert [fs.find("target").get("dir") for fs in (hostroot, job)] == ["hostroot", "job"]
    assert all(
        fs.find("readonly") is None for fs in (hostroot, job)
    )  # libvirt 9.0: no read-only virtiofs
    assert "powercut.transport=virtiofs" in root.findtext("os/cmdline")


def test_microvm_gets_modern_virtio_mmio_like_the_qemu_backend():
    for transport in ("9p", "virtiofs"):
        args = [a.get("value") for a in render(spec(transport=transport)).iter(f"{Q}arg")]
        assert args == ["-global", "virtio-mmio.force-legacy=false"]
    assert not list(render(spec(transport="virtiofs", machine="q35")).iter(f"{Q}arg"))


def test_console_serial_file_and_no_extra_devices():
    root = render(spec(console_path="/runs/r1/console.log"))
    (serial,) = root.findall("devices/serial")
    assert serial.get("type") == "file"
    assert (
        serial.find("source").get("path") == "/runs/r1/console.log"
        and serial.find("source").get("append") == "on"
    )
    devices = root.find("devices")
    for tag in ("graphics", "video", "interface", "sound", "input", "rng"):
        assert devices.find(tag) is None, tag
    assert devices.find("memballoon").get("model") == "none"
    assert any(
        c.get("type") == "usb" and c.get("model") == "none" for c in devices.iter("controller")
    )


def test_qemu_runs_as_root_without_relabeling():
    root = render(spec(disks=VIRTIO_DISKS))
    sec = root.find("seclabel")
    assert (
        sec.attrib == {"type": "static", "model": "dac", "relabel": "no"}
        and sec.findtext("label") == "+0:+0"
    )


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = render(spec(console_path="console.log", disks=(DiskSpec("data.img", "d"),)))
    assert root.find("devices/serial/source").get("path") == str(tmp_path / "console.log")
    assert root.find("devices/disk/source").get("file") == str(tmp_path / "data.img")


def test_name_override_and_no_override_without_disks():
    root = render(spec(), name="rec-0a1b2c3d")
    assert root.findtext("name") == "rec-0a1b2c3d"
    assert root.find(f"{Q}override") is None


def test_uri_locality():
    # local: no host and the unix socket; everything else is probed through libvirt
    for uri in (
        "qemu:///system",
        "qemu:///session",
        "qemu+unix:///system",
        "qemu+unix:///system?socket=/x.sock",
    ):
        assert lv.is_local_uri(uri), uri
    for uri in (
        "qemu+ssh://root@host/system",
        "qemu+ssh://root@127.0.0.1:2222/system?keyfile=/k",
        "qemu+ssh:///system",
        "qemu://localhost/system",
        "qemu+tcp://h/system",
        "qemu+libssh2://u@h/system",
        "qemu+ext:///system?command=/bin/tunnel",
    ):
        assert not lv.is_local_uri(uri), uri


def test_boot_timeout_per_accel_env_and_capped_by_vm_timeout(monkeypatch):
    monkeypatch.delenv("POWERCUT_BOOT_TIMEOUT", raising=False)
    assert (
        lv.boot_timeout_s("kvm", 900) == lv.BOOT_TIMEOUTS_S["kvm"] < lv.boot_timeout_s("tcg", 900)
    )
    assert lv.boot_timeout_s("tcg", 40) == 40
    monkeypatch.setenv("POWERCUT_BOOT_TIMEOUT", "7.5")
    assert lv.boot_timeout_s("kvm", 900) == lv.boot_timeout_s("tcg", 900) == 7.5
    monkeypatch.setenv("POWERCUT_BOOT_TIMEOUT", "soon")
    with pytest.raises(
        UsageError, match="POWERCUT_BOOT_TIMEOUT must be a number of seconds, not 'soon'"
    ):
        lv.boot_timeout_s("kvm", 900)


def test_console_watch_reads_only_new_bytes_and_finds_split_marker(tmp_path):
    path = tmp_path / "console.log"
    watch = lv.ConsoleWatch(path, b"powercut-probe-ok")
    assert not watch.seen()  # no file yet
    path.write_bytes(b"boot noise powercut-pro")
    assert not watch.seen()
    with open(path, "ab") as f:
        f.write(b"be-ok\n")
    assert watch.seen() and watch.seen()


def test_qemu_stderr_filters_libvirt_lines_and_warnings():
    text = (
        "2026-11-21 05:22:30.829+0000: starting up libvirt version: 9.0.0\n/usr/bin/qemu-system-x86_64 \\\n"
        "-name guest=x \\\nqemu-system-x86_64: -fsdev local,readonly: warning: short-form boolean\n"
        "2026-11-21T05:22:31.000Z qemu-system-x86_64: kvm_buf_set_msrs: Assertion failed\n"
        "2026-11-21 05:22:31.829+0000: shutting down, reason=crashed\n"
    )
    assert (
        lv._qemu_stderr(text)
        == "2026-11-21T05:22:31.000Z qemu-system-x86_64: kvm_buf_set_msrs: Assertion failed"
    )


def test_missing_libvirt_python_is_one_clear_line(monkeypatch):
    real_import = builtins.__import__

    def no_libvirt(name, *a, **kw):
        if name == "libvirt":
            raise ImportError("No module named 'libvirt'")
        return real_import(name, *a, **kw)

    monkeypatch.delitem(sys.modules, "libvirt", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_libvirt)
    with pytest.raises(EnvironmentNotReady, match="libvirt-python") as exc:
        lv.run_vm_libvirt(spec())
    assert "\n" not in str(exc.value)


def test_unreachable_uri_is_environment_not_ready(tmp_path):
    pytest.importorskip("libvirt")
    with pytest.raises(
        EnvironmentNotReady, match="cannot connect to libvirt at qemu\\+unix"
    ) as exc:
        lv.run_vm_libvirt(
            spec(console_path=str(tmp_path / "c.log")),
            uri=f"qemu+unix:///system?socket={tmp_path}/no-such.sock",
        )
    assert "\n" not in str(exc.value)

"""VmSpec -> libvirt domain XML (host; pure).  The mapping, checked against libvirt 9.0 + QEMU 7.2,
is described in vm/libvirt.py's docstring; tests/unit/test_libvirt_xml.py holds it to it."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from powercut.config import VmSpec
from powercut.vm.cmdline import kernel_cmdline

QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
ET.register_namespace("qemu", QEMU_NS)


def _sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
    el = ET.SubElement(parent, tag, attrs)
    if text is not None:
        el.text = text
    return el


def domain_xml(spec: VmSpec, accel: str, *, name: str | None = None) -> str:
    """The libvirt domain XML for ``spec`` with a resolved ``accel`` ('kvm' or 'tcg')."""
    machine = spec.resolved_machine()
    mmio = machine == "microvm"
    dom = ET.Element("domain", type="kvm" if accel == "kvm" else "qemu")
    _sub(dom, "name", name or spec.name)
    _sub(dom, "memory", str(spec.memory_mb), unit="MiB")
    _sub(dom, "vcpu", str(spec.cpus))
    if spec.transport == "virtiofs":
        mb = _sub(dom, "memoryBacking")
        _sub(mb, "source", type="memfd")
        _sub(mb, "access", mode="shared")
    os_el = _sub(dom, "os")
    _sub(os_el, "type", "hvm", arch="x86_64", machine=machine)
    _sub(os_el, "kernel", os.path.abspath(spec.kernel))
    _sub(os_el, "initrd", os.path.abspath(spec.initrd))
    _sub(os_el, "cmdline", kernel_cmdline(spec))
    _sub(_sub(dom, "features"), "acpi")
    _sub(dom, "cpu", mode="host-passthrough" if accel == "kvm" else "maximum")
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        _sub(dom, event, "destroy")
    dev = _sub(dom, "devices")
    _sub(dev, "controller", type="usb", model="none")
    if any(d.bus == "ahci" for d in spec.disks):
        _sub(dev, "controller", type="sata", index="0")
    _disks(dev, spec, mmio)
    _shares(dev, spec, mmio)
    serial = _sub(dev, "serial", type="file")
    _sub(serial, "source", path=os.path.abspath(spec.console_path), append="on")
    _sub(serial, "target", port="0")
    _sub(dev, "memballoon", model="none")
    sec = _sub(dom, "seclabel", type="static", model="dac", relabel="no")
    _sub(sec, "label", "+0:+0")
    _qemu_overrides(dom, spec, mmio)
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode") + "\n"


def _disks(dev: ET.Element, spec: VmSpec, mmio: bool) -> None:
    letters = {"virtio": 0, "ahci": 0}
    for i, disk in enumerate(spec.disks):
        d = _sub(dev, "disk", type="file", device="disk")
        _sub(
            d,
            "driver",
            name="qemu",
            type="raw",
            cache=disk.cache,
            io="threads",
            discard="unmap" if disk.discard else "ignore",
        )
        _sub(d, "source", file=os.path.abspath(disk.path))
        prefix = "vd" if disk.bus == "virtio" else "sd"
        _sub(
            d,
            "target",
            dev=prefix + "abcdefghijklmnopqrstuvwxyz"[letters[disk.bus]],
            bus="virtio" if disk.bus == "virtio" else "sata",
        )
        letters[disk.bus] += 1
        _sub(d, "serial", disk.serial)
        if disk.readonly:
            _sub(d, "readonly")
        _sub(d, "alias", name=f"ua-disk{i}")
        if mmio:
            _sub(d, "address", type="virtio-mmio")


def _shares(dev: ET.Element, spec: VmSpec, mmio: bool) -> None:
    for share in spec.shares:
        if spec.transport == "virtiofs":
            fs = _sub(dev, "filesystem", type="mount", accessmode="passthrough")
            _sub(fs, "driver", type="virtiofs", queue="1024")
            binary = _sub(fs, "binary")  # virtiofsd as qemu.VirtiofsDaemons runs it
            _sub(binary, "cache", mode="always" if share.readonly else "none")
            _sub(binary, "sandbox", mode="chroot")  # namespace mode: pivot_root fails in containers
        else:
            fs = _sub(dev, "filesystem", type="mount", accessmode="passthrough", multidevs="remap")
            _sub(fs, "driver", type="path")
        _sub(fs, "source", dir=os.path.abspath(share.path))
        _sub(fs, "target", dir=share.tag)
        if share.readonly and spec.transport != "virtiofs":
            _sub(fs, "readonly")
        if mmio:
            _sub(fs, "address", type="virtio-mmio")


def _qemu_overrides(dom: ET.Element, spec: VmSpec, mmio: bool) -> None:
    if spec.disks:
        override = _sub(dom, f"{{{QEMU_NS}}}override")
        for i, disk in enumerate(spec.disks):
            frontend = _sub(
                _sub(override, f"{{{QEMU_NS}}}device", alias=f"ua-disk{i}"),
                f"{{{QEMU_NS}}}frontend",
            )
            _sub(
                frontend,
                f"{{{QEMU_NS}}}property",
                name="write-cache",
                type="string",
                value="on" if disk.write_cache else "off",
            )
    if mmio:
        # modern (virtio 1.0) MMIO, as in qemu.build_argv: vhost-user-fs refuses legacy devices
        cmdline = _sub(dom, f"{{{QEMU_NS}}}commandline")
        _sub(cmdline, f"{{{QEMU_NS}}}arg", value="-global")
        _sub(cmdline, f"{{{QEMU_NS}}}arg", value="virtio-mmio.force-legacy=false")

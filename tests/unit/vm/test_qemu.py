"""VmSpec -> QEMU argv, and how the end of a VM is classified."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from powercut.config import DiskSpec, ShareSpec, VmSpec
from powercut.errors import GuestHang, GuestPanic, QemuCrashed, UsageError, VmError, VmKilled
from powercut.vm.cmdline import kernel_cmdline
from powercut.vm.console import classify_end
from powercut.vm.qemu import build_argv


def spec(tmp_path: Path, **kw) -> VmSpec:
    return VmSpec(
        kernel="/k",
        initrd="/i",
        console_path=str(tmp_path / "console"),
        disks=kw.pop(
            "disks",
            (
                DiskSpec("/d.img", "pcdata"),
                DiskSpec("/l.img", "pclog", write_cache=False, cache="none"),
            ),
        ),
        shares=(ShareSpec("hostroot", "/"), ShareSpec("job", "/job", readonly=False)),
        **kw,
    )


def opt(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_microvm_virtio_9p(tmp_path: Path) -> None:
    argv = build_argv(spec(tmp_path), "tcg")
    assert opt(argv, "-machine")[0].startswith("microvm")
    assert opt(argv, "-accel") == ["tcg"] and opt(argv, "-cpu") == ["max"]
    assert "-no-reboot" in argv and "-nodefaults" in argv
    drives = opt(argv, "-drive")
    assert "cache=unsafe" in drives[0] and "cache=none" in drives[1]
    devices = opt(argv, "-device")
    assert "virtio-blk-device,drive=disk0,serial=pcdata,write-cache=on" in devices
    assert "virtio-blk-device,drive=disk1,serial=pclog,write-cache=off" in devices
    fsdevs = opt(argv, "-fsdev")
    assert "readonly=on" in fsdevs[0] and "readonly=on" not in fsdevs[1]
    assert any("mount_tag=hostroot" in d for d in devices)
    assert opt(argv, "-chardev")[0] == f"file,id=con,path={tmp_path / 'console'}"


def test_ahci_needs_pci_machine(tmp_path: Path) -> None:
    s = spec(tmp_path, disks=(DiskSpec("/d.img", "pcdata", bus="ahci"),))
    argv = build_argv(s, "kvm")
    assert opt(argv, "-machine")[0].startswith("q35")
    assert opt(argv, "-cpu") == ["host"]
    devices = opt(argv, "-device")
    assert "ahci,id=ahci0" in devices
    assert "ide-hd,drive=disk0,bus=ahci0.0,serial=pcdata,write-cache=on" in devices
    assert any(d.startswith("virtio-9p-pci") for d in devices)


def test_virtiofs_uses_shared_memory_and_sockets(tmp_path: Path) -> None:
    s = spec(tmp_path, transport="virtiofs")
    argv = build_argv(s, "tcg", virtiofs_sockets={"hostroot": "/r.sock", "job": "/j.sock"})
    assert "memory-backend=mem" in opt(argv, "-machine")[0]
    assert any(
        o.startswith("memory-backend-memfd,id=mem") and "share=on" in o
        for o in opt(argv, "-object")
    )
    assert "socket,id=vfs0,path=/r.sock" in opt(argv, "-chardev")
    assert "-fsdev" not in argv


def test_cmdline_loads_only_needed_groups(tmp_path: Path) -> None:
    assert "powercut.load=" not in kernel_cmdline(spec(tmp_path))
    line = kernel_cmdline(spec(tmp_path, modules=("xfs",)))
    assert "powercut.load=xfs,9p" in line and "console=ttyS0" in line and "panic=-1" in line
    ahci = spec(tmp_path, modules=("ext4",), disks=(DiskSpec("/d.img", "pcdata", bus="ahci"),))
    assert "powercut.load=ext4,9p,pci,ahci" in kernel_cmdline(ahci)


@pytest.mark.parametrize(
    "kw", [{"memory_mb": 64}, {"cpus": 0}, {"transport": "nfs"}, {"accel": "hvf"}]
)
def test_bad_vm_specs(tmp_path: Path, kw: dict) -> None:
    with pytest.raises(UsageError):
        spec(tmp_path, **kw)


def test_bad_disk_specs() -> None:
    with pytest.raises(UsageError):
        DiskSpec("/d", "pc-data")
    with pytest.raises(UsageError):
        DiskSpec("/d", "pcdata", cache="sometimes")  # type: ignore[arg-type]


def test_classify_end(tmp_path: Path) -> None:
    s = spec(tmp_path)
    Path(s.console_path).write_bytes(b"boot\nKernel panic - not syncing: sysrq triggered crash\n")
    with pytest.raises(GuestPanic, match="sysrq triggered crash") as e:
        classify_end(Path(s.console_path).read_bytes(), 0, False, s, "")
    assert "sysrq" in e.value.console_tail
    assert classify_end(b"x\npowercut-exit=3\n", 0, False, s, "") == 3
    with pytest.raises(GuestHang):
        classify_end(b"booting", None, True, s, "")
    with pytest.raises(QemuCrashed, match="signal 11"):
        classify_end(b"booting", -11, False, s, "")
    with pytest.raises(QemuCrashed, match="exited 1: no such device"):
        classify_end(b"", 1, False, s, "warning\nno such device\n")
    with pytest.raises(VmError, match="without reporting"):
        classify_end(b"booting", 0, False, s, "")
    with pytest.raises(VmKilled, match="from outside: terminating on signal 15 from pid 1 "):
        classify_end(
            b"booting",
            0,
            False,
            s,
            "qemu-system-x86_64: terminating on signal 15 from pid 1 (pkill)\n",
        )
    with pytest.raises(
        VmError, match="without reporting"
    ):  # powercut's own kill is not "from outside"
        classify_end(
            b"booting",
            0,
            False,
            s,
            f"qemu: terminating on signal 15 from pid {os.getpid()} (python)\n",
        )
    with pytest.raises(VmKilled):  # a signal without a sender's pid (older QEMU)
        classify_end(b"booting", 0, False, s, "qemu: terminating on signal 1\n")


def test_paths_under_tmp_are_kept_visible_in_the_guest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from powercut.vm import cmdline

    venv = tmp_path / "some-venv"
    venv.mkdir()
    monkeypatch.setattr(sys, "prefix", str(venv))
    assert str(venv) in cmdline.host_paths_to_keep()
    assert "powercut.keep=" in kernel_cmdline(spec(tmp_path)) and str(venv) in kernel_cmdline(
        spec(tmp_path)
    )
    monkeypatch.setattr(sys, "prefix", "/usr")
    assert "/usr" not in cmdline.host_paths_to_keep()


def test_paths_kept_for_user_functions_are_not_repeated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pytest plugin's test project and its sys.path: one bind per outermost directory, and
    nothing that does not exist (the guest's bind would fail)."""
    from powercut.vm import cmdline

    monkeypatch.setattr(cmdline, "_extra_keep", set())
    (tmp_path / "proj" / "lib").mkdir(parents=True)
    cmdline.keep_visible(
        [str(tmp_path / "proj" / "lib"), str(tmp_path / "proj"), str(tmp_path / "gone"), "/usr/lib"]
    )
    kept = cmdline.host_paths_to_keep()
    assert str(tmp_path / "proj") in kept
    assert (
        str(tmp_path / "proj" / "lib") not in kept
        and str(tmp_path / "gone") not in kept
        and "/usr/lib" not in kept
    )

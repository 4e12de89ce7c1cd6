"""powercut doctor's checks and powercut setup (campaign/doctor.py), with the machine faked: what
each check says, which absences stop a crash test (missing) and which only weaken it (warn), and the
command that fixes each."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from powercut.campaign import doctor
from powercut.campaign.doctor import MISSING, OK, WARN, Check
from powercut.cli import main


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    """A machine where everything is there (tools, image with dm-log-writes, working KVM), to take away from."""
    m = SimpleNamespace(
        tools={
            "qemu-system-x86_64",
            "mkfs.ext4",
            "e2fsck",
            "mkfs.xfs",
            "xfs_repair",
            "mkfs.btrfs",
            "btrfs",
            "cc",
            "strace",
            "fio",
        },
        image=SimpleNamespace(
            hash="abc",
            source="Debian package linux-image-x",
            kernel_release="6.1",
            modules=("dm_mod", "dm_log_writes"),
            dir=str(tmp_path / "img"),
            kernel="/k",
            initrd="/i",
        ),
        kvm=("kvm", "KVM guest booted in 0.3 s"),
        dev_kvm=True,
        root=True,
    )
    monkeypatch.setenv("POWERCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(
        doctor, "_which", lambda tool: f"/usr/bin/{tool}" if tool in m.tools else None
    )
    monkeypatch.setattr(doctor, "find_image", lambda spec: m.image)
    monkeypatch.setattr(doctor.os, "geteuid", lambda: 0 if m.root else 1000)
    monkeypatch.setattr(
        doctor.os.path, "exists", lambda p: m.dev_kvm if p == "/dev/kvm" else Path(p).exists()
    )
    monkeypatch.setattr(doctor.accel, "kvm_usable_device", lambda: m.dev_kvm)
    monkeypatch.setattr(doctor.accel, "cached_probe", lambda key, probe, where: m.kvm[0])
    monkeypatch.setattr(doctor.accel, "local_key", lambda qemu, kernel: "key")
    monkeypatch.setattr(doctor.accel, "cached_verdicts", lambda: {"key": {"reason": m.kvm[1]}})
    return m


def by_what(found: list[Check]) -> dict[str, Check]:
    return {c.what: c for c in found}


def test_everything_there_is_ready(machine: SimpleNamespace) -> None:
    found = doctor.checks()
    assert doctor.ready(found)
    c = by_what(found)
    assert c["KVM"].status == OK and "booted in 0.3 s" in c["KVM"].detail
    assert c["dm-log-writes"].status == OK
    assert all(x.status == OK for x in found if x.what != "pytest plugin")
    assert c["template cache"].detail.startswith("none yet")


def test_no_qemu_no_image_and_no_ext4_tools_stop_every_crash_test(machine: SimpleNamespace) -> None:
    machine.tools -= {"qemu-system-x86_64", "e2fsck"}
    machine.image = None
    found = doctor.checks()
    assert not doctor.ready(found)
    c = by_what(found)
    assert (c["QEMU"].status, c["QEMU"].fix) == (MISSING, "powercut setup")
    assert (c["guest image"].status, c["guest image"].fix) == (MISSING, "powercut image build")
    assert c["dm-log-writes"].status == MISSING
    assert (
        c["ext4 tools"].status == MISSING
        and "e2fsck not found (Debian package e2fsprogs)" in c["ext4 tools"].detail
    )
    assert c["KVM"].status == WARN and "probed once the guest image is built" in c["KVM"].detail
    assert c["QEMU"].line() == (
        "missing  QEMU: qemu-system-x86_64 not found (Debian package qemu-system-x86): no VM "
        "can start -- fix: powercut setup"
    )


def test_what_only_weakens_a_crash_test_is_a_warning(machine: SimpleNamespace) -> None:
    machine.tools -= {"mkfs.xfs", "cc", "strace", "fio"}
    machine.kvm = ("tcg", "QEMU with KVM exited -6: assertion failed")
    machine.root = False
    found = doctor.checks()
    assert doctor.ready(found)
    c = by_what(found)
    assert {c[w].status for w in ("xfs tools", "C compiler", "strace", "fio", "KVM", "root")} == {
        WARN
    }
    assert (
        "does not boot (QEMU with KVM exited -6: assertion failed): VMs run under TCG"
        in c["KVM"].detail
    )
    machine.dev_kvm = False
    assert "no /dev/kvm" in by_what(doctor.checks())["KVM"].detail


def test_dm_log_writes_is_a_module_or_built_in(machine: SimpleNamespace) -> None:
    """An image is only built from a kernel that has dm-log-writes (modules.txt requires it)."""
    assert (
        by_what(doctor.checks())["dm-log-writes"].detail
        == "module dm_log_writes in the guest kernel 6.1"
    )
    machine.image.modules = ("dm_mod",)
    c = by_what(doctor.checks())["dm-log-writes"]
    assert c.status == OK and c.detail.startswith("built into the kernel, dm_log_writes")


def test_templates_in_the_cache_are_counted(
    machine: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("t1", "t2"):
        (tmp_path / "cache" / "templates" / key).mkdir(parents=True)
        (tmp_path / "cache" / "templates" / key / "state").write_bytes(b"")
    assert doctor.check_templates().detail.startswith("2 checker-VM templates in ")
    monkeypatch.setenv("POWERCUT_VM_START", "boot")
    assert "every checker VM boots" in doctor.check_templates().detail


def test_doctor_command_prints_one_line_each_and_exits_1_when_not_ready(
    machine: SimpleNamespace, capsys: pytest.CaptureFixture
) -> None:
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ok       root: ") and out[-1].startswith(
        "ready: a crash test can run here"
    )
    machine.tools.discard("qemu-system-x86_64")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("not ready: missing QEMU")
    assert main(["doctor", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ready"] is False
    assert {"status": MISSING, "what": "QEMU", "fix": "powercut setup"}.items() <= next(
        c for c in doc["checks"] if c["what"] == "QEMU"
    ).items()


def test_setup_installs_packages_then_builds_the_image(
    machine: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    asked: list[tuple[list[str], bool]] = []

    def install(wanted: list[str], *, dry_run: bool = False, say=print) -> list[str]:
        asked.append((wanted, dry_run))
        return ["strace"]

    monkeypatch.setattr(doctor.packages, "install", install)
    monkeypatch.setattr(doctor, "build_image", lambda spec: machine.image)
    assert main(["setup"]) == 0
    out = capsys.readouterr().out
    assert asked == [(doctor.packages.names(), False)]
    assert f"Debian packages: {len(doctor.packages.names())} wanted, installed strace" in out
    assert "guest image: abc: Debian package linux-image-x" in out and "KVM: works" in out
    asked.clear()
    assert main(["setup", "--dry-run", "--dev"]) == 0
    out = capsys.readouterr().out
    assert asked == [(doctor.packages.names(doctor.packages.GROUPS), True)]
    assert "would install strace" in out and "guest image: abc, built already" in out
    assert main(["setup", "--no-image"]) == 0
    assert "guest image" not in capsys.readouterr().out


def test_setup_where_apt_get_cannot_run_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    def install(wanted: list[str], **kw) -> list[str]:
        raise doctor.packages.InstallError(
            "no apt-get here: powercut setup installs Debian/Ubuntu packages; ..."
        )

    monkeypatch.setattr(doctor.packages, "install", install)
    assert main(["setup"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("powercut: error: no apt-get here") and "Traceback" not in err

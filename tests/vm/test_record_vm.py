"""Recording in real VMs (TCG here, KVM where it works): ext4, xfs, btrfs, both backends, and the bad
inputs a user meets.  Each recording boots one VM."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.core.log.dmlog import open_log
from powercut.core.states.models import CrashSpace
from powercut.errors import GuestPanic, ImageError, LogDeviceFull, UsageError, WorkloadFailed
from powercut.record.recording import load_recording
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm
N = 6


def assert_log_shape(rec_dir: Path, n: int) -> None:
    """mkfs mark, then begin:i .. FLUSH/FUA .. ack:i for every i in order, then the end mark."""
    with open_log(load_recording(rec_dir).log_path, strict=True) as index:
        entries = index.entries
        marks = [(e.index, e.mark) for e in entries if e.is_mark]
        texts = [m for _, m in marks]
        assert texts[0] == "mkfs"
        assert texts[-1] == "dm-log-writes-end"
        assert [m for m in texts if m.startswith("ack:")] == [f"ack:{i}" for i in range(n)]
        pos = {m: i for i, m in marks}
        for i in range(n):
            b, a = pos[f"begin:{i}"], pos[f"ack:{i}"]
            assert b < a
            between = entries[b + 1 : a]
            assert any(e.is_write for e in between), f"commit {i}: no data write before its ack"
            assert any(e.is_flush or e.is_fua for e in between), (
                f"commit {i}: no FLUSH/FUA before its ack"
            )
        assert index.clean


def _spec(fs: str, backend: str = "qemu", **kw) -> RecordSpec:
    size = 300 if fs == "xfs" else 256
    return RecordSpec(
        fs=FsSpec(fstype=fs, size_mb=size),
        workload=kw.pop("workload", WorkloadSpec(name="append-fsync", params={"n": N})),
        backend=backend,
        timeout_s=kw.pop("timeout_s", 600),
        **kw,
    )


@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
def test_record_qemu(fs: str, tmp_path: Path) -> None:
    rec = record(_spec(fs), tmp_path / "rec")
    assert rec.ok
    assert rec.manifest["result"]["workload_rc"] == 0
    assert rec.manifest["recording"]["boot_to_workload_s"] > 0
    assert_log_shape(rec.dir, N)
    assert rec.manifest["marks"]["ordered"] and rec.manifest["marks"]["ordered_key_marks"] == 2 * N
    # the data disk holds a filesystem of the requested type
    blkid = subprocess.run(
        ["blkid", "-p", "-o", "value", "-s", "TYPE", str(rec.final_image)],
        capture_output=True,
        text=True,
    )
    assert blkid.stdout.strip() == fs


@pytest.mark.libvirt
@pytest.mark.parametrize("fs", ["ext4", "xfs", "btrfs"])
def test_record_libvirt(fs: str, tmp_path: Path, libvirtd: None) -> None:
    rec = record(_spec(fs, backend="libvirt"), tmp_path / "rec")
    assert rec.ok and rec.manifest["recording"]["backend"] == "libvirt"
    assert_log_shape(rec.dir, N)


def test_cmd_workload_with_powercut_mark(tmp_path: Path) -> None:
    """Any command can record; other languages ack through the powercut-mark tool."""
    cmd = "for i in 1 2 3; do echo $i >> f; sync f; powercut-mark ack:$i; done"
    rec = record(_spec("ext4", workload=WorkloadSpec(cmd=cmd)), tmp_path / "rec")
    with open_log(rec.log_path) as index:
        assert [k for _, k in index.acks()] == ["1", "2", "3"]


DIRECT = """
import mmap, os, subprocess, powercut
fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, bytes(4 * 4096), 0)
os.fsync(fd)
dfd = os.open("f", os.O_WRONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
for i in range(4):
    buf[:] = bytes([65 + i]) * 4096
    os.pwrite(dfd, buf, i * 4096)
    if i % 2:
        subprocess.run(["powercut-mark", f"ack:{i}"], check=True)
    else:
        powercut.ack(i)
"""


def test_marks_are_ordered_after_completed_direct_writes(tmp_path: Path) -> None:
    """O_DIRECT overwrites acked without any flush from the program: in the log each ack follows
    the write that completed before it (the C tool and the Python API alike), the manifest says
    the marks are ordered, and the harness's flushes are no barrier (write-cache still loses them)."""
    rec = record(
        _spec("ext4", workload=WorkloadSpec(cmd=f"python3 -c {shlex.quote(DIRECT)}")),
        tmp_path / "rec",
    )
    assert rec.manifest["marks"] == {
        "key_marks": 4,
        "ordered_key_marks": 4,
        "ordering_flushes": 4,
        "ambiguous_windows": 0,
        "ordered": True,
    }
    with open_log(rec.log_path, strict=True) as index:
        sp = CrashSpace(index)
        for i in range(4):
            ack = index.find_mark(f"ack:{i}")
            data = [
                e
                for e in index.entries[:ack]
                if e.is_write and bytes(index.data(e))[:4096] == bytes([65 + i]) * 4096
            ]
            assert data, f"ack:{i} precedes its O_DIRECT write in the log"
        lost = [s for s in sp.states("write-cache") if "3" in s.acks and s.dropped]
        assert lost, "write-cache must still be able to lose the acked O_DIRECT writes"


def test_workload_exit_status_is_an_error_and_recording_is_kept(tmp_path: Path) -> None:
    with pytest.raises(WorkloadFailed, match="exited 3"):
        record(
            _spec("ext4", workload=WorkloadSpec(cmd="echo broken >&2; exit 3")), tmp_path / "rec"
        )
    m = load_recording(tmp_path / "rec").manifest
    assert m["recording"]["status"] == "workload-failed"
    assert (tmp_path / "rec" / "console.log").stat().st_size > 0
    assert "broken" in (tmp_path / "rec" / "job" / "workload.err").read_text()


def test_hanging_workload_is_killed(tmp_path: Path) -> None:
    with pytest.raises(WorkloadFailed, match="did not finish within 3 s"):
        record(
            _spec("ext4", workload=WorkloadSpec(cmd="sleep 1000", timeout_s=3)), tmp_path / "rec"
        )
    assert load_recording(tmp_path / "rec").manifest["recording"]["status"] == "workload-timeout"


def test_guest_panic_is_reported_with_console(tmp_path: Path) -> None:
    with pytest.raises(GuestPanic) as info:
        record(
            _spec("ext4", workload=WorkloadSpec(cmd="echo c > /proc/sysrq-trigger; sleep 60")),
            tmp_path / "rec",
        )
    assert "sysrq" in info.value.console_tail.lower() or "panic" in info.value.console_tail.lower()
    assert load_recording(tmp_path / "rec").manifest["recording"]["status"] == "kernel-panic"


def test_log_disk_too_small_is_an_error(tmp_path: Path) -> None:
    spec = _spec(
        "ext4", log_size_mb=2, workload=WorkloadSpec(cmd="head -c 8000000 /dev/urandom > f; sync")
    )
    with pytest.raises(LogDeviceFull, match="log device filled up"):
        record(spec, tmp_path / "rec")
    assert load_recording(tmp_path / "rec").manifest["recording"]["status"] == "log-full"


def test_vm_hang_is_a_timeout(tmp_path: Path) -> None:
    from powercut.errors import GuestHang

    # the workload's own timeout is longer than the VM's: the VM timeout fires
    spec = _spec("ext4", timeout_s=15, workload=WorkloadSpec(cmd="sleep 1000", timeout_s=900))
    with pytest.raises(GuestHang):
        record(spec, tmp_path / "rec")
    assert load_recording(tmp_path / "rec").manifest["recording"]["status"] == "timeout"


def test_kernel_without_dm_log_writes(tmp_path: Path) -> None:
    """A user kernel whose modules lack dm-log-writes: an error that names the module."""
    from powercut.images.build import ImageSpec, build_image

    image = build_image()
    src = Path(image.dir).parent.parent / "kernels"
    pkg = next(p for p in sorted(src.iterdir()) if (p / ".complete").exists())
    moddir = next((pkg / "lib" / "modules").iterdir())
    mods = tmp_path / moddir.name
    mods.mkdir()
    (mods / "kernel").symlink_to(moddir / "kernel")
    (mods / "modules.builtin").write_text((moddir / "modules.builtin").read_text())
    (mods / "modules.dep").write_text(
        "".join(
            line + "\n"
            for line in (moddir / "modules.dep").read_text().splitlines()
            if "dm-log-writes" not in line
        )
    )
    with pytest.raises(ImageError, match="dm-log-writes"):
        build_image(ImageSpec(kernel=image.kernel, modules_dir=str(mods)))


def test_qemu_missing_is_one_clear_line(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(tmp_path))  # no qemu-system-x86_64 on PATH
    (tmp_path / "python3").symlink_to(sys.executable)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "record",
            "--workload",
            "append-fsync",
            "--accel",
            "tcg",
            "-o",
            str(tmp_path / "rec"),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    errors = [line for line in out.stderr.splitlines() if line.startswith("powercut: error:")]
    assert errors == [
        "powercut: error: qemu-system-x86_64 not found (install the Debian package "
        "qemu-system-x86: powercut setup)"
    ], out.stderr
    assert not (tmp_path / "rec").exists()
    assert "Traceback" not in out.stderr


def test_unknown_filesystem_is_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown filesystem 'zfs'"):
        FsSpec(fstype="zfs")


def test_dry_run_prints_qemu_argv(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "record",
            "--workload",
            "append-fsync",
            "--accel",
            "tcg",
            "--dry-run",
            "-o",
            str(tmp_path / "rec"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    argv = out.stdout.strip()
    assert argv.startswith(shutil.which("qemu-system-x86_64") or "qemu-system-x86_64")
    assert (
        "-accel tcg" in argv and "serial=pcdata0,write-cache=on" in argv and "cache=unsafe" in argv
    )
    assert not (tmp_path / "rec").exists()

"""benchhost.py with fakes (no real disk here): which tool sets which disk's write cache and its
exact argv, the read-back refusal, the restore of the original setting (after success, an error
and an interrupt), and the refusal of a mounted or held device for raw tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from powercut.bench import host as benchhost
from powercut.bench.host import CacheTool, HostTarget, cache_tool, check_unused, write_cache_set
from powercut.errors import EnvironmentNotReady, Interrupted, UsageError
from powercut.linux import process


def fake_sysfs(
    root: Path,
    name: str,
    majmin: str,
    *,
    vendor: str | None = None,
    parts: dict[str, str] | None = None,
    holders: tuple[str, ...] = (),
    cache: str = "write back",
) -> Path:
    """/sys/block/NAME (+ partitions), /sys/dev/block/M:m links, /sys/class/block/X/holders."""
    disk = root / "devices" / "x" / "block" / name
    (disk / "queue").mkdir(parents=True)
    (disk / "queue" / "write_cache").write_text(cache + "\n")
    (disk / "dev").write_text(majmin + "\n")
    if vendor is not None:
        (disk / "device").mkdir()
        (disk / "device" / "vendor").write_text(vendor + "\n")
    for d in ("dev/block", "block", "class/block"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "dev" / "block" / majmin).symlink_to(disk)
    (root / "block" / name).symlink_to(disk)
    (root / "class" / "block" / name).symlink_to(disk)
    (disk / "holders").mkdir()
    for h in holders:
        (disk / "holders" / h).mkdir()
    for part, mm in (parts or {}).items():
        (disk / part).mkdir()
        (disk / part / "partition").write_text("1\n")
        (disk / part / "dev").write_text(mm + "\n")
        (disk / part / "holders").mkdir()
        (root / "dev" / "block" / mm).symlink_to(disk / part)
        (root / "class" / "block" / part).symlink_to(disk / part)
    return disk


@pytest.mark.parametrize(
    "name,vendor,tool,device",
    [
        ("sda", "ATA", "hdparm", "/dev/sda"),
        ("sdb", "SEAGATE", "sdparm", "/dev/sdb"),
        ("nvme0n1", None, "nvme", "/dev/nvme0"),
    ],
)
def test_the_tool_that_fits_the_transport(
    tmp_path: Path, name: str, vendor: str | None, tool: str, device: str
) -> None:
    fake_sysfs(tmp_path, name, "8:0", vendor=vendor, parts={f"{name}1": "8:1"})
    target = HostTarget(
        "/mnt/x", False, f"/dev/{name}", benchhost._disk_of("8:1", tmp_path)[1], "8:1"
    )
    assert benchhost._disk_of("8:1", tmp_path)[0] == name  # a partition resolves to its disk
    t = cache_tool(target)
    assert (t.name, t.device) == (tool, device)


def test_exact_argv_per_tool() -> None:
    h, s, n = (
        CacheTool("hdparm", "hdparm", "/dev/sda"),
        CacheTool("sdparm", "sdparm", "/dev/sdb"),
        CacheTool("nvme", "nvme-cli", "/dev/nvme0"),
    )
    assert (h.set_argv(True), h.set_argv(False), h.get_argv()) == (
        ["hdparm", "-W1", "/dev/sda"],
        ["hdparm", "-W0", "/dev/sda"],
        ["hdparm", "-W", "/dev/sda"],
    )
    assert (s.set_argv(True), s.set_argv(False), s.get_argv()) == (
        ["sdparm", "--set", "WCE", "/dev/sdb"],
        ["sdparm", "--clear", "WCE", "/dev/sdb"],
        ["sdparm", "--get", "WCE", "/dev/sdb"],
    )
    assert (n.set_argv(True), n.set_argv(False), n.get_argv()) == (
        ["nvme", "set-feature", "/dev/nvme0", "-f", "6", "-v", "1"],
        ["nvme", "set-feature", "/dev/nvme0", "-f", "6", "-v", "0"],
        ["nvme", "get-feature", "/dev/nvme0", "-f", "6"],
    )
    assert (
        s.parse(
            "    /dev/sdb: SEAGATE   ST1000   0001\nWCE           1  [cha: y, def:  1, sav:  1]\n"
        )
        is True
    )
    assert s.parse("WCE           0  [cha: y, def:  1, sav:  0]\n") is False
    assert n.parse("get-feature:0x06 (Volatile Write Cache), Current value:0x00000001\n") is True
    assert n.parse("get-feature:0x6 (Volatile Write Cache), Current value:00000000\n") is False
    with pytest.raises(EnvironmentNotReady, match="no write cache setting"):
        n.parse("NVMe status: INVALID_FIELD\n")


@pytest.mark.parametrize(
    "target,match",
    [
        (HostTarget("/mnt", False, "", "other"), "no block device"),
        (HostTarget("/mnt", False, "/dev/dm-0", "stacked"), "device-mapper/md"),
        (HostTarget("/mnt", False, "/dev/vda", "virtio"), "virtio disk"),
    ],
)
def test_no_tool_is_a_one_line_refusal(target: HostTarget, match: str) -> None:
    with pytest.raises(UsageError, match=match) as info:
        cache_tool(target)
    assert "\n" not in str(info.value)


class FakeDrive:
    """hdparm against a drive whose cache starts ``on``; ``stuck``: -W is ignored."""

    def __init__(self, sysfs: Path, on: bool = True, stuck: bool = False) -> None:
        self.on, self.stuck, self.calls, self.sysfs = on, stuck, [], sysfs

    def __call__(self, argv, *, timeout: float, **kw) -> process.Result:
        self.calls.append(list(argv))
        if argv[1] in ("-W0", "-W1") and not self.stuck:
            self.on = argv[1] == "-W1"
            (self.sysfs / "block" / "sda" / "queue" / "write_cache").write_text(
                "write back\n" if self.on else "write through\n"
            )
        out = f"\n/dev/sda:\n write-caching =  {int(self.on)} ({'on' if self.on else 'off'})\n"
        return process.Result(tuple(argv), 0, out, "")


@pytest.fixture
def ata(tmp_path: Path) -> tuple[HostTarget, CacheTool, Path]:
    fake_sysfs(tmp_path, "sda", "8:0", vendor="ATA")
    target = HostTarget("/mnt/x", False, "/dev/sda", "ata", "8:0")
    return target, cache_tool(target), tmp_path


def test_set_verify_and_restore(ata) -> None:
    target, tool, sysfs = ata
    drive = FakeDrive(sysfs, on=True)
    with write_cache_set(tool, target, False, run=drive, sysfs=sysfs) as seen:
        assert seen is False and drive.on is False
        assert benchhost.read_cache(tool, target, False, run=drive, sysfs=sysfs) is False
    assert drive.on is True  # the original setting is back
    assert drive.calls[0] == ["hdparm", "-W", "/dev/sda"] and drive.calls[1] == [
        "hdparm",
        "-W0",
        "/dev/sda",
    ]
    assert drive.calls[-1] == ["hdparm", "-W1", "/dev/sda"]


@pytest.mark.parametrize("exc", [RuntimeError("fio died"), Interrupted(2)])
def test_restore_after_an_error_or_an_interrupt(ata, exc: BaseException) -> None:
    target, tool, sysfs = ata
    drive = FakeDrive(sysfs, on=False)
    with pytest.raises(type(exc)):
        with write_cache_set(tool, target, True, run=drive, sysfs=sysfs):
            assert drive.on is True
            raise exc
    assert drive.on is False and drive.calls[-1] == ["hdparm", "-W0", "/dev/sda"]


def test_a_setting_that_does_not_take_is_refused_and_still_restored(ata) -> None:
    target, tool, sysfs = ata
    drive = FakeDrive(sysfs, on=True, stuck=True)
    with pytest.raises(
        EnvironmentNotReady, match="asked for the write cache off, hdparm says on; refusing"
    ):
        with write_cache_set(tool, target, False, run=drive, sysfs=sysfs):
            pytest.fail("timed with the wrong setting")
    assert drive.calls[-1] == ["hdparm", "-W1", "/dev/sda"]


def test_restore_blocks_signals_while_it_runs(ata) -> None:
    import signal

    target, tool, sysfs = ata
    masks = []

    def run(argv, *, timeout, **kw):
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, set()))
        return FakeDrive(sysfs)(argv, timeout=timeout)

    with write_cache_set(tool, target, True, run=run, sysfs=sysfs):
        pass
    assert (
        signal.SIGINT not in masks[0]
        and {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= masks[-1]
    )
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_raw_device_in_use_is_refused(tmp_path: Path) -> None:
    fake_sysfs(tmp_path, "sdb", "8:16", vendor="ATA", parts={"sdb1": "8:17", "sdb2": "8:18"})
    target = HostTarget("/dev/sdb", True, "/dev/sdb", "ata", "8:16")
    free = "22 1 0:21 / /proc rw - proc proc rw\n"
    check_unused(target, sysfs=tmp_path, mountinfo_text=free, swaps_text="Filename Type\n")
    with pytest.raises(UsageError, match="mounted on /srv"):
        check_unused(
            target,
            sysfs=tmp_path,
            mountinfo_text=free + "40 1 8:18 / /srv rw - ext4 /dev/sdb2 rw\n",
            swaps_text="",
        )
    with pytest.raises(UsageError, match="swap"):
        check_unused(
            target,
            sysfs=tmp_path,
            mountinfo_text=free,
            swaps_text="Filename Type Size Used Priority\n/dev/sdb1 partition 1 0 -2\n",
        )
    (tmp_path / "class" / "block" / "sdb1" / "holders" / "dm-3").mkdir()
    with pytest.raises(UsageError, match="held by dm-3"):
        check_unused(target, sysfs=tmp_path, mountinfo_text=free, swaps_text="")


def test_resolve_target(tmp_path: Path) -> None:
    t = benchhost.resolve_target(str(tmp_path))
    assert not t.raw and t.path == str(tmp_path)
    with pytest.raises(UsageError, match="neither a directory nor a block device"):
        benchhost.resolve_target(os.devnull)
    with pytest.raises(UsageError, match="No such file"):
        benchhost.resolve_target(str(tmp_path / "nope"))


def test_host_mode_without_toggle_times_the_directory_as_is(tmp_path: Path) -> None:
    """A real (tiny) host run in a temporary directory: fio and a timed workload, cache left alone."""
    import shutil

    if shutil.which("fio") is None:
        pytest.skip("fio is not installed (Debian package fio)")
    from powercut.bench.plan import plan

    sets = plan(
        (),
        quick=True,
        profiles=("fsync-4k",),
        workload="append-fsync",
        params={"n": 4},
        caches=(True,),
    )
    entries, checks = benchhost.run_on_host(
        sets, benchhost.resolve_target(str(tmp_path)), tmp_path / "run", toggle=False
    )
    assert [(e.name, e.write_cache, e.error) for e in entries] == [
        ("fsync-4k", None, ""),
        ("append-fsync n=4", None, ""),
    ]
    assert entries[1].commits_per_s > 0 and entries[1].p50_us > 0 and checks == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "run"
    ]  # fio unlinked its file, the workload dir is gone

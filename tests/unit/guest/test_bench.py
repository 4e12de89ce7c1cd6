"""benchguest.py without a VM: hdparm -W then the read-back before every run, the refusal when the
drive or the kernel disagrees, one item's failure reported (not raised), and real tiny fio /
workload / pg_test_fsync runs in a temporary directory through the same runners the guest uses."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest

from powercut.bench.items import PG_GLOB, ItemTarget, run_item
from powercut.config import BenchItem
from powercut.errors import EnvironmentNotReady
from powercut.guest import bench as benchguest
from powercut.linux import process


class Drive:
    """A fake hdparm for /dev/sda; ``kernel_follows``: does queue/write_cache follow -W at once."""

    def __init__(
        self, sysblock: Path, on: bool = True, kernel_follows: bool = True, takes: bool = True
    ) -> None:
        self.sysblock, self.on, self.follows, self.takes, self.calls = (
            sysblock,
            on,
            kernel_follows,
            takes,
            [],
        )
        (sysblock / "sda" / "queue").mkdir(parents=True)
        (sysblock / "sda" / "device").mkdir()
        self._kernel(on)

    def _kernel(self, on: bool) -> None:
        (self.sysblock / "sda" / "queue" / "write_cache").write_text(
            "write back\n" if on else "write through\n"
        )

    def run(self, argv, *, timeout, **kw) -> process.Result:
        self.calls.append(list(argv[1:]))
        if argv[1] in ("-W0", "-W1") and self.takes:
            self.on = argv[1] == "-W1"
            if self.follows:
                self._kernel(self.on)
        state = "on" if self.on else "off"
        return process.Result(
            tuple(argv), 0, f"\n/dev/sda:\n write-caching =  {int(self.on)} ({state})\n", ""
        )


@pytest.fixture
def drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def make(**kw) -> Drive:
        d = Drive(tmp_path, **kw)
        monkeypatch.setattr(benchguest, "SYS_BLOCK", tmp_path)
        monkeypatch.setattr(benchguest, "hdparm", lambda: "hdparm")
        monkeypatch.setattr(benchguest.process, "run", d.run)
        return d

    return make


def test_set_then_read_back(drive) -> None:
    d = drive(on=True)
    check = benchguest.set_write_cache("/dev/sda", False)
    assert (check.wanted, check.hdparm, check.sysfs) == (False, False, False)
    assert d.calls == [["-W0", "/dev/sda"], ["-W", "/dev/sda"]]


def test_a_lagging_kernel_view_is_rescanned(drive, tmp_path: Path) -> None:
    d = drive(on=True, kernel_follows=False)
    rescan = tmp_path / "sda" / "device" / "rescan"
    rescan.write_text("")
    with pytest.raises(EnvironmentNotReady, match="the block queue's write_cache says on"):
        benchguest.set_write_cache("/dev/sda", False)  # the (fake) rescan changes nothing: refused
    assert rescan.read_text() == "1\n" and d.calls.count(["-W", "/dev/sda"]) == 2


def test_a_drive_that_ignores_the_setting_is_refused(drive) -> None:
    drive(on=True, takes=False)
    with pytest.raises(
        EnvironmentNotReady, match="asked for the write cache off, hdparm says on; refusing to time"
    ):
        benchguest.set_write_cache("/dev/sda", False)


def test_a_failing_item_is_reported_not_raised(tmp_path: Path) -> None:
    item = BenchItem("workload", "append-fsync", "workload", params={"n": 2})
    got = run_item(
        item, ItemTarget(str(tmp_path), dict(os.environ), raw_device="/dev/sdz"), tmp_path / "x"
    )
    assert got == {
        "ok": False,
        "error": "workload append-fsync needs a filesystem, not the raw device /dev/sdz",
    }


needs_fio = pytest.mark.skipif(
    shutil.which("fio") is None, reason="fio is not installed (Debian package fio)"
)


@needs_fio
def test_real_items_through_the_guest_runners(tmp_path: Path) -> None:
    where = ItemTarget(str(tmp_path / "fs"), dict(os.environ), tmp=str(tmp_path))
    (tmp_path / "fs").mkdir()
    fio = run_item(BenchItem("fio", "fdatasync-4k", size_bytes=8 * 4096), where, tmp_path / "f")
    assert fio["ok"] and fio["result"]["ops"] == 8 and (tmp_path / "f.json").stat().st_size > 0
    wl = run_item(
        BenchItem("workload", "filestorage", params={"n": 5, "fsync": 1}), where, tmp_path / "w"
    )
    assert wl["ok"] and wl["result"]["commits"] == 5 and wl["result"]["p50_us"] > 0
    assert len((tmp_path / "w.timing").read_text().splitlines()) == 10  # begin + ack per commit
    assert os.listdir(tmp_path / "fs") == []  # nothing left behind


@pytest.mark.parametrize("fork", [True, False])
def test_a_timed_workload_forked_or_spawned(tmp_path: Path, fork: bool) -> None:
    """The guest forks each timed run from its agent (no new interpreter); a run reads its params and
    timing file from its own environment, so two runs in a row give their own results."""
    where = ItemTarget(str(tmp_path / "fs"), dict(os.environ), tmp=str(tmp_path), fork=fork)
    (tmp_path / "fs").mkdir()
    for n in (3, 6):
        wl = run_item(
            BenchItem("workload", "filestorage", params={"n": n, "fsync": 1}),
            where,
            tmp_path / f"w{n}",
        )
        assert wl["ok"] and wl["result"]["commits"] == n
    bad = run_item(BenchItem("workload", "filestorage", params={"n": -1}), where, tmp_path / "bad")
    assert (
        not bad["ok"]
        and "exited" in bad["error"]
        and "parameter n" in (tmp_path / "bad.err").read_text()
    )
    assert os.listdir(tmp_path / "fs") == []


@pytest.mark.skipif(
    not glob.glob(PG_GLOB), reason="pg_test_fsync not installed (Debian package postgresql)"
)
def test_real_pg_test_fsync_run(tmp_path: Path) -> None:
    got = run_item(
        BenchItem("pg_test_fsync", "pg_test_fsync", runtime_s=1, timeout_s=120),
        ItemTarget(str(tmp_path), dict(os.environ)),
        tmp_path / "pg",
    )
    assert got["ok"] and set(got["result"]["ops_per_s"]) >= {
        "open_datasync",
        "fdatasync",
        "fsync",
        "open_sync",
    }

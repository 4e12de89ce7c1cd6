"""benchspec.py and benchrun.py's pure parts: what each suite runs, the sizes --quick keeps small,
the bench job's JSON round trip, and the VM a bench boots (AHCI, a flushing QEMU cache mode)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from powercut.bench import parse as bench
from powercut.bench import plan as benchspec
from powercut.bench.plan import plan
from powercut.bench.profiles import by_name, profiles
from powercut.bench.run import BenchRequest, BenchVmSpec, estimate_timeout, plan_request, vm_spec
from powercut.config import BenchItem, FsSpec, RunSet
from powercut.errors import UsageError
from powercut.vm import guestjob
from powercut.vm.qemu import build_argv


def labels(rs: RunSet) -> list[str]:
    return [i.label for i in rs.items]


def test_default_suite_is_the_guarantee_profiles_cache_on_then_off() -> None:
    sets = plan(("guarantees",), quick=True)
    assert [(rs.write_cache, rs.target, rs.mount_opts) for rs in sets] == [
        (True, "disk", ""),
        (False, "disk", ""),
    ]
    assert labels(sets[0]) == labels(sets[1]) == [p.name for p in profiles(quick=True)]
    assert len(plan(("guarantees",))[0].items) == len(profiles())


def test_quick_sizes_are_small_and_every_sync_profile_reaches_a_sync() -> None:
    for quick, most in ((True, 256 << 10), (False, 16 << 20)):
        for rs in plan(("guarantees", "commit"), quick=quick):
            for item in rs.items:
                p = by_name(item.name)
                writes = item.size_bytes // p.block_size
                assert item.size_bytes % p.block_size == 0 and writes > p.sync_every
                assert item.size_bytes <= max(most, (2 * p.sync_every + 1) * p.block_size)
                assert item.runtime_s == (5 if quick else 20)


def test_tlpi_suite_scales_small_buffers_and_says_so() -> None:
    items = plan(("tlpi",), quick=False)[0].items
    assert [i.name for i in items] == [
        "buffered-1b",
        "buffered-16b",
        "buffered-256b",
        "buffered-4k",
        "osync-1b",
        "osync-16b",
        "osync-256b",
        "osync-4k",
    ]
    one = items[4]
    assert (one.size_bytes, one.scale_to) == (
        bench.TLPI_MAX_WRITES,
        1_000_000,
    ) and "scaled x100" in one.note
    assert items[7].size_bytes == 244 * 4096 and "whole writes" in items[7].note
    assert plan(("tlpi",), quick=True)[0].items[0].size_bytes == 100


def test_tlpi_times_buffered_writes_once_and_o_sync_with_each_cache_setting() -> None:
    def names(sets):  # type: ignore[no-untyped-def]
        return {rs.write_cache: [i.name.split("-")[0] for i in rs.items] for rs in sets}

    assert names(plan(("tlpi",))) == {True: ["buffered"] * 4 + ["osync"] * 4, False: ["osync"] * 4}
    assert names(plan(("tlpi",), caches=(False,))) == {False: ["buffered"] * 4 + ["osync"] * 4}
    assert names(plan(("tlpi",), caches=(False, True))) == {
        True: ["buffered"] * 4 + ["osync"] * 4,
        False: ["osync"] * 4,
    }


def test_seed_suites() -> None:
    zodb = plan(("zodb-fsync",), quick=True)
    assert [(i.kind, i.name, i.params) for i in zodb[0].items] == [
        ("workload", "filestorage", {"n": 16, "fsync": f}) for f in (0, 1, 2)
    ]
    assert labels(zodb[0]) == ["filestorage fsync=0", "filestorage fsync=1", "filestorage fsync=2"]
    assert labels(plan(("commit",), quick=True)[0]) == ["fsync-2k", "group-commit-8-2k"]
    assert len(plan(("commit",))[0].items) == 7
    pg = plan(("pg",))[0].items  # interleaved: pg_test_fsync, ours, three times
    assert [i.kind for i in pg] == (["pg_test_fsync"] + ["fio"] * 4) * 3
    assert [i.name for i in pg[1:5]] == [
        "pg-open_datasync-8k",
        "pg-fdatasync-8k",
        "pg-fsync-8k",
        "pg-open_sync-8k",
    ]
    assert {i.runtime_s for i in pg} == {3} and len(plan(("pg",), quick=True)[0].items) == 5


def test_flush_cost_adds_a_nobarrier_set_on_ext4_only() -> None:
    sets = plan(("flush-cost",))
    assert [rs.label for rs in sets] == ["cache on", "cache off", "cache on, nobarrier"]
    assert [rs.label for rs in plan(("flush-cost",), fstype="xfs")] == ["cache on", "cache off"]


def test_overhead_alternates_bare_and_log_writes_each_on_a_fresh_filesystem() -> None:
    sets = plan(("overhead",))
    assert [rs.label for rs in sets] == ["cache on", "cache on, log-writes"] * 3
    assert [rs.group for rs in sets] == [
        "overhead-1",
        "overhead-1",
        "overhead-2",
        "overhead-2",
        "overhead-3",
        "overhead-3",
    ]
    assert labels(sets[0]) == labels(sets[1]) == ["fsync-4k", "odirect-4k"]
    assert len(plan(("overhead",), quick=True)) == 2
    assert (
        len(plan(("guarantees", "overhead"), quick=True)) == 4
    )  # never merged into the other sets
    assert benchspec.needs_log_disk(sets) and not benchspec.needs_log_disk(plan(("guarantees",)))


def test_suites_merge_into_one_run_set_per_setting() -> None:
    sets = plan(
        ("guarantees", "zodb-fsync"),
        quick=True,
        profiles=("pg-fsync-8k",),
        workload="append-fsync",
        params={"n": 5},
    )
    assert len(sets) == 2 and benchspec.count_items(sets) == 2 * (9 + 3 + 1 + 1)
    assert labels(sets[0])[-1] == "append-fsync n=5"


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"suites": ("nope",)}, "unknown bench suite"),
        ({"suites": ()}, "nothing to run"),
        ({"suites": ("guarantees",), "caches": ()}, "no write cache"),
        ({"suites": (), "profiles": ("fsync-3k",)}, "unknown fio profile"),
    ],
)
def test_plan_rejects(kw, match) -> None:
    with pytest.raises(UsageError, match=match):
        plan(kw.pop("suites"), **kw)


def test_request_checks_the_workload_and_its_params() -> None:
    with pytest.raises(UsageError, match="unknown parameter"):
        plan_request(BenchRequest(suites=(), workload="filestorage", params={"nope": "1"}))
    with pytest.raises(UsageError, match="--param goes with --workload"):
        plan_request(BenchRequest(params={"n": "1"}))
    sets = plan_request(BenchRequest(suites=(), workload="filestorage", params={"fsync": "2"}))
    assert sets[0].items[0].params == {"fsync": 2}  # typed by the workload
    assert len(plan_request(BenchRequest(on_host="/tmp"))) == 1  # host, no toggle: as is


def test_bench_job_round_trips_through_json() -> None:
    job = guestjob.BenchJob(
        disks={"data": "pcbench", "log": "pcbenchlog"},
        fs=FsSpec(),
        runsets=plan(("overhead", "zodb-fsync", "pg"), quick=True),
        tools_dir="/t",
    )
    back = guestjob.from_json(json.loads(json.dumps(guestjob.to_json(job))))
    assert back == job and isinstance(back.runsets[0].items[0], BenchItem)
    with pytest.raises(UsageError, match="bench target"):
        RunSet(True, (), target="nfs")
    with pytest.raises(UsageError, match="item kind"):
        BenchItem("dd", "x")


def test_the_vm_uses_ahci_and_a_flushing_cache_mode(tmp_path: Path) -> None:
    spec = BenchVmSpec(qemu_cache="writeback")
    image = SimpleNamespace(kernel="/k", initrd="/i")
    (tmp_path / "job").mkdir()
    vs = vm_spec(
        spec,
        image,
        tmp_path,
        [(tmp_path / "d.img", "pcbench"), (tmp_path / "l.img", "pcbenchlog")],
        300,
    )
    assert vs.resolved_machine() == "q35" and "ahci" in vs.module_groups()
    argv = " ".join(build_argv(vs, "tcg", qemu="qemu"))
    assert "ide-hd,drive=disk0,bus=ahci0.0,serial=pcbench,write-cache=on" in argv
    assert f"file={tmp_path}/d.img,format=raw,if=none,id=disk0,cache=writeback" in argv
    assert "cache=unsafe" not in argv
    with pytest.raises(UsageError, match="drops the guest's flushes"):
        BenchVmSpec(qemu_cache="unsafe")
    with pytest.raises(UsageError, match="must be one of"):
        BenchVmSpec(qemu_cache="bogus")


def test_timeout_estimate_grows_with_the_work() -> None:
    quick, full = plan(("guarantees",), quick=True), plan(("guarantees", "pg"))
    assert 300 < estimate_timeout(quick) < estimate_timeout(full)


def test_the_backing_names_the_host_file_and_its_device(tmp_path: Path) -> None:
    from powercut.bench.run import block_device_of, describe_backing

    img = tmp_path / "d.img"
    img.write_bytes(b"")
    dev, fstype = block_device_of(img)
    assert dev.startswith(("/dev/", "device ", "tmpfs"))
    text = describe_backing(img)
    assert text.startswith(f"{img} on {dev}") and (not fstype or f"({fstype})" in text)

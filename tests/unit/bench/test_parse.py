"""bench.py and fioprofiles.py: the fio job files parse, the catalogue, fio JSON parsing against
recorded fio-3.33 outputs (bench/fixtures/fio-*.json), the write-cache read-back and its refusal,
the TLPI scaling rule, and one real tiny fio run."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from powercut.bench import parse as bench
from powercut.bench import profiles as fioprofiles
from powercut.bench.parse import (
    parse_fio_json,
    parse_hdparm_write_cache,
    parse_sysfs_write_cache,
    tlpi_scale,
)
from powercut.bench.profiles import by_name, fio_command, group_commit, profiles
from powercut.errors import EnvironmentNotReady, UsageError, WorkloadFailed
from powercut.linux import process

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "bench" / "fixtures"
FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed (Debian package fio)")
JOB_FILES = sorted((ROOT / "workloads" / "fio").glob("*.fio"))


def fixture(name: str) -> str:
    return (FIXTURES / f"fio-{name}.json").read_text()


def fixture_doc(name: str) -> dict:
    return json.loads(fixture(name))


# --- job files -----------------------------------------------------------------------------------


def job_vars(path: Path) -> set[str]:
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith((";", "#"))]
    return set(re.findall(r"\$\{(\w+)\}", "\n".join(lines)))


PARSE_VARS = {
    "PC_DIR": "/tmp",
    "PC_BS": "4096",
    "PC_SIZE": "65536",
    "PC_RUNTIME": "0",
    "PC_SYNC_EVERY": "8",
    "PC_FILE": "t.dat",
    "PC_UNLINK": "1",
    "PC_DIRECT": "0",
    "PC_SYNC": "none",
    "PC_FSYNC": "0",
    "PC_FDATASYNC": "1",
}


@needs_fio
@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.name)
def test_job_file_parses_and_needs_its_variables(path: Path) -> None:
    ok = process.run(
        [FIO, "--parse-only", str(path)], timeout=20, check=False, env={**os.environ, **PARSE_VARS}
    )
    assert ok.returncode == 0, ok.stderr
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PC_")}
    bad = process.run([FIO, "--parse-only", str(path)], timeout=20, check=False, env=bare)
    assert bad.returncode != 0, "parses without its ${VAR}s set: the substitution is not used"


def test_job_files_share_the_common_options() -> None:
    assert len(JOB_FILES) == 9
    for path in JOB_FILES:
        text = path.read_text()
        rewrite = (
            path.name == "rewrite.fio"
        )  # one block rewritten in place: the region is one block
        shape = (
            ("rw=randwrite", "norandommap=1", "size=${PC_BS}", "io_size=${PC_SIZE}", "overwrite=1")
            if rewrite
            else ("rw=write", "size=${PC_SIZE}")
        )
        for line in (
            "ioengine=psync",
            "numjobs=1",
            "iodepth=1",
            "bs=${PC_BS}",
            "directory=${PC_DIR}",
            "filename=${PC_FILE}",
            "unlink=${PC_UNLINK}",
            "runtime=${PC_RUNTIME}",
            "fallocate=none",
            "end_fsync=0",
        ) + shape:
            assert f"\n{line}\n" in text, f"{path.name} lacks {line}"
        assert "time_based" not in text.split("[global]")[1]
        assert "percentile_list=" in text and all(f"{p:g}" in text for p in bench.PERCENTILES)


@pytest.mark.parametrize(
    "name,option",
    [
        ("fsync", "fsync=1"),
        ("fdatasync", "fdatasync=1"),
        ("osync", "sync=sync"),
        ("odsync", "sync=dsync"),
        ("odirect", "direct=1"),
        ("group-commit", "fsync=${PC_SYNC_EVERY}"),
    ],
)
def test_each_job_file_sets_its_guarantee(name: str, option: str) -> None:
    job = (ROOT / "workloads" / "fio" / f"{name}.fio").read_text().split(f"[{name}]")[1]
    assert option in job.splitlines()


# --- the catalogue -------------------------------------------------------------------------------


def test_catalogue_names_and_quick_subset() -> None:
    names = [p.name for p in profiles()]
    assert len(names) == len(set(names)) and len(names) == 40
    quick = profiles(quick=True)
    assert quick and {p.name for p in quick} < set(names)
    assert {p.guarantee for p in quick} == set(fioprofiles.GUARANTEES)
    assert all(by_name(n).name == n for n in names)
    assert {p.job_file for p in profiles()} | {"rewrite.fio"} == {p.name for p in JOB_FILES}
    assert not [
        p for p in profiles() if fioprofiles.GUARANTEES[p.guarantee].direct and p.block_size % 4096
    ]


def test_catalogue_where_the_flush_is() -> None:
    assert by_name("osync-4k").latency_in == "clat" and by_name("odirect-8k").latency_in == "clat"
    assert (
        by_name("fsync-1b").latency_in == "sync" and by_name("odirect-fdatasync-4k").sync_every == 1
    )
    gc = group_commit(16)
    assert (gc.name, gc.sync_every, gc.writes_per_commit) == ("group-commit-16-2k", 16, 16)
    assert dict(gc.env)["PC_SYNC_EVERY"] == "16"
    assert by_name("group-commit-12-4k") == group_commit(12, 4096)
    assert not by_name("buffered-1b").durable and by_name("odsync-16b").durable


@pytest.mark.parametrize(
    "call",
    [
        lambda: group_commit(1),
        lambda: group_commit(65),
        lambda: group_commit(True),
        lambda: group_commit(8, 3000),
        lambda: fioprofiles._profile("odirect", 2048),
        lambda: by_name("fsync-3k"),
        lambda: by_name("group-commit-99-2k"),
    ],
)
def test_catalogue_rejects(call) -> None:
    with pytest.raises(UsageError):
        call()


def test_fio_command_is_exact() -> None:
    p = by_name("group-commit-8-2k")
    cmd = fio_command(p, "/mnt/t", 100_000, fio="/usr/bin/fio", runtime_s=30)
    assert cmd.argv == (
        "/usr/bin/fio",
        "--output-format=json",
        "--eta=never",
        str(ROOT / "workloads" / "fio" / "group-commit.fio"),
    )
    assert cmd.env_dict() == {
        "PC_DIR": "/mnt/t",
        "PC_SIZE": "98304",
        "PC_RUNTIME": "30",
        "PC_BS": "2048",
        "PC_SYNC_EVERY": "8",
        "PC_FILE": "powercut-group-commit.dat",
        "PC_UNLINK": "1",
    }
    assert cmd.size_bytes == 98304
    assert fioprofiles.fio_argv(p, "/mnt/t", 100_000, fio="/usr/bin/fio") == list(cmd.argv)
    assert fioprofiles.fio_env(p, "/mnt/t", 100_000, runtime_s=30) == cmd.env_dict()
    for path in JOB_FILES:  # every ${VAR} a job file uses is set by some profile's command
        used = [q for q in profiles() + (fioprofiles.rewrite("fsync"),) if q.job_file == path.name]
        assert job_vars(path) <= set(fio_command(used[0], "/x", 1 << 20).env_dict()), path.name


@pytest.mark.parametrize(
    "directory,size,match",
    [
        ("rel/dir", 65536, "absolute"),
        ("/a:b", 65536, "':'"),
        ("/t", 100, "smaller than one"),
        ("/t", 8 * 2048, "never reach a sync"),
    ],
)
def test_fio_command_rejects(directory: str, size: int, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        fio_command(by_name("group-commit-8-2k"), directory, size)


# --- parsing fio JSON ----------------------------------------------------------------------------


def test_fsync_fixture_flush_is_in_the_sync_object() -> None:
    doc = fixture_doc("fsync-4k")
    r = parse_fio_json(fixture("fsync-4k"), by_name("fsync-4k"))
    job = doc["jobs"][0]
    assert (r.ops, r.bytes, r.syncs, r.fio_version) == (64, 262144, 63, "fio-3.33")
    assert r.sync_p99_us == job["sync"]["lat_ns"]["percentile"]["99.000000"] / 1000
    assert r.lat_p50_us == job["write"]["clat_ns"]["percentile"]["50.000000"] / 1000
    assert r.sync_p50_us > 10 * r.lat_p50_us  # the flush, not the write(2), is the cost
    assert r.commit_mean_us == pytest.approx(r.lat_mean_us + r.sync_mean_us)
    assert r.commit_percentile_us(99) >= r.sync_p99_us + r.lat_mean_us
    assert r.seconds == job["write"]["runtime"] / 1000 and r.iops == pytest.approx(64 / r.seconds)


def test_osync_fixture_flush_is_in_clat() -> None:
    r = parse_fio_json(fixture("osync-4k"), by_name("osync-4k"))
    clat = fixture_doc("osync-4k")["jobs"][0]["write"]["clat_ns"]["percentile"]
    assert (r.ops, r.syncs, r.sync_p99_us, r.latency_in) == (64, 0, None, "clat")
    assert r.lat_p999_us == clat["99.900000"] / 1000
    assert r.commit_percentile_us(99) == r.lat_p99_us and r.commits_per_s == r.iops


def test_fdatasync_syncs_are_counted_by_n_not_total_ios() -> None:
    doc = fixture_doc("odirect-fdatasync-4k-jsonplus")
    assert doc["jobs"][0]["sync"]["total_ios"] == 0 and "bins" in doc["jobs"][0]["write"]["clat_ns"]
    r = parse_fio_json(json.dumps(doc), by_name("odirect-fdatasync-4k"))
    assert (r.ops, r.syncs) == (64, 63)
    assert r.sync_p50_us == doc["jobs"][0]["sync"]["lat_ns"]["percentile"]["50.000000"] / 1000


def test_group_commit_fixture() -> None:
    r = parse_fio_json(fixture("group-commit-8-2k"), by_name("group-commit-8-2k"))
    assert (r.ops, r.syncs, r.writes_per_commit, r.bytes) == (64, 7, 8, 131072)
    assert r.commits_per_s == pytest.approx(64 / 8 / r.seconds)
    assert r.commit_mean_us == pytest.approx(8 * r.lat_mean_us + r.sync_mean_us)
    d = r.as_dict()
    assert (
        d["commit_p99_us"] == r.commit_percentile_us(99) and json.loads(json.dumps(d))["syncs"] == 7
    )


def test_old_fio_field_names_in_microseconds() -> None:
    """fio 2.x: ``clat``/``lat`` in µs, ``io_bytes`` in KiB, no ``io_kbytes``/``bw_bytes``."""
    doc = fixture_doc("fsync-4k")
    new = parse_fio_json(json.dumps(doc), by_name("fsync-4k"))
    job = doc["jobs"][0]
    w = job["write"]
    clat = w.pop("clat_ns")
    w["clat"] = {
        "mean": clat["mean"] / 1000,
        "percentile": {k: v / 1000 for k, v in clat["percentile"].items()},
    }
    w["io_bytes"] //= 1024
    del w["io_kbytes"], w["bw_bytes"]
    sync = job["sync"].pop("lat_ns")
    job["sync"]["lat"] = {
        **sync,
        "mean": sync["mean"] / 1000,
        "percentile": {k: v / 1000 for k, v in sync["percentile"].items()},
    }
    old = parse_fio_json(json.dumps(doc), by_name("fsync-4k"))
    assert (old.ops, old.bytes, old.syncs) == (new.ops, new.bytes, new.syncs)
    assert old.lat_p99_us == pytest.approx(new.lat_p99_us) and old.sync_p50_us == pytest.approx(
        new.sync_p50_us
    )


def test_leading_warnings_are_skipped() -> None:
    text = "fio: this platform does not support process shared mutexes\n" + fixture("osync-4k")
    assert parse_fio_json(text, by_name("osync-4k")).ops == 64


def _mutated(name: str, edit) -> str:
    doc = copy.deepcopy(fixture_doc(name))
    edit(doc)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text,profile,match",
    [
        (
            lambda: _mutated("fsync-4k", lambda d: d["jobs"][0].update(error=5)),
            "fsync-4k",
            r"failed with error 5 \(Input/output error\)",
        ),
        (lambda: fixture("osync-4k"), "fsync-4k", "no sync calls"),
        (lambda: fixture("fsync-4k"), "osync-4k", "63 sync calls, but the profile makes none"),
        (lambda: fixture("fsync-4k"), "fsync-8k", "bs=4096"),
        (
            lambda: fixture("group-commit-8-2k"),
            "group-commit-4-2k",
            "7 sync calls for 64 writes, expected 15",
        ),
        (
            lambda: _mutated("osync-4k", lambda d: d["jobs"][0]["write"].update(total_ios=0)),
            "osync-4k",
            "wrote nothing",
        ),
        (
            lambda: _mutated(
                "osync-4k",
                lambda d: d["jobs"][0]["write"]["clat_ns"]["percentile"].pop("99.900000"),
            ),
            "osync-4k",
            "no 99.9th percentile",
        ),
        (lambda: "fio: failed parsing bs=\n", "fsync-4k", "no JSON"),
        (lambda: '{"fio version": "fio-3.33", "jobs": [', "fsync-4k", "not valid JSON"),
        (lambda: '{"jobs": []}', "fsync-4k", "no jobs"),
    ],
)
def test_parse_refuses(text, profile: str, match: str) -> None:
    with pytest.raises(WorkloadFailed, match=match) as info:
        parse_fio_json(text(), by_name(profile))
    assert "\n" not in str(info.value) and str(info.value).startswith(f"fio output for {profile}: ")


# --- the write cache -----------------------------------------------------------------------------

SET_OFF = "\n/dev/sda:\n setting drive write-caching to 0 (off)\n write-caching =  0 (off)\n"
TWO = "\n/dev/sda:\n write-caching =  1 (on)\n\n/dev/sdb:\n write-caching =  0 (off)\n"


def test_hdparm_parsing() -> None:
    assert parse_hdparm_write_cache("\n/dev/sda:\n write-caching =  1 (on)\n") is True
    assert (
        parse_hdparm_write_cache(SET_OFF) is False
        and parse_hdparm_write_cache(SET_OFF, "/dev/sda") is False
    )
    assert (
        parse_hdparm_write_cache(TWO, "/dev/sda") is True
        and parse_hdparm_write_cache(TWO, "/dev/sdb") is False
    )
    before_after = " write-caching =  1 (on)\n setting drive write-caching to 0 (off)\n write-caching =  0 (off)\n"
    assert parse_hdparm_write_cache(before_after) is False  # the read-back after the setting counts
    sense = "\n/dev/sdx:\nSG_IO: bad/missing sense data, sb[]:  70 00 05 00\n write-caching = not supported\n"
    with pytest.raises(EnvironmentNotReady, match="not supported"):
        parse_hdparm_write_cache(sense, "/dev/sdx")
    with pytest.raises(EnvironmentNotReady, match="no write-caching line"):
        parse_hdparm_write_cache("/dev/vda: Operation not permitted\n", "/dev/vda")
    with pytest.raises(EnvironmentNotReady, match="nothing for this device"):
        parse_hdparm_write_cache(TWO, "/dev/sdc")


def test_sysfs_parsing() -> None:
    assert (
        parse_sysfs_write_cache("write back\n") is True
        and parse_sysfs_write_cache("write through\n") is False
    )
    with pytest.raises(EnvironmentNotReady, match="expected 'write back'"):
        parse_sysfs_write_cache("writeback\n")


def test_write_cache_mismatch_is_refused() -> None:
    with pytest.raises(EnvironmentNotReady) as info:
        bench.verify_write_cache(
            False, device="/dev/sda", hdparm_output=TWO, sysfs_text="write through\n"
        )
    assert "/dev/sda: asked for the write cache off, hdparm says on" in str(info.value)
    with pytest.raises(
        EnvironmentNotReady, match="write cache on, the block queue's write_cache says off"
    ):
        bench.verify_write_cache(
            True, device="/dev/sda", hdparm_output=TWO, sysfs_text="write through\n"
        )
    ok = bench.verify_write_cache(
        False, device="/dev/sda", hdparm_output=SET_OFF, sysfs_text="write through"
    )
    assert (ok.wanted, ok.hdparm, ok.sysfs) == (False, False, False)
    assert bench.verify_write_cache(True, device="/dev/sdb", sysfs_text="write back").hdparm is None
    with pytest.raises(UsageError):
        bench.verify_write_cache(True, device="/dev/sdb")


# --- tlpi ----------------------------------------------------------------------------------------


def test_tlpi_scaling() -> None:
    assert tlpi_scale(1, max_writes=2_000_000) == (1_000_000, 1.0, "")
    written, scale, note = tlpi_scale(1)
    assert (written, scale) == (10_000, 100.0) and "10,000 of 1,000,000" in note and "x100" in note
    assert tlpi_scale(16)[:2] == (160_000, 6.25)
    written, scale, note = tlpi_scale(4096)
    assert (
        written == 244 * 4096
        and scale == pytest.approx(1_000_000 / 999_424)
        and "whole writes" in note
    )
    assert tlpi_scale(256)[0] == 3906 * 256
    assert [tlpi_scale(b)[0] % b for b in bench.TLPI_BUFFERS] == [0, 0, 0, 0]
    for bad in (
        {"buffer_size": 0},
        {"buffer_size": 16, "max_writes": 0},
        {"buffer_size": 4096, "total_bytes": 100},
    ):
        with pytest.raises(UsageError):
            tlpi_scale(**bad)


# --- one real run ----------------------------------------------------------------------------------


@needs_fio
@pytest.mark.parametrize("name", ["buffered-4k", "fsync-4k"])
def test_real_tiny_fio_run_parses(tmp_path: Path, name: str) -> None:
    profile = by_name(name)
    cmd = fio_command(profile, str(tmp_path), 16 * 1024, fio=FIO)
    res = process.run(cmd.argv, timeout=20, env={**os.environ, **cmd.env_dict()})
    r = parse_fio_json(res.stdout, profile)
    assert (r.ops, r.bytes, r.syncs) == (4, 16384, 3 if profile.sync_every else 0)
    assert r.seconds > 0 and r.lat_p50_us > 0 and list(tmp_path.iterdir()) == []  # unlink=1


def test_raw_device_command_writes_the_device_and_unlinks_nothing() -> None:
    cmd = fio_command(by_name("fsync-4k"), "/ignored", 1 << 20, device="/dev/sdz")
    env = cmd.env_dict()
    assert (env["PC_DIR"], env["PC_FILE"], env["PC_UNLINK"]) == ("/dev", "sdz", "0")
    with pytest.raises(UsageError, match="/dev path"):
        fio_command(by_name("fsync-4k"), "/t", 1 << 20, device="/tmp/x")


# --- pg_test_fsync's methods as rewrite-in-place profiles ------------------------------------------


@pytest.mark.parametrize(
    "method,direct,sync,fsync,fdatasync,latency_in",
    [
        ("open_datasync", "1", "dsync", "0", "0", "clat"),
        ("fdatasync", "0", "none", "0", "1", "sync"),
        ("fsync", "0", "none", "1", "0", "sync"),
        ("open_sync", "1", "sync", "0", "0", "clat"),
    ],
)
def test_rewrite_profiles_do_what_pg_test_fsync_does(
    method, direct, sync, fsync, fdatasync, latency_in
) -> None:
    p = fioprofiles.rewrite(method)
    env = dict(p.env)
    assert (p.name, p.block_size, p.job_file, p.latency_in) == (
        f"pg-{method}-8k",
        8192,
        "rewrite.fio",
        latency_in,
    )
    assert (env["PC_DIRECT"], env["PC_SYNC"], env["PC_FSYNC"], env["PC_FDATASYNC"]) == (
        direct,
        sync,
        fsync,
        fdatasync,
    )
    assert by_name(p.name) == p and p.durable
    with pytest.raises(UsageError):
        fioprofiles.rewrite("fsync_writethrough")


@needs_fio
def test_real_rewrite_run_stays_in_one_block(tmp_path: Path) -> None:
    profile = fioprofiles.rewrite("fdatasync")
    cmd = fio_command(profile, str(tmp_path), 10 * 8192, fio=FIO)
    res = process.run(cmd.argv, timeout=30, env={**os.environ, **cmd.env_dict(), "PC_UNLINK": "0"})
    r = parse_fio_json(res.stdout, profile)
    assert (r.ops, r.syncs) == (10, 9)
    assert (
        tmp_path / "powercut-rewrite.dat"
    ).stat().st_size == 8192  # every write went to offset 0


# --- timing files and pg_test_fsync's report ---------------------------------------------------------


def test_parse_timing_latency_is_ack_minus_begin() -> None:
    ms = 1_000_000
    lines = [
        f"{1000 * ms} begin:1",
        f"{1002 * ms} ack:1",
        f"{1010 * ms} begin:2",
        f"{1014 * ms} ack:2",
        f"{1020 * ms} begin:3",
        f"{1021 * ms} ack:3",
        f"{1030 * ms} mkfs",
    ]
    r = bench.parse_timing("\n".join(lines) + "\n")
    assert (r.commits, r.seconds) == (3, pytest.approx(0.021))
    assert r.commits_per_s == pytest.approx(3 / 0.021)
    assert (r.p50_us, r.p99_us, r.p999_us, r.mean_us) == (
        2000.0,
        4000.0,
        4000.0,
        pytest.approx(7000 / 3),
    )


def test_parse_timing_without_begin_uses_the_previous_ack() -> None:
    r = bench.parse_timing("100 ack:a\n400 ack:b\n1000 ack:c\n")
    assert (r.commits, r.p50_us, r.p99_us) == (2, 0.3, 0.6)
    with pytest.raises(WorkloadFailed, match="acked nothing"):
        bench.parse_timing("5 begin:1\n")
    with pytest.raises(WorkloadFailed, match="line 2"):
        bench.parse_timing("5 begin:1\nnot a line\n")


def test_percentile_nearest_rank() -> None:
    values = [float(i) for i in range(1, 1001)]
    assert [bench.percentile(values, p) for p in (50, 99, 99.9, 100)] == [
        500.0,
        990.0,
        999.0,
        1000.0,
    ]
    assert bench.percentile([7.0], 99.9) == 7.0


PG_OUT = """5 seconds per test
O_DIRECT supported on this platform for open_datasync and open_sync.

Compare file sync methods using one 8kB write:
(in "wal_sync_method" preference order, except fdatasync is Linux's default)
        open_datasync                      4383.890 ops/sec     228 usecs/op
        fdatasync                          4738.341 ops/sec     211 usecs/op
        fsync                              5970.498 ops/sec     167 usecs/op
        fsync_writethrough                              n/a
        open_sync                          7011.180 ops/sec     143 usecs/op

Compare file sync methods using two 8kB writes:
        open_datasync                      2972.793 ops/sec     336 usecs/op
"""


def test_parse_pg_test_fsync_one_write_section() -> None:
    got = bench.parse_pg_test_fsync(PG_OUT)
    assert got == {
        "open_datasync": 4383.89,
        "fdatasync": 4738.341,
        "fsync": 5970.498,
        "open_sync": 7011.18,
    }
    with pytest.raises(WorkloadFailed, match="no 'Compare"):
        bench.parse_pg_test_fsync("pg_test_fsync: could not open output file\n")


def test_parse_pg_test_fsync_real_output() -> None:
    """pg_test_fsync 15's whole report (bench/fixtures): only the one-8kB-write section counts."""
    got = bench.parse_pg_test_fsync((FIXTURES / "pg_test_fsync-15.txt").read_text())
    assert list(got) == ["open_datasync", "fdatasync", "fsync", "open_sync"] and all(
        v > 0 for v in got.values()
    )

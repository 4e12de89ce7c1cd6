"""What one ``powercut bench`` run times (pure; host and guest): the items (a fio profile, a workload
in timing mode, ``pg_test_fsync``), grouped into run sets -- one disk write-cache setting, one
target (the bare disk or a dm-log-writes target over it), one set of mount options, one fresh mkfs
each -- and the seed suites that build them (``plan``).

Suites (the seeds' tables, ratios only here):

* ``guarantees`` (default): every profile of the catalogue (``--quick``: each guarantee at 4 KiB).
* ``tlpi``: TLPI table 13-3: 1,000,000 bytes in 1/16/256/4096-byte writes, without and with O_SYNC;
  small buffers write fewer bytes and are scaled (``bench.tlpi_scale``).  The buffered writes run
  with one cache setting (on, if asked): none reaches the disk while it is timed, so a second
  setting would time the page cache again (the table shows them once).
* ``zodb-fsync``: the filestorage workload timed with fsync=0/1/2 (txn/s).
* ``commit``: one fsync per 2 KiB commit vs group commit of N.
* ``flush-cost``: fsync per call, cache on vs off (and, on ext4, on with ``nobarrier``: no flush).
* ``pg``: ``pg_test_fsync`` next to our rewrite-in-place profiles at 8 KiB.
* ``overhead``: the same fio jobs on the bare disk and through dm-log-writes (recording's cost).
* ``workload``: ``--workload NAME --param k=v`` in timing mode.

Every suite runs with the write cache on and off, except ``overhead`` (on: what a recording sees)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from powercut.bench import parse as bench
from powercut.bench import profiles as fioprofiles
from powercut.config import BenchItem, RunSet
from powercut.errors import UsageError

SUITES = ("guarantees", "tlpi", "zodb-fsync", "commit", "flush-cost", "pg", "overhead")


@dataclass(frozen=True, slots=True)
class Sizing:
    """How much each item writes: ``--quick`` keeps every run to seconds under TCG."""

    max_writes: int = 1000
    max_bytes: int = 16 << 20
    runtime_s: int = 20
    tlpi_writes: int = bench.TLPI_MAX_WRITES
    commits: int = 300  # zodb-fsync transactions
    pg_seconds: int = 3
    repeats: int = 3  # pg and overhead: interleaved repetitions (their tables take medians)

    @staticmethod
    def for_run(quick: bool) -> Sizing:
        if quick:
            return Sizing(
                max_writes=48,
                max_bytes=256 << 10,
                runtime_s=5,
                tlpi_writes=100,
                commits=16,
                pg_seconds=1,
                repeats=1,
            )
        return Sizing()


def fio_item(profile: fioprofiles.Profile, suite: str, sizing: Sizing, **kw: Any) -> BenchItem:
    writes = max(
        min(sizing.max_writes, sizing.max_bytes // profile.block_size),
        2 * profile.sync_every + 1,
        2,
    )
    return BenchItem(
        "fio", profile.name, suite, writes * profile.block_size, sizing.runtime_s, **kw
    )


def _guarantees(quick: bool, sizing: Sizing) -> list[BenchItem]:
    return [fio_item(p, "guarantees", sizing) for p in fioprofiles.profiles(quick)]


def _tlpi(sizing: Sizing, guarantee: str) -> list[BenchItem]:
    out = []
    for bs in bench.TLPI_BUFFERS:
        written, _, note = bench.tlpi_scale(bs, max_writes=sizing.tlpi_writes)
        profile = fioprofiles.by_name(f"{guarantee}-{fioprofiles.size_label(bs)}")
        out.append(
            BenchItem(
                "fio",
                profile.name,
                "tlpi",
                written,
                sizing.runtime_s,
                note=note,
                scale_to=bench.TLPI_TOTAL_BYTES,
            )
        )
    return out


def _zodb(sizing: Sizing) -> list[BenchItem]:
    return [
        BenchItem(
            "workload",
            "filestorage",
            "zodb-fsync",
            params={"n": sizing.commits, "fsync": f},
            label=f"filestorage fsync={f}",
        )
        for f in (0, 1, 2)
    ]


def _commit(quick: bool, sizing: Sizing) -> list[BenchItem]:
    groups = (8,) if quick else fioprofiles.GROUP_COMMIT_N
    base = fioprofiles.by_name(f"fsync-{fioprofiles.size_label(fioprofiles.GROUP_COMMIT_BLOCK)}")
    return [fio_item(base, "commit", sizing)] + [
        fio_item(fioprofiles.group_commit(n), "commit", sizing) for n in groups
    ]


def _pg(sizing: Sizing) -> list[BenchItem]:
    """pg_test_fsync, then ours, ``repeats`` times interleaved: a shared host disk's load drifts, and
    the comparison takes each side's median."""
    # our side runs as long as pg_test_fsync's own test does: a runtime cap on a large write budget
    ours = [
        BenchItem(
            "fio",
            fioprofiles.rewrite(m).name,
            "pg",
            fioprofiles.PG_BLOCK * 1_000_000,
            sizing.pg_seconds,
        )
        for m in fioprofiles.PG_METHODS
    ]
    return (
        [BenchItem("pg_test_fsync", "pg_test_fsync", "pg", runtime_s=sizing.pg_seconds)] + ours
    ) * sizing.repeats


def _flush_cost(sizing: Sizing) -> list[BenchItem]:
    return [fio_item(fioprofiles.by_name("fsync-4k"), "flush-cost", sizing)]


def _overhead(sizing: Sizing) -> list[BenchItem]:
    return [
        fio_item(fioprofiles.by_name(n), "overhead", sizing) for n in ("fsync-4k", "odirect-4k")
    ]


def plan(
    suites: tuple[str, ...],
    *,
    quick: bool = False,
    fstype: str = "ext4",
    profiles: tuple[str, ...] = (),
    workload: str = "",
    params: dict[str, Any] | None = None,
    caches: tuple[bool, ...] = (True, False),
) -> tuple[RunSet, ...]:
    """The run sets of ``suites`` (plus ``profiles`` by name, plus ``workload`` timed with
    ``params``), items of one (cache, target, mount options) merged into one run set."""
    sizing = Sizing.for_run(quick)
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise UsageError(f"unknown bench suite {unknown[0]!r}: one of {', '.join(SUITES)}")
    if not caches:
        raise UsageError("bench: no write cache setting to run with")
    # (group, write_cache, target, mount_opts) -> items, in first-use order
    sets: dict[tuple[str, bool, str, str], list[BenchItem]] = {}

    def add(
        items: list[BenchItem],
        caches_: tuple[bool, ...],
        target: str = "disk",
        opts: str = "",
        group: str = "",
    ) -> None:
        for wc in caches_:
            sets.setdefault((group, wc, target, opts), []).extend(items)

    for suite in suites:
        if suite == "guarantees":
            add(_guarantees(quick, sizing), caches)
        elif (
            suite == "tlpi"
        ):  # buffered writes, timed, never reach the disk: once, with the cache on if asked
            add(_tlpi(sizing, "buffered"), (True,) if True in caches else caches[:1])
            add(_tlpi(sizing, "osync"), caches)
        elif suite == "zodb-fsync":
            add(_zodb(sizing), caches)
        elif suite == "commit":
            add(_commit(quick, sizing), caches)
        elif suite == "pg":
            add(_pg(sizing), caches)
        elif suite == "flush-cost":
            add(_flush_cost(sizing), caches)
            if (
                fstype == "ext4" and True in caches
            ):  # fsync without the flush: what a plain macOS fsync does
                add(_flush_cost(sizing), (True,), opts="nobarrier")
        elif suite == "overhead":  # bare then logged, each on a fresh filesystem, repeated
            for k in range(1, sizing.repeats + 1):
                add(_overhead(sizing), (True,), group=f"overhead-{k}")
                add(_overhead(sizing), (True,), target="log-writes", group=f"overhead-{k}")
    if profiles:
        add([fio_item(fioprofiles.by_name(n), "profiles", sizing) for n in profiles], caches)
    if workload:
        add(
            [
                BenchItem(
                    "workload",
                    workload,
                    "workload",
                    params=dict(params or {}),
                    label=workload
                    + "".join(f" {k}={v}" for k, v in sorted((params or {}).items())),
                )
            ],
            caches,
        )
    if not sets:
        raise UsageError("bench: nothing to run (give --suite, --profile or --workload)")
    return tuple(
        RunSet(wc, tuple(items), target, opts, group)
        for (group, wc, target, opts), items in sets.items()
    )


def needs_log_disk(runsets: tuple[RunSet, ...]) -> bool:
    return any(rs.target == "log-writes" for rs in runsets)


def count_items(runsets: tuple[RunSet, ...]) -> int:
    return sum(len(rs.items) for rs in runsets)

"""The cost half's pure parts (host and guest): fio JSON output -> ``FioResult`` (write clat and sync
latency, combined into a per-commit latency), the disk write-cache read-back (``hdparm -W``, the
block queue's ``write_cache``) and the refusal when it disagrees with what was asked, and the TLPI
suite's scaling rule.  Nothing here runs a process; the runner (``powercut bench``) does.

fio JSON (3.x, checked against fio-3.33): ``jobs[0].write`` has ``total_ios``, ``io_bytes`` (bytes;
fio 2.x: KiB, and no ``io_kbytes``), ``runtime`` (ms) and ``clat_ns`` (fio 2.x: ``clat`` in µs) with
``N``, ``mean`` and ``percentile`` keyed "99.900000".  Syncs issued by ``fsync=N``/``fdatasync=N``
are in ``jobs[0].sync.lat_ns``; count them by its ``N``: ``sync.total_ios`` counts fsync only, so
it is 0 for fdatasync.  fio issues a sync before the next write, never after the last one: a run of
W writes with a sync every n has (W-1)//n syncs.

Also pure parsers for the other timed sources: a workload's timing file (marks.py's timing mode:
``<monotonic ns> begin:KEY`` / ``ack:KEY`` lines -> ``TimingResult``) and ``pg_test_fsync``'s report
(its "one 8kB write" section -> ops/s per sync method)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from powercut.bench.profiles import Profile
from powercut.errors import EnvironmentNotReady, UsageError, WorkloadFailed

PERCENTILES = (50.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class Latency:
    """One latency distribution in microseconds."""

    count: int
    mean_us: float
    p50_us: float
    p99_us: float
    p999_us: float


@dataclass(frozen=True, slots=True)
class FioResult:
    """One fio run of one profile.  ``lat_*``: the write completion latency (for ``sync=``/``direct=``
    profiles the flush is in it); ``sync_*``: the separate fsync/fdatasync calls (None when the
    profile makes none).  A *commit* is ``writes_per_commit`` writes plus one sync, or one write
    when there is no separate sync."""

    profile: str
    ops: int  # writes
    bytes: int
    seconds: float  # fio's runtime, or the time spent in I/O calls if that is longer
    iops: float
    bw_bytes_s: float
    lat_mean_us: float
    lat_p50_us: float
    lat_p99_us: float
    lat_p999_us: float
    syncs: int
    sync_mean_us: float | None
    sync_p50_us: float | None
    sync_p99_us: float | None
    sync_p999_us: float | None
    writes_per_commit: int
    latency_in: str  # "clat" or "sync": where the flush cost is
    fio_version: str

    @property
    def commits_per_s(self) -> float:
        return self.ops / self.writes_per_commit / self.seconds

    @property
    def commit_mean_us(self) -> float:
        """Exact: n writes at their mean plus one sync at its mean."""
        return self.writes_per_commit * self.lat_mean_us + (self.sync_mean_us or 0.0)

    def commit_percentile_us(self, pct: float) -> float:
        """A commit's latency at ``pct`` (50, 99 or 99.9).  Without a separate sync: the write's.
        With one, an estimate (fio reports the two distributions apart, not their sum): the larger
        of "the sync at ``pct``, the n writes at their mean" and "one write at ``pct``, the other
        writes and the sync at their mean"."""
        name = {50.0: "p50", 99.0: "p99", 99.9: "p999"}.get(float(pct))
        if name is None:
            raise UsageError(f"commit percentile must be one of 50, 99, 99.9, not {pct}")
        sync, write = getattr(self, f"sync_{name}_us"), getattr(self, f"lat_{name}_us")
        if sync is None or self.sync_mean_us is None:
            return write
        n, mean = self.writes_per_commit, self.lat_mean_us
        return max(sync + n * mean, write + (n - 1) * mean + self.sync_mean_us)

    def as_dict(self) -> dict[str, Any]:
        """Fields plus the derived commit figures, for JSON output."""
        out = asdict(self)
        out.update(
            commits_per_s=self.commits_per_s,
            commit_mean_us=self.commit_mean_us,
            commit_p50_us=self.commit_percentile_us(50),
            commit_p99_us=self.commit_percentile_us(99),
            commit_p999_us=self.commit_percentile_us(99.9),
        )
        return out


def _bad(profile: Profile, why: str) -> WorkloadFailed:
    return WorkloadFailed(f"fio output for {profile.name}: {why}")


def _load(text: str, profile: Profile) -> dict[str, Any]:
    """The JSON document in fio's stdout (fio may print warning lines before it)."""
    start = text.find("{")
    if start < 0:
        raise _bad(profile, "no JSON in it (was fio run with --output-format=json?)")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise _bad(profile, f"not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise _bad(profile, "no jobs in it")
    return doc


def _latency(
    parent: dict[str, Any], names: tuple[tuple[str, float], ...], what: str, profile: Profile
) -> Latency | None:
    """The first of ``names`` (key, divisor to µs) present in ``parent``; None if it saw no sample."""
    found = [(parent[key], div) for key, div in names if isinstance(parent.get(key), dict)]
    if not found:
        return None
    obj, div = found[0]
    count = int(obj.get("N", parent.get("total_ios", 0)) or 0)
    if count <= 0:
        return None
    pcts = {round(float(k), 6): v for k, v in (obj.get("percentile") or {}).items() if float(k) > 0}
    values = []
    for p in PERCENTILES:
        if round(p, 6) not in pcts:
            raise _bad(
                profile,
                f"{what} has no {p:g}th percentile (fio's percentile_list must include "
                f"{':'.join(f'{q:g}' for q in PERCENTILES)})",
            )
        values.append(pcts[round(p, 6)] / div)
    return Latency(count, float(obj["mean"]) / div, *values)


def _check_shape(
    profile: Profile, doc: dict[str, Any], job: dict[str, Any], ops: int, syncs: int
) -> None:
    """Refuse output that does not belong to ``profile`` or says nothing."""
    opts = {**(doc.get("global options") or {}), **(job.get("job options") or {})}
    bs = str(opts.get("bs", ""))
    if bs.isdigit() and int(bs) != profile.block_size:
        raise _bad(profile, f"written with bs={bs}, the profile writes {profile.block_size} bytes")
    if ops <= 0:
        raise _bad(profile, "fio wrote nothing")
    n = profile.sync_every
    if not n and syncs:
        raise _bad(profile, f"{syncs} sync calls, but the profile makes none")
    if n and not syncs:
        raise _bad(
            profile,
            f"no sync calls in {ops} writes (one comes after every {n}, never after the last; "
            "or this fio's JSON has no 'sync' object)",
        )
    if n and syncs not in {(ops - 1) // n, ops // n}:
        raise _bad(
            profile,
            f"{syncs} sync calls for {ops} writes, expected {(ops - 1) // n} (one every {n}) "
            "-- too short a run, or fio too old to report sync latency?",
        )


def parse_fio_json(text: str, profile: Profile) -> FioResult:
    """Parse ``fio --output-format=json`` (or json+) output of one run of ``profile``; refuse a run
    that reports an error, that did nothing, or whose shape does not match the profile."""
    doc = _load(text, profile)
    job = doc["jobs"][0]
    err = int(job.get("error", 0) or 0)
    if err:
        raise _bad(
            profile, f"job {job.get('jobname', '?')!r} failed with error {err} ({os.strerror(err)})"
        )
    write = job.get("write")
    if not isinstance(write, dict):
        raise _bad(profile, "no write statistics")
    ops = int(write.get("total_ios", 0))
    lat = _latency(write, (("clat_ns", 1000.0), ("clat", 1.0)), "write clat", profile)
    sync = _latency(
        job.get("sync") or {}, (("lat_ns", 1000.0), ("lat", 1.0)), "sync latency", profile
    )
    syncs = sync.count if sync else 0
    _check_shape(profile, doc, job, ops, syncs)
    if lat is None:
        raise _bad(profile, "no write latency samples")
    nbytes = int(write.get("io_bytes", 0)) * (
        1 if "io_kbytes" in write or "bw_bytes" in write else 1024
    )
    busy_s = (lat.mean_us * ops + (sync.mean_us * syncs if sync else 0.0)) / 1e6
    seconds = max(int(write.get("runtime", 0)) / 1000.0, busy_s)
    return FioResult(
        profile=profile.name,
        ops=ops,
        bytes=nbytes,
        seconds=seconds,
        iops=ops / seconds,
        bw_bytes_s=nbytes / seconds,
        lat_mean_us=lat.mean_us,
        lat_p50_us=lat.p50_us,
        lat_p99_us=lat.p99_us,
        lat_p999_us=lat.p999_us,
        syncs=syncs,
        sync_mean_us=sync.mean_us if sync else None,
        sync_p50_us=sync.p50_us if sync else None,
        sync_p99_us=sync.p99_us if sync else None,
        sync_p999_us=sync.p999_us if sync else None,
        writes_per_commit=profile.writes_per_commit,
        latency_in=profile.latency_in,
        fio_version=str(doc.get("fio version", "unknown")),
    )


# --- the disk write cache ------------------------------------------------------------------------

_HDPARM_HEADER = re.compile(r"^(/\S+):", re.MULTILINE)
_HDPARM_WC = re.compile(
    r"^\s*write-caching\s*=\s*(?:(\d+)\s*\((?:on|off)\)|(not supported))", re.MULTILINE
)


def _on(value: bool) -> str:
    return "on" if value else "off"


def parse_hdparm_write_cache(text: str, device: str | None = None) -> bool:
    """``hdparm -W DEV`` output (" write-caching =  1 (on)") -> is the drive's write cache on.
    ``device``: pick that device's block when the output covers several."""
    block, label = text, device or "hdparm -W"
    if device is not None:
        heads = list(_HDPARM_HEADER.finditer(text))
        mine = [i for i, m in enumerate(heads) if m.group(1) == device]
        if heads and not mine:
            raise EnvironmentNotReady(f"{device}: hdparm -W printed nothing for this device")
        if mine:
            i = mine[-1]
            block = text[heads[i].end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
    readings = list(_HDPARM_WC.finditer(block))
    if not readings:
        raise EnvironmentNotReady(f"{label}: hdparm -W printed no write-caching line")
    last = readings[-1]
    if last.group(2):
        raise EnvironmentNotReady(
            f"{label}: the drive reports no write cache setting (hdparm -W: not supported)"
        )
    return int(last.group(1)) != 0


def parse_sysfs_write_cache(text: str) -> bool:
    """``/sys/block/X/queue/write_cache`` ("write back" / "write through") -> is the cache on."""
    value = " ".join(text.split()).lower()
    if value == "write back":
        return True
    if value == "write through":
        return False
    raise EnvironmentNotReady(
        f"queue/write_cache says {text.strip()!r}, expected 'write back' or 'write through'"
    )


@dataclass(frozen=True, slots=True)
class WriteCacheCheck:
    """What the read-back said before a run (None: that source was not read)."""

    device: str
    wanted: bool
    hdparm: bool | None
    sysfs: bool | None


def verify_write_cache(
    wanted: bool, *, device: str, hdparm_output: str | None = None, sysfs_text: str | None = None
) -> WriteCacheCheck:
    """Refuse a run whose write cache setting did not take: every source read must agree with
    ``wanted``."""
    if hdparm_output is None and sysfs_text is None:
        raise UsageError(
            f"{device}: nothing to verify the write cache setting with (no hdparm, no sysfs)"
        )
    check = WriteCacheCheck(
        device,
        wanted,
        None if hdparm_output is None else parse_hdparm_write_cache(hdparm_output, device),
        None if sysfs_text is None else parse_sysfs_write_cache(sysfs_text),
    )
    for source, seen in (("hdparm", check.hdparm), ("the block queue's write_cache", check.sysfs)):
        if seen is not None and seen != wanted:
            raise EnvironmentNotReady(
                f"{device}: asked for the write cache {_on(wanted)}, {source} says "
                f"{_on(seen)}; refusing to time it"
            )
    return check


# --- the tlpi suite ------------------------------------------------------------------------------

TLPI_TOTAL_BYTES = 1_000_000
TLPI_BUFFERS = (1, 16, 256, 4096)
TLPI_MAX_WRITES = 10_000


def tlpi_scale(
    buffer_size: int, *, total_bytes: int = TLPI_TOTAL_BYTES, max_writes: int = TLPI_MAX_WRITES
) -> tuple[int, float, str]:
    """TLPI table 13-3 writes ``total_bytes`` with ``buffer_size``-byte writes.  fio writes whole
    blocks, and at most ``max_writes`` of them (1,000,000 one-byte O_SYNC writes take hours), so:
    (bytes actually written, factor that scales a measured time to ``total_bytes``, a note saying
    so -- empty when nothing was scaled).  Scaling assumes every write costs the same."""
    if buffer_size < 1 or max_writes < 1 or total_bytes < buffer_size:
        raise UsageError(
            f"tlpi: need 1 <= buffer ({buffer_size}) <= total ({total_bytes}) and max_writes "
            f"({max_writes}) >= 1"
        )
    writes = min(total_bytes // buffer_size, max_writes)
    written = writes * buffer_size
    scale = total_bytes / written
    if written == total_bytes:
        return written, 1.0, ""
    why = f"capped at {max_writes:,} writes" if writes == max_writes else "whole writes only"
    return (
        written,
        scale,
        (
            f"wrote {written:,} of {total_bytes:,} bytes ({writes:,} {buffer_size}-byte writes, "
            f"{why}); times scaled x{scale:.4g} to {total_bytes:,} bytes"
        ),
    )


# --- timing mode (a workload's begin/ack timestamps) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class TimingResult:
    """A timed workload run: ``commits`` acks in ``seconds`` (first begin -- or first ack -- to last
    ack); per-commit latency = ack time - begin time of the same key (a key without a begin: the
    time since the previous ack)."""

    commits: int
    seconds: float
    commits_per_s: float
    mean_us: float
    p50_us: float
    p99_us: float
    p999_us: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list (the smallest value >= pct % of the values)."""
    if not sorted_values:
        raise UsageError("percentile of no values")
    rank = max(1, -(-len(sorted_values) * pct // 100))
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def parse_timing(text: str, source: str = "timing file") -> TimingResult:
    """The lines marks.py wrote in timing mode -> commits/s and per-commit latency."""
    begun: dict[str, int] = {}
    lats: list[float] = []
    first = last = prev_ack = None
    for n, line in enumerate(text.splitlines(), 1):
        stamp, _, mark = line.strip().partition(" ")
        if not line.strip():
            continue
        if not stamp.isdigit() or not mark:
            raise WorkloadFailed(f"{source}: line {n} is not '<ns> <mark>': {line[:80]!r}")
        ns = int(stamp)
        kind, _, key = mark.partition(":")
        if kind == "begin":
            begun[key] = ns
            first = ns if first is None else first
        elif kind == "ack":
            start = begun.pop(key, prev_ack if prev_ack is not None else first)
            first = ns if first is None else first
            if start is not None:
                lats.append((ns - start) / 1000.0)
            prev_ack = last = ns
    if last is None or first is None or not lats:
        raise WorkloadFailed(f"{source}: the workload acked nothing (does it call powercut.ack?)")
    seconds = max((last - first) / 1e9, 1e-9)
    lats.sort()
    return TimingResult(
        len(lats),
        seconds,
        len(lats) / seconds,
        sum(lats) / len(lats),
        *(percentile(lats, p) for p in PERCENTILES),
    )


# --- pg_test_fsync ---------------------------------------------------------------------------------

PG_SECTION = "Compare file sync methods using one 8kB write"
_PG_LINE = re.compile(r"^\s+(\w+)\s+(?:([\d.]+) ops/sec\s+(\d+) usecs/op|n/a\S*)", re.MULTILINE)


def parse_pg_test_fsync(text: str) -> dict[str, float]:
    """``pg_test_fsync`` output -> {method: ops/s} for its "one 8kB write" section (methods it
    reports as n/a are left out)."""
    start = text.find(PG_SECTION)
    if start < 0:
        raise WorkloadFailed(f"pg_test_fsync output has no '{PG_SECTION}' section")
    section = text[start:].split("\n\n", 1)[0]
    out = {m.group(1): float(m.group(2)) for m in _PG_LINE.finditer(section) if m.group(2)}
    if not out:
        raise WorkloadFailed("pg_test_fsync reported no figure for one 8kB write")
    return out

"""The results of one ``powercut bench`` run (host): where it ran (``BenchMeta``: accel, QEMU cache
mode, the host file and device behind the disk, guest kernel, filesystem, bus...), one ``BenchEntry``
per (item, write-cache setting, target), the write-cache read-backs, and the one JSON file that holds
them (``results.json``; ``load`` reads it back, exactly).

Entries come from the guest agent's result (``from_guest``) or from host mode (same item dicts).
Every latency is per operation as the workload sees it: for fio a *commit* (the write(s) plus the
sync that makes them durable; the write alone for buffered and O_DIRECT), for a timed workload
ack - begin, for pg_test_fsync the mean (it reports nothing else)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from powercut.config import BenchItem, RunSet
from powercut.errors import UsageError

FORMAT = 1
TCG_NOTE = (
    "figures from an emulated disk under TCG (software emulation): absolute times say nothing "
    "about real disks; compare ratios only"
)


@dataclass(frozen=True, slots=True)
class BenchMeta:
    mode: str  # vm | host
    accel: str  # kvm | tcg | host
    qemu_cache: str  # QEMU's cache= for the bench disk ("" on the host)
    backing: str  # the host file and device behind the disk (or the host target)
    guest_kernel: str
    fs: str
    bus: str  # ahci (vm) | the host disk's transport
    quick: bool
    date: str
    suites: tuple[str, ...] = ()
    device: str = ""  # the guest's (or host's) block device timed
    note: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class BenchEntry:
    suite: str
    name: str  # the item's label (a profile, "filestorage fsync=1", "pg_test_fsync fsync")
    kind: str  # fio | workload | pg_test_fsync
    write_cache: bool | None  # None: left as it was (host mode without --toggle-write-cache)
    target: str = "disk"  # disk | log-writes | a host path
    mount_opts: str = ""
    ops_per_s: float | None = None
    mb_per_s: float | None = None
    commits_per_s: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    p999_us: float | None = None
    mean_us: float | None = None
    seconds: float | None = None
    note: str = ""
    error: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def cache(self) -> str:
        if self.write_cache is None:
            return "as is"
        elif self.write_cache:
            return "on"
        else:
            return "off"

    @property
    def setting(self) -> str:
        """The conditions besides the cache (for grouping): target and mount options."""
        return ", ".join(
            x for x in (self.target if self.target != "disk" else "", self.mount_opts) if x
        )


@dataclass(frozen=True, slots=True)
class BenchResults:
    meta: BenchMeta
    entries: tuple[BenchEntry, ...]
    checks: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "meta": asdict(self.meta),
            "entries": [asdict(e) for e in self.entries],
            "checks": list(self.checks),
        }

    def find_all(
        self, name: str, write_cache: bool | None, *, suite: str = "", setting: str = ""
    ) -> list[BenchEntry]:
        """Every successful entry of this item under these conditions (repeated suites run it more
        than once), in run order."""
        return [
            e
            for e in self.entries
            if e.name == name
            and e.write_cache == write_cache
            and not e.error
            and (not suite or e.suite == suite)
            and e.setting == setting
        ]

    def find(
        self, name: str, write_cache: bool | None, *, suite: str = "", setting: str = ""
    ) -> BenchEntry | None:
        found = self.find_all(name, write_cache, suite=suite, setting=setting)
        return found[0] if found else None

    def median(
        self, attr: str, name: str, write_cache: bool | None, *, suite: str = "", setting: str = ""
    ) -> float | None:
        """The median of ``attr`` over the repetitions of an item (None if it never ran)."""
        values = sorted(
            v
            for e in self.find_all(name, write_cache, suite=suite, setting=setting)
            if (v := getattr(e, attr)) is not None
        )
        if not values:
            return None
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _build(cls: type, d: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise UsageError(f"{cls.__name__}: unknown keys {', '.join(sorted(unknown))}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def from_json(d: dict[str, Any], source: str = "results") -> BenchResults:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise UsageError(f"{source}: not a powercut bench results file (format {FORMAT})")
    try:
        return BenchResults(
            _build(BenchMeta, d["meta"]),
            tuple(_build(BenchEntry, e) for e in d["entries"]),
            tuple(d.get("checks", ())),
        )
    except (KeyError, TypeError) as e:
        raise UsageError(f"{source}: malformed bench results ({e})") from None


def write(results: BenchResults, path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results.to_json(), indent=1) + "\n")
    tmp.replace(path)
    return path


def load(path: str | os.PathLike[str]) -> BenchResults:
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: cannot read bench results: {e}") from None
    return from_json(d, str(path))


# --- from what an item produced ----------------------------------------------------------------------


def entries_for(
    item: BenchItem,
    outcome: dict[str, Any],
    *,
    write_cache: bool | None,
    target: str,
    mount_opts: str,
) -> list[BenchEntry]:
    """One item's outcome (``{"ok", "result"|"error"}``, as benchguest returns it) -> its entries."""
    base: dict[str, Any] = dict(
        suite=item.suite,
        kind=item.kind,
        write_cache=write_cache,
        target=target,
        mount_opts=mount_opts,
        note=item.note,
    )
    if not outcome.get("ok"):
        return [BenchEntry(name=item.label, error=str(outcome.get("error", "failed")), **base)]
    r = outcome["result"]
    if item.kind == "fio":
        detail = dict(r)
        if item.scale_to:  # tlpi: the time to write scale_to bytes at the measured rate
            detail["scaled_seconds"] = r["seconds"] * item.scale_to / r["bytes"]
            detail["scaled_to_bytes"] = item.scale_to
        return [
            BenchEntry(
                name=item.label,
                ops_per_s=r["iops"],
                mb_per_s=r["bw_bytes_s"] / 1e6,
                commits_per_s=r["commits_per_s"],
                p50_us=r["commit_p50_us"],
                p99_us=r["commit_p99_us"],
                p999_us=r["commit_p999_us"],
                mean_us=r["commit_mean_us"],
                seconds=r["seconds"],
                detail=detail,
                **base,
            )
        ]
    if item.kind == "workload":
        return [
            BenchEntry(
                name=item.label,
                ops_per_s=r["commits_per_s"],
                commits_per_s=r["commits_per_s"],
                p50_us=r["p50_us"],
                p99_us=r["p99_us"],
                p999_us=r["p999_us"],
                mean_us=r["mean_us"],
                seconds=r["seconds"],
                detail={**r, "params": item.params},
                **base,
            )
        ]
    return [
        BenchEntry(
            name=f"pg_test_fsync {method}",
            ops_per_s=ops,
            commits_per_s=ops,
            mean_us=1e6 / ops,
            detail={"binary": r.get("binary", "")},
            **base,
        )
        for method, ops in r["ops_per_s"].items()
    ]


def from_sets(
    runsets: tuple[RunSet, ...], sets: list[dict[str, Any]]
) -> tuple[list[BenchEntry], list[dict]]:
    """The guest's per-run-set results, in ``runsets`` order -> entries and write-cache checks."""
    if len(sets) != len(runsets):
        raise UsageError(f"the guest returned {len(sets)} run sets for {len(runsets)} planned")
    entries: list[BenchEntry] = []
    checks: list[dict] = []
    for rs, got in zip(runsets, sets, strict=True):
        checks += [{**c, "set": rs.label} for c in got.get("checks", [])]
        if len(got["items"]) != len(rs.items):
            raise UsageError(
                f"{rs.label}: the guest returned {len(got['items'])} results for {len(rs.items)} items"
            )
        for item, outcome in zip(rs.items, got["items"], strict=True):
            checks += (
                [{**outcome["check"], "set": rs.label, "item": item.label}]
                if outcome.get("check")
                else []
            )
            entries += entries_for(
                item,
                outcome,
                write_cache=rs.write_cache,
                target=rs.target,
                mount_opts=rs.mount_opts,
            )
    return entries, checks

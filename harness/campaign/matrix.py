"""Running the verdict matrix (host): record each row (one ahead while the previous one is checked),
check it under each model, judge failing torn states again without their tear, and time the rows for
the durability-vs-cost report."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.bench.plan import plan
from powercut.bench.results import BenchResults, write
from powercut.bench.run import BenchVmSpec, run_bench_vm
from powercut.bench.run import prewarm as bench_prewarm
from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.check.checkervm import prewarm
from powercut.check.context import LogSource, context_for
from powercut.check.place import Place
from powercut.check.vmpool import VmPool
from powercut.config import DEFAULT_ACCEL, BenchItem, FsSpec, RunSet, WorkloadSpec, disk_latency
from powercut.core.log.dmlog import open_log
from powercut.core.states.nodes import Nodes
from powercut.core.states.selection import SelectionSpec
from powercut.core.states.stateid import TORN_MODELS
from powercut.debug.triage import diagnose_at
from powercut.errors import PowercutError
from powercut.linux import filesystems
from powercut.record import recording
from powercut.record.vm import RecordSpec, record
from powercut.report.matrix import Cell, Row, cells, failed_cells, one_line

log = logging.getLogger(__name__)


MAX_TEAR_CHECKS = 40  # failing torn states checked for whether they need their tear, per row


@dataclass(frozen=True, slots=True)
class MatrixRun:
    """How to run the chosen rows.  ``check_in`` empty: each CI row where its ``ci`` says, the
    others in checker VMs.  ``resume``: reuse a row's recording and judged states."""

    out: Path
    check_in: str = ""  # "" : each row where its ``ci`` says (checker VMs for the others)
    selection: SelectionSpec = (
        SelectionSpec()
    )  # each row's models and max_states override its fields
    place: Place = Place()  # accel, jobs, --check-uri, memory; its check_in is replaced per row
    resume: bool = False
    require_exhaustive: str | bool = (
        ""  # "commits": a cell expecting pass whose commit windows were not
    )
    #                                       exhaustive is a surprise; "all": nor its set-up windows


def run_row(row: Row, how: MatrixRun, on_verdict: Any = None) -> tuple[list[Cell], dict[str, Any]]:
    """Record the row's workload (unless resumed) and check it under its models."""
    return check_row(row, how, record_row(row, how), on_verdict)


def run_rows(
    rows: list[Row], how: MatrixRun, on_row: Any = None, then: Callable[[], None] | None = None
) -> list[tuple[list[Cell], dict[str, Any]]]:
    """Every row, the next one recorded while this one is checked (a TCG recording keeps one core
    busy; the check runs beside it).  ``on_row(row, cells, info)`` as each row ends.  ``then``: run
    in the recording lane once the last row is recorded, beside the last checks (the main job
    builds its bench VM's template there).  The rows' checks share one pool of checker VMs
    (check/vmpool.py), closed when the last row is checked."""
    out: list[tuple[list[Cell], dict[str, Any]]] = []
    if rows:
        _prewarm(rows[0], how)
    vms = _vm_pool(rows, how)
    if vms is not None:
        how = dataclasses.replace(how, place=dataclasses.replace(how.place, warm=vms))
    try:
        _each_row(rows, how, on_row, then, out)
    except BaseException:
        if vms is not None:
            vms.close(force=True)
        raise
    if vms is not None:
        vms.close()  # before anything is timed: no idle VM beside a bench VM
        log.info(
            "checker VMs: %d booted for %d rows, %d check chunks took a booted one",
            vms.booted,
            len(rows),
            vms.lent,
        )
    return out


def _vm_pool(rows: list[Row], how: MatrixRun) -> VmPool | None:
    """The checker VMs the rows' checks share (check/vmpool.py): when any row is checked in VMs on
    this machine; its VMs share ``how.out`` (every row's recording is under it)."""
    if how.place.uris or not any((how.check_in or row.ci or "vm") == "vm" for row in rows):
        return None
    return VmPool(how.out, how.out / "checker-vms", how.place.workers())


def _each_row(
    rows: list[Row],
    how: MatrixRun,
    on_row: Any,
    then: Callable[[], None] | None,
    out: list[tuple[list[Cell], dict[str, Any]]],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="powercut-record") as pool:
        ahead = pool.submit(record_row, rows[0], how) if rows else None
        if then is not None and len(rows) <= 1:
            pool.submit(then)  # one worker: it runs after the only recording
        for k, row in enumerate(rows):
            recorded = ahead.result() if ahead is not None else ""
            ahead = pool.submit(record_row, rows[k + 1], how) if k + 1 < len(rows) else None
            if then is not None and k + 2 == len(rows):
                pool.submit(then)  # after the last recording, beside the last checks
            cells_, info = check_row(row, how, recorded)
            if on_row:
                on_row(row, cells_, info)
            out.append((cells_, info))


def _prewarm(row: Row, how: MatrixRun) -> None:
    """The first row's checker-VM template built while the row records (check/checkervm.prewarm)."""
    if (how.check_in or row.ci or "vm") != "vm" or how.place.uris or row.nodes > 1:
        return
    try:
        fs = FsSpec(
            fstype=row.fs, mkfs_opts=tuple(row.mkfs_opts.split()), mount_opts=row.mount_opts
        )
        prewarm(how.place.vm(), filesystems.get(row.fs), fs.size_mb << 20)
    except (PowercutError, OSError) as e:  # the check says it, if it matters
        log.debug("no checker VM template ahead: %s", one_line(e))


def record_row(row: Row, how: MatrixRun) -> str:
    """Record the row into ``how.out/ROW`` (kept when resuming a finished one); "" or the error."""

    recdir = how.out / row.slug
    if how.resume and _recorded(recdir):
        return ""
    try:
        spec = RecordSpec(
            fs=FsSpec(
                fstype=row.fs, mkfs_opts=tuple(row.mkfs_opts.split()), mount_opts=row.mount_opts
            ),
            workload=WorkloadSpec(
                name=row.workload,
                params=dict(row.params),
                fault=row.fault,
                delay_sync=row.delay_sync,
            ),
            accel=how.place.accel,
            latency=disk_latency(row.disk_latency),
        )
        record(spec, recdir, nodes=row.nodes, force=True)
        return ""
    except (PowercutError, OSError) as e:
        log.warning("matrix row %s: %s", row.id, one_line(e))
        return one_line(e)


def check_row(
    row: Row, how: MatrixRun, record_error: str, on_verdict: Any = None
) -> tuple[list[Cell], dict[str, Any]]:
    recdir = how.out / row.slug
    info: dict[str, Any] = {"row": row.id, "recording": str(recdir)}
    if record_error:
        return failed_cells(row, record_error), info
    try:
        rec = recording.load(recdir)
        info["record_s"] = rec.manifest.get("recording", {}).get("vm_wall_s")
        where = how.check_in or ("vm" if how.place.uris else row.ci or "vm")
        selection = how.selection.with_(
            models=row.models,
            max_states=min((x for x in (how.selection.max_states, row.max_states) if x), default=0),
            lie_file=row.lie_file or None,
        )
        cspec = CampaignSpec(
            selection=selection,
            place=dataclasses.replace(how.place, check_in=where),
            resume=how.resume,
            shrink=0,
        )  # the matrix wants verdicts; triage is check's
        summary, _ = run_campaign(recdir, cspec, recdir / "check", on_verdict=on_verdict)
        info["check_s"] = round(summary.seconds, 1)
        info["check_in"] = cspec.place.check_in
        info["anatomy"] = summary.anatomy
        if row.nodes > 1:  # one disk's without_tear has no form for N disks yet
            info["tear_checks"] = {
                "checked": 0,
                "torn_failures": sum(f.model in TORN_MODELS for f in summary.failures),
                "seconds": 0.0,
                "note": "not checked for a cluster row",
            }
            return cells(row, summary, {}, how.require_exhaustive), info
        torn = [f for f in summary.failures if f.model in TORN_MODELS]
        t0 = time.monotonic()
        untorn = _untorn(rec, cspec, torn[:MAX_TEAR_CHECKS], recdir / "untorn") if torn else {}
        info["tear_checks"] = {
            "checked": min(len(torn), MAX_TEAR_CHECKS),
            "torn_failures": len(torn),
            "seconds": round(time.monotonic() - t0, 1),
        }
        return cells(row, summary, untorn, how.require_exhaustive), info
    except (PowercutError, OSError) as e:
        log.warning("matrix row %s: %s", row.id, one_line(e))
        return failed_cells(row, one_line(e)), info


def _untorn(rec: Any, cspec: CampaignSpec, torn: list[Any], work: Path) -> dict[str, str]:
    """Which failing torn states fail the same way without their tear (diagnose.without_tear), where
    the check ran; the states not checked (beyond MAX_TEAR_CHECKS) stay the torn model's."""
    with open_log(rec.log_path) as index:
        found = diagnose_at(
            cspec.place,
            context_for(rec),
            LogSource.of(rec),
            [index],
            Nodes([index]),
            torn,
            work,
            floors=(None,),
            budget=1,
            tear_only=True,
        )
    return {d["state"]: d.get("without_tear", "") for d in found}


def _recorded(recdir: Path) -> bool:
    try:
        recording.load(recdir).require_ok()
        return True
    except PowercutError:
        return False


TIMED_COMMITS = {False: 64, True: 24}  # commits per timed run (quick: True)


def timed_params(row: Row, quick: bool) -> dict[str, Any]:
    """The row's parameters with enough commits to time (``n``, or osync's ``total``)."""
    p = dict(row.params)
    n = TIMED_COMMITS[quick]
    if row.workload == "osync":
        p["total"] = int(p.get("bs", 4096)) * n
    else:
        p["n"] = max(int(p.get("n", 0) or 0), n)
    return p


@dataclass(frozen=True, slots=True)
class Timing:
    """What ``measure`` times: per filesystem, one bench VM and its run sets."""

    quick: bool
    accel: str = DEFAULT_ACCEL
    suites: tuple[str, ...] = ()

    def vms(self, rows: list[Row]) -> list[tuple[BenchVmSpec, tuple[RunSet, ...], tuple[str, ...]]]:
        """(bench VM, run sets, suites) per filesystem of the one-disk rows: every row's workload
        with the cache on and off, ``suites`` (e.g. ``tlpi``) in the first VM too.  Cluster rows are
        not timed (a bench VM has one disk): their cost is the cluster's."""
        out = []
        rows = [r for r in rows if r.nodes == 1]
        for k, fstype in enumerate(dict.fromkeys(r.fs for r in rows)):
            sets: dict[tuple[bool, str], list[BenchItem]] = {}
            for r in (r for r in rows if r.fs == fstype):
                item = BenchItem(
                    "workload", r.workload, "report", params=timed_params(r, self.quick), label=r.id
                )
                for wc in (True, False):
                    sets.setdefault((wc, r.mount_opts), []).append(item)
            runsets = tuple(
                RunSet(wc, tuple(items), "disk", opts) for (wc, opts), items in sets.items()
            )
            extra = self.suites if k == 0 else ()
            if extra:
                runsets += plan(extra, quick=self.quick, fstype=fstype)
            out.append(
                (
                    BenchVmSpec(fs=FsSpec(fstype=fstype), accel=self.accel),
                    runsets,
                    ("report", *extra),
                )
            )
        return out

    def prewarm(self, rows: list[Row]) -> None:
        """The bench VMs' templates built now (bench/run.prewarm), so that the timings start at once."""
        for spec, runsets, _ in self.vms(rows):
            bench_prewarm(spec, runsets)


def measure(rows: list[Row], out: Path, timing: Timing) -> list[BenchResults]:
    """Time every one-disk row's workload with the cache on and off (``Timing.vms``)."""
    results = []
    for spec, runsets, suites in timing.vms(rows):
        d = out / f"bench-{spec.fs.fstype}"
        d.mkdir(parents=True, exist_ok=True)
        res = run_bench_vm(spec, runsets, d, suites=suites, quick=timing.quick)
        write(res, d / "results.json")
        results.append(res)
    return results

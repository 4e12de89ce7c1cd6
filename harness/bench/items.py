"""How one bench item runs (guest and host): fio, a timed workload or pg_test_fsync in a directory with
its environment, and the runner table."""

from __future__ import annotations

import functools
import glob
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut import workload
from powercut.bench import parse as bench
from powercut.bench import profiles as fioprofiles
from powercut.config import BenchItem
from powercut.errors import EnvironmentNotReady, PowercutError
from powercut.linux import environ, process
from powercut.marks import TIMING_ENV

log = logging.getLogger(__name__)


PG_GLOB = "/usr/lib/postgresql/*/bin/pg_test_fsync"


@dataclass(frozen=True, slots=True)
class ItemTarget:
    """Where items run: a directory (on the filesystem under test), the environment they get, and
    -- for raw fio runs on the host -- a block device written directly."""

    directory: str
    env: dict[str, str]
    raw_device: str = ""
    tmp: str = "/tmp"  # where timing files go (not on the filesystem under test)
    fork: bool = False  # a workload runs in a child forked from this process (process.Forked), not
    #                             a new interpreter: the guest's bench, where starting Python costs ~2 s a run


def run_fio(item: BenchItem, where: ItemTarget, out: Path) -> dict[str, Any]:
    profile = fioprofiles.by_name(item.name)
    cmd = fioprofiles.fio_command(
        profile,
        where.directory,
        item.size_bytes,
        fio=process.require("fio", "fio"),
        runtime_s=item.runtime_s,
        device=where.raw_device,
    )
    res = process.run(
        cmd.argv, timeout=item.timeout_s, env={**where.env, **cmd.env_dict()}, check=False
    )
    out.with_suffix(".json").write_text(res.stdout)
    if res.returncode != 0:
        tail = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""
        raise PowercutError(f"fio {profile.name} exited {res.returncode}: {tail}")
    return bench.parse_fio_json(res.stdout, profile).as_dict()


def run_workload(item: BenchItem, where: ItemTarget, out: Path) -> dict[str, Any]:
    """The workload with ``$POWERCUT_TIMING`` set: its begin/ack marks become timestamps."""
    if where.raw_device:
        raise PowercutError(
            f"workload {item.name} needs a filesystem, not the raw device {where.raw_device}"
        )
    cwd = Path(where.directory) / f"powercut-wl-{out.name}"
    cwd.mkdir()
    timing = Path(where.tmp) / f"powercut-timing-{os.getpid()}-{out.name}.txt"
    timing.unlink(missing_ok=True)
    env = {**where.env, TIMING_ENV: str(timing), environ.PARAMS: json.dumps(item.params)}
    with open(out.with_suffix(".out"), "wb") as so, open(out.with_suffix(".err"), "wb") as se:
        proc: process.Forked | process.Spawned
        if where.fork:
            workload.get(item.name)  # imported here, once: every forked run has it
            proc = process.Forked(
                functools.partial(workload.main, [item.name]),
                cwd=str(cwd),
                env=env,
                stdout=so,
                stderr=se,
            )
        else:
            proc = process.Spawned(
                [sys.executable, "-m", "powercut.workload", item.name],
                cwd=str(cwd),
                env=env,
                stdout=so,
                stderr=se,
            )
        with proc:
            rc = proc.wait(item.timeout_s)
    text = timing.read_text() if timing.exists() else ""
    timing.unlink(missing_ok=True)
    shutil.rmtree(cwd, ignore_errors=True)
    out.with_suffix(".timing").write_text(text)
    if rc != 0:
        raise PowercutError(
            f"workload {item.name} "
            + ("timed out" if rc is None else f"exited {rc}")
            + f" (see {out.name}.err in the job share)"
        )
    return bench.parse_timing(text, f"{item.label} timing").as_dict()


def run_pg_test_fsync(item: BenchItem, where: ItemTarget, out: Path) -> dict[str, Any]:
    found = sorted(
        glob.glob(PG_GLOB),
        key=lambda p: [int(x) for x in p.split("/")[4].split(".") if x.isdigit()],
    )
    if not found:
        raise EnvironmentNotReady("pg_test_fsync not found (Debian package postgresql)")
    if where.raw_device:
        raise PowercutError(
            f"pg_test_fsync needs a filesystem, not the raw device {where.raw_device}"
        )
    res = process.run(
        [
            found[-1],
            "-s",
            str(max(1, item.runtime_s)),
            "-f",
            f"{where.directory}/powercut-pg_test_fsync.out",
        ],
        timeout=item.timeout_s,
        env=where.env,
    )
    out.with_suffix(".txt").write_text(res.stdout)
    return {"ops_per_s": bench.parse_pg_test_fsync(res.stdout), "binary": found[-1]}


RUNNERS = {"fio": run_fio, "workload": run_workload, "pg_test_fsync": run_pg_test_fsync}


def run_item(item: BenchItem, where: ItemTarget, out: Path) -> dict[str, Any]:
    """One item -> ``{"ok": True, "result": ...}`` or ``{"ok": False, "error": one line}``."""
    t = time.monotonic()
    try:
        result = RUNNERS[item.kind](item, where, out)
    except PowercutError as e:
        log.error("%s: %s", item.label, e)
        return {"ok": False, "error": e.one_line()}
    log.info("%s: done in %.1f s", item.label, time.monotonic() - t)
    return {"ok": True, "result": result, "wall_s": round(time.monotonic() - t, 3)}

"""The job the host sends to the guest agent, typed and versioned, and the one reader of the
agent's result (both sides: the host writes jobs and reads results, the guest the reverse).

A job directory (shared into the guest as ``/run/powercut/job``) holds ``job.json`` (one of the
job types below, with ``version`` and ``kind``), ``job.sh`` (what the guest's init runs: the agent
under the one guest PATH) and, afterwards, ``result.json`` and ``agent.log``."""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Union

from powercut.checker import CheckerSpec
from powercut.config import FsSpec, RunSet, WorkloadSpec, from_dict, to_dict
from powercut.errors import PowercutError, UsageError

JOB_VERSION = 3
GUEST_JOB_DIR = "/run/powercut/job"
GUEST_REC_DIR = "/run/powercut/rec"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHELL_READY = b"=== recovered and mounted at"   # the shell job's banner: its shell reads input from now on


def guest_path(tools_dir: str = "") -> str:
    """The one PATH of everything powercut runs in the guest: the image's tools (the C
    powercut-mark) first, then this Python's scripts, then the system's."""
    parts = [tools_dir] if tools_dir else []
    parts += [os.path.dirname(sys.executable), SYSTEM_PATH]
    return ":".join(parts)


@dataclass(frozen=True, slots=True)
class RecordJob:
    kind: ClassVar[str] = "record"
    dm_name: str
    disks: dict[str, str]          # role (data, log) -> disk serial
    fs: FsSpec
    workload: WorkloadSpec
    tools_dir: str = ""


@dataclass(frozen=True, slots=True)
class StateSource:
    """What every checker-VM job rebuilds states from and judges them with."""
    log: str                       # the log's path in the guest
    size: int                      # data device bytes
    fstype: str
    mount_opts: str
    checker: CheckerSpec
    disks: dict[str, str]          # scratch -> serial
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckJob:
    """Judge these states, one progress line before and one verdict after each."""
    kind: ClassVar[str] = "check"
    src: StateSource
    states: tuple[str, ...]
    tools_dir: str = ""


@dataclass(frozen=True, slots=True)
class DiagnoseJob:
    """Minimize and blame failing states (or, ``tear_only``, ask whether each torn one needs its tear)."""
    kind: ClassVar[str] = "diagnose"
    src: StateSource
    failures: tuple[dict[str, Any], ...]   # first verdicts (Verdict.to_json) of the failures
    floor: int = -1                        # the floor mark's entry (-1: none)
    budget: int = 60                       # checks per minimization
    tear_only: bool = False
    tools_dir: str = ""


@dataclass(frozen=True, slots=True)
class ShellJob:
    """Judge one state, then an interactive shell on it, recovered and mounted (``repro --shell``)."""
    kind: ClassVar[str] = "shell"
    src: StateSource
    state: str
    tools_dir: str = ""


@dataclass(frozen=True, slots=True)
class MarkBenchJob:
    kind: ClassVar[str] = "mark-bench"
    dm_name: str
    disks: dict[str, str]
    n: int = 200
    tools_dir: str = ""


@dataclass(frozen=True, slots=True)
class BenchJob:
    """``powercut bench`` in the guest (guest/bench.py): each run set on a fresh filesystem, the disk
    write cache set with ``hdparm -W`` and read back before every item."""
    kind: ClassVar[str] = "bench"
    disks: dict[str, str]          # data (and log, for a dm-log-writes target) -> serial
    fs: FsSpec
    runsets: tuple[RunSet, ...]
    dm_name: str = "powercut-bench"
    tools_dir: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "runsets", tuple(RunSet.of(r) for r in self.runsets))


Job = Union[RecordJob, CheckJob, DiagnoseJob, ShellJob, MarkBenchJob, BenchJob]
KINDS: dict[str, type] = {c.kind: c for c in (RecordJob, CheckJob, DiagnoseJob, ShellJob, MarkBenchJob, BenchJob)}
NESTED: dict[str, type] = {"fs": FsSpec, "workload": WorkloadSpec, "checker": CheckerSpec, "src": StateSource}


def to_json(job: Job) -> dict[str, Any]:
    return {"version": JOB_VERSION, "kind": job.kind, **to_dict(job)}


def from_json(d: dict[str, Any], source: str = "job.json") -> Job:
    if d.get("version") != JOB_VERSION:
        raise PowercutError(f"{source}: job version {d.get('version')!r}, this agent reads {JOB_VERSION} "
                            "(host and guest run different powercut versions)")
    cls = KINDS.get(d.get("kind", ""))
    if cls is None:
        raise PowercutError(f"{source}: unknown job kind {d.get('kind')!r}")
    body = {k: v for k, v in d.items() if k not in ("version", "kind")}
    try:
        return from_dict(cls, body, NESTED)
    except UsageError as e:
        raise PowercutError(f"{source}: a {cls.kind} job: {e.one_line()}") from None


def job_script(tools_dir: str = "") -> str:
    return ("#!/bin/sh\n# written by powercut: runs the guest agent in the guest\n"
            f"exec /usr/bin/env -i PATH={shlex.quote(guest_path(tools_dir))} HOME=/tmp LANG=C.UTF-8 "
            f"PYTHONDONTWRITEBYTECODE=1 {shlex.quote(sys.executable)} -m powercut.guest "
            f"{GUEST_JOB_DIR}/job.json\n")


def write(jobdir: Path, job: Job) -> None:
    """job.json + job.sh into a (new or empty) job directory."""
    jobdir.mkdir(parents=True, exist_ok=True)
    (jobdir / "job.json").write_text(json.dumps(to_json(job), indent=1))
    (jobdir / "job.sh").write_text(job_script(job.tools_dir))


def load(path: Path) -> Job:
    try:
        return from_json(json.loads(Path(path).read_text()), str(path))
    except (OSError, ValueError) as e:
        raise PowercutError(f"{path}: unreadable job: {e}") from None


@dataclass(frozen=True, slots=True)
class GuestResult:
    """What the agent says happened.  ``data``: the job's own figures (timings, log status...)."""

    ok: bool
    error: str = ""
    stderr_tail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def read_result(jobdir: Path) -> GuestResult:
    try:
        d = json.loads((Path(jobdir) / "result.json").read_text())
    except (OSError, ValueError):
        return GuestResult(False, f"the guest agent wrote no result (see {jobdir}/agent.log and the console log)")
    if not isinstance(d, dict):
        return GuestResult(False, f"{jobdir}/result.json is not an object")
    data = {k: v for k, v in d.items() if k not in ("ok", "error", "stderr_tail")}
    return GuestResult(bool(d.get("ok")), str(d.get("error", "")), str(d.get("stderr_tail", "")), data)


def write_result(jobdir: Path, result: GuestResult) -> None:
    out = {"ok": result.ok, **result.data}
    if result.error:
        out["error"] = result.error
    if result.stderr_tail:
        out["stderr_tail"] = result.stderr_tail
    (Path(jobdir) / "result.json").write_text(json.dumps(out, indent=1))

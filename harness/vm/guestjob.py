"""The job the host sends to the guest agent, typed and versioned, and the one reader of the
agent's result (both sides: the host writes jobs and reads results, the guest the reverse).

A job directory (shared into the guest as ``/run/powercut/job``) holds ``job.json`` (one of the
job types below, with ``version`` and ``kind``), ``job.sh`` (what the guest's init runs: the agent
under the one guest PATH), ``boot.py`` (how the agent starts: vm/agentboot.py) and, afterwards, ``result.json`` and ``agent.log``."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from powercut import checker as checkers
from powercut import registry
from powercut.checker import CheckerSpec
from powercut.config import FsSpec, RunSet, WorkloadSpec, from_dict, to_dict
from powercut.errors import PowercutError, UsageError
from powercut.vm.agentboot import boot_script, start_config, workload_entry
from powercut.workload import GROUP as WORKLOAD_GROUP

JOB_VERSION = 5
GUEST_JOB_DIR = "/run/powercut/job"
GUEST_REC_DIR = "/run/powercut/rec"
GUEST_MNT = "/run/powercut/mnt"  # where the guest mounts the filesystem under test
# the checker VM's scratch disk (the pristine and the COWs): ext4 without a journal, whatever is judged;
# formatted by the host where it can (natively ~30 ms; a dynamically linked mkfs costs a TCG guest ~0.3 s)
SCRATCH_MKFS = ("mkfs.ext4", "-F", "-q", "-E", "nodiscard", "-O", "^has_journal")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHELL_READY = (
    b"=== recovered and mounted at"  # the shell job's banner: its shell reads input from now on
)


def uptime() -> float:
    """Seconds since the guest kernel started (guest side; the boot timeline's clock: init.sh
    stamps its steps with it too).  -1 where there is no /proc/uptime."""
    try:
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


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
    disks: dict[str, str]  # role (data, log) -> disk serial
    fs: FsSpec
    workload: WorkloadSpec
    tools_dir: str = ""
    latency: str = (
        "none"  # the data disk's latency (core/recording/latency.DiskLatency, canonical text)
    )
    nodes: int = 1  # data disks (> 1: a cluster, each node's disks named by record_roles)
    mkfs: bool = True  # False: the data disk starts from another recording's crash state (--from)
    prior: tuple[str, ...] = ()  # marks logged before the mount: that state's begin:/ack: marks


def record_roles(i: int) -> tuple[str, str]:
    """The roles (RecordJob.disks keys) of node i's data and log disks: ``data<i>``/``log<i>``."""
    return (f"data{i}", f"log{i}")


@dataclass(frozen=True, slots=True)
class StateSource:
    """What every checker-VM job rebuilds states from and judges them with."""

    log: str  # the log's path in the guest
    size: int  # data device bytes
    fstype: str
    mount_opts: str
    checker: CheckerSpec
    disks: dict[str, str]  # scratch -> serial
    params: dict[str, Any] = field(default_factory=dict)
    entries: dict[str, str] = field(
        default_factory=dict
    )  # "group/name" -> "module:attr", as the host found them
    fsck: tuple[str, ...] = ()  # the fsck argv the host chose (filesystems.fsck_program)
    scratch_ready: bool = False  # the host made the scratch filesystem (SCRATCH_MKFS)
    zeros: tuple[
        tuple[tuple[int, int], ...], ...
    ] = ()  # per disk, its log's all-zero writes before its
    #                                                        first mark (replay/materialize.zero_writes)
    trace_reads: bool = False  # CheckContext.trace_reads (left out of job.json when False: what an
    #                                agent before it reads)
    initial: str = ""  # the first disk's image before its log, in the guest ("": zeros); a
    #                    recording made from another's crash state (record --from) has one

    @staticmethod
    def entries_for(checker: CheckerSpec) -> dict[str, str]:
        """Where the registered checker is (registry.preset in the guest: no metadata scan there)."""
        ref = registry.entry_ref(checkers.GROUP, checker.name) if checker.name else ""
        return {f"{checkers.GROUP}/{checker.name}": ref} if ref else {}


@dataclass(frozen=True, slots=True)
class CheckJob:
    """Judge these states, one progress line before and one verdict after each: states of one disk
    (``src.log``), or of N > 1 disks (core/states/nodes.py ids) whose logs are ``logs`` (node 0 first,
    paths in the guest; ``src.log`` is node 0's), every disk's image rebuilt from its own log and
    all mounted at once."""

    kind: ClassVar[str] = "check"
    src: StateSource
    states: tuple[str, ...]
    tools_dir: str = ""
    logs: tuple[str, ...] = ()
    prove: bool = False  # the read-set rule may prove states of one disk (check/proving.py)


@dataclass(frozen=True, slots=True)
class DiagnoseJob:
    """Minimize and blame failing states of one disk or of N (``logs`` as CheckJob's), or, with
    ``tear_only``, ask whether each torn one of one disk needs its tear."""

    kind: ClassVar[str] = "diagnose"
    src: StateSource
    failures: tuple[dict[str, Any], ...]  # first verdicts (Verdict.to_json) of the failures
    floors: tuple[int, ...] = ()  # each disk's floor mark entry (-1: none; empty: none anywhere)
    budget: int = 60  # checks per minimization, shared by the disks
    tear_only: bool = False
    tools_dir: str = ""
    logs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShellJob:
    """Judge one state, then an interactive shell on it, recovered and mounted (``repro --shell``):
    one disk's at ``GUEST_MNT``, or with ``logs`` (as CheckJob's) every node's at ``GUEST_MNT/n<i>``."""

    kind: ClassVar[str] = "shell"
    src: StateSource
    state: str
    tools_dir: str = ""
    logs: tuple[str, ...] = ()


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
    disks: dict[str, str]  # data (and log, for a dm-log-writes target) -> serial
    fs: FsSpec
    runsets: tuple[RunSet, ...]
    dm_name: str = "powercut-bench"
    tools_dir: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "runsets", tuple(RunSet.of(r) for r in self.runsets))


Job = RecordJob | CheckJob | DiagnoseJob | ShellJob | MarkBenchJob | BenchJob
KINDS: dict[str, type[Job]] = {
    c.kind: c for c in (RecordJob, CheckJob, DiagnoseJob, ShellJob, MarkBenchJob, BenchJob)
}
NESTED: dict[str, type] = {
    "fs": FsSpec,
    "workload": WorkloadSpec,
    "checker": CheckerSpec,
    "src": StateSource,
}


STOP = "stop"  # a file in the job share: a serving agent ends (and the guest powers off)
IDLE_S = 900.0  # a serving agent given no next job for this long ends by itself


def to_json(job: Job, *, seq: int = 1, serve: bool = False) -> dict[str, Any]:
    """``seq``: the job's number in this VM; ``serve``: after it, the agent waits for job seq+1 (a
    new job.json) or the STOP file, so one booted VM can run the jobs of several phases."""
    body = to_dict(job)
    if isinstance(body.get("src"), dict):
        for key in (
            "trace_reads",
            "initial",
        ):  # left out when unset: what an agent before them reads
            if not body["src"].get(key):
                body["src"].pop(key, None)
    if job.kind == "record" and body.get("mkfs") is True and not body.get("prior"):
        body.pop("mkfs", None)
        body.pop("prior", None)
    return {"version": JOB_VERSION, "kind": job.kind, "seq": seq, "serve": serve, **body}


def envelope(d: Any) -> tuple[int, bool]:
    """(seq, serve) of a job.json's contents ((1, False) for anything else)."""
    if not isinstance(d, dict):
        return 1, False
    seq = d.get("seq", 1)
    return (seq if isinstance(seq, int) else 1), d.get("serve") is True


def peek(path: Path) -> tuple[int, bool]:
    """(seq, serve) of a job file, never an error (``load`` reports an unreadable one)."""
    try:
        return envelope(json.loads(Path(path).read_text()))
    except (OSError, ValueError):
        return 1, False


def from_json(d: dict[str, Any], source: str = "job.json") -> Job:
    if d.get("version") != JOB_VERSION:
        raise PowercutError(
            f"{source}: job version {d.get('version')!r}, this agent reads {JOB_VERSION} "
            "(host and guest run different powercut versions)"
        )
    cls = KINDS.get(d.get("kind", ""))
    if cls is None:
        raise PowercutError(f"{source}: unknown job kind {d.get('kind')!r}")
    body = {k: v for k, v in d.items() if k not in ("version", "kind", "seq", "serve")}
    try:
        return from_dict(cls, body, NESTED)
    except UsageError as e:
        raise PowercutError(f"{source}: a {cls.kind} job: {e.one_line()}") from None


def needs_full_site(job: Job) -> bool:
    """A job that runs the user's code in the agent's process (a checker function) or the user's
    programs (record, bench) starts the agent with ``site`` as usual; the checker-VM jobs of
    built-in or command checkers without it (vm/agentboot.py)."""
    src = getattr(job, "src", None)
    return src is None or bool(src.checker.function)


def agent_env(tools_dir: str = "") -> dict[str, str]:
    """The guest agent's whole environment."""
    return {
        "PATH": guest_path(tools_dir),
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def job_script(tools_dir: str = "") -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in agent_env(tools_dir).items())
    return (
        "#!/bin/sh\n# written by powercut: runs the guest agent in the guest (boot.py: vm/agentboot.py)\n"
        f"exec /usr/bin/env -i {env} {shlex.quote(sys.executable)} -S {GUEST_JOB_DIR}/boot.py "
        f"{GUEST_JOB_DIR}/job.json\n"
    )


def write(jobdir: Path, job: Job, *, seq: int = 1, serve: bool = False) -> None:
    """job.json (replaced atomically: a serving agent polls for it) and, for a VM's first job, job.sh
    and boot.py into a job directory."""
    jobdir.mkdir(parents=True, exist_ok=True)
    if seq == 1:  # a later job goes to an agent that has started already
        (jobdir / "job.sh").write_text(job_script(job.tools_dir))
        (jobdir / "boot.py").write_text(
            boot_script(guest_path(job.tools_dir), full_site=needs_full_site(job))
        )
        (jobdir / "start.json").write_text(
            json.dumps(start_config(agent_env(job.tools_dir), full_site=needs_full_site(job)))
        )
        if isinstance(job, RecordJob):
            write_workload_boot(jobdir, job)
    tmp = jobdir / ".job.json.tmp"
    tmp.write_text(json.dumps(to_json(job, seq=seq, serve=serve), indent=1))
    os.replace(tmp, jobdir / "job.json")


WORKLOAD_BOOT = "workload.py"
BUILTIN_WORKLOADS = "powercut.workloads."


def write_workload_boot(jobdir: Path, job: RecordJob) -> None:
    """``workload.py`` for a recording of one of powercut's own workloads: the guest starts it with
    ``python -S`` (vm/agentboot.py), sparing the workload's process what the agent spares itself.
    Under TCG a full start -- ``site`` with the host's .pth files, every distribution's entry points
    scanned for the workload's name -- took ~2-3 s of a recording's ~6 s (measured 2026-11-28 from
    the trace's timestamps: 2.3 s to the end of ``site``, 1.5 s in the entry points).  A user's
    workload (another distribution, or a command) starts as before: its package may need ``site``."""
    (jobdir / WORKLOAD_BOOT).unlink(missing_ok=True)
    if job.workload.cmd:
        return
    ref = registry.entry_ref(WORKLOAD_GROUP, job.workload.name)
    if ref.startswith(BUILTIN_WORKLOADS):
        (jobdir / WORKLOAD_BOOT).write_text(
            boot_script(
                guest_path(job.tools_dir),
                full_site=False,
                entry=workload_entry(WORKLOAD_GROUP, job.workload.name, ref),
            )
        )


def wait_next(jobdir: Path, seq: int, idle_s: float = IDLE_S, poll_s: float = 0.05) -> bool:
    """Guest side, after job ``seq`` of a serving agent: True once job.json holds a later job, False
    on the STOP file or after ``idle_s`` without one."""
    deadline = time.monotonic() + idle_s
    while time.monotonic() < deadline:
        if (jobdir / STOP).exists():
            return False
        if peek(jobdir / "job.json")[0] > seq:
            return True
        time.sleep(poll_s)
    return False


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


def read_result(jobdir: Path, seq: int | None = None) -> GuestResult:
    """The agent's result (of job ``seq``, when given: an earlier job's result is no result)."""
    try:
        d = json.loads((Path(jobdir) / "result.json").read_text())
    except (OSError, ValueError):
        return GuestResult(
            False, f"the guest agent wrote no result (see {jobdir}/agent.log and the console log)"
        )
    if not isinstance(d, dict):
        return GuestResult(False, f"{jobdir}/result.json is not an object")
    if seq is not None and d.get("seq", 1) != seq:
        return GuestResult(
            False, f"the guest agent wrote no result for job {seq} (see {jobdir}/agent.log)"
        )
    data = {k: v for k, v in d.items() if k not in ("ok", "error", "stderr_tail", "seq")}
    return GuestResult(
        bool(d.get("ok")), str(d.get("error", "")), str(d.get("stderr_tail", "")), data
    )


def peek_result_seq(jobdir: Path) -> int | None:
    """The job number of the result in ``jobdir`` (None: no readable result)."""
    try:
        d = json.loads((Path(jobdir) / "result.json").read_text())
    except (OSError, ValueError):
        return None
    return d.get("seq", 1) if isinstance(d, dict) else None


def write_result(jobdir: Path, result: GuestResult, seq: int = 1) -> None:
    out = {"ok": result.ok, "seq": seq, **result.data}
    if result.error:
        out["error"] = result.error
    if result.stderr_tail:
        out["stderr_tail"] = result.stderr_tail
    tmp = Path(jobdir) / ".result.json.tmp"
    tmp.write_text(json.dumps(out, indent=1))
    os.replace(tmp, Path(jobdir) / "result.json")  # whole or not there: the host polls for it


# A checker VM's template (vmstart/template.py on the host, guest/template.py in the guest): the
# template agent says READY once it can be saved, polls the control disk for a go block, and says
# RESTORED once restored and in the host root (what fails before that is the restore's).
TEMPLATE_READY = "powercut-template-ready"
TEMPLATE_RESTORED = "powercut-restored"
TEMPLATE_PRELOAD = (
    "powercut.guest.__main__",
    "powercut.guest.check",
)  # what it imports before the save
CONTROL_SERIAL = "pcctl"
GO_MAGIC = b"powercut-go\n"
GO_BLOCK = 4096


def go_block(now: float, seed: str) -> bytes:
    """The control disk's first block for one restored VM: the host's clock and random bytes."""
    block = GO_MAGIC + json.dumps({"time": now, "seed": seed}).encode()
    if len(block) >= GO_BLOCK:
        raise ValueError("go block too long")
    return block + b"\0" * (GO_BLOCK - len(block))


def parse_go(block: bytes) -> dict[str, Any] | None:
    """A go block's settings (None: not a go block, e.g. the template's zeroed control disk)."""
    if not block.startswith(GO_MAGIC):
        return None
    end = block.find(b"\0")
    go = json.loads(block[len(GO_MAGIC) : end if end > 0 else len(block)])
    if (
        not isinstance(go, dict)
        or not isinstance(go.get("time"), (int, float))
        or not isinstance(go.get("seed"), str)
    ):
        raise ValueError(f"a go block without time and seed: {go!r}")
    return go

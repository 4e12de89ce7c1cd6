"""Judge crash states: recover (mount: the kernel replays its journal, as after a real power loss)
-> the workload's checker -> unmount -> read-only fsck -> a verdict with reasons.

``judge`` works on any block device and runs wherever the device is: on the host over a loop device
(``--check-in host``) or inside the checker VM over a dm-snapshot (``--check-in vm``, see
checkvm.py).  Verdicts, worst first: kernel-panic, timeout, mount-failed, checker-crashed,
corrupt-data, lost-ack, fsck-error, pass."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import process
from .checker import CheckInput, CheckResult
from .checker import get as get_checker
from .errors import CommandFailed, UsageError
from .models import CrashState

log = logging.getLogger(__name__)

FSCK = {"ext4": ["e2fsck", "-fn"], "xfs": ["xfs_repair", "-n"], "btrfs": ["btrfs", "check", "--readonly"]}
SEVERITY = ("pass", "fsck-error", "lost-ack", "corrupt-data", "checker-crashed", "mount-failed", "timeout",
            "kernel-panic")


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str
    model: str
    cut: int
    verdict: str
    reasons: tuple[str, ...]
    acked: int
    begun: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Verdict":
        return Verdict(d["state"], d["model"], d["cut"], d["verdict"], tuple(d["reasons"]), d["acked"], d["begun"],
                       d["seconds"])


@dataclass(frozen=True, slots=True)
class CheckerSpec:
    """A registered checker (by workload name) or an executable command (``--checker``)."""

    name: str = ""
    command: str = ""
    timeout_s: float = 120.0

    def run(self, inp: CheckInput) -> CheckResult:
        if not self.name and not self.command:
            return CheckResult("pass", ("no checker: recovery mount and fsck only",))
        if self.name:
            return get_checker(self.name).check(inp)
        try:
            out = subprocess.run(["/bin/sh", "-c", self.command], input=json.dumps(inp.to_json()), text=True,
                                 capture_output=True, timeout=self.timeout_s, cwd=inp.mount)
        except subprocess.TimeoutExpired:
            return CheckResult("checker-crashed", (f"checker command timed out after {self.timeout_s:g} s",))
        lines = tuple(line for line in out.stdout.splitlines() if line.strip())
        if out.returncode == 0:
            return CheckResult("pass", lines)
        if out.returncode == 1:
            kind = "lost-ack" if any("lost" in line.lower() for line in lines) else "corrupt-data"
            return CheckResult(kind, lines or ("checker command exited 1",))
        tail = (out.stderr.strip().splitlines() or [""])[-1]
        return CheckResult("checker-crashed", (f"checker command exited {out.returncode}: {tail}",))


def fsck(fstype: str, device: str, timeout: float = 300.0) -> tuple[bool, str]:
    """Read-only fsck: (clean, last lines of its report)."""
    try:
        res = process.run(FSCK[fstype] + [device], timeout=timeout, check=False)
    except CommandFailed as e:
        return False, f"fsck timed out: {e.one_line()}"
    text = (res.stdout + res.stderr).strip().splitlines()
    return res.returncode == 0, " | ".join(text[-3:])


def judge(device: str, fstype: str, state: CrashState, checker: CheckerSpec, params: dict[str, Any], mnt: str,
          *, mount_opts: str = "", mount_timeout: float = 120.0) -> Verdict:
    """The verdict for one state whose image is the block device ``device``."""
    t0 = time.monotonic()
    reasons: list[str] = []

    def done(verdict: str) -> Verdict:
        return Verdict(state.id, state.model, state.cut, verdict, tuple(reasons), len(state.acks), len(state.begun),
                       round(time.monotonic() - t0, 3))

    os.makedirs(mnt, exist_ok=True)
    err = _mount(device, mnt, fstype, mount_opts, mount_timeout)
    if err:
        reasons.append(f"mount failed: {err}")
        ok, report = fsck(fstype, device)
        reasons.append(f"fsck: {'clean' if ok else report}")
        return done("mount-failed")
    try:
        try:
            result = checker.run(CheckInput(mnt, state.acks, state.begun, params, state.id))
        except Exception as e:  # a checker's bug is that state's finding, not the campaign's end
            log.exception("checker crashed on %s", state.id)
            result = CheckResult("checker-crashed", (f"{type(e).__name__}: {e}",))
    finally:
        _umount(mnt, mount_timeout)
    reasons.extend(result.reasons)
    ok, report = fsck(fstype, device)
    if not ok:
        reasons.append(f"fsck: {report}")
        return done(result.verdict if result.verdict != "pass" else "fsck-error")
    return done(result.verdict)


_libc = None


def _syscalls() -> Any:
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _mount(device: str, mnt: str, fstype: str, opts: str, timeout: float) -> str | None:
    """Mount (= let the kernel recover the state); None or the reason it failed.  Without options
    this is the mount(2) system call itself: in a TCG guest each fork+exec of mount(8) costs more
    than the mount."""
    if opts:
        res = process.run(["mount", "-t", fstype, "-o", opts, device, mnt], timeout=timeout, check=False)
        return None if res.returncode == 0 else (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    import ctypes
    libc = _syscalls()
    if libc.mount(device.encode(), mnt.encode(), fstype.encode(), ctypes.c_ulong(0), None) == 0:
        return None
    e = ctypes.get_errno()
    return f"mount(2) of {device} as {fstype}: {os.strerror(e)}"


def _umount(mnt: str, timeout: float) -> None:
    libc = _syscalls()
    for attempt in range(3):
        if libc.umount2(mnt.encode(), 0) == 0:
            return
        time.sleep(0.2 * (attempt + 1))
    process.run(["umount", "-l", mnt], timeout=timeout, check=False)


class Journal:
    """Append-only JSON-lines journal of verdicts, fsync'd per verdict; the resume point."""

    def __init__(self, path: str | os.PathLike[str], resume: bool) -> None:
        self.path = str(path)
        self.done: dict[str, Verdict] = {}
        if os.path.exists(self.path):
            if not resume:
                raise UsageError(f"{self.path} exists: use --resume to continue that campaign, or another output")
            self._load()
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def _load(self) -> None:
        with open(self.path, "rb+") as f:
            data = f.read()
            end = data.rfind(b"\n") + 1
            if end < len(data):  # a torn last line from a kill -9: drop it, that state is judged again
                f.truncate(end)
            for line in data[:end].splitlines():
                try:
                    v = Verdict.from_json(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    log.warning("%s: skipping an unreadable journal line", self.path)
                    continue
                self.done[v.state] = v

    def add(self, v: Verdict) -> None:
        os.write(self.fd, (json.dumps(v.to_json(), separators=(",", ":")) + "\n").encode())
        os.fsync(self.fd)
        self.done[v.state] = v

    def close(self) -> None:
        os.close(self.fd)


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=SEVERITY.index, default="pass")


# ------------------------------------------------------------------------------ campaign (host)

def select_states(index: Any, models: list[str], *, seed: int = 0, bound: int = 10, samples: int = 64) -> list[CrashState]:
    """The states worth judging: those after the ``mkfs`` mark whose durable set keeps all of mkfs
    (before mkfs finished there is no filesystem to recover), for each model, without duplicates."""
    from .models import enumerate_states
    mkfs = index.find_mark("mkfs")
    floor = mkfs if mkfs is not None else 0
    seen: set[str] = set()
    out: list[CrashState] = []
    for model in models:
        for s in enumerate_states(index, model, seed=seed, exhaustive_bound=bound, samples=samples):
            if s.cut <= floor or any(d < floor for d in s.dropped) or s.id in seen:
                continue
            seen.add(s.id)
            out.append(s)
    return out


def split_by_base(index: Any, states: list[CrashState], parts: int) -> list[list[CrashState]]:
    """Contiguous chunks in walk order, one incremental walk each (for -j N)."""
    from .replay import plan
    ordered = sorted(states, key=lambda s: plan(index, s).base)
    parts = max(1, min(parts, len(ordered)))
    size, extra = divmod(len(ordered), parts)
    chunks, pos = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        chunks.append(ordered[pos:pos + n])
        pos += n
    return [c for c in chunks if c]


def cleanup_stale(workspace: str) -> None:
    """Undo what a killed run left under ``workspace``: deepest mount first, and before unmounting a
    file system, detach the loop devices whose backing files live on it."""
    root = os.path.realpath(workspace)
    inside = lambda p, top: p == top or p.startswith(top + "/")  # noqa: E731
    try:
        with open("/proc/self/mounts") as f:
            points = [line.split()[1].replace("\\040", " ") for line in f]
    except OSError:
        points = []
    res = process.run(["losetup", "--list", "--noheadings", "-O", "NAME,BACK-FILE"], timeout=30, check=False)
    loops = []
    for line in res.stdout.splitlines():
        name, _, back = line.strip().partition(" ")
        back = back.strip().removesuffix("(deleted)").strip()
        if inside(back, root):
            loops.append((name, back))

    def detach(top: str) -> None:
        for name, back in [lp for lp in loops if inside(lp[1], top)]:
            log.warning("detaching %s (%s) left by an interrupted run", name, back)
            process.run(["losetup", "-d", name], timeout=30, check=False)
            loops.remove((name, back))

    for mp in sorted((p for p in points if inside(p, root)), key=len, reverse=True):
        detach(mp)
        log.warning("unmounting %s left by an interrupted run", mp)
        if process.run(["umount", mp], timeout=60, check=False).returncode:
            process.run(["umount", "-l", mp], timeout=60, check=False)
    detach(root)


def check_host(index: Any, data_size: int, fstype: str, states: list[CrashState], checker: CheckerSpec,
               params: dict[str, Any], journal: Journal, workspace: str, jobs: int = 1,
               on_verdict: Any = None, mount_opts: str = "") -> None:
    """Judge ``states`` on this host with loop devices, ``jobs`` incremental walks in parallel."""
    import stat
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from .loopdev import LoopDevice
    from .replay import materialize

    process.require("losetup", "mount")
    cleanup_stale(workspace)
    lock = threading.Lock()
    todo = [s for s in states if s.id not in journal.done]

    def worker(wid: int, chunk: list[CrashState]) -> None:
        ws = os.path.join(workspace, f"w{wid}")
        os.makedirs(ws, exist_ok=True)
        for state, img in materialize(index, None, data_size, chunk, Path(ws)):
            mnt = os.path.join(ws, "mnt")
            if stat.S_ISBLK(os.stat(img).st_mode):
                v = judge(str(img), fstype, state, checker, params, mnt, mount_opts=mount_opts)
            else:
                with LoopDevice(img) as dev:
                    v = judge(dev, fstype, state, checker, params, mnt, mount_opts=mount_opts)
            with lock:
                journal.add(v)
                if on_verdict:
                    on_verdict(v)

    chunks = split_by_base(index, todo, jobs)
    with ThreadPoolExecutor(max_workers=len(chunks) or 1) as pool:
        for f in [pool.submit(worker, i, c) for i, c in enumerate(chunks)]:
            f.result()

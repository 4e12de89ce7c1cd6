"""The write cache of loop devices: reading and setting it (sysfs), the write-through devices live
powercut runs hold, and their cache given back when a run dies without doing so itself (host and
guest; root).

Making a loop device write-through (loopdev.LoopDevice(write_cache=False)) changes /dev/loopN,
not the attachment: on Linux 6.11 and later a device that is detached while write-through is
attached write-through by the next program the kernel hands it to (``losetup -f``, a VM image, a
container), whose flushes then never reach its backing file.  So powercut keeps a device
write-through only while it holds it (attached, for a whole run: the XFS workspace, dm-snapshot's
pristines), and restores the cache before it lets go.  For a run killed before it could:

* every such device is *claimed* in ``$POWERCUT_RUN_DIR/write-through/loopN`` (pid, the pid's
  start time, backing file), under one flock;
* a *guardian* process per run (``python -m powercut.linux.loopcache``, in a session of its own,
  not killed by an interrupt's cleanup) reads a pipe from the run; the pipe ends when the run's
  process ends, however it ends (``kill -9`` included), and the guardian restores the write cache
  of every device the run still claims;
* where the guardian died too, the next powercut run on the host restores the devices of every
  claim whose process no longer lives (``restore_orphans``: at each claim and at stale-run
  cleanup), and only those: a live run's devices are never touched.

``GUARD = False`` (set by the guest agent: a VM's devices die with it) skips the guardian."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from powercut.linux import process
from powercut.linux.rundir import run_dir

log = logging.getLogger(__name__)

GUARD = True
_guardian: process.Spawned | None = None
_guardian_lock = threading.Lock()


def _cache_knob(dev: str) -> str:
    return f"/sys/block/{os.path.basename(dev)}/queue/write_cache"


def has_write_cache(dev: str) -> bool:
    """Whether the block layer treats ``dev`` as having a volatile write cache (sends it flushes)."""
    with open(_cache_knob(dev), "rb") as f:
        return f.read().strip() == b"write back"


def set_write_cache(dev: str, enabled: bool) -> None:
    """Write-back (flushes reach the loop driver, which fsyncs the backing file) or write-through
    (the block layer completes flushes and drops FUA itself).  What is written and read is the
    same either way; only durability across a host crash differs.  Costs a queue freeze (~10 ms)."""
    with open(_cache_knob(dev), "wb") as f:
        f.write(b"write back" if enabled else b"write through")


def ensure_write_cache(dev: str) -> None:
    """Turn the write cache of ``dev`` back on where it is off (set only while it is attached)."""
    try:
        if not has_write_cache(dev):
            set_write_cache(dev, True)
    except OSError:  # refused where there is no cache to turn on (a backing file without fsync)
        pass


def _registry() -> Path:
    return run_dir("write-through")


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    reg = _registry()
    fd = os.open(reg / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield reg
    finally:
        os.close(fd)


def start_time(pid: int) -> str:
    """The process's start time (field 22 of /proc/PID/stat), "" if it is gone or a zombie: a pid
    and its start time name one process even after the pid is reused."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = raw[raw.rfind(")") + 2 :].split()
    return "" if fields[0] in ("Z", "X") else fields[19]


def claim(dev: str, backing: str) -> None:
    """Record that this process makes ``dev`` write-through (before it does); the guardian starts
    with the first claim."""
    me = os.getpid()
    with _locked() as reg:
        _restore_orphans(reg)
        (reg / os.path.basename(dev)).write_text(
            json.dumps({"pid": me, "start": start_time(me), "backing": backing})
        )
    if GUARD:
        _start_guardian()


def release(dev: str) -> None:
    """This process gave ``dev`` its write cache back: the claim goes (only this process's)."""
    with _locked() as reg:
        rec = _read(reg / os.path.basename(dev))
        if rec is not None and rec.get("pid") == os.getpid():
            (reg / os.path.basename(dev)).unlink(missing_ok=True)


def _read(path: Path) -> dict | None:
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def restore_orphans(dead_pid: int = 0) -> list[str]:
    """Give back the write cache of every claimed device whose claiming process no longer lives
    (and, with ``dead_pid``, of every device that pid claims: the guardian's parent, which is
    exiting); their claims go.  The devices it restored."""
    with _locked() as reg:
        return _restore_orphans(reg, dead_pid)


def _restore_orphans(reg: Path, dead_pid: int = 0) -> list[str]:
    """restore_orphans under the registry's lock (held by the caller)."""
    done = []
    for path in sorted(reg.glob("loop*")):
        rec = _read(path)
        pid = int(rec.get("pid", 0)) if rec else 0
        if rec is not None and pid != dead_pid and start_time(pid) == rec.get("start") != "":
            continue  # a live run's
        dev = f"/dev/{path.name}"
        ensure_write_cache(dev)
        path.unlink(missing_ok=True)
        log.warning(
            "%s: write cache turned back on (left write-through by powercut pid %s, which died)",
            dev,
            pid or "?",
        )
        done.append(dev)
    return done


def _start_guardian() -> None:
    global _guardian
    with _guardian_lock:
        if _guardian is not None and _guardian.poll() is None:
            return
        _guardian = process.Spawned(
            [sys.executable, "-m", "powercut.linux.loopcache", str(os.getpid())],
            stdin=process.PIPE,
            survives_interrupt=True,
        )


def main(argv: list[str]) -> int:
    """The guardian: wait for the end of the pipe from its run, then restore what the run claims."""
    parent = int(argv[0])
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except KeyboardInterrupt:
        pass
    restore_orphans(dead_pid=parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

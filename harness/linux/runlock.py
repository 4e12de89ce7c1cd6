"""Host-wide locks of live powercut runs (host): one per output directory, so that two runs on one
host (a nightly and a person's check, two shards on one machine) never work in, clean up or
replace the same directory.

A lock is an ``flock`` on a file under ``$POWERCUT_RUN_DIR/locks`` (``/run/powercut``: a tmpfs,
emptied at boot), named by a hash of the directory's real path, so it does not depend on the
directory existing or being replaced (``--force`` removes and recreates it).  The kernel drops the
lock when its process dies, by any signal: a lock that nothing holds is a dead run's, and the next
run takes it; stale-run cleanup (check/host.cleanup_stale) runs only under it, so it only ever
touches what a dead run left.  The file holds the holder's pid, for the one-line refusal."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from powercut.errors import UsageError
from powercut.linux.rundir import run_dir

log = logging.getLogger(__name__)


def lock_path(directory: str | os.PathLike[str]) -> Path:
    key = os.path.realpath(directory)
    return run_dir("locks") / (hashlib.sha256(os.fsencode(key)).hexdigest()[:24] + ".lock")


def holder(directory: str | os.PathLike[str]) -> int:
    """The pid of the live run that holds ``directory``'s lock, 0 if none does."""
    path = lock_path(directory)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _pid_in(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return 0
    finally:
        os.close(fd)


def _pid_in(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return 0


@contextlib.contextmanager
def hold(directory: str | os.PathLike[str], what: str = "output directory") -> Iterator[None]:
    """Hold ``directory``'s lock for the ``with`` body; another live run holding it is one
    UsageError line naming its pid.  Taken again by the same process (a campaign inside a
    command that holds it already) it is a no-op."""
    key = os.path.realpath(directory)
    if key in _held:
        yield
        return
    path = lock_path(directory)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _pid_in(fd)
            raise UsageError(
                f"{directory} is in use by another powercut run (pid {pid or '?'}): wait for it, "
                f"or choose another {what}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {key}\n".encode(), 0)
        _held.add(key)
        try:
            yield
        finally:
            _held.discard(key)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # drops the lock; the file stays (removing it would race a waiting taker)


_held: set[str] = set()

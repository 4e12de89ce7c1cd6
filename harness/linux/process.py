"""The only place that runs subprocesses (host and guest): argv lists (or an explicit shell for a
user's command string), a timeout on every call, each child in its own process group that is killed
as a whole (a grandchild cannot outlive its timeout and keep a mount busy), errors that carry the
argv (``shlex.join``), the exit code and the stderr tail.

Every live child group is registered, so an interrupt handler can kill them all at once
(``kill_all``) even while the thread that started them is blocked."""
from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from powercut.errors import CommandFailed, EnvironmentNotReady

log = logging.getLogger(__name__)

TAIL_CHARS = 4000
PIPE = subprocess.PIPE   # a Spawned child's stdin/stdout as a pipe (its callers import no subprocess)
SHELL = "/bin/sh"

_live: set[int] = set()
_live_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str, ...]
    returncode: int | None    # None: killed by its timeout
    stdout: str
    stderr: str
    duration_s: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def require(tool: str, package: str | None = None) -> str:
    """Absolute path of ``tool`` or EnvironmentNotReady naming the package that provides it."""
    path = shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}", f"/usr/lib/qemu/{tool}", f"/usr/libexec/{tool}")
         if os.access(p, os.X_OK)), None)
    if not path:
        hint = f" (install the Debian package {package}: powercut setup)" if package else ""
        raise EnvironmentNotReady(f"{tool} not found{hint}")
    return path


def _register(pid: int) -> None:
    with _live_lock:
        _live.add(pid)


def _unregister(pid: int) -> None:
    with _live_lock:
        _live.discard(pid)


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def live_groups() -> list[int]:
    with _live_lock:
        return sorted(_live)


def kill_all(sig: int = signal.SIGKILL) -> int:
    """Signal every live child process group (for an interrupt); returns how many."""
    groups = live_groups()
    for pid in groups:
        _kill_group(pid, sig)
    return len(groups)


class _Popen(subprocess.Popen):
    """Popen whose ``wait(timeout)`` sleeps on a pidfd until the child exits.  subprocess's own
    polls waitpid with sleeps of 1 ms, then 2, 4...: ``communicate(timeout=...)`` pays one or more
    of them after a short command's pipes close (an fsck per crash state: ~1 ms of ~4)."""

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None or self.returncode is not None:
            return super().wait(timeout)
        try:
            fd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):   # no pidfd (Linux < 5.3), or already reaped
            return super().wait(timeout)
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            ready = p.poll(max(0, int(timeout * 1000) + 1))
        finally:
            os.close(fd)
        if not ready:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return super().wait()   # it has exited: reaped at once


def run(argv: Sequence[str], *, timeout: float, check: bool = True, input: str | bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | None = None, text: bool = True) -> Result:
    """Run ``argv`` to completion in its own process group; on timeout kill the whole group.
    ``check``: a non-zero exit or a timeout raises CommandFailed; else both are in the Result."""
    argv = [str(a) for a in argv]
    log.debug("run %s", argv)
    start = time.monotonic()
    try:
        proc = _Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env) if env else None,
                      cwd=cwd, text=text, start_new_session=True)
    except FileNotFoundError as e:
        raise EnvironmentNotReady(f"{argv[0]} not found") from e
    except NotADirectoryError as e:
        raise EnvironmentNotReady(f"{cwd or argv[0]}: not a directory") from e
    _register(proc.pid)
    timed_out = False
    try:
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            out, err = proc.communicate()
        finally:
            # the leader has exited (or was killed): its leftovers in the group must not linger
            _kill_group(proc.pid)
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        _unregister(proc.pid)
    res = Result(tuple(argv), None if timed_out else proc.returncode, out, err,
                 round(time.monotonic() - start, 3), timed_out)
    if check and timed_out:
        raise CommandFailed(argv, None, _tail(err), timed_out=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, _tail(err))
    return res


def run_shell(command: str, *, timeout: float, check: bool = False, **kwargs: object) -> Result:
    """A user's command string, explicitly through ``/bin/sh -c`` (same guarantees as ``run``)."""
    return run([SHELL, "-c", command], timeout=timeout, check=check, **kwargs)  # type: ignore[arg-type]


def _tail(s: str | bytes | None) -> str:
    if s is None:
        return ""
    if isinstance(s, bytes):
        s = s.decode(errors="replace")
    return s[-TAIL_CHARS:]


class Spawned:
    """A long-running child (QEMU, virtiofsd, a workload) in its own process group, output to files.

    ``survives_interrupt``: not among the groups an interrupt kills (``kill_all``): a guardian that
    must outlive its run (linux/loopcache)."""

    def __init__(self, argv: Sequence[str], *, stdout: IO | int | None = None, stderr: IO | int | None = None,
                 env: Mapping[str, str] | None = None, pass_fds: Sequence[int] = (), cwd: str | None = None,
                 stdin: IO | int | None = None, survives_interrupt: bool = False) -> None:
        self.argv = [str(a) for a in argv]
        log.debug("spawn %s", self.argv)
        try:
            self.proc = subprocess.Popen(self.argv, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                         stdout=stdout if stdout is not None else subprocess.DEVNULL,
                                         stderr=stderr if stderr is not None else subprocess.DEVNULL,
                                         env=dict(env) if env else None, start_new_session=True,
                                         pass_fds=tuple(pass_fds), cwd=cwd)
        except FileNotFoundError as e:
            raise EnvironmentNotReady(f"{self.argv[0]} not found") from e
        if not survives_interrupt:
            _register(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float | None) -> int | None:
        """Exit code, or None if still running after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        """Kill the whole group (also when the leader already exited: its children may not have)."""
        _kill_group(self.proc.pid)
        self.proc.wait()
        _unregister(self.proc.pid)

    def __enter__(self) -> "Spawned":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class Forked:
    """``fn()`` run in a child forked from this process, in its own process group, with its working
    directory, environment and output files -- Spawned's contract without a new interpreter: a
    guest under TCG spends ~2 s starting Python and importing a workload, which a fork skips (what
    the child runs was imported by the parent).  The child's exit code is ``fn``'s return value (an
    uncaught exception: its traceback on stderr, exit 1)."""

    def __init__(self, fn: Callable[[], int], *, stdout: IO, stderr: IO, env: Mapping[str, str], cwd: str) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:   # the child: never returns
            code = 1
            try:
                os.setsid()
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(stdout.fileno(), 1)
                os.dup2(stderr.fileno(), 2)
                sys.stdout = open(1, "w", closefd=False)   # noqa: SIM115 -- the child's own streams, whatever
                sys.stderr = open(2, "w", closefd=False)   # noqa: SIM115    the parent had replaced them with
                os.chdir(cwd)
                os.environ.clear()
                os.environ.update(env)
                code = int(fn() or 0)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:   # noqa: BLE001 -- the child reports whatever ended it, like an interpreter
                traceback.print_exc()
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except OSError:
                        pass
                os._exit(code)
        self.pid = pid
        self._code: int | None = None
        _register(pid)

    def poll(self) -> int | None:
        if self._code is None:
            got, status = os.waitpid(self.pid, os.WNOHANG)
            if got:
                self._code = os.waitstatus_to_exitcode(status)
                _unregister(self.pid)
        return self._code

    def wait(self, timeout: float | None) -> int | None:
        """Exit code, or None if still running after ``timeout`` seconds."""
        end = None if timeout is None else time.monotonic() + timeout
        pause = 0.005
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return self._code

    def kill(self) -> None:
        """Kill the whole group (its children too) and reap the child."""
        _kill_group(self.pid)
        if self._code is None:
            _, status = os.waitpid(self.pid, 0)
            self._code = os.waitstatus_to_exitcode(status)
            _unregister(self.pid)

    def __enter__(self) -> "Forked":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

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
PIPE = (
    subprocess.PIPE
)  # a Spawned child's stdin/stdout as a pipe (its callers import no subprocess)
SHELL = "/bin/sh"

_live: set[int] = set()
_live_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed by its timeout
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
        (
            p
            for p in (
                f"/usr/sbin/{tool}",
                f"/sbin/{tool}",
                f"/usr/lib/qemu/{tool}",
                f"/usr/libexec/{tool}",
            )
            if os.access(p, os.X_OK)
        ),
        None,
    )
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
        except (AttributeError, OSError):  # no pidfd (Linux < 5.3), or already reaped
            return super().wait(timeout)
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            ready = p.poll(max(0, int(timeout * 1000) + 1))
        finally:
            os.close(fd)
        if not ready:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return super().wait()  # it has exited: reaped at once


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    check: bool = True,
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    text: bool = True,
) -> Result:
    """Run ``argv`` to completion in its own process group; on timeout kill the whole group.
    ``check``: a non-zero exit or a timeout raises CommandFailed; else both are in the Result."""
    argv = [str(a) for a in argv]
    log.debug("run %s", argv)
    start = time.monotonic()
    if input is None and cwd is None and _lean[0]:
        code, out, err, timed_out = _run_lean(argv, env, timeout, text)
        return _result(argv, code, out, err, start, timed_out, check, timeout)
    try:
        proc = _Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env else None,
            cwd=cwd,
            text=text,
            start_new_session=True,
        )
    except FileNotFoundError as e:
        raise EnvironmentNotReady(f"{argv[0]} not found") from e
    except (NotADirectoryError, PermissionError) as e:
        raise EnvironmentNotReady(f"{cwd or argv[0]}: {e.strerror}") from e
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
    return _result(argv, proc.returncode, out, err, start, timed_out, check, timeout)


def _result(
    argv: list[str],
    code: int | None,
    out: str | bytes,
    err: str | bytes,
    start: float,
    timed_out: bool,
    check: bool,
    timeout: float,
) -> Result:
    res = Result(
        tuple(argv),
        None if timed_out else code,
        out,  # type: ignore[arg-type]
        err,  # type: ignore[arg-type]
        round(time.monotonic() - start, 3),
        timed_out,
    )
    if check and timed_out:
        raise CommandFailed(argv, None, _tail(err), timed_out=True, timeout=timeout)
    if check and code != 0:
        raise CommandFailed(argv, code, _tail(err))
    return res


_lean = [hasattr(os, "pidfd_open") and hasattr(os, "memfd_create") and hasattr(os, "posix_spawn")]


def _run_lean(
    argv: list[str], env: Mapping[str, str] | None, timeout: float, text: bool
) -> tuple[int | None, str | bytes, str | bytes, bool]:
    """``run`` without stdin data or a working directory, with the least Python between the call
    and the exit: posix_spawn (vfork and exec) into a new session, stdout and stderr into two
    anonymous files, the exit waited for on a pidfd.  In a TCG guest, Popen with pipes and
    ``communicate`` costs ~7 ms of Python per call on top of the child's own (~30 ms for any exec):
    the fsck of every crash state pays it.  Same guarantees as Popen's path: the group is killed
    after the exit or the timeout, the child is registered for ``kill_all``."""
    outs = [
        os.memfd_create("powercut-stdout", os.MFD_CLOEXEC),
        os.memfd_create("powercut-stderr", os.MFD_CLOEXEC),
    ]
    try:
        environ = dict(env) if env else os.environ
        # found on the child's PATH, as Popen finds it (posix_spawnp would search this process's)
        exe = (
            argv[0]
            if "/" in argv[0]
            else shutil.which(argv[0], path=environ.get("PATH", os.defpath))
        )
        if exe is None:
            raise EnvironmentNotReady(f"{argv[0]} not found")
        try:
            pid = os.posix_spawn(
                exe,
                argv,
                environ,
                setsid=True,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, outs[0], 1),
                    (os.POSIX_SPAWN_DUP2, outs[1], 2),
                ],
            )
        except FileNotFoundError as e:
            raise EnvironmentNotReady(f"{argv[0]} not found") from e
        except (NotADirectoryError, PermissionError) as e:
            raise EnvironmentNotReady(f"{argv[0]}: {e.strerror}") from e
        _register(pid)
        try:
            ready = _exited(pid, timeout)
            if not ready:
                _kill_group(pid)
            _, status = os.waitpid(pid, 0)
        except BaseException:
            _kill_group(pid)
            os.waitpid(pid, 0)
            raise
        finally:
            _kill_group(pid)  # the leader has exited (or was killed): its leftovers must not linger
            _unregister(pid)
        got = [_drain(f) for f in outs]
    finally:
        for f in outs:
            os.close(f)
    code = os.waitstatus_to_exitcode(status)
    if text:  # as Popen's text mode gives them: universal newlines
        return code, *(_text(b) for b in got), not ready  # type: ignore[return-value]
    return code, got[0], got[1], not ready


def _text(b: bytes) -> str:
    return b.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _exited(pid: int, timeout: float) -> bool:
    """Whether ``pid`` exited within ``timeout`` seconds: a sleep on its pidfd; where the kernel
    has none (Linux < 5.3), polls that leave it unreaped."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        deadline, pause = time.monotonic() + timeout, 0.001
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return True
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        return bool(p.poll(max(0, int(timeout * 1000) + 1)))
    finally:
        os.close(fd)


def _drain(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def run_shell(
    command: str, *, timeout: float, check: bool = False, wrap: Sequence[str] = (), **kwargs: object
) -> Result:
    """A user's command string, explicitly through ``/bin/sh -c`` (same guarantees as ``run``);
    ``wrap``: an argv the shell runs under (a tracer that exits as its command does)."""
    return run([*wrap, SHELL, "-c", command], timeout=timeout, check=check, **kwargs)  # type: ignore[arg-type]


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

    def __init__(
        self,
        argv: Sequence[str],
        *,
        stdout: IO | int | None = None,
        stderr: IO | int | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
        cwd: str | None = None,
        stdin: IO | int | None = None,
        survives_interrupt: bool = False,
    ) -> None:
        self.argv = [str(a) for a in argv]
        log.debug("spawn %s", self.argv)
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=stdin if stdin is not None else subprocess.DEVNULL,
                stdout=stdout if stdout is not None else subprocess.DEVNULL,
                stderr=stderr if stderr is not None else subprocess.DEVNULL,
                env=dict(env) if env else None,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
                cwd=cwd,
            )
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

    def __init__(
        self, fn: Callable[[], int], *, stdout: IO, stderr: IO, env: Mapping[str, str], cwd: str
    ) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 1
            try:
                os.setsid()
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.dup2(stdout.fileno(), 1)
                os.dup2(stderr.fileno(), 2)
                sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 -- the child's own streams, whatever
                sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115    the parent had replaced them with
                os.chdir(cwd)
                os.environ.clear()
                os.environ.update(env)
                code = int(fn() or 0)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: BLE001 -- the child reports whatever ended it, like an interpreter
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

"""The only place that runs subprocesses: argv lists, a timeout on every call, process-group kill,
errors that carry the argv, the exit code and the stderr tail."""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from typing import IO, Mapping, Sequence

from .errors import CommandFailed, EnvironmentNotReady

log = logging.getLogger(__name__)

TAIL_CHARS = 4000


@dataclass(frozen=True, slots=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def require(tool: str, package: str | None = None) -> str:
    """Absolute path of ``tool`` or EnvironmentNotReady naming the package that provides it."""
    path = shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}", f"/usr/lib/qemu/{tool}", f"/usr/libexec/{tool}")
         if os.access(p, os.X_OK)), None)
    if not path:
        hint = f" (install the Debian package {package}, or run ci/setup.sh)" if package else ""
        raise EnvironmentNotReady(f"{tool} not found{hint}")
    return path


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(argv: Sequence[str], *, timeout: float, check: bool = True, input: str | bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | None = None, text: bool = True) -> Result:
    """Run ``argv`` to completion in its own process group; on timeout kill the whole group."""
    argv = [str(a) for a in argv]
    log.debug("run %s", argv)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env) if env else None,
                                cwd=cwd, text=text, start_new_session=True)
    except FileNotFoundError as e:
        raise EnvironmentNotReady(f"{argv[0]} not found") from e
    try:
        out, err = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise CommandFailed(argv, None, _tail(err), timed_out=True, timeout=timeout) from None
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    if check and proc.returncode != 0:
        raise CommandFailed(argv, proc.returncode, _tail(err))
    return Result(tuple(argv), proc.returncode, out, err)


def _tail(s: str | bytes | None) -> str:
    if s is None:
        return ""
    if isinstance(s, bytes):
        s = s.decode(errors="replace")
    return s[-TAIL_CHARS:]


class Spawned:
    """A long-running child (QEMU, virtiofsd) in its own process group, output to files."""

    def __init__(self, argv: Sequence[str], *, stdout: IO | int | None = None, stderr: IO | int | None = None,
                 env: Mapping[str, str] | None = None, pass_fds: Sequence[int] = ()) -> None:
        self.argv = [str(a) for a in argv]
        log.debug("spawn %s", self.argv)
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                         stdout=stdout if stdout is not None else subprocess.DEVNULL,
                                         stderr=stderr if stderr is not None else subprocess.DEVNULL,
                                         env=dict(env) if env else None, start_new_session=True,
                                         pass_fds=tuple(pass_fds))
        except FileNotFoundError as e:
            raise EnvironmentNotReady(f"{self.argv[0]} not found") from e

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
        if self.proc.poll() is None:
            _kill_group(self.proc)
            self.proc.wait()

    def __enter__(self) -> "Spawned":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

"""What a state's checker opened and read (host and guest; ``CheckContext.trace_reads``, said by
core/judging/recoveryread.py): the size of every file under the mounts before the checker runs, then the
checker run traced -- a command under strace (``strace -f -y``, its output parsed by
recoveryread.parse), an in-process one (a registered checker, a checker function) watched through
Python's audit events (``open``, ``os.listdir``, ``os.scandir``, ``mmap.__new__``,
``sqlite3.connect``: its bytes read unknown, and what its own child processes open unseen).

Tracing changes no verdict: strace exits as its command does (its exit code, the signal that
killed it), writes nothing on the checker's stdout or stderr (-qq, its trace to a file), and runs
in the checker's process group under the same timeout.  Where it cannot trace (no strace, or
ptrace refused: probed once per process, ``strace_tool``) the command runs as it would untraced
and the reads are empty; nothing here fails the judge.

Python's audit hooks cannot be removed: the one hook is installed at the first traced judge and
records only while a judge traces, only paths under that judge's mounts (several judges trace side
by side, each its own mounts: a checker thread of its own is seen too)."""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from powercut.checker import CheckerSpec, CheckInput, CheckResult
from powercut.core.judging import recoveryread
from powercut.core.judging.recoveryread import Accesses, ReadFile
from powercut.linux import process

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Strace:
    path: str
    seccomp: bool  # --seccomp-bpf works here (only the traced calls stop)

    def argv(self, out: str) -> tuple[str, ...]:
        return (self.path, *recoveryread.strace_args(out, self.seccomp))


@functools.cache
def strace_tool() -> Strace | None:
    """strace, if it can trace here (probed once: installed, ptrace allowed; with --seccomp-bpf
    if that works too), else None (said once in the log)."""
    path = shutil.which("strace") or next(
        (p for p in ("/usr/bin/strace", "/bin/strace") if os.access(p, os.X_OK)), None
    )
    if path is None:
        log.warning(
            "strace is not installed: recovery's reads are not traced (apt-get install strace)"
        )
        return None
    why = ""
    for seccomp in (True, False):
        tool = Strace(path, seccomp)
        try:
            res = process.run(
                [*tool.argv(os.devnull), "/bin/true"], timeout=PROBE_TIMEOUT_S, check=False
            )
        except Exception as e:  # noqa: BLE001 -- any failure to start it: no tracing, never the judge's end
            why = str(e)
            continue
        if res.ok:
            return tool
        why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    log.warning("strace cannot trace here (%s): recovery's reads are not traced", why)
    return None


def sizes_under(mounts: Sequence[str]) -> dict[str, int]:
    """Every file's and directory's size under ``mounts`` (named as recoveryread.relative names
    them), symbolic links not followed; what cannot be read is left out."""
    out: dict[str, int] = {}
    for m in mounts:
        entries = [m]
        for root, dirs, files in os.walk(m, onerror=lambda e: None):
            entries += [os.path.join(root, n) for n in (*dirs, *files)]
        for path in entries:
            name = recoveryread.relative(path, mounts)
            if name is None:
                continue
            try:
                out[name] = os.lstat(path).st_size
            except OSError:
                continue
    return out


class ReadTracer:
    """One judge's trace of its checker's reads: ``run`` runs the checker as ``CheckerSpec.run``
    would, traced; ``files`` what it opened (empty when tracing could not be done).  The sizes
    are taken when it is made: after the mounts (the kernel's recovery), before the checker."""

    def __init__(self, checker: Any, mounts: Sequence[str]) -> None:
        self.checker = checker
        self.given = tuple(os.path.abspath(m) for m in mounts)
        self.mounts = tuple(os.path.realpath(m) for m in mounts)
        try:
            self.sizes = sizes_under(self.mounts)
        except Exception:  # noqa: BLE001 -- a trace is an extra: it never ends the judge
            log.exception("sizes under %s not read", self.mounts)
            self.sizes = {}
        self._files: tuple[ReadFile, ...] = ()

    def files(self) -> tuple[ReadFile, ...]:
        return self._files

    def run(self, given: CheckInput) -> CheckResult:
        spec = self.checker
        if isinstance(spec, CheckerSpec) and not spec.name and not spec.function:
            return self._strace(spec, given) if spec.command else spec.run(given)
        acc = Accesses(self.mounts, self.sizes, counted=False)
        try:
            with watching(self.given, self.mounts, acc):
                return spec.run(given)
        finally:
            self._files = _safely(acc.files)

    def _strace(self, spec: CheckerSpec, given: CheckInput) -> CheckResult:
        tool = strace_tool()
        if tool is None:
            return spec.run(given)
        fd, out = tempfile.mkstemp(prefix="powercut-reads-", suffix=".txt")
        os.close(fd)
        try:
            return spec.run(given, wrap=tool.argv(out))
        finally:
            self._files = _safely(lambda: self._parsed(out))
            try:
                os.unlink(out)
            except OSError:
                pass

    def _parsed(self, out: str) -> tuple[ReadFile, ...]:
        with open(out, encoding="utf-8", errors="surrogateescape") as f:
            return recoveryread.parse(f, self.mounts, self.sizes, cwd=self.mounts[0])


def _safely(fn: Callable[[], tuple[ReadFile, ...]]) -> tuple[ReadFile, ...]:
    try:
        return fn()
    except Exception:  # noqa: BLE001 -- a trace is an extra: it never ends the judge
        log.exception("the checker's reads could not be read")
        return ()


# -- the audit hook ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Watch:
    prefixes: tuple[tuple[str, str], ...]  # (a mount as given, as the kernel names it)
    acc: Accesses
    lock: threading.Lock


_watches: list[_Watch] = []
_hooked = [False]
_lock = threading.Lock()
EVENTS = frozenset({"open", "os.listdir", "os.scandir", "mmap.__new__", "sqlite3.connect"})


@contextlib.contextmanager
def watching(given: Sequence[str], real: Sequence[str], acc: Accesses) -> Iterator[None]:
    """Record the audited opens under the mounts (as ``given``, and as the kernel names them:
    ``real``, in the same order) into ``acc`` while inside."""
    watch = _Watch(tuple(zip(given, real)), acc, threading.Lock())
    with _lock:
        if not _hooked[0]:
            sys.addaudithook(_hook)
            _hooked[0] = True
        _watches.append(watch)
    try:
        yield
    finally:
        with _lock:
            _watches.remove(watch)


def _owner(path: str) -> tuple[_Watch, str] | None:
    """The watch whose mounts hold ``path`` (absolute), with the path as the kernel names it."""
    for w in list(_watches):
        for given, real in w.prefixes:
            for prefix in (given, real):
                if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                    return w, real + path[len(prefix) :]
    return None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _watches or event not in EVENTS:
        return
    try:
        _seen(event, args)
    except Exception:  # noqa: BLE001 -- an audit hook that raises would fail the checker's own call
        pass


def _path(event: str, args: tuple[Any, ...]) -> str | None:
    """The absolute path an audited event is about (None: none, or a descriptor's)."""
    p = args[0] if args else None
    if event == "mmap.__new__":
        return os.readlink(f"/proc/self/fd/{p}") if isinstance(p, int) and p >= 0 else None
    if p is None and event in ("os.listdir", "os.scandir"):
        p = "."
    if not isinstance(p, (str, bytes, os.PathLike)):
        return None
    name = os.fsdecode(p)
    if event == "sqlite3.connect":
        name = name.removeprefix("file:").split("?", 1)[0] if name.startswith("file:") else name
        if name in ("", ":memory:"):
            return None
    return os.path.abspath(name)


def _seen(event: str, args: tuple[Any, ...]) -> None:
    path = _path(event, args)
    found = _owner(path) if path is not None else None
    if path is None or found is None:
        return
    w, real = found
    with w.lock:
        if event == "mmap.__new__":
            w.acc.mapped(real)
        elif event == "sqlite3.connect":
            w.acc.opened(real, write=True)
        elif event == "open":
            _open(w.acc, real, path, args)
        else:
            w.acc.opened(real, _missing(path, create=False), directory=True)


def _open(acc: Accesses, real: str, path: str, args: tuple[Any, ...]) -> None:
    """An ``open`` event (path, mode, flags): io.open's mode ("r", "wb"...), os.open's flags."""
    mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
    flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
    write = any(c in mode for c in "wax+") or bool(
        flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    )
    create = any(c in mode for c in "wax") or bool(flags & os.O_CREAT)
    try:
        directory = stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        directory = False
    acc.opened(real, _missing(path, create), directory=directory, write=write)


def _missing(path: str, create: bool) -> str:
    """The errno name an open of ``path`` is about to fail with, as far as a stat tells ("": none)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return "" if create else "ENOENT"
    except OSError as e:
        return errno.errorcode.get(e.errno or 0, "")
    return ""

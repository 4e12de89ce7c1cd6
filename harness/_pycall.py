"""A user's own Python functions as a recording's workload and a campaign's checker (host and
guest), named by reference so that the guest can import them: ``FILE::QUALNAME`` (pytest's node-id
shape), plus the ``sys.path`` entries the file's own imports need.  The pytest plugin makes them.

* **Workload**: ``python -m powercut._pycall FILE::QUALNAME`` runs in the guest with its working
  directory on the filesystem under test and calls ``fn(mount, **params)`` (``mount`` a Path; the
  params from $POWERCUT_PARAMS).  A non-zero return or an exception fails the recording.
* **Checker**: ``FunctionRef.load`` imports the file once per judging process (the checker VM's
  agent, or the host's worker threads); ``checker.CheckerSpec`` calls it on each state and reads
  its answer (``checker.py``).

Only module-level functions can be named: a lambda or a nested function is a UsageError."""

from __future__ import annotations

import importlib.util
import json
import linecache
import os
import shlex
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from powercut.errors import CheckerError, UsageError
from powercut.linux import environ

SEP = "::"
_modules: dict[str, ModuleType] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class FunctionRef:
    file: str  # absolute path of the module's source
    qualname: str  # a module-level name (dotted for a class's static method)

    @property
    def text(self) -> str:
        return f"{self.file}{SEP}{self.qualname}"

    @staticmethod
    def parse(text: str) -> "FunctionRef":
        file, sep, qualname = text.rpartition(SEP)
        if not sep or not file or not qualname:
            raise UsageError(f"a function reference is FILE{SEP}NAME, not {text!r}")
        return FunctionRef(file, qualname)

    @staticmethod
    def of(fn: Callable[..., Any], role: str) -> "FunctionRef":
        """The reference of a module-level function; anything the guest cannot import by name is
        a UsageError that says what to do."""
        name = getattr(fn, "__qualname__", "")
        module = sys.modules.get(getattr(fn, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        if not callable(fn) or not name:
            raise UsageError(f"the {role} must be a function, not {fn!r}")
        if "<lambda>" in name or "<locals>" in name:
            raise UsageError(
                f"the {role} {name} must be defined at the top level of its module (it runs in "
                "another process, which imports it by name), not as a lambda or inside a function"
            )
        if not file or not file.endswith(".py"):
            raise UsageError(f"the {role} {name} must come from a .py file (its module has none)")
        return FunctionRef(os.path.abspath(file), name)

    def load(self, path: tuple[str, ...] = ()) -> Callable[..., Any]:
        """Import the file (once per process) with ``path`` on sys.path and return the function."""
        with _lock:
            for entry in reversed(path):
                if entry not in sys.path:
                    sys.path.insert(0, entry)
            module = _modules.get(self.file)
            if module is None:
                module = _modules[self.file] = _import(self.file)
        obj: Any = module
        for part in self.qualname.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                raise CheckerError(f"{self.text}: {Path(self.file).name} has no {self.qualname}")
        return obj


def _import(file: str) -> ModuleType:
    if not os.path.isfile(file):
        raise CheckerError(
            f"{file}: no such file (the function's module must be readable where it runs)"
        )
    name = f"powercut_user_{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise CheckerError(f"{file}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise CheckerError(f"importing {file} failed: {type(e).__name__}: {e}") from None
    return module


def assertion_reason(e: AssertionError) -> str:
    """An assertion's message, or the ``assert`` line that failed (file:line) when it has none."""
    if str(e):
        return str(e)
    tb = traceback.extract_tb(e.__traceback__)
    if tb:
        frame = tb[-1]
        line = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
        return f"{line} ({Path(frame.filename).name}:{frame.lineno})"
    return "assertion failed"


def workload_command(ref: FunctionRef, path: tuple[str, ...], python: str = sys.executable) -> str:
    """The shell command that runs the workload function in the guest."""
    pythonpath = ":".join(p for p in path if p)
    env = f"PYTHONPATH={shlex.quote(pythonpath)} " if pythonpath else ""
    return f"{env}exec {shlex.quote(python)} -m powercut._pycall {shlex.quote(ref.text)}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write(
            f"usage: python -m powercut._pycall FILE{SEP}FUNCTION   (params as JSON in "
            "$POWERCUT_PARAMS; runs in the mount)\n"
        )
        return 2
    try:
        fn = FunctionRef.parse(args[0]).load()
        params = json.loads(environ.text(environ.PARAMS, "{}"))
    except (CheckerError, UsageError, ValueError) as e:
        sys.stderr.write(f"powercut._pycall: {e}\n")
        return 2
    rc = fn(Path(environ.text(environ.MOUNT) or os.getcwd()), **params)
    return int(rc or 0) if not isinstance(rc, bool) else int(not rc)


if __name__ == "__main__":
    from powercut._pycall import main as _main  # one module object, as powercut.workload does

    sys.exit(_main())

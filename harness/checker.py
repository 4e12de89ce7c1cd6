"""The checker contract and registry (host and guest).

A checker gets a recovered, mounted filesystem and what the crash state promises: the keys acked
before the cut (they must be there, intact), the keys begun but not acked (may or may not be there,
all or nothing) and the workload's parameters.  It runs the program's own recovery, then verifies,
and returns a ``CheckResult`` with reasons -- never a bare boolean.

Registered under the entry-point group ``powercut.checkers`` with the workload's name; a user's own
checker can also be a Python function named by reference (``FILE::NAME``, the pytest plugin's
checkers; ``_pycall.py``): it gets the ``CheckInput`` and answers ``None``/``True`` (pass), ``False``
(fail), a ``CheckResult``, or raises ``AssertionError`` (``fail``, its message or ``assert`` line the
reason; any other exception is ``checker-crashed``; it must read ``state.mount``, never the cwd:
several states may be judged at once in one process).  Or any command (``--checker 'COMMAND'``, run by /bin/sh in the mount): it gets
the same input as JSON on stdin (``{"mount": ..., "acked": [...], "begun": [...], "params": {...},
"state": "<id>"}``) and answers one JSON object on stdout, ``{"verdict": "pass|lost-ack|corrupt-data",
"reasons": [...]}`` (``fail`` too: a failure of no named kind).  Without that JSON the exit code
alone decides: 0 pass, 1 the generic ``fail`` (its output lines are the reasons; their words are
never parsed for a verdict), anything else (or the timeout) ``checker-crashed``.  The whole process
group is killed at the timeout.

A broken checker is the harness's error (CheckerError, exit 1), never a finding of the program
under test: a command the shell cannot find or run (exit 127/126), a JSON answer whose verdict is
not one of the above.  ``CheckerSpec.validate`` finds a missing command before the campaign.  Its
output is capped at MAX_REASONS lines of MAX_REASON_CHARS characters."""
from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable

from powercut import registry
from powercut.core.verdict import CHECKER_VERDICTS, VERDICTS
from powercut.errors import CheckerError, UsageError
from powercut.linux import process
from powercut._pycall import FunctionRef, assertion_reason

GROUP = "powercut.checkers"
DEFAULT_TIMEOUT_S = 120.0
MAX_REASONS = 40            # lines of a checker's answer kept as reasons
MAX_REASON_CHARS = 400
SHELL_WORDS = frozenset("cd exec env test [ true false echo printf export set if for while until case command eval "
                        "exit return read wait trap ulimit umask shift unset alias type hash kill pwd readonly "
                        "source . : time nice timeout sudo".split())


@dataclass(frozen=True, slots=True)
class CheckInput:
    mount: str
    acked: tuple[str, ...]
    begun: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)
    state: str = ""

    def __post_init__(self) -> None:  # a state's acks may be a KeyPrefix (core/crashstate): checkers get tuples
        for name in ("acked", "begun"):
            if type(getattr(self, name)) is not tuple:
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_json(self) -> dict[str, Any]:
        return {"mount": self.mount, "acked": list(self.acked), "begun": list(self.begun), "params": self.params,
                "state": self.state}


@dataclass(frozen=True, slots=True)
class CheckResult:
    verdict: str
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    @property
    def ok(self) -> bool:
        return self.verdict == "pass"


@dataclass(frozen=True, slots=True)
class Checker:
    name: str
    description: str
    check: Callable[[CheckInput], CheckResult]


def get(name: str) -> Checker:
    return registry.load(GROUP, name, Checker, "no checker registered for workload {name!r} (known: {known}); "
                                               "give one with --checker 'COMMAND'")


@dataclass(frozen=True, slots=True)
class CheckerSpec:
    """A registered checker (by workload name), a command (``--checker``), a Python function
    (``FILE::NAME`` with the sys.path its imports need), or none (recovery and fsck only)."""

    name: str = ""
    command: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    function: str = ""
    path: tuple[str, ...] = ()

    def host_paths(self) -> tuple[str, ...]:
        """The host paths a checker function needs where it runs: its file's directory, its sys.path."""
        if not self.function:
            return ()
        return (os.path.dirname(FunctionRef.parse(self.function).file), *self.path)

    def validate(self) -> None:
        """Before a campaign: a registered checker exists, a command's program can be found."""
        if self.timeout_s <= 0:
            raise UsageError(f"the checker timeout must be more than 0 s, not {self.timeout_s:g}")
        if self.name:
            get(self.name)
        elif self.function:
            FunctionRef.parse(self.function).load(self.path)
        elif self.command:
            program = first_program(self.command)
            if program and not _runnable(program):
                raise UsageError(f"--checker {self.command!r}: {program} is not an executable "
                                 f"{'file' if '/' in program else 'command on PATH'}")

    def run(self, inp: CheckInput) -> CheckResult:
        if self.name:
            return get(self.name).check(inp)
        if self.function:
            return call_function(self.function, self.path, inp)
        if self.command:
            return run_command(self.command, inp, self.timeout_s)
        return CheckResult("pass", ("no checker: recovery mount and fsck only",))


def call_function(ref: str, path: tuple[str, ...], inp: CheckInput) -> CheckResult:
    """A checker function's verdict on one state (see the module's docstring)."""
    fn = FunctionRef.parse(ref).load(path)
    name = ref.rpartition("::")[2]
    try:
        value = fn(inp)
    except AssertionError as e:
        return CheckResult("fail", _capped(assertion_reason(e).splitlines() or ["assertion failed"]))
    if value is None or value is True:
        return CheckResult("pass")
    if value is False:
        return CheckResult("fail", (f"{name} returned False",))
    if isinstance(value, CheckResult):
        if value.verdict not in CHECKER_VERDICTS:
            raise CheckerError(f"the checker {name} answered verdict {value.verdict!r}, which is the harness's, "
                               f"not one of {', '.join(CHECKER_VERDICTS)}: fix the checker")
        return CheckResult(value.verdict, _capped(list(value.reasons)))
    raise CheckerError(f"the checker {name} returned {type(value).__name__}: return None or True (pass), False "
                       "(fail) or a powercut.CheckResult, or raise AssertionError")


def first_program(command: str) -> str:
    """The program a shell command line starts (after VAR=value words), or "" when it starts with
    shell syntax this cannot judge (a builtin, a keyword, a subshell)."""
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise UsageError(f"--checker {command!r}: {e}") from None
    words = [w for w in words if not ("=" in w and w.split("=", 1)[0].isidentifier())] or [""]
    first = words[0]
    if not first or first in SHELL_WORDS or any(c in first for c in "()$`;|&<>{}*?"):
        return ""
    return first


def _runnable(program: str) -> bool:
    if "/" in program:
        return os.path.isabs(program) and os.path.isfile(program) and os.access(program, os.X_OK)
    return shutil.which(program) is not None


def _capped(lines: list[str]) -> tuple[str, ...]:
    out = [line if len(line) <= MAX_REASON_CHARS else line[:MAX_REASON_CHARS] + " [...]"
           for line in lines[:MAX_REASONS]]
    if len(lines) > MAX_REASONS:
        out.append(f"[{len(lines) - MAX_REASONS} more lines of checker output not kept]")
    return tuple(out)


def run_command(command: str, inp: CheckInput, timeout: float) -> CheckResult:
    res = process.run_shell(command, timeout=timeout, input=json.dumps(inp.to_json()), cwd=inp.mount)
    if res.timed_out:
        return CheckResult("checker-crashed", (f"checker command timed out after {timeout:g} s (process group "
                                               "killed)",))
    if res.returncode in (126, 127):   # the shell could not find or run it: the harness's input is wrong
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        raise CheckerError(f"--checker {command!r} cannot run (exit {res.returncode}): {tail}")
    raw = [line for line in res.stdout.splitlines() if line.strip()]
    answer = _json_answer(tuple(raw))
    if answer is not None:
        return CheckResult(answer.verdict, _capped(list(answer.reasons)))
    lines = _capped(raw)
    if res.returncode == 0:
        return CheckResult("pass", lines)
    if res.returncode == 1:
        return CheckResult("fail", lines or ("checker command exited 1",))
    tail = (res.stderr.strip().splitlines() or [""])[-1]
    return CheckResult("checker-crashed", (f"checker command exited {res.returncode}: {tail}",))


def _json_answer(lines: tuple[str, ...]) -> CheckResult | None:
    """The structured answer, if the output is one JSON object with a known verdict."""
    if not lines:
        return None
    try:
        obj = json.loads("\n".join(lines))
    except ValueError:
        return None
    if not isinstance(obj, dict) or "verdict" not in obj:
        return None
    if obj["verdict"] not in CHECKER_VERDICTS:
        raise CheckerError(f"the checker answered verdict {obj['verdict']!r}, which is none of "
                           f"{', '.join(CHECKER_VERDICTS)}: fix the checker")
    reasons = obj.get("reasons", [])
    if not isinstance(reasons, list):
        reasons = [str(reasons)]
    return CheckResult(obj["verdict"], tuple(str(r) for r in reasons))

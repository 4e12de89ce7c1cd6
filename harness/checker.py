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
several states may be judged at once in one process).  Its answer is its return value: what it
prints is never read.

Or any command (``--checker 'COMMAND'``, run by /bin/sh in the mount): it gets the same input as
JSON on stdin (``{"mount": ..., "acked": [...], "begun": [...], "params": {...}, "state": "<id>"}``).
The protocol is strict (#37):

* **The answer** is the last non-empty stdout line when that line starts with ``{``: one JSON object
  ``{"verdict": "pass|lost-ack|corrupt-data|detected|silent-corruption|fail|checker-crashed", "reasons": [...]}``
  (``fail``: a failure of no named kind; ``detected``: the program noticed damage -- refused to open,
  reported a checksum or I/O error, repaired from a redundant copy; ``silent-corruption``: it served
  data that differs from what was acked or written, with no error (core/judging/verdict.py says what each
  means under a lying-disk and a power-loss model); ``reasons`` optional, a list of strings).  It wins over the
  exit code.  The lines before it are progress (the checker's own, or a child's such as ``pg_ctl``
  or ``sqlite3`` that shares its stdout): kept after its reasons as ``output: ...``, never read.
* **A protocol violation** is the checker's error (CheckerError: the campaign stops with one line
  naming the state, what is wrong and the offending line), never a verdict: a JSON verdict (a line
  starting with ``{`` that opens a JSON object with a ``"verdict"``) on any line but the last -- a
  trailing "done", a second answer --; a ``"verdict":`` key line (an answer printed over several
  lines, ``json.dumps(..., indent=2)``); a last line that starts with ``{`` but is not a JSON object
  with a ``"verdict"`` key; an unknown verdict; ``reasons`` that are not a list of strings.
* **Without an answer** the exit code decides: 0 pass, 1 the generic ``fail`` (the output lines are
  the reasons; their words are never parsed for a verdict), anything else (or the timeout)
  ``checker-crashed``, its reason the crash's own message where stderr has one (core/judging/crashwords.py: a
  Rust or Go panic, a Python or Java exception), else stderr's last line; an exit 1 with no output
  says that message too.  Exit 0 is no pass when stderr shows a crash (``crash_line``): a Python
  traceback (``Traceback (most recent call last):``) or ``Fatal Python error:``, the shell's
  ``not found``/``command not found``/``Permission denied`` for a command, or its report of a
  command killed by a signal (``Segmentation fault``, ``Killed``, ``Aborted``...) -- what
  ``python3 check.py | cat`` without ``set -o pipefail`` leaves of a crash -- then it is
  ``checker-crashed``.  (A shell may not report a pipeline member killed by a signal -- bash does
  not -- and then nothing tells.)
The whole process group is killed at the timeout.

A broken checker is the harness's error (CheckerError, exit 1), never a finding of the program
under test: a command the shell cannot find or run (exit 127/126), an answer that breaks the
protocol.  ``CheckerSpec.validate`` finds a missing command before the campaign.  Its output is
capped at MAX_REASONS lines of MAX_REASON_CHARS characters."""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from powercut import registry
from powercut._pycall import FunctionRef, assertion_reason
from powercut.core.judging.crashwords import TRACEBACK, crash_message
from powercut.core.judging.verdict import CHECKER_VERDICTS, VERDICTS
from powercut.core.states.stateid import LIE_MODELS
from powercut.errors import CheckerError, UsageError
from powercut.linux import process

GROUP = "powercut.checkers"
# what a checker function reading the program's files may meet when the filesystem or the device
# noticed damage: under a lying-disk model such an uncaught error is ``detected``, not a crash
NOTICED_ERRNOS = frozenset({errno.EIO, errno.EBADMSG, errno.EUCLEAN})
DEFAULT_TIMEOUT_S = 120.0
MAX_REASONS = 40  # lines of a checker's answer kept as reasons
MAX_REASON_CHARS = 400
MAX_QUOTED_CHARS = 120  # of an offending line quoted in a protocol error
SHELL_WORDS = frozenset(
    "cd exec env test [ true false echo printf export set if for while until case command eval "
    "exit return read wait trap ulimit umask shift unset alias type hash kill pwd readonly "
    "source . : time nice timeout sudo".split()
)


@dataclass(frozen=True, slots=True)
class CheckInput:
    mount: str
    acked: tuple[str, ...]
    begun: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)
    state: str = ""
    mounts: tuple[
        str, ...
    ] = ()  # a cluster state: every node's mount, node 0 first (``mount`` is node 0's)

    def __post_init__(
        self,
    ) -> None:  # a state's acks may be a KeyPrefix (core/states/crashstate): checkers get tuples
        for name in ("acked", "begun"):
            if type(getattr(self, name)) is not tuple:
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_json(self) -> dict[str, Any]:
        return {
            "mount": self.mount,
            "acked": list(self.acked),
            "begun": list(self.begun),
            "params": self.params,
            "state": self.state,
            **({"mounts": list(self.mounts)} if self.mounts else {}),
        }

    @property
    def lying_disk(self) -> bool:
        """The state is a lying disk's (core/crashmodels/lies.py): the question is whether the program noticed."""
        return self.state.partition("@")[0] in LIE_MODELS

    @property
    def noticed(self) -> str:
        """The verdict for "the program reported the damage" (refused to open, a checksum or I/O
        error, its own integrity check failed): ``detected`` under a lying disk (a pass there);
        under a power-loss model ``corrupt-data`` -- an honest crash left damage the program's own
        recovery cannot get past, a finding as before."""
        return "detected" if self.lying_disk else "corrupt-data"


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
    return registry.load(
        GROUP,
        name,
        Checker,
        "no checker registered for workload {name!r} (known: {known}); "
        "give one with --checker 'COMMAND'",
    )


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
                raise UsageError(
                    f"--checker {self.command!r}: {program} is not an executable "
                    f"{'file' if '/' in program else 'command on PATH'}"
                )

    def run(self, inp: CheckInput, wrap: Sequence[str] = ()) -> CheckResult:
        """The checker's verdict on one state; ``wrap``: the argv a command checker's shell runs
        under (strace and its arguments: check/readtrace.py), it exiting as the shell does."""
        try:
            if self.name:
                return get(self.name).check(inp)
            if self.function:
                return call_function(self.function, self.path, inp)
        except (
            OSError
        ) as e:  # the storage stack refused to serve the data: noticed (a lying disk's question)
            if not (inp.lying_disk and e.errno in NOTICED_ERRNOS):
                raise
            return CheckResult(
                "detected",
                (
                    f"reading failed with {errno.errorcode[e.errno]} ({e.strerror}): "
                    f"{e.filename or ''}",
                ),
            )
        if self.command:
            return run_command(self.command, inp, self.timeout_s, wrap)
        return CheckResult("pass", ("no checker: recovery mount and fsck only",))


def call_function(ref: str, path: tuple[str, ...], inp: CheckInput) -> CheckResult:
    """A checker function's verdict on one state (see the module's docstring)."""
    fn = FunctionRef.parse(ref).load(path)
    name = ref.rpartition("::")[2]
    try:
        value = fn(inp)
    except AssertionError as e:
        return CheckResult(
            "fail", _capped(assertion_reason(e).splitlines() or ["assertion failed"])
        )
    if value is None or value is True:
        return CheckResult("pass")
    if value is False:
        return CheckResult("fail", (f"{name} returned False",))
    if isinstance(value, CheckResult):
        if value.verdict not in CHECKER_VERDICTS:
            raise CheckerError(
                f"the checker {name} answered verdict {value.verdict!r}, which is the harness's, "
                f"not one of {', '.join(CHECKER_VERDICTS)}: fix the checker"
            )
        return CheckResult(value.verdict, _capped(list(value.reasons)))
    raise CheckerError(
        f"the checker {name} returned {type(value).__name__}: return None or True (pass), False "
        "(fail) or a powercut.CheckResult, or raise AssertionError"
    )


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
    out = [
        line if len(line) <= MAX_REASON_CHARS else line[:MAX_REASON_CHARS] + " [...]"
        for line in lines[:MAX_REASONS]
    ]
    if len(lines) > MAX_REASONS:
        out.append(f"[{len(lines) - MAX_REASONS} more lines of checker output not kept]")
    return tuple(out)


def run_command(
    command: str, inp: CheckInput, timeout: float, wrap: Sequence[str] = ()
) -> CheckResult:
    """A checker command's verdict on one state (the protocol: the module's docstring); ``wrap``:
    what its shell runs under (CheckerSpec.run)."""
    res = process.run_shell(
        command, timeout=timeout, input=json.dumps(inp.to_json()), cwd=inp.mount, wrap=wrap
    )
    if res.timed_out:
        return CheckResult(
            "checker-crashed",
            (f"checker command timed out after {timeout:g} s (process group killed)",),
        )
    if res.returncode in (
        126,
        127,
    ):  # the shell could not find or run it: the harness's input is wrong
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        raise CheckerError(f"--checker {command!r} cannot run (exit {res.returncode}): {tail}")
    raw = [line for line in res.stdout.splitlines() if line.strip()]
    answer = json_answer(raw, inp.state)
    if answer is not None:
        return CheckResult(
            answer.verdict, _capped([*answer.reasons, *(f"output: {line}" for line in raw[:-1])])
        )
    if res.returncode == 0:
        crash = crash_line(res.stderr)
        if crash is None:
            return CheckResult("pass", _capped(raw))
        return CheckResult(
            "checker-crashed",
            _capped(
                [
                    f"checker command exited 0, but its stderr shows a crash: {crash} (a pipeline without "
                    "`set -o pipefail` passes on its last command's exit status)",
                    *raw,
                ]
            ),
        )
    said = crash_message(res.stderr)
    if res.returncode == 1:
        return CheckResult(
            "fail", _capped(raw) or (f"checker command exited 1{': ' + said if said else ''}",)
        )
    tail = said or (res.stderr.strip().splitlines() or [""])[-1]
    return CheckResult("checker-crashed", (f"checker command exited {res.returncode}: {tail}",))


_VERDICT_KEY = re.compile(r'^\{?\s*"verdict"\s*:')  # a line of an answer printed over several lines


def json_answer(lines: list[str], state: str = "") -> CheckResult | None:
    """The answer on the last of the non-empty stdout ``lines``; None when there is none (the exit
    code decides).  A protocol violation is a CheckerError (the module's docstring)."""
    n = len(lines)
    for i, line in enumerate(lines[:-1], 1):
        if _opens_verdict(line):
            raise _violation(
                state,
                f"stdout line {i} of {n} is a JSON verdict, but not the last line: "
                f"{_quoted(line)}, followed by {_quoted(lines[-1])}",
            )
        if _VERDICT_KEY.match(line.strip()):
            raise _violation(
                state,
                f"its answer is printed over several lines (line {i} of {n}: {_quoted(line)})",
            )
    last = lines[-1].strip() if lines else ""
    if not last.startswith("{"):
        if _VERDICT_KEY.match(last):
            raise _violation(
                state, f"its answer is printed over several lines (the last: {_quoted(last)})"
            )
        return None
    try:
        obj = json.loads(last)
    except ValueError as e:
        raise _violation(
            state,
            f"its last stdout line starts like a JSON answer but is not JSON ({e}): "
            f"{_quoted(last)}",
        ) from None
    if not isinstance(obj, dict) or "verdict" not in obj:
        raise _violation(
            state, f'its last stdout line is a JSON object with no "verdict" key: {_quoted(last)}'
        )
    verdict, reasons = obj["verdict"], obj.get("reasons", [])
    if not isinstance(verdict, str) or verdict not in CHECKER_VERDICTS:
        raise _violation(
            state,
            f"it answered verdict {verdict!r}, which is none of {', '.join(CHECKER_VERDICTS)}",
        )
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise _violation(
            state, f"its reasons must be a list of strings, not {_quoted(json.dumps(reasons))}"
        )
    return CheckResult(verdict, tuple(reasons))


def _opens_verdict(line: str) -> bool:
    """Whether a line starts with a JSON object that has a "verdict" key (text may follow it)."""
    text = line.strip()
    if not text.startswith("{"):
        return False
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return False
    return isinstance(obj, dict) and "verdict" in obj


def _quoted(line: str) -> str:
    text = line.strip()
    return repr(text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + " [...]")


def _violation(state: str, what: str) -> CheckerError:
    where = f" on state {state}" if state else ""
    return CheckerError(
        f"checker protocol error{where}: {what}; the answer is one JSON object "
        '{"verdict": ..., "reasons": [...]} alone on the last non-empty stdout line, progress '
        "before it: fix the checker"
    )


_SIGNALS = (
    r"(?:Segmentation fault|Killed|Aborted|Bus error|Illegal instruction|Floating point exception)"
)
# dash: "/bin/sh: 1: x: not found"; bash: "bash: line 1: x: command not found"; busybox: "sh: x: not found"
_SHELL_FAILED = re.compile(
    r"^(?:\S*/)?(?:sh|bash|dash|ash|busybox|zsh)(?:: line \d+|: \d+)?: .+: "
    r"(?:command not found|not found|Permission denied)$"
)
# dash: "Segmentation fault (core dumped)"; bash: "bash: line 1: 4242 Aborted   (core dumped) ./check"
_SIGNALLED = re.compile(
    rf"^(?:(?:\S+: )?(?:line \d+: )?\d+ +{_SIGNALS}(?: .*)?|{_SIGNALS}(?: +\(core dumped\))?)$"
)


def crash_line(stderr: str) -> str | None:
    """The line of a checker's stderr that shows a crash (the last such; for a Python traceback,
    its exception line), or None."""
    lines = [" ".join(line.split()) for line in stderr.splitlines()]
    raw = stderr.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if line == TRACEBACK:
            after = [
                text
                for text, r in zip(lines[i + 1 :], raw[i + 1 :])
                if text and not r[:1].isspace()
            ]
            return after[0] if after else TRACEBACK
        if (
            line.startswith("Fatal Python error:")
            or _SHELL_FAILED.match(line)
            or _SIGNALLED.match(line)
        ):
            return line
    return None

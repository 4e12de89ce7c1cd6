"""The checker contract and registry (host and guest).

A checker gets a recovered, mounted filesystem and what the crash state promises: the keys acked
before the cut (they must be there, intact), the keys begun but not acked (may or may not be there,
all or nothing) and the workload's parameters.  It runs the program's own recovery, then verifies,
and returns a ``CheckResult`` with reasons -- never a bare boolean.

Registered under the entry-point group ``powercut.checkers`` with the workload's name; a user's own
checker can also be any command (``--checker 'COMMAND'``, run by /bin/sh in the mount): it gets
the same input as JSON on stdin (``{"mount": ..., "acked": [...], "begun": [...], "params": {...},
"state": "<id>"}``) and answers one JSON object on stdout, ``{"verdict": "pass|lost-ack|corrupt-data",
"reasons": [...]}`` (``fail`` too: a failure of no named kind).  Without that JSON the exit code
alone decides: 0 pass, 1 the generic ``fail`` (its output lines are the reasons; their words are
never parsed for a verdict), anything else (or the timeout) ``checker-crashed``.  The whole process group is killed at the timeout."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from powercut import registry
from powercut.core.verdict import CHECKER_VERDICTS, VERDICTS
from powercut.linux import process

GROUP = "powercut.checkers"


@dataclass(frozen=True, slots=True)
class CheckInput:
    mount: str
    acked: tuple[str, ...]
    begun: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)
    state: str = ""

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
    """A registered checker (by workload name), a command (``--checker``), or none (recovery and
    fsck only)."""

    name: str = ""
    command: str = ""
    timeout_s: float = 120.0

    def run(self, inp: CheckInput) -> CheckResult:
        if self.name:
            return get(self.name).check(inp)
        if self.command:
            return run_command(self.command, inp, self.timeout_s)
        return CheckResult("pass", ("no checker: recovery mount and fsck only",))


def run_command(command: str, inp: CheckInput, timeout: float) -> CheckResult:
    res = process.run_shell(command, timeout=timeout, input=json.dumps(inp.to_json()), cwd=inp.mount)
    if res.timed_out:
        return CheckResult("checker-crashed", (f"checker command timed out after {timeout:g} s (process group "
                                               "killed)",))
    lines = tuple(line for line in res.stdout.splitlines() if line.strip())
    answer = _json_answer(lines)
    if answer is not None:
        return answer
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
    if not isinstance(obj, dict) or obj.get("verdict") not in CHECKER_VERDICTS:
        return None
    reasons = obj.get("reasons", [])
    if not isinstance(reasons, list):
        reasons = [str(reasons)]
    return CheckResult(obj["verdict"], tuple(str(r) for r in reasons))

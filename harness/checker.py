"""The checker contract and registry.

A checker gets a recovered, mounted filesystem and what the crash state promises: the keys acked
before the cut (they must be there, intact), the keys begun but not acked (may or may not be there,
all or nothing) and the workload's parameters.  It runs the program's own recovery, then verifies,
and returns a ``CheckResult`` with reasons -- never a bare boolean.

Registered under the entry-point group ``powercut.checkers`` with the workload's name; a user's own
checker can also be any executable (``--checker 'COMMAND'``): it gets the same input as JSON on
stdin (``{"mount": ..., "acked": [...], "begun": [...], "params": {...}, "state": "<id>"}``), exits 0 (pass) or 1
(fail) and prints its reasons, one per line."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from . import registry

GROUP = "powercut.checkers"
VERDICTS = ("pass", "lost-ack", "corrupt-data", "fsck-error", "mount-failed", "checker-crashed", "kernel-panic",
            "timeout")


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

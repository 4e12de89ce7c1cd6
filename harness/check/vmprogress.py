"""A checker VM's progress as the host follows it (host side): the agent's ``progress.jsonl`` in the
job share (a "begin" line before each state, its verdict after it, a proven state's verdict
alone, diagnoses, what the read-set rule did), and how one boot
went (``Outcome``): the state in progress when it ended is the one a panic or a hang is blamed on."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.proving import Report
from powercut.core.judging.verdict import Verdict
from powercut.errors import VmError
from powercut.linux.jsonlines import read_lines


class Progress:
    """Follows one VM's progress.jsonl: which state is in progress, new verdicts."""

    def __init__(self, path: Path) -> None:
        self.path, self.pos = path, 0
        self.current: str | None = None
        self.since = time.monotonic()
        self.diagnoses: list[dict[str, Any]] = []
        self.rule: Report | None = None  # what the guest's read-set rule did

    def poll(self) -> list[Verdict]:
        objs, self.pos = read_lines(self.path, self.pos)
        new = []
        for obj in objs:
            if "begin" in obj:
                self.current, self.since = obj["begin"], time.monotonic()
            elif "verdict" in obj:
                new.append(Verdict.from_json(obj["verdict"]))
                self.current = None
            elif "diagnosis" in obj:
                self.diagnoses.append(obj["diagnosis"])
            elif "readset" in obj:
                self.rule = Report.from_json(obj["readset"])
        return new

    def overdue(self, limit_s: float) -> str | None:
        """Why the VM must end: its state in progress ran past the per-state limit (None: it has not)."""
        if self.current and time.monotonic() - self.since > limit_s:
            return f"state {self.current} did not finish within {limit_s:g} s"
        return None


@dataclass(slots=True)
class Outcome:
    """How one boot of a checker VM went."""

    failure: VmError | None  # a panic, hang or crash of the VM (None: it ended normally)
    current: str | None  # the state in progress when it ended
    since: float  # when that state began (monotonic)
    diagnoses: list[dict[str, Any]]
    rule: Report | None = None  # what the guest's read-set rule did (check/proving.py)

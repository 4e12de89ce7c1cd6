"""The verdict journal (host): the resume point of a check campaign -- which state ids already have a
verdict, appended durably as each one comes in."""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator

from powercut.core.verdict import Verdict
from powercut.errors import UsageError
from powercut.linux.jsonlines import JsonLines, read_lines, repair

log = logging.getLogger(__name__)


class Journal:
    """The verdicts of a campaign, one JSON line each; on resume the later line for a state wins
    (a confirmation or a flaky verdict replaces the first one)."""

    def __init__(self, path: str | os.PathLike[str], resume: bool) -> None:
        self.path = Path(path)
        self.done: dict[str, Verdict] = {}
        if self.path.exists():
            if not resume:
                raise UsageError(f"{self.path} exists: use --resume to continue that campaign, or another output")
            repair(self.path)
            for obj in read_lines(self.path)[0]:
                try:
                    v = Verdict.from_json(obj)
                except (KeyError, TypeError, ValueError):
                    log.warning("%s: skipping an unreadable journal line", self.path)
                    continue
                self.done[v.state] = v
        self._out = JsonLines(self.path)

    def add(self, v: Verdict) -> None:
        self._out.add(v.to_json())
        self.done[v.state] = v

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.done.values())

    def close(self) -> None:
        self._out.close()

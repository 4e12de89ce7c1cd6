"""The verdict journal (host): the resume point of a check campaign -- which state ids already have a
verdict, appended durably as each one comes in -- and the settings it was made with
(``campaign.json``): ``--resume`` with other settings would mix verdicts of two campaigns, so it is
refused, naming what differs."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator

from powercut.core.verdict import Verdict
from powercut.errors import UsageError
from powercut.linux.jsonlines import JsonLines, read_lines, repair

log = logging.getLogger(__name__)

SETTINGS = "campaign.json"


def pin_settings(outdir: Path, settings: dict[str, Any], resume: bool) -> None:
    """Write the campaign's settings, or on resume refuse settings that differ from the pinned ones."""
    path = outdir / SETTINGS
    if resume and path.exists():
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            raise UsageError(f"{path} is unreadable: cannot tell which settings the journal was made with; "
                             "check again without --resume into another --out") from None
        diff = [k for k in sorted(set(before) | set(settings)) if before.get(k) != settings.get(k)]
        if diff:
            k = diff[0]
            raise UsageError(f"--resume with other settings would mix two campaigns' verdicts: {k} was "
                             f"{before.get(k)!r}, now {settings.get(k)!r}" + (f" (and {len(diff) - 1} more)"
                                                                              if len(diff) > 1 else ""))
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


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

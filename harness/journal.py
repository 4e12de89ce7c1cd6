"""Append-only JSON-lines files, fsync'd per line (host and guest): the verdict journal of a
campaign (the resume point) and the guest's progress stream use the same writer and reader."""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterator

from .errors import UsageError
from .verdict import Verdict

log = logging.getLogger(__name__)


class JsonLines:
    """``add(obj)`` appends one line (one write(2)) and fsyncs it; a crash leaves at most one torn
    last line, which ``read_lines`` drops (and ``repair`` truncates away).  ``durable=False``: no
    fsync -- for the guest's progress stream, where a write over 9p already reaches the host file
    before it returns (all a panic attribution needs) and an fsync would flush the host's disk."""

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.path = str(path)
        self.durable = durable
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._lock = threading.Lock()

    def add(self, obj: dict[str, Any]) -> None:
        line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self.fd, line)
            if self.durable:
                os.fsync(self.fd)

    def close(self) -> None:
        with self._lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def __enter__(self) -> "JsonLines":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def repair(path: str | os.PathLike[str]) -> None:
    """Truncate a torn last line (from a kill -9) so that appends start on a line of their own."""
    with open(path, "rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            f.truncate(end)


def read_lines(path: str | os.PathLike[str], start: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The complete lines from byte ``start`` on, parsed, and the offset after the last complete
    one (a torn or unreadable line is skipped with a warning)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except FileNotFoundError:
        return [], start
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            log.warning("%s: skipping an unreadable line", path)
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out, start + end


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

"""The one fsync'd JSON-lines file (host and guest): append a record and make it durable, read what is
there from an offset, repair a torn last line."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any

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

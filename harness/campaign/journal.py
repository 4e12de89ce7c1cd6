"""The verdict journal (host): the resume point of a check campaign -- which state ids already have a
verdict, appended as each one comes in and made durable within ``SYNC_S`` -- and the settings it
was made with (``campaign.json``): ``--resume`` with other settings would mix verdicts of two
campaigns, so it is refused, naming what differs."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from powercut.core.judging.verdict import Verdict
from powercut.errors import UsageError
from powercut.linux.jsonlines import JsonLines, read_lines, repair

log = logging.getLogger(__name__)

SETTINGS = "campaign.json"
SYNC_S = 0.5  # a verdict is on disk at most this long after it was written


def pinned_settings(outdir: Path) -> dict[str, Any]:
    """The settings an earlier campaign in ``outdir`` pinned ({} if none or unreadable)."""
    try:
        return read_settings(outdir / SETTINGS)
    except (OSError, ValueError):
        return {}


def read_settings(path: Path) -> dict[str, Any]:
    """A campaign.json in the one form (OSError, ValueError as json.loads): one disk's
    ``log_sha256`` of campaigns before the one form read as ``logs_sha256`` of one, and their
    ``cluster_bound`` as ``node_bound``."""
    got = json.loads(path.read_text())
    if not isinstance(got, dict):
        raise ValueError(f"{path}: not a JSON object")
    if "log_sha256" in got:
        got["logs_sha256"] = [got.pop("log_sha256")]
    if "cluster_bound" in got:  # its name before one word per idea
        got["node_bound"] = got.pop("cluster_bound")
    return got


def pin_settings(outdir: Path, settings: dict[str, Any], resume: bool) -> None:
    """Write the campaign's settings, or on resume refuse settings that differ from the pinned ones."""
    path = outdir / SETTINGS
    if resume and path.exists():
        try:
            before = read_settings(path)
        except (OSError, ValueError):
            raise UsageError(
                f"{path} is unreadable: cannot tell which settings the journal was made with; "
                "check again without --resume into another --out"
            ) from None
        diff = [k for k in sorted(set(before) | set(settings)) if before.get(k) != settings.get(k)]
        if diff:
            k = diff[0]
            raise UsageError(
                f"--resume with other settings would mix two campaigns' verdicts: {k} was "
                f"{before.get(k)!r}, now {settings.get(k)!r}"
                + (f" (and {len(diff) - 1} more)" if len(diff) > 1 else "")
            )
        return
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


class Journal:
    """The verdicts of a campaign, one JSON line each; on resume the later line for a state wins
    (a confirmation or a flaky verdict replaces the first one).

    Each verdict is one write(2) at once: a killed run (^C, kill -9, a crashed harness) keeps
    every verdict it wrote, and ``--resume`` skips them.  The fsync follows within ``SYNC_S``
    (and at close) on another thread, not one per verdict on the workers' path (~0.15 ms each on
    an idle disk, milliseconds on a busy one): a host crash loses at most the last ``SYNC_S`` of
    verdicts, which a resumed campaign judges again; a torn last line is dropped, as ever."""

    def __init__(self, path: str | os.PathLike[str], resume: bool) -> None:
        self.path = Path(path)
        self.done: dict[str, Verdict] = {}
        if self.path.exists():
            if not resume:
                raise UsageError(
                    f"{self.path} exists: use --resume to continue that campaign, or another output"
                )
            repair(self.path)
            for obj in read_lines(self.path)[0]:
                try:
                    v = Verdict.from_json(obj)
                except (KeyError, TypeError, ValueError):
                    log.warning("%s: skipping an unreadable journal line", self.path)
                    continue
                self.done[v.state] = v
        self._out = JsonLines(self.path, durable=False)
        self._sync_fd = os.dup(self._out.fd)  # the flusher's own: close() may close the writer's
        self._fd_lock = threading.Lock()  # held while fsyncing or closing _sync_fd
        self._lock = threading.Lock()  # guards _timer (never held across an fsync)
        self._timer: threading.Timer | None = None
        self._closed = False

    def add(self, v: Verdict) -> None:
        self._out.add(v.to_json())
        self.done[v.state] = v
        with self._lock:
            if self._timer is None and not self._closed:
                self._timer = threading.Timer(SYNC_S, self._sync)
                self._timer.daemon = True
                self._timer.start()

    def _sync(self) -> None:
        with self._lock:
            self._timer = None  # a verdict written from now on schedules the next fsync
        with self._fd_lock:
            if self._sync_fd >= 0:
                self._fsync(self._sync_fd)

    def _fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as e:
            log.warning("%s: fsync: %s", self.path, e.strerror)

    def __iter__(self) -> Iterator[Verdict]:
        return iter(self.done.values())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        with self._fd_lock:
            fd, self._sync_fd = self._sync_fd, -1
            if fd >= 0:
                self._fsync(fd)
                os.close(fd)
        self._out.close()

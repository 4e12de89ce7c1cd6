"""Plug-ins by entry point: the harness finds workloads and checkers by name, never by module."""
from __future__ import annotations

import threading
from importlib.metadata import entry_points
from typing import Any, TypeVar

from powercut.errors import UsageError

T = TypeVar("T")


def names(group: str) -> list[str]:
    return sorted(ep.name for ep in entry_points(group=group))


_loaded: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def load(group: str, name: str, cls: type[T], unknown: str) -> T:
    """The object registered as ``name`` in ``group``; ``unknown`` is the message's start when there
    is none (the known names and nothing else are appended).  Loaded once per process: scanning the
    installed distributions' metadata costs ~0.3 s per call in a TCG guest over 9p, and the
    checker VM asks once per state."""
    with _lock:
        found = _loaded.get((group, name))
    if found is not None:
        return found
    obj = _load(group, name, cls, unknown)
    with _lock:
        _loaded[(group, name)] = obj
    return obj


def _load(group: str, name: str, cls: type[T], unknown: str) -> T:
    eps = {ep.name: ep for ep in entry_points(group=group)}
    if name not in eps:
        raise UsageError(unknown.format(name=name, known=", ".join(sorted(eps)) or "none"))
    obj = eps[name].load()
    if not isinstance(obj, cls):
        raise UsageError(f"entry point {name!r} in {group} is not a {cls.__module__}.{cls.__name__}")
    return obj

"""Plug-ins by entry point: the harness finds workloads and checkers by name, never by module."""

from __future__ import annotations

import importlib
import threading
from typing import Any, TypeVar

from powercut.errors import UsageError

T = TypeVar("T")


def entry_points(group: str) -> Any:
    from importlib.metadata import (
        entry_points as eps,
    )  # here: importlib.metadata alone costs a TCG guest 0.15 s

    return eps(group=group)


def names(group: str) -> list[str]:
    return sorted(ep.name for ep in entry_points(group=group))


def entry_ref(group: str, name: str) -> str:
    """The entry point's value (``module:attr``) registered as ``name`` in ``group``; '' if none."""
    for ep in entry_points(group=group):
        if ep.name == name:
            return str(ep.value)
    return ""


_preset: dict[tuple[str, str], str] = {}


def preset(group: str, name: str, ref: str) -> None:
    """Where ``name`` in ``group`` is (``module:attr``), as the host found it: the checker VM loads
    it from there without scanning every installed distribution's metadata (~0.3 s under TCG), and
    scans only if the module is not there."""
    _preset[(group, name)] = ref


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


def _from_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module.strip())
    for part in attr.strip().split(".") if attr.strip() else ():
        obj = getattr(obj, part)
    return obj


def _load(group: str, name: str, cls: type[T], unknown: str) -> T:
    ref = _preset.get((group, name))
    if ref:
        try:
            obj = _from_ref(ref)
            if isinstance(obj, cls):
                return obj
        except (ImportError, AttributeError):
            pass  # not where the host found it: look it up as usual
    eps = {ep.name: ep for ep in entry_points(group=group)}
    if name not in eps:
        raise UsageError(unknown.format(name=name, known=", ".join(sorted(eps)) or "none"))
    obj = eps[name].load()
    if not isinstance(obj, cls):
        raise UsageError(
            f"entry point {name!r} in {group} is not a {cls.__module__}.{cls.__name__}"
        )
    return obj

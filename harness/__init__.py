"""powercut: crash-consistency testing with dm-log-writes.

The public API, for workloads and checkers (theirs and the built-in ones alike):

* ``powercut.mark(text)``, ``powercut.ack(key)``, ``powercut.begin(key)`` insert a mark into the
  dm-log-writes log of the device the workload runs on (``ack:<key>`` once a commit is durable,
  ``begin:<key>`` at its start);
* ``powercut.fault(kind, ranges)``, ``powercut.recover()``, ``powercut.file_sectors(path)`` inject
  I/O errors on the workload's device from a chosen point (faults.py);
* ``Workload`` (a guest-side program with typed parameters) and ``Checker``, ``CheckInput``,
  ``CheckResult`` (the verdict on one recovered crash state), registered through the entry-point
  groups ``powercut.workloads`` and ``powercut.checkers``.

The names load on first use (PEP 562), so that importing a submodule -- the pytest plugin, which
pytest loads in every session of a project that has powercut installed -- costs nothing else."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "mark",
    "ack",
    "begin",
    "fault",
    "recover",
    "file_sectors",
    "Workload",
    "Checker",
    "CheckInput",
    "CheckResult",
]
__version__ = "0.2.0"

_HOME = {
    "mark": "powercut.marks",
    "ack": "powercut.marks",
    "begin": "powercut.marks",
    "fault": "powercut.faults",
    "recover": "powercut.faults",
    "file_sectors": "powercut.faults",
    "Workload": "powercut.workload",
    "Checker": "powercut.checker",
    "CheckInput": "powercut.checker",
    "CheckResult": "powercut.checker",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'powercut' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

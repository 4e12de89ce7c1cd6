"""powercut: crash-consistency testing with dm-log-writes.

The public API, for workloads and checkers (theirs and the built-in ones alike):

* ``powercut.mark(text)``, ``powercut.ack(key)``, ``powercut.begin(key)`` insert a mark into the
  dm-log-writes log of the device the workload runs on (``ack:<key>`` once a commit is durable,
  ``begin:<key>`` at its start);
* ``Workload`` (a guest-side program with typed parameters) and ``Checker``, ``CheckInput``,
  ``CheckResult`` (the verdict on one recovered crash state), registered through the entry-point
  groups ``powercut.workloads`` and ``powercut.checkers``."""
from __future__ import annotations

from powercut.checker import Checker, CheckInput, CheckResult
from powercut.marks import ack, begin, mark
from powercut.workload import Workload

__all__ = ["mark", "ack", "begin", "Workload", "Checker", "CheckInput", "CheckResult"]
__version__ = "0.2.0"

"""powercut: crash-consistency testing with dm-log-writes.

Public API for workloads: ``powercut.mark(text)`` inserts a mark into the dm-log-writes log of the
device the workload runs on (``ack:<key>`` once a commit is durable, ``begin:<key>`` at its start)."""
from .marks import mark, ack, begin  # noqa: F401

__all__ = ["mark", "ack", "begin"]
__version__ = "0.1.0"

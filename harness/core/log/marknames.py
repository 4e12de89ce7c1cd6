"""The marks' words, shared by the log's reader (core/log/dmlog.py) and the code that inserts marks in
the recorded program's own process (_logmark.py, marks.py), which imports nothing heavier than this:
under TCG and strace each module a workload imports costs it ~20-50 ms."""

from __future__ import annotations

END_MARK = "dm-log-writes-end"  # dm-log-writes' own, at the target's teardown
ACK_PREFIX = "ack:"
BEGIN_PREFIX = "begin:"
ORDER_BEGIN = (
    "powercut-order-begin"  # the marking code's ordering flush lies between these two (models.py)
)
ORDER_END = "powercut-order-end"

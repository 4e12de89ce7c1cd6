"""Marks in the dm-log-writes log, through the DM_TARGET_MSG ioctl on /dev/mapper/control (no fork,
no dmsetup; the ioctl itself is ``dm.message``).  ``powercut.mark("ack:7")`` from Python;
``powercut-mark ack:7`` from any language.  Runs in the guest, inside a recording's workload.

The target is named by $POWERCUT_DM_NAME, which the recording job sets for the workload.

**Ordered marks.**  dm-log-writes logs a completed plain write only at the next flush but a mark at
once, so a mark could precede writes that completed before it (a false lost-ack; core/states/models.py,
blind spot (c), has the kernel's lines).  With $POWERCUT_ORDER_DEV set (the recording job sets it to
a linear device over the log-writes target), a mark first inserts ``powercut-order-begin``, fsyncs
that device (one empty flush through the target: every completed write is logged), inserts
``powercut-order-end``, suspends and resumes the target (every bio in flight completes, a program
flush already under way included), then inserts the mark.  The models treat that flush as an
ordering point, never as a durability barrier.

**Cluster recordings** (core/states/nodes.py): with $POWERCUT_NODES set (``name=order,...``, one per
node), a mark goes to every node's log in node order, each ordered as above, all under one flock
(``_logmark.insert_on_nodes``), so every node's log holds the same sequence of marks.

**Timing mode** (``powercut bench --workload``): with ``$POWERCUT_TIMING=<file>`` set, a mark sends
no ioctl and needs no target; it appends ``<CLOCK_MONOTONIC ns> <text>`` to that file instead (one
``write(2)`` on a descriptor opened once, no fsync), so any workload that acks can be timed:
commits/s and per-commit latency = its ack's time minus its begin's (bench.parse_timing)."""

from __future__ import annotations

import os
import sys
import time

from powercut import _logmark as logmark
from powercut._logmark import ORDER_ENV, TIMING_ENV, MarkError
from powercut.linux import environ

PLAN_ENV = (
    environ.FAULT_PLAN
)  # faults.py's (imported only when a plan is set: marks run in the program)

__all__ = ["mark", "ack", "begin", "close", "MarkError", "ORDER_ENV", "TIMING_ENV", "MAX_MARK"]

MAX_MARK = 512 - 32 - 1  # the kernel keeps at most sectorsize - sizeof(entry) - 1 bytes of a mark

_timing: dict[str, int] = {}  # timing file path -> its open descriptor


def mark(text: str, dm_name: str | None = None, *, order_dev: str | None = None) -> None:
    """Insert ``text`` as a mark into the log, ordered after every completed write when an order
    device is given (``order_dev`` or $POWERCUT_ORDER_DEV), then let the recording's fault plan see
    it (faults.plan_mark).  Raises MarkError if it cannot."""
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"a mark is one word without spaces, not {text!r}")
    if len(text.encode()) > MAX_MARK:
        raise ValueError(f"a mark is at most {MAX_MARK} bytes")
    timing = environ.text(TIMING_ENV)
    if timing:
        _time(timing, text)
        return
    cluster = environ.text(logmark.MARK_NODES_ENV) if dm_name is None else ""
    if cluster:  # a cluster recording: the mark goes to every node's log, under one lock
        logmark.insert_on_nodes(text, cluster)
    else:
        logmark.insert(text, dm_name, order_dev)
    if environ.text(PLAN_ENV) and not text.startswith("powercut-"):
        from powercut.faults import plan_mark

        plan_mark(text)


def close() -> None:
    """Close the descriptors marks keep open (before the recording removes its devices)."""
    logmark.close()
    for fd in _timing.values():
        os.close(fd)
    _timing.clear()


def _time(path: str, text: str) -> None:
    """Timing mode: one line ``<monotonic ns> <text>`` appended to ``path``."""
    fd = _timing.get(path)
    if fd is None:
        try:
            fd = _timing[path] = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
            )
        except OSError as e:
            raise MarkError(
                e.errno, f"${TIMING_ENV}={path}: cannot open it: {e.strerror}"
            ) from None
    os.write(fd, f"{time.monotonic_ns()} {text}\n".encode())


def ack(key: object) -> None:
    mark(f"ack:{key}")


def begin(key: object) -> None:
    mark(f"begin:{key}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(
            "usage: powercut-mark TEXT   (e.g. powercut-mark ack:42; needs $POWERCUT_DM_NAME, "
            f"or ${TIMING_ENV}=FILE to time instead)",
            file=sys.stderr if len(args) != 1 else sys.stdout,
        )
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        mark(args[0])
    except (MarkError, ValueError, OSError) as e:
        print(f"powercut-mark: {e}", file=sys.stderr)
        return 1
    return 0

"""Inserting one mark into a dm-log-writes log, ordered after every completed write (the Linux side
of marks.py, which has the why): the DM_TARGET_MSG ioctl, and before it the ordering step -- mark
``powercut-order-begin``, fsync the order device (one empty flush through the target), mark
``powercut-order-end``, suspend and resume the target (every bio in flight completes).

Below both marks.py (the public ``powercut.mark``, which then moves the recording's fault plan) and
faults.py (whose switches are marks but must not move the plan)."""

from __future__ import annotations

import fcntl
import os

from powercut.core.log.marknames import ORDER_BEGIN, ORDER_END
from powercut.linux import dm, environ
from powercut.linux.dm import DM_CONTROL

TIMING_ENV = environ.TIMING  # timing mode: marks are timestamps in this file (marks.py)
ORDER_ENV = environ.ORDER_DEV
DM_NAME_ENV = environ.DM_NAME
MARK_NODES_ENV = environ.NODES
NODES_LOCK = (
    "/run/powercut/cluster-marks.lock"  # guest-local: every marking process of the VM takes it
)

_order: dict[str, int] = {}  # order device path -> its open descriptor


class MarkError(OSError):
    pass


def _control() -> int:
    try:
        return dm.control()
    except dm.DmError as e:
        raise MarkError(
            e.errno,
            f"cannot open {DM_CONTROL}: {os.strerror(e.errno) if e.errno else e} "
            "(marks work only inside a powercut recording, as root)",
        ) from None


def insert(text: str, dm_name: str | None = None, order_dev: str | None = None) -> None:
    """Insert ``text`` (already validated) into the log of ``dm_name`` (default $POWERCUT_DM_NAME),
    ordered when an order device is given (``order_dev`` or $POWERCUT_ORDER_DEV)."""
    dm_name = dm_name or environ.text(DM_NAME_ENV)
    if not dm_name:
        raise MarkError(0, f"{DM_NAME_ENV} is not set: marks work only inside a powercut recording")
    _control()
    order_dev = environ.text(ORDER_ENV) if order_dev is None else order_dev
    try:
        if order_dev:
            _ordering(dm_name, order_dev)
        dm.message(dm_name, f"mark {text}")
    except dm.DmError as e:
        raise MarkError(e.errno, f"mark {text!r} on {dm_name}: {os.strerror(e.errno)}") from None


def node_pairs(spec: str) -> list[tuple[str, str]]:
    """``name=order,name=order,...`` ($POWERCUT_NODES) as (dm name, order device) pairs."""
    out = []
    for part in filter(None, spec.split(",")):
        name, _, order = part.partition("=")
        out.append((name, order))
    return out


def insert_on_nodes(text: str, spec: str, lock: str = NODES_LOCK) -> None:
    """A cluster recording's mark: on every node's log in node order (each ordered after that
    node's completed writes), all of them under one lock (an flock held across processes), so
    every log has the same sequence of marks (core/states/nodes.py)."""
    nodes = node_pairs(spec)
    if not nodes:
        raise MarkError(0, f"{MARK_NODES_ENV} names no node")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise MarkError(e.errno, f"cluster mark lock {lock}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        for name, order in nodes:
            insert(text, name, order)
    finally:
        os.close(fd)  # releases the lock


def _ordering(dm_name: str, order_dev: str) -> None:
    """The ordering step before a mark (see the module's docstring)."""
    fd = _order.get(order_dev)
    if fd is None:
        try:
            fd = _order[order_dev] = os.open(order_dev, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise MarkError(
                e.errno, f"${ORDER_ENV}={order_dev}: cannot open it: {e.strerror}"
            ) from None
    dm.message(dm_name, f"mark {ORDER_BEGIN}")
    try:
        os.fsync(fd)
    except OSError as e:
        raise MarkError(e.errno, f"flush of {order_dev} before a mark: {e.strerror}") from None
    dm.message(dm_name, f"mark {ORDER_END}")
    dm.suspend(dm_name)
    dm.resume(dm_name)


def close() -> None:
    """Close the order devices' descriptors (before the recording removes its devices)."""
    for fd in _order.values():
        os.close(fd)
    _order.clear()

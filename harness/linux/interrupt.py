"""Interrupts (host): SIGINT, SIGTERM and SIGHUP turn into ``errors.Interrupted`` in the main thread,
so every ``finally`` and context manager on the way out runs: QEMU process groups and virtiofsd are
killed, libvirt domains destroyed, host-mode mounts and loop devices undone, the journal closed and
the output labelled ``interrupted``.  Worker threads watch ``stopping()`` and stop between states;
the child processes they wait on are killed at once (their results would be discarded anyway).

A second signal while unwinding kills every registered child group and exits at once (128+signum):
a second Ctrl-C never hangs."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from powercut.errors import Interrupted
from powercut.linux import process

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_stop = threading.Event()
_first: list[int] = []


def stopping() -> bool:
    """True once an interrupt arrived: workers finish nothing new."""
    return _stop.is_set()


def raise_if_stopping() -> None:
    """Raise Interrupted in a worker thread if the run is being interrupted."""
    if _stop.is_set():
        raise Interrupted(_first[0] if _first else signal.SIGINT)


def _handler(signum: int, frame: FrameType | None) -> None:
    if _stop.is_set():
        n = process.kill_all()
        try:
            os.write(
                2,
                f"powercut: {signal.Signals(signum).name} again: killed {n} child group(s), exiting\n".encode(),
            )
        finally:
            os._exit(128 + signum)
    _first.append(signum)
    _stop.set()
    process.kill_all()  # whatever runs now is not waited for: its verdict would not be kept
    raise Interrupted(signum)


@contextmanager
def handled() -> Iterator[None]:
    """Install the handlers for the duration of a command (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in SIGNALS}
    for s in SIGNALS:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        reset()


def reset() -> None:
    """Forget a past interrupt (tests run several commands in one process)."""
    _stop.clear()
    _first.clear()


def exit_status(e: BaseException) -> int:
    """128+signum for an Interrupted, 130 for a plain KeyboardInterrupt."""
    return e.exit_status if isinstance(e, Interrupted) else 130


def note(e: BaseException) -> str:
    return str(e) if isinstance(e, Interrupted) else "interrupted"


__all__ = ["raise_if_stopping", "exit_status", "handled", "note", "reset", "stopping"]

"""How a VM run ended (host), read from its serial console: the result value, the exit and panic
markers, the console's tail, and a watch for one string in a growing console file."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from powercut.config import VmSpec
from powercut.errors import GuestHang, GuestPanic, QemuCrashed, VmError, VmKilled

log = logging.getLogger(__name__)


EXIT_RE = re.compile(rb"powercut-exit=(\d+)")
PANIC_RE = re.compile(rb"Kernel panic - not syncing[^\n]*")
KILLED_RE = re.compile(r"terminating on signal (\d+)(?: from pid (\d+))?[^\n]*")  # QEMU's own line


@dataclass(frozen=True, slots=True)
class VmResult:
    exit_status: int
    console_path: str
    wall_s: float
    accel: str
    boot_s: float | None = None


def console_tail(path: str | os.PathLike, lines: int = 30) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def classify_end(
    console: bytes, qemu_rc: int | None, timed_out: bool, spec: VmSpec, qemu_stderr: str
) -> int:
    """The guest's exit status, or the VmError that says how the VM ended instead."""
    tail = console_tail(spec.console_path)
    panic = PANIC_RE.search(console)
    if panic:
        line = panic.group(0).decode(errors="replace").strip()
        # the tail starts at the panic line: the stack dump after it can push it out of any last-N
        after = console[panic.start() :].decode(errors="replace").splitlines()[:30]
        raise GuestPanic(
            f"guest kernel panic: {line}", spec.console_path, "\n".join(after), panic_line=line
        )
    m = EXIT_RE.search(console)
    if m and not timed_out:
        return int(m.group(1))
    if timed_out:
        raise GuestHang(
            f"VM did not finish within {spec.timeout_s:g} s (killed)", spec.console_path, tail
        )
    err = qemu_stderr.strip().splitlines()[-1] if qemu_stderr.strip() else ""
    killed = KILLED_RE.search(qemu_stderr)
    if killed and killed.group(2) != str(
        os.getpid()
    ):  # powercut's own kills end as hangs, before this
        raise VmKilled(f"QEMU was stopped from outside: {killed.group(0)}", spec.console_path, tail)
    if qemu_rc is not None and qemu_rc < 0:
        raise QemuCrashed(
            f"QEMU died of signal {-qemu_rc}" + (f": {err}" if err else ""), spec.console_path, tail
        )
    if qemu_rc:
        raise QemuCrashed(
            f"QEMU exited {qemu_rc}" + (f": {err}" if err else ""), spec.console_path, tail
        )
    raise VmError("guest stopped without reporting an exit status", spec.console_path, tail)


class ConsoleWatch:
    """Watches a growing console file for one byte string, reading only what is new."""

    def __init__(self, path: str | os.PathLike, needle: bytes) -> None:
        self.path = path
        self.needle = needle
        self.pos = 0
        self.found = False

    def seen(self) -> bool:
        if not self.found:
            try:
                with open(self.path, "rb") as f:
                    f.seek(max(0, self.pos - len(self.needle) + 1))
                    data = f.read()
                    self.pos = f.tell()
            except OSError:
                return False
            self.found = self.needle in data
        return self.found

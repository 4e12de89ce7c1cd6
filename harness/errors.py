"""One hierarchy of errors.  Every error a user can cause or meet carries a one-line message
(``str(err)``) that the CLI prints as is; nothing below should need a traceback to be understood."""

from __future__ import annotations

import shlex


class PowercutError(Exception):
    """Base of every error powercut raises on purpose."""

    def one_line(self) -> str:
        return " ".join(str(self).split("\n")[0].split()) or type(self).__name__


class UsageError(PowercutError):
    """A wrong option, an unknown name, a value out of range."""


class OptionError(UsageError):
    """A command-line option's value the parser could not judge (a workload's --param): exit 2, as
    argparse's own refusals."""


class EnvironmentNotReady(PowercutError):
    """A tool, a kernel module, a package or a device the run needs is missing."""


class ImageError(PowercutError):
    """The guest image cannot be built or is incomplete (e.g. a module is missing)."""


class BadLog(PowercutError):
    """A dm-log-writes log is corrupt, truncated or not a log at all."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: bad dm-log-writes log at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class BadRecording(PowercutError):
    """A recording directory is missing files or its manifest does not parse."""


class CommandFailed(PowercutError):
    """A subprocess exited non-zero or timed out."""

    def __init__(
        self,
        argv: list[str],
        returncode: int | None,
        stderr_tail: str,
        timed_out: bool = False,
        timeout: float | None = None,
    ) -> None:
        what = f"timed out after {timeout:g} s" if timed_out else f"exited {returncode}"
        tail = stderr_tail.strip().splitlines()[-1] if stderr_tail.strip() else ""
        super().__init__(
            f"{argv[0]} {what}" + (f": {tail}" if tail else "") + f"  (argv: {shlex.join(argv)})"
        )
        self.argv = argv
        self.returncode = returncode
        self.stderr_tail = stderr_tail
        self.timed_out = timed_out


class VmError(PowercutError):
    """The VM did not run the job to its end.  ``console_tail`` holds the last console lines."""

    kind = "vm-error"

    def __init__(
        self, message: str, console_path: str | None = None, console_tail: str = ""
    ) -> None:
        super().__init__(message + (f" (console: {console_path})" if console_path else ""))
        self.console_path = console_path
        self.console_tail = console_tail


class GuestPanic(VmError):
    """``panic_line`` is the kernel's own "Kernel panic - not syncing: ..." line; ``console_tail``
    starts at it (the stack dump that follows can be long)."""

    kind = "kernel-panic"

    def __init__(
        self,
        message: str,
        console_path: str | None = None,
        console_tail: str = "",
        panic_line: str = "",
    ) -> None:
        super().__init__(message, console_path, console_tail)
        self.panic_line = panic_line


class GuestHang(VmError):
    kind = "timeout"


class QemuCrashed(VmError):
    kind = "qemu-crashed"


class VmKilled(VmError):
    """QEMU was stopped by a signal from another process (``pkill``, a CI runner's cleanup): no
    state's doing, so no state's finding."""

    kind = "vm-killed"


class WorkloadFailed(PowercutError):
    """The workload ran in the guest and exited non-zero (or was killed by its timeout)."""


class LogDeviceFull(PowercutError):
    """dm-log-writes ran out of log space: the log would be silently short."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP arrived: unwind, stop every VM and clean up, then exit 128+signum.
    A KeyboardInterrupt subclass, so ``except Exception`` never swallows it."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


class CheckerError(PowercutError):
    """The checker itself is broken (a command that cannot start, an answer that is no verdict, a
    checker that fails on every first state): a harness-side error (exit 1), never a finding."""

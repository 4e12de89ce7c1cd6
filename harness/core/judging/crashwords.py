"""What a crashed program said, in its own words (pure; issue 61 item 6): the message of a Rust
panic, a Go panic with the first frame in the program, the exception of a Python traceback or a
Java stack trace -- read from its stderr, so that a checker command that runs the program's own
open is judged by why it crashed, not by the last line it printed (Rust's "note: run with
`RUST_BACKTRACE=1` ..."), and its failures group by that.

``crash_message(stderr)`` is the message, or None when stderr shows none of these."""

from __future__ import annotations

import re

# Rust >= 1.73: "thread 'main' panicked at src/main.rs:10:5:" then the message on the next lines;
# before:      "thread 'main' panicked at 'the message', src/main.rs:10:5"
_RUST_AT = re.compile(r"^thread '([^']*)' panicked at (\S+?):$")
_RUST_OLD = re.compile(r"^thread '([^']*)' panicked at '(.*)', (\S+)$")
_RUST_NOTE = "note: run with `RUST_BACKTRACE=1`"
# Go: "panic: the message" (or "fatal error: ..."), then "goroutine 1 [running]:" and frames,
# each a "pkg.func(...)" line and a tab-indented "/path/file.go:12 +0x1d" line
_GO_PANIC = re.compile(r"^(panic|fatal error): (.*)$")
_GO_FRAME = re.compile(r"^([\w./*()-]+?)\((.*)\)$")
_GO_WHERE = re.compile(r"^\t(\S+\.go):(\d+)")
_GO_RUNTIME = ("runtime.", "panic(", "sync.", "internal/")
# Java: "Exception in thread "main" java.lang.IllegalStateException: msg", "\tat ..." frames,
# "Caused by: ..." for each cause (the last one is the root)
_JAVA_MAIN = re.compile(r'^Exception in thread "[^"]*" (.+)$')
_JAVA_CAUSE = re.compile(r"^Caused by: (.+)$")
TRACEBACK = "Traceback (most recent call last):"


def crash_message(stderr: str) -> str | None:
    """The crash's own message (see the module's docstring), or None."""
    lines = stderr.splitlines()
    for read in (_rust, _go, _java, _python):
        said = read(lines)
        if said:
            return said
    return None


def _rust(lines: list[str]) -> str | None:
    for i in range(len(lines) - 1, -1, -1):
        old = _RUST_OLD.match(lines[i])
        if old:
            return f"panicked at {old.group(3)}: {old.group(2)}"
        at = _RUST_AT.match(lines[i])
        if at:
            message = []
            for line in lines[i + 1 :]:
                if not line.strip() or line.startswith((_RUST_NOTE, "stack backtrace:")):
                    break
                message.append(line.strip())
            return f"panicked at {at.group(2)}: {' '.join(message) or '(no message)'}"
    return None


def _go(lines: list[str]) -> str | None:
    start = next((i for i, line in enumerate(lines) if _GO_PANIC.match(line)), None)
    if start is None:
        return None
    panic = lines[start]
    for i in range(start + 1, len(lines) - 1):
        frame = _GO_FRAME.match(lines[i])
        where = _GO_WHERE.match(lines[i + 1])
        if frame and where and not lines[i].startswith(_GO_RUNTIME):
            return f"{panic} (in {frame.group(1)}, {where.group(1).rsplit('/', 1)[-1]}:{where.group(2)})"
    return panic


def _java(lines: list[str]) -> str | None:
    cause = None
    for line in lines:
        m = _JAVA_MAIN.match(line) or _JAVA_CAUSE.match(line)
        if m:
            cause = m.group(1).strip()
    return cause


def _python(lines: list[str]) -> str | None:
    """The exception line of the last traceback (the first unindented line after it)."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == TRACEBACK:
            after = [
                line.strip() for line in lines[i + 1 :] if line.strip() and not line[:1].isspace()
            ]
            return after[0] if after else None
    return None

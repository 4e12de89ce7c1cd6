"""The recording's syscall trace in the guest: strace around the workload (one disk's, or a
cluster's client and the nodes it starts, its children), kept gzipped in the job directory for
core/trace/syscalls.py to read on the host."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from powercut.core.trace import syscalls
from powercut.vm import guestjob

log = logging.getLogger("powercut.guest")

TRACE_TMP = "/tmp/powercut-syscalls.txt"  # strace writes here (the guest's tmpfs), copied to the job share after
TRACE_FILE = (
    "syscalls.txt.gz"  # in the job directory: the recording's trace (core/trace/syscalls.py)
)


def strace_argv(out: str, holding: bool = False) -> list[str]:
    """strace around the workload: every thread and child (-f), descriptors with their paths (-y),
    each call's time inside the kernel (-T: how long a sync took, run --explore-races), the mark
    ioctls' messages decoded (abbrev=none).  Only the traced calls stop (--seccomp-bpf), except
    under the --delay-sync supervisor (``holding``): its seccomp filter's user notification takes
    precedence over strace's, and every sync call would vanish from the trace; plain ptrace stops
    each call before seccomp sees it, so a held call shows where the program made it, the hold
    inside its -T (docs/races.md has what each mode costs)."""
    seccomp = [] if holding else ["--seccomp-bpf"]
    return [
        "strace",
        "-f",
        "-y",
        "-T",
        "-qq",
        "-ttt",
        "-s",
        "512",
        *seccomp,
        "-e",
        "abbrev=none",
        "-e",
        "signal=none",
        "-e",
        "trace=" + ",".join(syscalls.TRACED),
        "-o",
        out,
        "--",
    ]


def traced(
    argv: list[str], trace: bool, tools_dir: str, res: dict[str, Any], holding: bool = False
) -> list[str]:
    """``argv`` under strace when ``trace`` is asked for (in the mode a hold needs when ``holding``);
    without strace in the image, ``argv`` as it is and ``res["trace_error"]``."""
    if not trace:
        return argv
    strace = shutil.which("strace", path=guestjob.guest_path(tools_dir))
    if not strace:
        res["trace_error"] = (
            "strace is not installed (apt-get install strace): recorded without a trace"
        )
        log.warning("%s", res["trace_error"])
        return argv
    if os.path.exists(TRACE_TMP):
        os.unlink(TRACE_TMP)
    return [strace, *strace_argv(TRACE_TMP, holding)[1:], *argv]


def kept_trace(trace: bool, jobdir: Path, res: dict[str, Any]) -> None:
    """After the workload: its trace kept in the job directory (``res`` says where, or why not)."""
    if trace and "trace_error" not in res:
        res.update(keep_trace(jobdir))


def keep_trace(jobdir: Path) -> dict[str, Any]:
    """The trace, gzipped into the job directory; what went wrong if there is none."""
    try:
        size = os.path.getsize(TRACE_TMP)
    except OSError:
        return {"trace_error": "strace wrote no trace (see workload.err)"}
    with open(TRACE_TMP, "rb") as src, gzip.open(jobdir / TRACE_FILE, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.unlink(TRACE_TMP)
    return {"trace_file": TRACE_FILE, "trace_bytes": size}

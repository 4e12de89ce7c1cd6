"""Building a workload's Go program on the host (etcd's pinned release, gotwofile's source): where
the Go toolchain is, and one build step run with its failure said in one line."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence

GO_CANDIDATES = ("/usr/local/go/bin/go", "/usr/lib/go/bin/go")


class BuildError(Exception):
    """A Go program cannot be built here (no Go, a failed step): one line."""


def find_go() -> str | None:
    return shutil.which("go") or next((g for g in GO_CANDIDATES if os.access(g, os.X_OK)), None)


def toolchain(what: str, go: str | None, find: Callable[[], str | None] = find_go) -> str:
    """``go``, else the one ``find`` finds; BuildError when there is none."""
    found = go or find()
    if found is None:
        raise BuildError(
            f"cannot build {what}: no Go toolchain (no `go` on PATH, nor "
            f"{' or '.join(GO_CANDIDATES)}; apt-get install golang-go)"
        )
    return found


def step(
    what: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run one build step of ``what``; a step that cannot start, times out or fails: BuildError
    naming the command and the last line it printed."""
    try:
        r = subprocess.run(
            list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"cannot build {what}: {shlex.join(argv)}: {e}") from None
    if r.returncode:
        tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise BuildError(f"cannot build {what}: {shlex.join(argv)} exited {r.returncode}: {tail}")
    return r

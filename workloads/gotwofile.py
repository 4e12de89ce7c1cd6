"""gotwofile: twofile's race in a static Go program (issue 60, docs/races.md).

The program (``workloads/gotwofile.go``, standard library only) is twofile's ``log_via=pwrite``
store, call for call: store.log (``n`` blocks) and store.idx preallocated and fsynced with the
directory; per commit i ``begin:i``, record i into block i of store.log, its index entry, then
``fdatasync(store.log)`` and ``fsync(store.idx)`` each in a goroutine of its own; ``reply_on=both``
acks once both returned, ``reply_on=index`` (the bug) once the index's did.  Its syscalls are raw
(package ``syscall``, no libc) and its marks are the C ``powercut-mark``, a failed one a failed
workload.  The records are twofile's own (``twofile.record``): this side writes them into a file in
the guest's /tmp, outside the recorded filesystem, and the program reads record i from there, so
the twofile checker judges its store unchanged.

The binary (host): ``python -m powercut.workloads.gotwofile --build`` builds it with the machine's
Go toolchain (``CGO_ENABLED=0 -trimpath``, ``GOTOOLCHAIN=local``, no module download) into
/var/cache/powercut/gotwofile/gotwofile-<source digest>, which the guest sees (it runs the host's
root read-only); nothing when it is there already; one line and exit 1 without Go.  The digest
names the source: a changed program is a missing binary, never a stale one.

Params: twofile's ``n`` (12), ``size`` (1000), ``seed`` (0), ``reply_on`` (both); ``binary`` (the
built program's path)."""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from powercut import Workload
from powercut.workloads.gobuild import BuildError, find_go, step, toolchain
from powercut.workloads.twofile import record

CACHE = "/var/cache/powercut/gotwofile"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gotwofile.go")
BUILD_HINT = "python -m powercut.workloads.gotwofile --build"


def digest(source: str = SOURCE) -> str:
    with open(source, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def binary(cache: str = CACHE) -> str:
    """Where the program built from this source is (or would be)."""
    return os.path.join(cache, f"gotwofile-{digest()}")


def write_records(path: str, n: int, seed: int, size: int) -> None:
    """Records 0 .. n-1, twofile's, one 4 KiB block each, into ``path`` (what the program reads)."""
    with open(path, "wb") as f:
        for i in range(n):
            f.write(record(seed, i, size))


def main(params: dict[str, Any]) -> int:
    program = params["binary"]
    if not os.access(program, os.X_OK):
        raise SystemExit(
            f"gotwofile: no program at {program}: build it on the host first ({BUILD_HINT})"
        )
    with tempfile.TemporaryDirectory(
        prefix="powercut-gotwofile-"
    ) as tmp:  # the guest's /tmp: not recorded
        records = os.path.join(tmp, "records")
        write_records(records, params["n"], params["seed"], params["size"])
        rc = subprocess.run(
            [program, "-records", records, "-reply-on", params["reply_on"]]
        ).returncode
    if rc:
        raise SystemExit(f"gotwofile: {program} exited with status {rc}")
    return 0


WORKLOAD = Workload(
    name="gotwofile",
    description="twofile's store as a static Go program (raw syscalls, a goroutine per sync); "
    "reply_on=index replies before the log's sync returns",
    main=main,
    defaults={"n": 12, "size": 1000, "seed": 0, "reply_on": "both", "binary": binary()},
    choices={"reply_on": ("both", "index")},
    minimum={"n": 1, "size": 1},
)


# -- the build (host) -------------------------------------------------------------------------------


def build_argv(go: str, out: str, source: str = SOURCE) -> list[str]:
    return [go, "build", "-trimpath", "-o", out, source]


def build_env(scratch: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The build's environment: static, this toolchain, no module download; a Go cache in ``scratch``
    when neither $GOCACHE nor a home to keep one in is set."""
    env = dict(os.environ if environ is None else environ)
    env.update({"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": "", "GOPROXY": "off"})
    if not env.get("HOME"):
        env["HOME"] = scratch
        env.setdefault("GOCACHE", os.path.join(scratch, "go-build"))
    return env


def build(cache: str = CACHE, *, go: str | None = None, say: Callable[[str], None] = print) -> str:
    """The program's path, built first if it is not there (BuildError)."""
    target = binary(cache)
    if os.access(target, os.X_OK):
        return target
    go = toolchain("gotwofile", go, find_go)  # find_go looked up here: tests replace it
    os.makedirs(cache, exist_ok=True)
    say(f"building gotwofile ({SOURCE}) with {go}")
    tmp = f"{target}.tmp{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="powercut-gotwofile-build-") as scratch:
        step("gotwofile", build_argv(go, tmp), scratch, build_env(scratch), timeout=600)
    os.replace(tmp, target)
    return target


def cli(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m powercut.workloads.gotwofile")
    ap.add_argument(
        "--build", action="store_true", help="build the Go program (host; once per source)"
    )
    ap.add_argument("--cache", default=CACHE, help=f"where the binary goes (default {CACHE})")
    a = ap.parse_args(argv)
    if not a.build:
        ap.error("give --build")
    try:
        print(f"gotwofile: {build(a.cache, say=lambda s: print(s, file=sys.stderr))}")
    except BuildError as e:
        print(f"gotwofile: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))

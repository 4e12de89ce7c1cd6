"""etcd: a three-member etcd cluster, one member a node of a cluster recording (issue 40's etcd row).

The recording (guest): member i runs with ``--data-dir n<i>/<dir>`` (its node's filesystem), all on
127.0.0.1 (client port ``port + 2i``, peer port one above), between ``begin:up`` and ``ack:up`` (every
member healthy, then ``sync``: the bootstrap is on disk as on a cluster that has run for longer than
the kernel's writeback delay -- without it, ``fsync=false`` would lose the bootstrap's own WAL records
and restart members with no voters, wedged; from ``ack:up`` on the cluster must come back); then the client
puts ``k0`` .. ``k<n-1>`` one at a time through etcd's HTTP/JSON gRPC gateway (member 0 first,
another member if it fails), each value ``size`` bytes from (seed, i): ``begin:i`` before the put,
``ack:i`` after etcd answered it (a put answers once a majority has it in its WAL -- with fsync;
``fsync=false`` adds ``--unsafe-no-fsync`` to every member: etcd's "Disables fsync, unsafe, will
cause data loss").  Then SIGTERM to every member (SIGKILL 3 s later).

The pinned etcd (host): ``python -m powercut.workloads.etcd --build`` builds etcd VERSION from the
Go module proxy (``etcdmain.Main`` in a five-line main, checksums from the Go checksum database) into
/var/cache/powercut/etcd/etcd-VERSION, which the guest sees (it runs the host's root read-only);
nothing when it is there already; one line and exit 1 without Go.

The checker's recovery (host): ``python -m powercut.workloads.etcd --recover --params JSON MOUNT...``
starts the members on the mounts' data dirs with the recorded ports -- the checker runs it in a
network namespace of its own (``unshare --net``), so states judged at once never share a port --,
waits for a leader, reads every key (linearizable), stops the members and prints one JSON line:
``{"kvs": {b64 key: b64 value} | null, "failed": [{"node", "code", "line"}], "error": str,
"seconds": float}``.  checkers/etcd.py judges it.

Params: ``n`` (20), ``size`` (100), ``seed`` (0), ``fsync`` (true), ``port`` (2379), ``heartbeat_ms``
(200), ``election_ms`` (2000: generous, the recording VM runs under TCG), ``start_timeout`` (300 s),
``put_timeout`` (120 s), ``dir`` ("etcd"), ``etcd`` (the pinned binary); for the checker,
``recover_timeout`` (30 s: the recovery's wait for a leader and a read)."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import powercut
from powercut import Workload
from powercut.workloads.etcdcluster import Cluster, EtcdError, b64, lo_up, put, range_all
from powercut.workloads.gobuild import BuildError, find_go, step, toolchain

VERSION = "v3.6.16"
MODULE = "go.etcd.io/etcd/server/v3"
CACHE = "/var/cache/powercut/etcd"
MAIN_GO = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""
RECOVER_TIMEOUT_S = 30.0  # for a leader and a read: ~1-2 s on the host when etcd recovers
UP = "up"  # the key acked once every member is healthy: from then on the cluster must come back


def binary(cache: str = CACHE) -> str:
    return os.path.join(cache, f"etcd-{VERSION}")


DEFAULTS: dict[str, Any] = {
    "n": 20,
    "size": 100,
    "seed": 0,
    "fsync": True,
    "port": 2379,
    "heartbeat_ms": 200,
    "election_ms": 2000,
    "start_timeout": 300.0,
    "put_timeout": 120.0,
    "dir": "etcd",
    "etcd": binary(),
    "recover_timeout": RECOVER_TIMEOUT_S,
}


def key(i: int) -> bytes:
    return b"k%d" % i


def value(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"etcd:{seed}:{i}").randbytes(size)


def node_mounts(cwd: str = ".") -> list[str]:
    """A cluster recording's node mounts in the workload's cwd: n0, n1, ... in node order."""
    return sorted(
        (d for d in os.listdir(cwd) if d[:1] == "n" and d[1:].isdigit()), key=lambda d: int(d[1:])
    )


def cluster(data_dirs: Sequence[str], logs: str, p: dict[str, Any], *, fsync: bool) -> Cluster:
    return Cluster(
        p["etcd"],
        data_dirs,
        logs,
        port=p["port"],
        fsync=fsync,
        heartbeat_ms=p["heartbeat_ms"],
        election_ms=p["election_ms"],
    )


def failures(cl: Cluster) -> list[str]:
    return [f"node {i}: exit {rc}: {cl.last_error(i)}" for i, rc in sorted(cl.exited().items())]


def put_retrying(cl: Cluster, k: bytes, v: bytes, timeout: float) -> None:
    """Put through member 0, else the next running member, until ``timeout`` or a majority exited."""
    deadline = time.monotonic() + timeout
    err = ""
    while time.monotonic() < deadline and len(cl.exited()) <= len(cl.procs) // 2:
        for url in cl.urls():
            try:
                put(url, k, v, max(1.0, deadline - time.monotonic()))
                return
            except EtcdError as e:
                err = str(e)
        time.sleep(0.5)
    raise SystemExit(
        f"etcd: put {k.decode()} not answered (timeout {timeout:g} s): {err}; "
        + "; ".join(failures(cl))
    )


def main(params: dict[str, Any]) -> int:
    mounts = node_mounts()
    if not mounts:
        raise SystemExit(
            "etcd: needs a cluster recording (record --nodes N: node mounts n0, n1, ... in its cwd)"
        )
    if not os.access(params["etcd"], os.X_OK):
        raise SystemExit(
            f"etcd: no etcd binary at {params['etcd']}: build it on the host first "
            f"(python -m powercut.workloads.etcd --build)"
        )
    logs = tempfile.mkdtemp(
        prefix="powercut-etcd-"
    )  # the guest's /tmp: no member log on a recorded disk
    cl = cluster(
        [os.path.join(m, params["dir"]) for m in mounts], logs, params, fsync=params["fsync"]
    )
    t0 = time.monotonic()
    try:
        powercut.begin(UP)
        cl.start()
        if not cl.wait_ready(params["start_timeout"]):
            raise SystemExit(
                f"etcd: no healthy cluster within {params['start_timeout']:g} s: "
                + ("; ".join(failures(cl)) or "no member exited")
            )
        os.sync()  # the bootstrap on disk, as on a cluster up for longer than the writeback delay (30 s)
        powercut.ack(UP)
        t1 = time.monotonic()
        sys.stderr.write(f"etcd: {len(mounts)} members healthy in {t1 - t0:.1f} s\n")
        for i in range(params["n"]):
            powercut.begin(i)
            put_retrying(
                cl, key(i), value(params["seed"], i, params["size"]), params["put_timeout"]
            )
            powercut.ack(i)
        sys.stderr.write(f"etcd: {params['n']} puts acked in {time.monotonic() - t1:.1f} s\n")
    finally:  # SIGTERM; the leader, its followers gone, waits out a leadership transfer: SIGKILL after 3 s
        cl.stop(grace=3.0)
        shutil.rmtree(logs, ignore_errors=True)
    return 0


WORKLOAD = Workload(
    "etcd",
    "an etcd cluster, a member per node: n puts, each acked once etcd answered",
    main,
    DEFAULTS,
    minimum={
        "n": 1,
        "size": 1,
        "port": 1024,
        "heartbeat_ms": 10,
        "election_ms": 50,
        "start_timeout": 1,
        "put_timeout": 1,
        "recover_timeout": 1,
    },
    nodes=True,
)


# -- the checker's recovery (host, in a network namespace of its own) -----------------------------


def recover(
    mounts: Sequence[str], params: dict[str, Any], timeout: float = RECOVER_TIMEOUT_S
) -> dict[str, Any]:
    """Start the members on ``mounts`` (node order), read every key once a majority runs and a
    leader answers, stop them.  What ``--recover`` prints."""
    p = WORKLOAD.params(params)  # typed: params from a manifest or a command line are strings
    logs = tempfile.mkdtemp(prefix="powercut-etcd-check-")
    cl = cluster([os.path.join(m, p["dir"]) for m in mounts], logs, p, fsync=True)
    t0 = time.monotonic()
    kvs: dict[bytes, bytes] | None = None
    err, failed = "", []
    try:
        cl.start()
        cl.wait_ready(timeout)
        deadline = t0 + timeout
        while kvs is None and time.monotonic() < deadline and len(cl.exited()) <= len(mounts) // 2:
            for url in cl.urls():
                try:
                    kvs = range_all(url, 5.0)
                    break
                except EtcdError as e:
                    err = str(e)
            else:
                time.sleep(0.3)
        failed = [
            {"node": i, "code": rc, "line": cl.last_error(i)}
            for i, rc in sorted(cl.exited().items())
        ]
        if kvs is None:
            err = (
                f"a majority of members exited ({len(failed)} of {len(mounts)})"
                if len(failed) > len(mounts) // 2
                else f"no linearizable read within {timeout:g} s ({err or 'no answer'}); "
                + "; ".join(
                    f"node {i}: {cl.raft_state(i)}"
                    for i in range(len(mounts))
                    if i not in cl.exited()
                )
            )
    finally:
        cl.stop(sig=signal.SIGKILL)  # read already; the image is a disposable copy
        shutil.rmtree(logs, ignore_errors=True)
    return {
        "kvs": None if kvs is None else {b64(k): b64(v) for k, v in kvs.items()},
        "failed": failed,
        "error": "" if kvs is not None else err,
        "seconds": round(time.monotonic() - t0, 3),
    }


# -- the pinned build (host) -----------------------------------------------------------------------


def build(cache: str = CACHE, *, go: str | None = None, say: Callable[[str], None] = print) -> str:
    """The pinned etcd's path, built from the Go module proxy first if it is not there (BuildError)."""
    target = binary(cache)
    if os.access(target, os.X_OK):
        return target
    go = toolchain(f"etcd {VERSION}", go, find_go)  # find_go looked up here: tests replace it
    os.makedirs(cache, exist_ok=True)
    say(f"building etcd {VERSION} ({MODULE}) with {go}")
    env = {**os.environ, "GOTOOLCHAIN": "auto", "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    with tempfile.TemporaryDirectory(prefix="powercut-etcd-build-") as src:
        with open(os.path.join(src, "main.go"), "w") as f:
            f.write(MAIN_GO)
        tmp = f"{target}.tmp{os.getpid()}"
        steps = (
            [go, "mod", "init", "powercut.invalid/etcd"],
            [go, "get", f"{MODULE}@{VERSION}"],
            [go, "mod", "tidy"],
            [go, "build", "-trimpath", "-o", tmp, "."],
            [tmp, "--version"],
        )
        for argv in steps:
            r = step(f"etcd {VERSION}", argv, src, env, timeout=1800)
        if f"etcd Version: {VERSION.lstrip('v')}" not in r.stdout:
            raise BuildError(f"the etcd built is not {VERSION}: {r.stdout.strip()[:200]}")
        os.replace(tmp, target)
    return target


def cli(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m powercut.workloads.etcd")
    ap.add_argument(
        "--build", action="store_true", help=f"build the pinned etcd {VERSION} (host; once)"
    )
    ap.add_argument("--cache", default=CACHE, help=f"where the binary goes (default {CACHE})")
    ap.add_argument(
        "--recover", action="store_true", help="the checker's recovery: start, read every key, stop"
    )
    ap.add_argument("--params", default="{}", help="--recover: the workload's params as JSON")
    ap.add_argument(
        "--timeout", type=float, default=RECOVER_TIMEOUT_S, help="--recover: seconds for a leader"
    )
    ap.add_argument("mounts", nargs="*", help="--recover: every node's mount, node 0 first")
    a = ap.parse_args(argv)
    if a.build == a.recover:
        ap.error("give --build or --recover")
    if a.build:
        try:
            print(f"etcd {VERSION}: {build(a.cache, say=lambda s: print(s, file=sys.stderr))}")
        except BuildError as e:
            print(f"etcd: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        p = WORKLOAD.params(json.loads(a.params))
    except Exception as e:  # noqa: BLE001 -- bad JSON, an unknown or mistyped parameter (a UsageError)
        print(f"etcd: --params: {e}", file=sys.stderr)
        return 2
    if not os.access(p["etcd"], os.X_OK):
        print(
            f"etcd: no etcd binary at {p['etcd']} (python -m powercut.workloads.etcd --build)",
            file=sys.stderr,
        )
        return 1
    lo_up()
    print(json.dumps(recover(a.mounts, json.loads(a.params), a.timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))

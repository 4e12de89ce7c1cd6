"""Checker for etcd (a cluster workload): start the members on every node's recovered filesystem
(``CheckInput.mounts``, node 0 first) with the recorded ports, in a network namespace of its own
(``unshare --net``: states judged at once never share a port, nor meet a real etcd on this host),
read every key with a linearizable range read, stop the members
(``python -m powercut.workloads.etcd --recover``, its own process group, killed whole at the end;
the members die with it).  Runs on the host in host mode, as root.

* lost-ack -- an acked key absent;
* corrupt-data -- an acked or begun key with a value the workload never put, or a key never begun;
* detected -- etcd refused: a member exited with an error (its node and etcd's own log line), or no
  linearizable read within the workload's ``recover_timeout`` (30 s; the host is fast: a recovering
  cluster reads in 1-2 s) -- etcd cannot recover from a power cut of every
  node, the mildest finding under a power-loss model (core/judging/verdict.py);
* pass -- otherwise; and a cut before ``ack:up`` (every member healthy once), without starting etcd: a
  bootstrap cut short promises nothing -- and the cluster model would combine, within that one
  instant, a node before its first WAL write with peers that already know it bootstrapped, which no
  real power cut gives ("member ... has already been bootstrapped").

Findings add up: a member that failed while a majority still served its keys gives ``detected``
with the read's verdict (the worst one wins)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
from typing import Any

from powercut import Checker, CheckInput, CheckResult

DEFAULTS: dict[str, Any] = {"size": 100, "seed": 0, "recover_timeout": 30.0}  # the workload's
MARGIN_S = 30.0  # the recovery's own start and stop
UP = "up"  # the workload's ack once every member was healthy (the bootstrap over)


def value(seed: int, i: int, size: int) -> bytes:
    return random.Random(f"etcd:{seed}:{i}").randbytes(size)


def _short(v: bytes) -> str:
    return repr(v[:12]) + ("..." if len(v) > 12 else "") + f" ({len(v)} bytes)"


def judge(
    kvs: dict[bytes, bytes], acked: list[int], begun: list[int], seed: int, size: int
) -> CheckResult:
    """The keys etcd served against what the client put and acked."""
    wrong, phantom = [], []
    known = set(acked) | set(begun)
    for k, v in sorted(kvs.items()):
        i = int(k[1:]) if k[:1] == b"k" and k[1:].isdigit() else None
        if i is None or i not in known:
            phantom.append(f"key {k!r} was never put (begun keys: {len(known)})")
        elif v != value(seed, i, size):
            wrong.append(
                f"key {k.decode()} holds {_short(v)}, not the value put {_short(value(seed, i, size))}"
            )
    if wrong or phantom:
        return CheckResult("corrupt-data", tuple(wrong + phantom))
    lost = [i for i in acked if b"k%d" % i not in kvs]
    if lost:
        return CheckResult(
            "lost-ack",
            (
                f"acked key k{lost[0]} is missing: etcd serves {len(kvs)} keys, "
                f"{len(acked)} were acked"
                + (
                    f"; {len(lost)} acked keys lost: {', '.join(f'k{i}' for i in lost[:10])}"
                    if len(lost) > 1
                    else ""
                ),
            ),
        )
    return CheckResult("pass")


SEVERITY = ("pass", "detected", "lost-ack", "corrupt-data")


def verdict(
    out: dict[str, Any], acked: list[int], begun: list[int], seed: int, size: int
) -> CheckResult:
    """The recovery's answer (``--recover``'s JSON) as a verdict."""
    failed = [
        f"node {f['node']}: etcd exited {f['code']}: {f['line']}" for f in out.get("failed", ())
    ]
    if out.get("kvs") is None:
        return CheckResult(
            "detected", (f"etcd did not serve: {out.get('error') or 'no answer'}", *failed)
        )
    kvs = {base64.b64decode(k): base64.b64decode(v) for k, v in out["kvs"].items()}
    read = judge(kvs, acked, begun, seed, size)
    if not failed:
        return read
    worst = max(read.verdict, "detected", key=SEVERITY.index)
    return CheckResult(worst, (*read.reasons, *failed))


def recover(mounts: list[str], params: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run the recovery in a network namespace of its own; its JSON answer."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError(
            "etcd checker: needs unshare (util-linux) for a network namespace per state"
        )
    argv = [
        unshare,
        "--net",
        "--",
        sys.executable,
        "-m",
        "powercut.workloads.etcd",
        "--recover",
        "--params",
        json.dumps(params),
        "--timeout",
        str(timeout),
        *mounts,
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout + MARGIN_S)
    except subprocess.TimeoutExpired:
        out, err = b"", b"(killed at the timeout)"
    finally:
        if proc.returncode is None:  # still running: its group (the members die with it: PDEATHSIG)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = out.decode(errors="replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (err.decode(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"etcd checker: the recovery failed (exit {proc.returncode}): {tail}")
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def check(inp: CheckInput) -> CheckResult:
    if UP not in inp.acked:
        return CheckResult(
            "pass",
            (
                "the cut is before the cluster first came up (no ack:up): a bootstrap cut "
                "short promises nothing, etcd not started",
            ),
        )
    p = {**DEFAULTS, **inp.params}
    mounts = list(inp.mounts or (inp.mount,))
    out = recover(mounts, dict(inp.params), float(p["recover_timeout"]))
    acked, begun = ([int(k) for k in keys if k != UP] for keys in (inp.acked, inp.begun))
    return verdict(out, acked, begun, p["seed"], p["size"])


CHECKER = Checker(
    "etcd", "every acked key served by the recovered etcd cluster with the value put", check
)

"""etcd members, for the etcd workload (in the recording guest) and its checker's recovery (on the
host, ``python -m powercut.workloads.etcd --recover``): a member's argv, starting members, waiting
for the cluster, a client over etcd's HTTP/JSON gRPC gateway (``/v3/kv/put``, ``/v3/kv/range``:
base64 keys and values, stdlib urllib, no etcdctl), stopping them.

No stray members, ever: each member runs in its own process group (``stop`` signals the group) and
dies with the process that started it (``PR_SET_PDEATHSIG``: SIGKILL when its parent exits, however
it exits).  A member's output goes to ``<logs>/m<i>.log``; ``last_error`` quotes etcd's own words."""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOKEN = "powercut-etcd"
PR_SET_PDEATHSIG = 1
NOISE = (
    "single port",
    "simple token is not cryptographically signed",
)  # warnings every member logs
_OPENER = urllib.request.build_opener(
    urllib.request.ProxyHandler({})
)  # loopback: never through a proxy


class EtcdError(Exception):
    """etcd answered with an error (the gateway's message), or did not answer."""


@dataclass(frozen=True, slots=True)
class Member:
    index: int
    client_port: int
    peer_port: int

    @property
    def name(self) -> str:
        return f"m{self.index}"

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


def members(count: int, port: int) -> tuple[Member, ...]:
    """``count`` members on 127.0.0.1: member i's client port ``port + 2i``, its peer port one above."""
    return tuple(Member(i, port + 2 * i, port + 2 * i + 1) for i in range(count))


def member_argv(
    binary: str,
    me: Member,
    cluster: Sequence[Member],
    data_dir: str,
    *,
    fsync: bool,
    heartbeat_ms: int,
    election_ms: int,
) -> list[str]:
    """One member's command line.  The same ``--initial-cluster`` and token on every start: a member
    whose data dir is empty (a crash state before etcd made it) bootstraps with the member and
    cluster ids the recording had; one with a data dir ignores them (its WAL knows the cluster)."""
    argv = [
        binary,
        "--name",
        me.name,
        "--data-dir",
        data_dir,
        "--listen-client-urls",
        me.client_url,
        "--advertise-client-urls",
        me.client_url,
        "--listen-peer-urls",
        me.peer_url,
        "--initial-advertise-peer-urls",
        me.peer_url,
        "--initial-cluster",
        ",".join(f"{m.name}={m.peer_url}" for m in cluster),
        "--initial-cluster-token",
        TOKEN,
        "--initial-cluster-state",
        "new",
        "--heartbeat-interval",
        str(heartbeat_ms),
        "--election-timeout",
        str(election_ms),
    ]
    return argv if fsync else [*argv, "--unsafe-no-fsync"]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def call(url: str, path: str, body: dict[str, Any] | None, timeout: float) -> dict[str, Any]:
    """POST ``body`` as JSON (GET without one) to a member; its JSON answer, or EtcdError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            out: dict[str, Any] = json.load(r)
            return out
    except urllib.error.HTTPError as e:
        text = e.read().decode(errors="replace")
        with contextlib.suppress(ValueError):
            text = json.loads(text).get("message") or text
        raise EtcdError(f"{url}{path}: HTTP {e.code}: {text.strip()[:300]}") from None
    except (OSError, ValueError) as e:  # refused, reset, timed out; a torn answer
        raise EtcdError(f"{url}{path}: {e}") from None


def put(url: str, key: bytes, value: bytes, timeout: float) -> int:
    """Put one key; the revision etcd answered (the put is committed by a majority when it answers)."""
    out = call(url, "/v3/kv/put", {"key": b64(key), "value": b64(value)}, timeout)
    return int(out.get("header", {}).get("revision", 0))


def range_all(url: str, timeout: float) -> dict[bytes, bytes]:
    """Every key and value: a linearizable range read (the gateway's default, ``serializable`` off)."""
    out = call(url, "/v3/kv/range", {"key": b64(b"\0"), "range_end": b64(b"\0")}, timeout)
    return {
        base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", ""))
        for kv in out.get("kvs", ())
    }


def healthy(url: str, timeout: float) -> bool:
    try:
        return str(call(url, "/health", None, timeout).get("health")) == "true"
    except EtcdError:
        return False


def lo_up() -> None:
    """Bring ``lo`` up (a fresh network namespace has it down)."""
    siocgifflags = 0x8913
    siocsifflags = 0x8914
    iff_up = 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, siocgifflags, struct.pack("16sH14x", b"lo", 0))
        flags = struct.unpack("16sH14x", ifr)[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


def last_error(log_text: str) -> str:
    """etcd's own words for why a member stopped: its last fatal or panic record (zap JSON) as
    ``msg: error``; else Go's last ``panic:``/``fatal error:`` line; else its last error record; else its
    last line."""
    lines = [ln for ln in log_text.splitlines() if ln.strip()]
    records = []
    for ln in lines:
        with contextlib.suppress(ValueError):
            rec = json.loads(ln)
            if isinstance(rec, dict):
                records.append(rec)

    def words(rec: dict[str, Any]) -> str:
        return ": ".join(str(rec[k]) for k in ("msg", "error") if rec.get(k))[:300]

    fatal = [r for r in records if r.get("level") in ("fatal", "panic", "dpanic")]
    crashes = [i for i, ln in enumerate(lines) if ln.startswith(("panic: ", "fatal error: "))]
    errors = [r for r in records if r.get("level") == "error"]
    if fatal:
        return words(fatal[-1])
    if crashes:  # Go's own: "panic: ..." or "fatal error: fault" and its "[signal SIGBUS ...]"
        i = crashes[-1]
        sig = lines[i + 1] if i + 1 < len(lines) and lines[i + 1].startswith("[signal") else ""
        return f"{lines[i]} {sig}".strip()[:300]
    if errors:
        return words(errors[-1])
    return lines[-1][:300] if lines else "(no output)"


def raft_state(log_text: str) -> str:
    """Why a running member has no leader, in etcd's words: its last raft configuration line
    (``... switched to configuration voters=()``: a WAL without its members) and last warning."""
    config = warn = ""
    for ln in log_text.splitlines():
        with contextlib.suppress(ValueError, AttributeError):
            rec = json.loads(ln)
            msg = str(rec.get("msg", ""))
            if "switched to configuration" in msg:
                config = msg.split(" ", 1)[-1]
            elif rec.get("level") in ("warn", "error") and not any(n in msg for n in NOISE):
                warn = msg
    return "; ".join(x for x in (config, warn) if x)[:300] or "(nothing logged)"


class Cluster:
    """The members, started on ``data_dirs`` (one a member), their logs in ``logs``."""

    def __init__(
        self,
        binary: str,
        data_dirs: Sequence[str],
        logs: str,
        *,
        port: int,
        fsync: bool,
        heartbeat_ms: int,
        election_ms: int,
    ) -> None:
        self.members = members(len(data_dirs), port)
        self.argvs = [
            member_argv(
                binary,
                m,
                self.members,
                d,
                fsync=fsync,
                heartbeat_ms=heartbeat_ms,
                election_ms=election_ms,
            )
            for m, d in zip(self.members, data_dirs)
        ]
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def log_path(self, i: int) -> str:
        return os.path.join(self.logs, f"m{i}.log")

    def start(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)

        def die_with_parent() -> None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

        for i, argv in enumerate(self.argvs):
            with open(self.log_path(i), "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        argv,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=die_with_parent,
                    )
                )

    def exited(self) -> dict[int, int]:
        """member -> exit code, for the members that have exited."""
        return {i: rc for i, p in enumerate(self.procs) if (rc := p.poll()) is not None}

    def last_error(self, i: int) -> str:
        with open(self.log_path(i), errors="replace") as f:
            return last_error(f.read()[-200_000:])

    def raft_state(self, i: int) -> str:
        """A running member's last raft configuration and last warning, in etcd's words."""
        with open(self.log_path(i), errors="replace") as f:
            return raft_state(f.read()[-200_000:])

    def wait_ready(self, timeout: float) -> bool:
        """Every member healthy (has a leader) -- or False at the timeout, or as soon as one exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.exited():
                return False
            if all(healthy(m.client_url, 2.0) for m in self.members):
                return True
            time.sleep(0.2)
        return False

    def urls(self) -> list[str]:
        """The client URLs of the members still running."""
        gone = self.exited()
        return [m.client_url for m in self.members if m.index not in gone]

    def stop(self, grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
        """``sig`` to every member's group, SIGKILL what is left after ``grace`` seconds."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()

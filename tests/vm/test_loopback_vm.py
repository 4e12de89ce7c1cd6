"""The program under test runs in the VMs as it runs at home: the loopback interface is up in every
guest (vm-images/init.sh), so a client and a server on 127.0.0.1 meet -- in the recording VM
(``powercut record --cmd``, a booted guest) and in a checker VM (restored from its template, whose
init brought lo up before the VM was saved)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vm

# a server thread and a client on 127.0.0.1 in one process; exits 1 with the error if they cannot meet
ECHO = """
import socket, sys, threading
try:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    def serve():
        conn, _ = srv.accept()
        conn.sendall(conn.recv(64).upper())
        conn.close()
    threading.Thread(target=serve, daemon=True).start()
    cli = socket.create_connection(srv.getsockname(), timeout=20)
    cli.sendall(b"ping")
    assert cli.recv(64) == b"PING"
except OSError as e:
    print(f"loopback failed: {e}", file=sys.stderr)
    sys.exit(1)
print("loopback ok")
"""


def powercut(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900
    )


def test_client_and_server_on_127_0_0_1_in_the_recording_and_checker_vms(tmp_path: Path) -> None:
    py = f"{shlex.quote(sys.executable)} -c {shlex.quote(ECHO)}"
    rec = tmp_path / "rec"
    out = powercut(
        "record",
        "--cmd",
        f"{py} > echo.out && sync echo.out && powercut-mark ack:1",
        "-o",
        str(rec),
        "--size",
        "64",
    )
    assert out.returncode == 0, out.stderr
    # the checker (a command) talks to itself on 127.0.0.1 too, then passes every state
    checker = f"cat >/dev/null; {py} >&2"
    out = powercut(
        "check",
        str(rec),
        "--checker",
        checker,
        "--model",
        "flush",
        "--max-states",
        "2",
        "--shrink",
        "0",
        "-j",
        "1",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "loopback failed" not in out.stdout + out.stderr

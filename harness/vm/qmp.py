"""A minimal QMP client (host side): one command at a time over QEMU's ``-qmp unix:PATH`` socket,
asynchronous events skipped.  Used to save a checker VM's template (vmstart/template.py)."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from powercut.errors import VmError


class QmpError(VmError):
    pass


class Qmp:
    def __init__(self, path: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout_s)
                self.sock.connect(path)
                break
            except OSError as e:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise QmpError(f"cannot reach QEMU's monitor at {path}: {e}") from None
                time.sleep(0.05)
        self.buf = b""
        self._read()  # the greeting
        self.command("qmp_capabilities")

    def _read(self) -> dict[str, Any]:
        while b"\n" not in self.buf:
            try:
                chunk = self.sock.recv(65536)
            except OSError as e:
                raise QmpError(f"QEMU's monitor: {e}") from None
            if not chunk:
                raise QmpError("QEMU's monitor closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def command(self, name: str, **args: Any) -> Any:
        self.sock.sendall(
            json.dumps({"execute": name, **({"arguments": args} if args else {})}).encode() + b"\n"
        )
        while True:
            reply = self._read()
            if "event" in reply:
                continue
            if "error" in reply:
                raise QmpError(f"QEMU refused {name}: {reply['error'].get('desc', reply['error'])}")
            return reply.get("return")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def wait_migration(qmp: Qmp, timeout_s: float) -> None:
    """Until the outgoing migration (a save) has completed; QmpError if it failed or took too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = qmp.command("query-migrate") or {}
        status = info.get("status", "none")
        if status == "completed":
            return
        if status in ("failed", "cancelled") or time.monotonic() > deadline:
            raise QmpError(
                f"saving the VM {status if status != 'active' else 'timed out'}"
                + (f": {info['error-desc']}" if info.get("error-desc") else "")
            )
        time.sleep(0.05)


def unlink_socket(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass

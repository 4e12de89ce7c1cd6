"""workloads/pgserver.py without a PostgreSQL server: the binaries, the settings file, command lines,
the lock file's readiness, the start/stop loop against a stand-in postmaster, psql's error message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from powercut.workloads import pgserver

# postmaster.pid as PostgreSQL 15 writes it: pid, data dir, start time, port, socket dir, listen
# address, shared memory key, state
PIDFILE = "4242\n/d\n1700000000\n5432\n/tmp/s\n\n  5432001      3\nready   \n"


def test_bindir_is_the_newest_major_and_none_without_the_user_or_a_binary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = [
        "/usr/lib/postgresql/9/bin/postgres",
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/lib/postgresql/x/bin/postgres",
    ]
    monkeypatch.setattr(pgserver.glob, "glob", lambda pattern: found)
    monkeypatch.setattr(pgserver.pwd, "getpwnam", lambda name: object())
    assert pgserver.bindir() == "/usr/lib/postgresql/15/bin"
    assert pgserver.major("/usr/lib/postgresql/15/bin/") == "15"
    found[:] = []
    assert pgserver.bindir() is None

    def no_user(name: str) -> Any:
        raise KeyError(name)

    found[:] = ["/usr/lib/postgresql/15/bin/postgres"]
    monkeypatch.setattr(pgserver.pwd, "getpwnam", no_user)
    assert pgserver.bindir() is None


def test_the_settings_block_is_appended_after_initdbs(tmp_path: Path) -> None:
    assert (
        pgserver.render_conf({"fsync": "off", "log_line_prefix": "'%m [%p] '"})
        == "\n# powercut: the workload's settings\nfsync = off\nlog_line_prefix = '%m [%p] '\n"
    )
    (tmp_path / "postgresql.conf").write_text("fsync = on\n")
    pgserver.append_conf(str(tmp_path), {"fsync": "off"})
    pgserver.append_conf(str(tmp_path), {"hot_standby": "on"})
    assert (tmp_path / "postgresql.conf").read_text().splitlines() == [
        "fsync = on",
        "",
        "# powercut: the workload's settings",
        "fsync = off",
        "",
        "# powercut: the workload's settings",
        "hot_standby = on",
    ]


def test_command_lines() -> None:
    assert pgserver.server_argv("/b", "/d", "/s", ("-c", "port=5433")) == [
        "/b/postgres",
        "-D",
        "/d",
        "-c",
        "listen_addresses=",
        "-c",
        "unix_socket_directories=/s",
        "-c",
        "port=5433",
    ]
    assert pgserver.client_argv("/b", "pg_amcheck", "/s", "-d", "postgres") == [
        "/b/pg_amcheck",
        "-h",
        "/s",
        "-U",
        "postgres",
        "-d",
        "postgres",
    ]


def test_the_lock_file_says_whose_it_is_and_when_it_is_ready(tmp_path: Path) -> None:
    assert pgserver.read_pidfile(str(tmp_path)) == []
    assert not pgserver.started_by([], 4242) and not pgserver.is_ready([], 4242)
    (tmp_path / "postmaster.pid").write_text(PIDFILE)
    lines = pgserver.read_pidfile(str(tmp_path))
    assert pgserver.started_by(lines, 4242) and pgserver.is_ready(lines, 4242)
    assert not pgserver.started_by(lines, 4243) and not pgserver.is_ready(
        lines, 4243
    )  # a stale one
    assert not pgserver.is_ready(lines[:7], 4242)  # still starting
    assert not pgserver.is_ready(
        PIDFILE.replace("ready", "standby").splitlines(), 4242
    )  # a standby, not yet hot


class FakeProc:
    def __init__(self, exits_after: int | None) -> None:
        self.polls = 0
        self.exits_after = exits_after

    def poll(self) -> int | None:
        self.polls += 1
        return 1 if self.exits_after is not None and self.polls > self.exits_after else None


def test_wait_ready_tells_ready_exited_and_timeout_apart() -> None:
    asked: list[int] = []

    def ready_on_third() -> bool:
        asked.append(1)
        return len(asked) >= 3

    assert pgserver.wait_ready(FakeProc(None), ready_on_third, 5, interval=0.001) == "ready"  # type: ignore[arg-type]
    assert pgserver.wait_ready(FakeProc(2), lambda: False, 5, interval=0.001) == "exited"  # type: ignore[arg-type]
    assert pgserver.wait_ready(FakeProc(None), lambda: False, 0.05, interval=0.01) == "timeout"  # type: ignore[arg-type]


def stand_in(tmp_path: Path, body: str) -> str:
    """A bin directory whose ``postgres`` is a shell script (``$2`` is the data directory)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "postgres").write_text("#!/bin/sh\n" + body)
    (bin_dir / "postgres").chmod(0o755)
    return str(bin_dir)


def test_start_waits_for_ready_and_stop_shuts_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgserver, "as_postgres", dict)  # stays this user
    # a Python stand-in notes the signal it got: it sets its handler before it is ready, and a
    # program (as postgres does) can handle SIGINT even where it was ignored on entry -- a shell
    # script cannot trap it then (a suite started in the background), and never exits on it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "postgres").write_text(
        f"#!{sys.executable}\n"
        "import os, signal, sys, time\n"
        "data = sys.argv[2]\n"
        "def stop(*_):\n"
        "    open(os.path.join(data, 'got'), 'w').write('INT')\n"
        "    os._exit(3)\n"
        "signal.signal(signal.SIGINT, stop)\n"
        "time.sleep(0.2)\n"
        "pid = f'{os.getpid()}\\n{data}\\n1\\n1\\n/s\\n\\nk\\nready\\n'\n"
        "open(os.path.join(data, 'postmaster.pid'), 'w').write(pid)\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    (bin_dir / "postgres").chmod(0o755)
    with open(tmp_path / "log", "wb") as log:
        server = pgserver.start(str(bin_dir), str(tmp_path), str(tmp_path), log)
    assert server.poll() is None
    assert pgserver.stop(server) == 3  # its exit status
    assert (tmp_path / "got").read_text() == "INT"  # a fast shutdown: SIGINT


def test_a_server_that_exits_while_starting_is_a_runtime_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgserver, "as_postgres", dict)
    bin_dir = stand_in(tmp_path, "exit 7\n")
    with pytest.raises(RuntimeError, match=r"^postgres: the server exited 7 while starting$"):
        pgserver.start(bin_dir, str(tmp_path), str(tmp_path), subprocess.DEVNULL)


def test_psql_says_its_last_lines_when_it_fails(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    said = b"psql:<stdin>:1: ERROR:  x\nLINE 1: y\n        ^\nERROR:  z\n"

    def fake_run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        assert argv == [
            "/b/psql",
            "-h",
            "/s",
            "-U",
            "postgres",
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            "postgres",
            "-f",
            "-",
        ]
        assert kw["input"] == b"SELECT 1;\n"
        return subprocess.CompletedProcess(argv, 3, None, said)

    monkeypatch.setattr(pgserver.subprocess, "run", fake_run)
    monkeypatch.setattr(pgserver.sys, "stdout", sys.stdout)
    with pytest.raises(
        RuntimeError, match=r"^postgres: psql exited 3: LINE 1: y \|         \^ \| ERROR:  z$"
    ):
        pgserver.psql("/b", "/s", "SELECT 1;\n")
    assert pgserver.psql("/b", "/s", "SELECT 1;\n", check=False).returncode == 3
    assert "ERROR:  x" in capfd.readouterr().err  # what psql said goes on to our stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_chown_a_file_and_a_tree(tmp_path: Path) -> None:
    if pgserver.bindir() is None:
        pytest.skip("no postgres user")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("")
    (tmp_path / "g").write_text("")
    pgserver.chown_tree(str(tmp_path / "d"))
    pgserver.chown(str(tmp_path / "g"))
    uid = pgserver.pwd.getpwnam(pgserver.USER).pw_uid
    assert {os.stat(p).st_uid for p in (tmp_path / "d", tmp_path / "d" / "f", tmp_path / "g")} == {
        uid
    }

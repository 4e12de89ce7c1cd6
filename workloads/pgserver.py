"""pgserver: Debian's PostgreSQL server as powercut runs it -- the one place for the server code of the
``postgres`` and ``pgsync`` workloads and of their checkers.  No workload: a helper module.

It owns:

* the binaries: ``bindir()``, the newest /usr/lib/postgresql/<major>/bin with a ``postgres``
  binary (None without one, or without the ``postgres`` user); ``MISSING``, the one line said then;
* the data directory's owner and settings: ``as_postgres()`` (subprocess arguments that run a child
  as ``postgres``), ``chown()`` / ``chown_tree()``, ``render_conf()`` / ``append_conf()`` (a block
  appended to postgresql.conf, whose later lines win over initdb's defaults);
* the server: ``server_argv()`` (a unix socket in a directory of the caller's, no TCP unless the
  options say so), ``read_pidfile()`` and ``is_ready()`` / ``started_by()`` (what the postmaster's
  lock file says: its pid on line 1, its state -- ``starting``, ``standby``, ``ready``,
  ``stopping`` -- on line 8), ``wait_ready()``; the workloads' ``start()`` and ``stop()`` (fast
  shutdown, so that the shutdown checkpoint is part of the recording);
* the clients: ``client_argv()`` (any client program, connected over the socket as ``postgres``),
  ``psql()`` (a script in one session, as the workloads feed it), ``query()`` (one statement, its
  rows as unaligned text) and ``accepts_connections()`` (pg_isready).

The checkers keep their own policy on top of these (a server on a recovered image runs under
setpriv, in its own session, with ``fsync=off``, and always goes down immediately).

Runs wherever its callers run: in the guest (the workloads), on the host (``python -m
powercut.workloads.postgres --prepare``) and where checks run (the checkers).  Standard library only,
so that a checker may import it without the workloads' dependencies."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

USER = "postgres"
MISSING = "the postgres workload needs PostgreSQL: apt-get install postgresql"
# How long a workload's server may take to start (a crash recovery under emulation) or to shut down
START_TIMEOUT_S = 300.0
CONF_HEADER = "\n# powercut: the workload's settings\n"
# The postmaster's state on line 8 of postmaster.pid once it accepts connections as a primary
READY = "ready"


# -- the binaries and the user ------------------------------------------------------------------------


def bindir() -> str | None:
    """Debian's /usr/lib/postgresql/<major>/bin with a postgres binary, the newest major; None if
    there is none (or no ``postgres`` user)."""
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return None
    found = [
        d for d in glob.glob("/usr/lib/postgresql/*/bin/postgres") if d.split("/")[4].isdigit()
    ]
    if not found:
        return None
    return os.path.dirname(max(found, key=lambda d: int(d.split("/")[4])))


def major(bin_dir: str) -> str:
    """The major version a bin directory belongs to: ``15`` for /usr/lib/postgresql/15/bin."""
    return bin_dir.rstrip("/").split("/")[-2]


def as_postgres() -> dict[str, Any]:
    """subprocess arguments that run a child as the postgres user (no supplementary groups)."""
    pw = pwd.getpwnam(USER)
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "umask": 0o077}


def chown(path: str) -> None:
    """``path`` (a file or a directory, not what it holds) owned by the postgres user."""
    pw = pwd.getpwnam(USER)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def chown_tree(path: str) -> None:
    """The directory ``path`` and everything under it owned by the postgres user."""
    pw = pwd.getpwnam(USER)
    for root, _, files in os.walk(path):
        for name in (root, *(os.path.join(root, f) for f in files)):
            os.chown(name, pw.pw_uid, pw.pw_gid)


# -- the settings file ---------------------------------------------------------------------------------


def render_conf(values: dict[str, str]) -> str:
    """A block for postgresql.conf (later lines win over the defaults initdb wrote)."""
    return CONF_HEADER + "".join(f"{k} = {v}\n" for k, v in values.items())


def append_conf(datadir: str, values: dict[str, str]) -> None:
    """``values`` appended to ``datadir``'s postgresql.conf (not synced: the caller syncs once)."""
    with open(os.path.join(datadir, "postgresql.conf"), "a") as f:
        f.write(render_conf(values))


# -- the server ------------------------------------------------------------------------------------------


def server_argv(bin_dir: str, datadir: str, sockdir: str, options: Sequence[str] = ()) -> list[str]:
    """The postmaster's command line: its socket in ``sockdir``, no TCP; ``options``: more argv
    (``-c name=value`` pairs, which win over the ones before them)."""
    return [
        os.path.join(bin_dir, "postgres"),
        "-D",
        datadir,
        "-c",
        "listen_addresses=",
        "-c",
        f"unix_socket_directories={sockdir}",
        *options,
    ]


def read_pidfile(datadir: str) -> list[str]:
    """The lines of ``datadir``'s postmaster.pid, stripped; [] when there is none."""
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            return [line.strip() for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def started_by(lines: Sequence[str], pid: int) -> bool:
    """Is the lock file (``read_pidfile``'s lines) the postmaster ``pid``'s?  Its signal handlers are
    set once it has written it."""
    return bool(lines) and lines[0] == str(pid)


def is_ready(lines: Sequence[str], pid: int) -> bool:
    """Does the lock file say that the postmaster ``pid`` accepts connections (line 8 ``ready``)?  A
    hot standby says ``ready`` too once it does; ``standby`` before that."""
    return started_by(lines, pid) and len(lines) > 7 and lines[7] == READY


def wait_ready(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float, interval: float = 0.1
) -> str:
    """Poll ``ready()`` every ``interval`` s for at most ``timeout`` s: ``"ready"``, ``"exited"``
    (``proc`` ended first) or ``"timeout"``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        if ready():
            return "ready"
        time.sleep(interval)
    return "timeout"


def start(
    bin_dir: str, datadir: str, sockdir: str, log: Any, *, options: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """A workload's postmaster, as ``postgres`` (in this process group, its output on ``log``), once
    it accepts connections; ``options``: more argv.  A RuntimeError if it exits or takes longer than
    START_TIMEOUT_S (then it is stopped)."""
    argv = server_argv(bin_dir, datadir, sockdir, options)
    server = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, **as_postgres()
    )
    outcome = wait_ready(
        server, lambda: is_ready(read_pidfile(datadir), server.pid), START_TIMEOUT_S
    )
    if outcome == "exited":
        raise RuntimeError(f"postgres: the server exited {server.returncode} while starting")
    if outcome == "timeout":
        stop(server, fast=False)
        raise RuntimeError(f"postgres: the server did not become ready in {START_TIMEOUT_S:g} s")
    return server


def stop(server: subprocess.Popen[bytes], *, fast: bool = True) -> int | None:
    """Fast shutdown (a checkpoint, then exit); immediate (SIGQUIT, then SIGKILL) otherwise or when
    it takes too long.  The postmaster's exit status, None if it had to be killed."""
    if server.poll() is None and fast:
        server.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return server.wait(START_TIMEOUT_S)
    if server.poll() is None:
        server.send_signal(signal.SIGQUIT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        return None
    return server.returncode


# -- the clients -----------------------------------------------------------------------------------------


def client_argv(bin_dir: str, program: str, sockdir: str, *args: str) -> list[str]:
    """A client program of ``bin_dir`` (psql, pg_isready, pg_amcheck, ...) connecting over the socket
    in ``sockdir`` as the postgres user; ``args`` follow."""
    return [os.path.join(bin_dir, program), "-h", sockdir, "-U", USER, *args]


def psql(
    bin_dir: str,
    sockdir: str,
    text: str,
    *,
    timeout: float = 3600.0,
    check: bool = True,
    pass_fds: Sequence[int] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Run ``text`` through one psql session as root (its ``\\!`` marks need root); its output goes to
    our stdout, what it said on stderr on to ours; with ``check``, a RuntimeError when it exits
    non-zero (naming its last three lines)."""
    argv = client_argv(
        bin_dir, "psql", sockdir, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "postgres", "-f", "-"
    )
    res = subprocess.run(
        argv,
        input=text.encode(),
        stdout=sys.stdout.buffer,
        stderr=subprocess.PIPE,
        timeout=timeout,
        check=False,
        pass_fds=tuple(pass_fds),
    )
    said = res.stderr.decode(errors="replace")
    sys.stderr.write(said)
    sys.stderr.flush()
    if check and res.returncode != 0:
        raise RuntimeError(
            f"postgres: psql exited {res.returncode}: {' | '.join(said.strip().splitlines()[-3:])}"
        )
    return res


def query(
    bin_dir: str, sockdir: str, sql: str, *, timeout: float, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """One statement through psql: its rows on stdout, unaligned, without headers, fields separated by
    a space; with ``check``, CalledProcessError when psql fails."""
    argv = client_argv(bin_dir, "psql", sockdir, "-XAt", "-F", " ", "-d", "postgres", "-c", sql)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=check)


def accepts_connections(bin_dir: str, sockdir: str) -> bool:
    """pg_isready's answer (it waits up to 5 s): does the server accept connections now?"""
    argv = client_argv(bin_dir, "pg_isready", sockdir, "-q", "-d", "postgres", "-t", "5")
    return subprocess.run(argv, check=False, timeout=60).returncode == 0

"""What the postgres and pgsync workloads and checkers make PostgreSQL do, pinned: every command they
run (argv and the text fed to it), every postgresql.conf they leave and the files beside it, for a few
option combinations, against ``pg_commands.json``.  Written before the server code was gathered into
workloads/pgserver.py, so that the move is seen to change nothing a server sees.

Needs root and PostgreSQL (as the other real tests); ``POWERCUT_UPDATE_GOLDEN=1`` rewrites the file.
Temporary paths, the port and the prepared cluster's hash are replaced by placeholders."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powercut import CheckInput
from powercut.checkers import pgsync as psc
from powercut.checkers import postgres as pgc
from powercut.workloads import pgsync as psw
from powercut.workloads import postgres as pgw

GOLDEN = Path(__file__).with_name("pg_commands.json")
POSTGRES_RUNS: tuple[dict[str, Any], ...] = (
    {"n": 4, "checkpoint_every": 2},
    {
        "n": 3,
        "synchronous_commit": "OFF",
        "fsync": False,
        "full_page_writes": False,
        "checkpoint_every": 0,
        "data_checksums": False,
        "row_bytes": 40,
        "seed": 3,
    },
    {
        "n": 7,
        "synchronous_commit": "remote_apply",
        "data_sync_retry": True,
        "fault_at": 2,
        "checkpoint_every": 2,
        "dir": "sub/pg",
    },
)
PGSYNC_RUNS: tuple[dict[str, Any], ...] = (
    {"n": 3, "checkpoint_every": 2, "synchronous_commit": "remote_write"},
    {"n": 2, "standby_fsync": False, "fsync": False, "full_page_writes": False},
)

real = pytest.mark.skipif(
    os.geteuid() != 0 or pgw.bindir() is None,
    reason="needs root and PostgreSQL (apt-get install postgresql)",
)


class Recorder:
    """Wraps subprocess.run and subprocess.Popen: each call's argv and input, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict[str, Any]] = []
        real_run, real_popen = subprocess.run, subprocess.Popen

        self.in_run = False

        def run(argv: Any, *a: Any, **kw: Any) -> Any:
            self.note("run", argv, kw)
            self.in_run = True  # its Popen is the same call
            try:
                return real_run(argv, *a, **kw)
            finally:
                self.in_run = False

        class Popen(real_popen):  # type: ignore[misc,valid-type]
            def __init__(inner, argv: Any, *a: Any, **kw: Any) -> None:
                if not self.in_run:
                    self.note("popen", argv, kw)
                super().__init__(argv, *a, **kw)

        monkeypatch.setattr(subprocess, "run", run)
        monkeypatch.setattr(subprocess, "Popen", Popen)

    def note(self, how: str, argv: Any, kw: dict[str, Any]) -> None:
        if isinstance(argv, (str, bytes)) or Path(str(list(argv)[0])).name in ("cp",):
            return
        given = kw.get("input")
        call: dict[str, Any] = {"how": how, "argv": [str(a) for a in argv]}
        if given is not None:
            call["input"] = given.decode() if isinstance(given, bytes) else given
        if kw.get("env") is not None and "PGOPTIONS" in kw["env"]:
            call["PGOPTIONS"] = kw["env"]["PGOPTIONS"]
        if not self.calls or self.calls[-1] != call:  # a poll repeated until it answers: once
            self.calls.append(call)


def normalize(value: Any, top: Path, port: int) -> Any:
    """The run's temporary paths, port and hashes as placeholders (the same one each time it recurs)."""
    text = json.dumps(value, indent=1, sort_keys=True)
    text = text.replace(str(top), "<top>")
    names: dict[str, str] = {}
    for m in re.finditer(r"/tmp/(powercut-[A-Za-z0-9_]+?-|tmp)[A-Za-z0-9_]{6,}", text):
        names.setdefault(m.group(0), f"<tmp{len(names)}>")
    for old, new in sorted(names.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(old, new)
    text = re.sub(r"pgdata-(\d+)-[0-9a-f]{12}\.tar", r"pgdata-\1-<hash>.tar", text)
    text = re.sub(rf"\b{port}\b", "<port>", text)
    text = re.sub(r"/proc/self/fd/\d+", "/proc/self/fd/<fd>", text)
    return json.loads(text)


def files_of(run: Path) -> dict[str, str]:
    """postgresql.conf (what follows initdb's part) and which small marker files sit in each data dir."""
    out: dict[str, str] = {}
    for conf in sorted(run.rglob("postgresql.conf")):
        text = conf.read_text()
        out[str(conf.relative_to(run))] = (
            text[text.index("\n# powercut") :] if "\n# powercut" in text else text
        )
        for extra in ("standby.signal", "postmaster.pid", "PG_VERSION"):
            out[str(conf.parent.relative_to(run) / extra)] = (
                "present" if (conf.parent / extra).exists() else "absent"
            )
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def observed() -> Iterator[dict[str, Any]]:
    top = Path(tempfile.mkdtemp(prefix="powercut-test-pgcmd-"))
    port = free_port()
    out: dict[str, Any] = {}
    try:
        os.chmod(top, 0o755)
        mark = top / "mark"
        mark.write_text(f'#!/bin/sh\necho "$1" >> {top}/marks\n')
        mark.chmod(0o755)
        fault = top / "fault"
        fault.write_text("#!/bin/sh\nexit 0\n")
        fault.chmod(0o755)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(pgw, "MARK_CMD", str(mark))
            m.setattr(pgw, "FAULT_CMD", str(fault))
            m.setenv("POWERCUT_TIMING", str(top / "timing"))
            m.setenv("PGPORT", str(port))  # pgsync sets it; restored afterwards
            rec = Recorder(m)
            out["prepare"] = {"rc": pgw.prepare_main([str(top / "cache")]), "calls": rec.calls}
            rec.calls = []
            out["prepare"]["again"] = pgw.prepare_main([str(top / "cache"), "--no-checksums"])
            rec.calls = []
            for k, given in enumerate(POSTGRES_RUNS):
                run = top / f"pg{k}"
                run.mkdir()
                m.chdir(run)
                rc = pgw.WORKLOAD.main(pgw.WORKLOAD.params({**given, "cache": str(top / "cache")}))
                got: dict[str, Any] = {
                    "given": given,
                    "rc": rc,
                    "calls": rec.calls,
                    "files": files_of(run),
                }
                rec.calls = []
                n = int(given["n"])
                verdict = pgc.check(
                    CheckInput(str(run), tuple(map(str, range(1, n + 1))), (), given)
                )
                got["check"] = {"verdict": verdict.verdict, "calls": rec.calls}
                rec.calls = []
                out[f"postgres {k}"] = got
            for k, given in enumerate(PGSYNC_RUNS):
                run = top / f"sync{k}"
                for node in ("n0", "n1"):
                    (run / node).mkdir(parents=True)
                m.chdir(run)
                rc = psw.WORKLOAD.main(
                    psw.WORKLOAD.params({**given, "cache": str(top / "cache"), "port": port})
                )
                got = {"given": given, "rc": rc, "calls": rec.calls, "files": files_of(run)}
                rec.calls = []
                n, mounts = int(given["n"]), (str(run / "n0"), str(run / "n1"))
                verdict = psc.check(
                    CheckInput(
                        mounts[0], tuple(map(str, range(1, n + 1))), (), given, "s", mounts=mounts
                    )
                )
                got["check"] = {"verdict": verdict.verdict, "calls": rec.calls}
                rec.calls = []
                got["files after check"] = files_of(run)
                out[f"pgsync {k}"] = got
        yield normalize(out, top, port)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@real
def test_every_command_and_setting_is_as_pinned(observed: dict[str, Any]) -> None:
    if os.environ.get("POWERCUT_UPDATE_GOLDEN") == "1" or not GOLDEN.exists():
        GOLDEN.write_text(json.dumps(observed, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {GOLDEN.name}")
    want = json.loads(GOLDEN.read_text())
    for key in sorted(set(want) | set(observed)):
        assert observed.get(key) == want.get(key), key

"""guest/record.shared_shim: the --delay-sync shim and its log where a child that drops root can use
them (PostgreSQL's server runs as ``postgres``): the shim copied beside the log, readable by all; the
log empty and writable by all, whatever the umask; an earlier recording's log gone."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from powercut.core import syncdelay
from powercut.guest import record


def test_the_shim_and_its_log_are_usable_by_another_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image = tmp_path / "cache" / "bin"
    image.mkdir(parents=True)
    (image / syncdelay.SHIM).write_bytes(b"\x7fELF shim")
    os.chmod(image / syncdelay.SHIM, 0o600)
    run = tmp_path / "run"
    run.mkdir()
    log = run / "delay-sync.log"
    log.write_text("fsync\t0\t/old\n")
    monkeypatch.setattr(record, "DELAY_LOG", str(log))
    old = os.umask(0o077)
    try:
        shared = record.shared_shim(str(image / syncdelay.SHIM))
    finally:
        os.umask(old)
    assert Path(shared).parent == run and Path(shared).read_bytes() == b"\x7fELF shim"
    assert stat.S_IMODE(os.stat(shared).st_mode) & 0o005 == 0o005          # others may read and map it
    assert stat.S_IMODE(log.stat().st_mode) & 0o006 == 0o006 and log.read_text() == ""

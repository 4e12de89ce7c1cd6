"""#25 item 5: no command loses work silently -- a recording, a user's file in it, an earlier check
(finished or interrupted) -- and the check options that guard verdicts are there (no VM boots)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from powercut.errors import UsageError
from powercut.record.vm import prepare_outdir


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=300
    )


def _recording_dir(d: Path) -> Path:
    d.mkdir(parents=True)
    (d / "manifest.toml").write_text('[recording]\nformat = 1\nstatus = "ok"\n')
    (d / "log.bin").write_bytes(b"log")
    return d


def test_force_never_deletes_files_powercut_did_not_make(tmp_path: Path) -> None:
    rec = _recording_dir(tmp_path / "rec")
    (rec / "my-notes.txt").write_text("precious")
    with pytest.raises(UsageError, match="not empty .use --force"):
        prepare_outdir(rec, force=False)
    with pytest.raises(UsageError, match="did not make .my-notes.txt."):
        prepare_outdir(rec, force=True)
    assert (rec / "my-notes.txt").read_text() == "precious" and (rec / "log.bin").exists()
    (rec / "my-notes.txt").unlink()
    prepare_outdir(rec, force=True)  # only its own files: replaced when asked
    assert not (rec / "log.bin").exists()


def test_run_into_an_existing_recording_needs_force(tmp_path: Path) -> None:
    rec = _recording_dir(tmp_path / "mine")
    p = _cli("run", "-o", str(rec))
    assert p.returncode == 1 and "--force" in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    assert (rec / "log.bin").read_bytes() == b"log"


def test_check_options_that_guard_verdicts_exist() -> None:
    out = _cli("check", "--help").stdout
    for opt in ("-o OUT", "--force", "--checker-timeout", "--allow-no-acks", "--resume"):
        assert opt in out, opt

"""Host-wide run locks: one live run per output directory; the lock dies with its process (kill -9
too); a second run is refused in one line naming the holder; the same process may take it again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.errors import UsageError
from powercut.linux import runlock


@pytest.fixture(autouse=True)
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))
    return tmp_path / "run"


def holder_process(path: Path) -> subprocess.Popen:
    """Another process holding ``path``'s run lock (it says 'held' first); kill it to end it."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from powercut.linux import runlock\n"
            f"with runlock.hold({str(path)!r}):\n"
            "    print('held', flush=True)\n"
            "    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_is_refused_naming_the_first(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = holder_process(out)
    try:
        assert runlock.holder(out) == proc.pid
        with pytest.raises(UsageError) as e:
            with runlock.hold(out):
                pass
        assert (
            f"pid {proc.pid}" in str(e.value)
            and str(out) in str(e.value)
            and "\n" not in str(e.value)
        )
    finally:
        proc.kill()  # kill -9: no code of it runs, the kernel drops its lock
        proc.wait()
    assert runlock.holder(out) == 0
    with runlock.hold(out):
        assert runlock.holder(out) == os.getpid()
    assert runlock.holder(out) == 0


def test_the_same_process_may_take_it_again_and_other_paths_are_apart(tmp_path: Path) -> None:
    with runlock.hold(tmp_path / "a"):
        with runlock.hold(tmp_path / "a"):
            pass
        assert runlock.holder(tmp_path / "a") == os.getpid()  # still held by the outer one
        with runlock.hold(tmp_path / "b"):
            assert runlock.holder(tmp_path / "b") == os.getpid()
    assert runlock.holder(tmp_path / "a") == 0


def test_a_path_and_its_spellings_are_one_lock(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    proc = holder_process(tmp_path / "d")
    try:
        for spelling in (tmp_path / "link", tmp_path / "d" / ".." / "d"):
            with pytest.raises(UsageError):
                with runlock.hold(spelling):
                    pass
    finally:
        proc.kill()
        proc.wait()


def test_an_unusable_run_directory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "file"))
    with pytest.raises(UsageError, match="cannot use .*file/locks"):
        with runlock.hold(tmp_path / "out"):
            pass

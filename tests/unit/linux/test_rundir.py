"""$POWERCUT_RUN_DIR: made on first use, a bad setting one line naming it, a /run this user cannot
write falls back to the temporary directory."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from powercut.errors import UsageError
from powercut.linux import rundir


def test_made_on_first_use_under_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))
    assert (
        rundir.run_dir("locks") == tmp_path / "run" / "locks"
        and (tmp_path / "run" / "locks").is_dir()
    )


def test_a_file_in_the_way_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "f"))
    with pytest.raises(UsageError, match=r"cannot use .*f/locks for powercut's run state"):
        rundir.run_dir("locks")


def test_an_unwritable_run_goes_to_the_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERCUT_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    real = Path.mkdir

    def refused(self: Path, *a: object, **kw: object) -> None:
        if str(self).startswith(str(tmp_path / "run")):
            raise PermissionError(errno.EACCES, "Permission denied")
        real(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", refused)
    got = rundir.run_dir("locks")
    assert got.parent.parent == tmp_path / "tmp" and got.name == "locks" and got.is_dir()

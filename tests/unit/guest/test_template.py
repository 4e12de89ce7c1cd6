"""The template agent's mounts (guest/template.py): the plan comes from the table init.sh copied into
its root and the kernel command line, and mount_host makes it (an optional mount that fails or has
no directory is skipped, any other failure stops the agent).  That init.sh walks the same table the
same way: tests/unit/images/test_init.py."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import pytest

from powercut.guest import template
from powercut.linux.mounts import GuestMount, MountError, guest_mounts


def test_the_plan_is_the_copied_table_for_this_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = resources.files("powercut.images").joinpath("mounts.txt").read_text()
    (tmp_path / "mounts").write_text(table)
    args = {"powercut.transport": "9p", "powercut.keep": "/tmp/co", "powercut.mount": "t1"}
    monkeypatch.setattr(template, "TABLE", str(tmp_path / "mounts"))
    monkeypatch.setattr(template, "cmdline", lambda: args)
    plan = template.mount_plan()
    assert plan == guest_mounts(table, template.HOST, args)
    assert plan[0].target == template.HOST and plan[0].source == "hostroot"
    monkeypatch.setattr(template, "TABLE", str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError):  # before the template is saved: checker VMs then boot
        template.mount_plan()


def test_mount_host_skips_optional_mounts_and_stops_at_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done: list[str] = []

    def mount(source: str, target: str, fstype: str, options: str = "") -> None:
        if fstype == "bad":
            raise MountError(f"mount(2) of {source}: Invalid argument")
        done.append(target)

    monkeypatch.setattr(template, "mount", mount)
    (tmp_path / "cfg").mkdir()
    plan = [
        GuestMount("a", str(tmp_path / "a" / "b"), "tmpfs", ""),
        GuestMount("", str(tmp_path / "d"), "", ""),
        GuestMount("x", str(tmp_path / "cfg"), "bad", "", optional=True),  # fails: ignored
        GuestMount(
            "y", str(tmp_path / "nodir"), "configfs", "", optional=True
        ),  # no directory: skipped
        GuestMount("z", str(tmp_path / "z"), "bad", ""),
        GuestMount("never", str(tmp_path / "never"), "tmpfs", ""),
    ]
    with pytest.raises(MountError):
        template.mount_host(plan)
    assert done == [str(tmp_path / "a" / "b")]
    assert (
        os.path.isdir(tmp_path / "d")
        and os.path.isdir(tmp_path / "z")
        and not (tmp_path / "nodir").exists()
    )

"""The Debian packages powercut needs: one list (linux/packages.py), what apt-get would run for the
missing ones, the one-line errors, and ci/setup.sh keeping no list of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.linux import packages
from powercut.linux.packages import INSTALL, UPDATE, InstallError, names, parse_dpkg_query, plan

ROOT = Path(__file__).resolve().parents[3]


def test_groups_partition_the_one_list() -> None:
    every = names(packages.GROUPS)
    assert len(every) == len(set(every)) == len(packages.PACKAGES)
    crash = names(("crash",))
    assert {
        "qemu-system-x86",
        "e2fsprogs",
        "xfsprogs",
        "btrfs-progs",
        "busybox-static",
        "strace",
    } <= set(crash)
    assert set(names()) == set(crash) | set(names(("bench",)))
    assert (
        "postgresql" in every and "postgresql" not in names()
    )  # the dev group is powercut's own tests'
    with pytest.raises(ValueError, match="unknown package group"):
        names(("nope",))


def test_plan_installs_only_what_is_missing_after_an_update_when_there_are_no_lists() -> None:
    assert plan(["a", "b", "c"], {"a", "b", "c"}, have_lists=True) == []
    assert plan(["a", "b", "c"], {"b"}, have_lists=True) == [(*INSTALL, "a", "c")]
    # a fresh container: no package lists (the guest kernel is fetched with apt-get download too)
    assert plan(["a"], {"a"}, have_lists=False) == [UPDATE]
    assert plan(["a", "b"], set(), have_lists=False) == [UPDATE, (*INSTALL, "a", "b")]


def test_dpkg_query_output() -> None:
    text = (
        "qemu-system-x86 install ok installed\nfio deinstall ok config-files\n"
        "libc6:amd64 install ok installed\nstrace unknown ok not-installed\n"
    )
    assert parse_dpkg_query(text) == {"qemu-system-x86", "libc6"}


@pytest.fixture
def apt(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """apt-get replaced: the commands it was asked to run (install fails once when FAIL_ONCE is in it)."""
    ran: list[tuple[str, ...]] = []

    def run(argv: tuple[str, ...]) -> None:
        ran.append(argv)
        if "fail-once" in argv and sum("fail-once" in a for a in ran) == 1:
            raise InstallError("apt-get install exited 100:\nE: stale lists")

    monkeypatch.setattr(packages, "_run", run)
    monkeypatch.setattr(packages, "apt_ready", lambda: None)
    monkeypatch.setattr(packages, "have_lists", lambda lists_dir="": True)
    monkeypatch.setattr(packages, "installed", lambda wanted: {"a"})
    return ran


def test_install_runs_apt_get_for_the_missing_and_retries_after_an_update(apt: list) -> None:
    said: list[str] = []
    assert packages.install(["a", "b"], say=said.append) == ["b"]
    assert apt == [(*INSTALL, "b")]
    assert said == ["running: apt-get install (1 packages: b)"]
    apt.clear()
    assert packages.install(["a", "fail-once"], say=said.append) == ["fail-once"]
    assert apt == [(*INSTALL, "fail-once"), UPDATE, (*INSTALL, "fail-once")]


def test_dry_run_runs_nothing(apt: list) -> None:
    said: list[str] = []
    assert packages.install(["a", "b"], dry_run=True, say=said.append) == ["b"]
    assert apt == [] and said == ["would run: apt-get install -y -q --no-install-recommends b"]


def test_no_apt_get_or_no_root_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packages.shutil, "which", lambda tool: None)
    with pytest.raises(
        InstallError, match="no apt-get here: powercut setup installs Debian/Ubuntu packages"
    ):
        packages.apt_ready()
    monkeypatch.setattr(packages.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(packages.os, "geteuid", lambda: 1000)
    with pytest.raises(InstallError, match="needs root"):
        packages.apt_ready()


def test_runs_as_a_script_before_powercut_is_installed() -> None:
    """ci/setup.sh runs the file itself (standard library only), from the checkout."""
    out = subprocess.run(
        [sys.executable, "-S", str(ROOT / "harness" / "linux" / "packages.py"), "--dev", "--list"],
        capture_output=True,
        text=True,
        cwd="/",
        check=True,
    )
    assert out.stdout.split() == names(packages.GROUPS)


def test_ci_setup_keeps_no_list_of_its_own() -> None:
    text = (ROOT / "ci" / "setup.sh").read_text()
    code = "\n".join(
        line.split("#")[0] for line in text.splitlines()
    )  # the comments may name a package
    assert "harness/linux/packages.py --dev" in text and "powercut.cli setup" in text
    listed = [
        p for p in names(packages.GROUPS) if re.search(rf"(?<![\w/-]){re.escape(p)}(?![\w-])", code)
    ]
    assert listed == [], f"ci/setup.sh names Debian packages of its own: {listed}"

"""vm/agentboot.py: the guest agent's fast start (python -S + boot.py) reaches the agent and imports
only what a checker-VM job needs; registered checkers and the fsck program come preset from the
host, with the usual lookup when the preset is not usable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from powercut import checker as checkers
from powercut import registry
from powercut.checker import CheckerSpec
from powercut.linux import filesystems
from powercut.vm import agentboot, guestjob

SRC = guestjob.StateSource(
    log="/nope/log.bin",
    size=1 << 20,
    fstype="ext4",
    mount_opts="",
    checker=CheckerSpec(name="append-fsync"),
    disks={"scratch": "pcscratch"},
)


def _run_boot(jobdir: Path, job: guestjob.Job, *extra: str) -> subprocess.CompletedProcess[str]:
    guestjob.write(jobdir, job)
    env = {
        "PATH": guestjob.guest_path(),
        "HOME": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [sys.executable, "-S", *extra, str(jobdir / "boot.py"), str(jobdir / "job.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )


def test_boot_without_site_reaches_the_agent(tmp_path: Path) -> None:
    # the job fails in the agent (no scratch disk here), which proves the agent ran and answered
    res = _run_boot(tmp_path, guestjob.CheckJob(SRC, states=("flush@3",)), "-X", "importtime")
    result = guestjob.read_result(tmp_path)
    assert not result.ok and result.error and "Traceback" not in result.error, (
        res.stderr[-2000:],
        result,
    )
    boot = (tmp_path / "boot.py").read_text()
    assert "FULL_SITE = False" in boot
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in res.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert (
        "powercut.check.judge" in imported
    )  # (guest.check itself comes by importlib: no line of its own)
    # what only other jobs need, and what site would have loaded, stays out of a check job
    for absent in (
        "site",
        "powercut.debug.diagnose",
        "powercut.guest.record",
        "importlib.metadata",
        "tomllib",
        "hashlib",
        "_hashlib",
    ):
        assert absent not in imported, absent


def test_jobs_that_run_user_code_get_the_full_site(tmp_path: Path) -> None:
    fn = guestjob.CheckJob(
        guestjob.StateSource(
            **{
                **{f: getattr(SRC, f) for f in SRC.__slots__},
                "checker": CheckerSpec(function="/x/t.py::check"),
            }
        ),
        states=(),
    )
    assert guestjob.needs_full_site(fn)
    assert not guestjob.needs_full_site(guestjob.CheckJob(SRC, states=()))
    assert guestjob.needs_full_site(guestjob.MarkBenchJob(dm_name="x", disks={}))
    res = _run_boot(tmp_path, guestjob.MarkBenchJob(dm_name="x", disks={}))
    assert "FULL_SITE = True" in (tmp_path / "boot.py").read_text()
    assert guestjob.read_result(tmp_path).error, res.stderr[-2000:]


def test_boot_falls_back_to_site_when_the_package_is_elsewhere(tmp_path: Path) -> None:
    guestjob.write(tmp_path, guestjob.CheckJob(SRC, states=()))
    boot = tmp_path / "boot.py"
    boot.write_text(
        boot.read_text().replace(
            repr(agentboot.package_dirs()["powercut"]), repr(str(tmp_path / "gone"))
        )
    )
    env = {"PATH": guestjob.guest_path(), "HOME": "/tmp"}
    subprocess.run(
        [sys.executable, "-S", str(boot), str(tmp_path / "job.json")],
        env=env,
        capture_output=True,
        timeout=120,
        cwd="/",
    )
    assert guestjob.read_result(
        tmp_path
    ).error  # the agent ran (through site's finder) and answered


def test_package_dirs_cover_pyproject() -> None:
    import tomllib

    pyproject = Path(agentboot.package_dirs()["powercut"]).parent / "pyproject.toml"
    if not pyproject.exists():
        pytest.skip("an installed powercut: no pyproject.toml beside it")
    mapped = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    assert set(mapped) == {"powercut", *agentboot.OUTSIDE}
    for name, d in agentboot.package_dirs().items():
        assert os.path.isfile(os.path.join(d, "__init__.py")), name


def test_registry_preset_and_its_fallback() -> None:
    ref = registry.entry_ref(checkers.GROUP, "append-fsync")
    assert ref and ":" in ref
    assert guestjob.StateSource.entries_for(CheckerSpec(name="append-fsync")) == {
        f"{checkers.GROUP}/append-fsync": ref
    }
    assert guestjob.StateSource.entries_for(CheckerSpec(command="true")) == {}
    key = (checkers.GROUP, "append-fsync")
    registry._loaded.pop(key, None)
    try:
        registry.preset(*key, "powercut.no_such_module:CHECKER")  # stale: looked up as usual
        assert checkers.get("append-fsync").name == "append-fsync"
        registry._loaded.pop(key, None)
        registry.preset(*key, ref)
        assert checkers.get("append-fsync").name == "append-fsync"
    finally:
        registry._preset.pop(key, None)


def test_fsck_program_static_only_when_same_version(monkeypatch: pytest.MonkeyPatch) -> None:
    ext4 = filesystems.get("ext4")
    monkeypatch.setattr(filesystems, "_fsck", {})
    monkeypatch.setattr(filesystems.shutil, "which", lambda p: f"/sbin/{p}")
    versions = {
        "e2fsck": "e2fsck 1.47.0 (5-Feb-2023)",
        "e2fsck.static": "e2fsck 1.47.0 (5-Feb-2023)",
    }
    monkeypatch.setattr(filesystems, "_version", lambda p: versions[p])
    assert filesystems.fsck_program(ext4) == ("e2fsck.static", "-fn")
    assert ext4.fsck_argv("/dev/x") == ["e2fsck.static", "-fn", "/dev/x"]
    monkeypatch.setattr(filesystems, "_fsck", {})
    versions["e2fsck.static"] = "e2fsck 1.46.2 (28-Feb-2021)"
    assert filesystems.fsck_program(ext4) == ("e2fsck", "-fn")
    assert filesystems.fsck_program(filesystems.get("xfs")) == filesystems.get("xfs").fsck
    # the guest takes the host's choice, but only a known program that is there
    monkeypatch.setattr(filesystems, "_fsck", {})
    filesystems.preset_fsck("ext4", ("rm", "-rf"))
    filesystems.preset_fsck("ext4", ("e2fsck.static", "-fy"))
    assert "ext4" not in filesystems._fsck
    filesystems.preset_fsck("ext4", ("e2fsck.static", "-fn"))
    assert filesystems._fsck["ext4"] == ("e2fsck.static", "-fn")
    monkeypatch.setattr(filesystems, "_fsck", {})
    monkeypatch.setattr(filesystems.shutil, "which", lambda p: None)
    filesystems.preset_fsck("ext4", ("e2fsck.static", "-fn"))
    assert "ext4" not in filesystems._fsck

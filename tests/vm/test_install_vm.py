"""powercut as someone else's project installs it (#41): the sdist built from this checkout, the
wheel built from that sdist, the wheel installed with pytest into a fresh virtual environment
outside the checkout (no system site-packages: neither the checkout nor its editable install is
importable there), ``powercut doctor`` from that environment, and the scratch project of
docs/own-program.md -- its files taken from that page, so the page cannot go stale -- run by that
environment's pytest: the durable journal's crash test passes, the broken one is caught.

Needs the network for pip (powercut's dependencies and pytest, the build's setuptools), as any
install does; the guest image and the KVM verdict come from the usual cache."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.unit.test_packaging import ROOT, build_sdist, package_files

pytestmark = pytest.mark.vm

PAGE = ROOT / "docs" / "own-program.md"


def examples() -> dict[str, str]:
    """Each ``<!-- example: PATH -->`` code block of the page, by the file's path in the project."""
    found = dict(re.findall(r"<!-- example: (\S+) -->\n```\w*\n(.*?)```", PAGE.read_text(), re.S))
    assert set(found) == {"journal.py", "tests/test_crash.py", "pyproject.toml"}, sorted(found)
    return found


def run(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(argv)}  (exit {out.returncode})\n{out.stdout}{out.stderr}")
    return out


def package_data() -> set[str]:
    """The files of the package that are not Python, as installed paths (powercut/images/init.sh, ...)."""
    where = {
        "harness": "powercut",
        "vm-images": "powercut/images",
        "workloads": "powercut/workloads",
        "checkers": "powercut/checkers",
    }
    return {
        f"{where[f.relative_to(ROOT).parts[0]]}/{f.relative_to(ROOT / f.relative_to(ROOT).parts[0])}"
        for f in package_files()
        if f.suffix not in (".py", ".pyc")
    }


def test_wheel_in_a_fresh_venv_runs_doctor_and_a_scratch_projects_crash_tests(
    tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    dist = tmp_path / "dist"
    dist.mkdir()
    sdist = build_sdist(dist)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("PYTEST_")
    }
    out = run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(sdist)],
        env,
        tmp_path,
    )
    assert out.returncode == 0
    (wheel,) = dist.glob("powercut-*.whl")
    data = package_data()
    assert data and data <= set(zipfile.ZipFile(wheel).namelist()), data - set(
        zipfile.ZipFile(wheel).namelist()
    )

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], env, tmp_path).returncode == 0
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    out = run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(wheel),
            "pytest",
        ],
        env,
        tmp_path,
    )
    assert out.returncode == 0
    installed = run(
        [str(venv / "bin" / "python"), "-c", "import powercut; print(powercut.__file__)"],
        env,
        tmp_path,
    )
    assert Path(installed.stdout.strip()).is_relative_to(venv) and not Path(
        installed.stdout.strip()
    ).is_relative_to(ROOT)
    t_install = time.monotonic() - t0

    doctor = run([str(venv / "bin" / "powercut"), "doctor"], env, tmp_path)
    assert doctor.returncode == 0 and "ready: a crash test can run here" in doctor.stdout
    assert re.search(r"^ok +pytest plugin: registered", doctor.stdout, re.M)

    project = tmp_path / "project"
    for name, text in examples().items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    results = tmp_path / "pc-out"
    t1 = time.monotonic()
    res = run(
        [
            str(venv / "bin" / "pytest"),
            "-p",
            "no:cacheprovider",
            "--powercut-models=flush",
            "--powercut-max-states=12",
            "--powercut-jobs=2",
            f"--powercut-out={results}",
        ],
        env,
        project,
        1200,
    )
    t_tests = time.monotonic() - t1
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"\b2 passed\b", res.stdout)
    assert re.search(
        r"test_journal_survives_power_loss: pass .*all \d+ judged crash states pass", res.stdout
    )
    assert re.search(
        r"test_journal_without_fsync_is_caught: lost-ack: \d+ of \d+ distinct crash states fail",
        res.stdout,
    )
    # report.html is titled with the test's id
    page = (
        results / "tests_test_crash.py_test_journal_survives_power_loss" / "check" / "report.html"
    ).read_text()
    assert (
        "<title>powercut: pass -- tests/test_crash.py::test_journal_survives_power_loss on ext4</title>"
        in page
    )
    print(
        f"install (sdist, wheel, venv, pip): {t_install:.1f} s; the two crash tests: {t_tests:.1f} s"
    )

"""The package as pip builds it (#41): the sdist -- what a wheel is built from -- holds every source
and data file of the package (harness/, vm-images/, workloads/, checkers/), so nothing a user's
install needs is left behind in a checkout.  tests/vm/test_install_vm.py builds the wheel from it,
installs it in a fresh venv and runs crash tests with it."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("harness", "vm-images", "workloads", "checkers")  # pyproject.toml's package-dir


def build_sdist(dest: Path) -> Path:
    """The sdist, by setuptools' PEP 517 hook (what ``python -m build --sdist`` calls)."""
    code = f"from setuptools import build_meta; print(build_meta.build_sdist({str(dest)!r}))"
    name = (
        subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return dest / name


def package_files() -> list[Path]:
    return [
        f
        for src in SOURCES
        for f in (ROOT / src).rglob("*")
        if f.is_file() and "__pycache__" not in f.parts
    ]


def test_the_sdist_holds_every_file_of_the_package(tmp_path: Path) -> None:
    with tarfile.open(build_sdist(tmp_path)) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    want = {str(f.relative_to(ROOT)) for f in package_files()}
    assert want <= names, sorted(want - names)

"""Shared fixtures for the VM tests."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def libvirtd() -> None:
    """A running libvirtd answering on qemu:///system (ci/start-libvirtd.sh starts it if needed)."""
    out = subprocess.run(["sh", str(ROOT / "ci" / "start-libvirtd.sh")], capture_output=True, text=True, timeout=120)
    if out.returncode == 77:
        pytest.skip(f"this machine cannot run libvirtd: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr

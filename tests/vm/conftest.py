"""Shared fixtures for the VM tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def libvirtd() -> None:
    """A running libvirtd answering on qemu:///system (ci/start-libvirtd.sh starts it if needed)."""
    out = subprocess.run(
        ["sh", str(ROOT / "ci" / "start-libvirtd.sh")], capture_output=True, text=True, timeout=120
    )
    if out.returncode == 77:
        pytest.skip(f"this machine cannot run libvirtd: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr


# -- recordings shared by the tests that only judge them (each is ~10-20 s of TCG) -----------------------
# A test must not write into a shared recording: its check goes to its own tmp_path (never the default
# output directory beside the recording) and a test that alters a recording copies it first.


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="session")
def ack_early(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """append-fsync n=3 acking before its fsync (ext4, 64 MiB): every model catches it."""
    out = tmp_path_factory.mktemp("ack-early") / "rec"
    record(
        RecordSpec(
            fs=FsSpec(size_mb=64),
            workload=WorkloadSpec(name="append-fsync", params={"n": 3, "ack_early": True}),
        ),
        out,
    )
    return out


@pytest.fixture(scope="session")
def replog_unsynced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """replog on 3 nodes (32 MiB each), its replicas answering before their fsync: lost acks.

    ``commit=60``: ext4's journal commits every 5 s by default, and a recording slowed by a busy
    machine (CI once) let those commits make every answered write durable before its ack, so that no
    state lost one; with 60 s no commit comes before the unmount, and the bug is in every run."""
    rec = tmp_path_factory.mktemp("replog-unsynced") / "rec"
    out = _cli(
        "record",
        "--nodes",
        "3",
        "--workload",
        "replog",
        "--param",
        "n=6",
        "--param",
        "fsync=false",
        "--size",
        "32",
        "--mount-opts",
        "commit=60",
        "-o",
        str(rec),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return rec

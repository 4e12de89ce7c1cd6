"""The command line: wrong input is one clear line and a non-zero exit, never a traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from powercut.cli import main
from powercut.logwrite import LogWriter


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args", [["record", "--bogus"], ["states", "x", "--model"], ["frobnicate"]])
def test_wrong_options_are_one_line(args: list[str]) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("powercut: error:")


def test_help_lists_commands() -> None:
    out = run("--help")
    assert out.returncode == 0
    for cmd in ("run", "record", "image", "log", "states", "replay"):
        assert cmd in out.stdout


@pytest.fixture
def small_log(tmp_path: Path) -> Path:
    path = tmp_path / "log.bin"
    with LogWriter(path) as w:
        w.write(0, b"a" * 512)
        w.flush()
        w.mark("mkfs")
        w.write(8, b"b" * 1024)
        w.fua(16, b"c" * 512)
        w.mark("ack:0")
    return path


def test_log_stats_and_show(small_log: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["log", "stats", str(small_log)]) == 0
    out = capsys.readouterr().out
    assert "6 entries" in out and "2 marks (1 acks)" in out
    assert main(["log", "show", "--marks-only", str(small_log)]) == 0
    assert "ack:0" in capsys.readouterr().out


def test_states_json(small_log: Path, capsys: pytest.CaptureFixture) -> None:
    import json
    assert main(["states", str(small_log), "--model", "no-cache", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 6 and lines[-1]["acks"] == ["0"]


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, b"\0" * 4096])
def test_corrupt_log_is_one_line(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(content)
    out = run("log", "stats", str(bad))
    assert out.returncode == 1
    assert out.stderr.startswith("powercut: error:") and "Traceback" not in out.stderr


def test_missing_path_and_unknown_model(small_log: Path) -> None:
    assert "no such file" in run("log", "stats", "/nonexistent").stderr
    out = run("states", str(small_log), "--model", "sometimes")
    assert out.returncode == 1 and "unknown crash model" in out.stderr


def test_record_input_errors_before_any_vm(tmp_path: Path) -> None:
    out = run("record", "--workload", "nope", "-o", str(tmp_path / "r"))
    assert out.returncode == 1 and "unknown workload 'nope'" in out.stderr
    out = run("record", "--workload", "append-fsync", "--fs", "zfs", "-o", str(tmp_path / "r"))
    assert out.returncode == 1 and "unknown filesystem 'zfs'" in out.stderr
    out = run("record", "--cmd", "true", "--param", "n=1", "-o", str(tmp_path / "r"))
    assert out.returncode == 1 and "--param goes with --workload" in out.stderr
    assert not (tmp_path / "r").exists()

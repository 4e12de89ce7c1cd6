"""The command line: wrong input is one clear line and a non-zero exit, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from powercut.cli import main
from powercut.core.log.dmlog_writer import LogWriter


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "args", [["record", "--bogus"], ["states", "x", "--model"], ["frobnicate"]]
)
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
    """Bad option values (a workload or filesystem name, --param with --cmd) exit 2, as the parser's."""
    out = run("record", "--workload", "nope", "-o", str(tmp_path / "r"))
    assert out.returncode == 2 and "unknown workload 'nope'" in out.stderr
    out = run("record", "--workload", "append-fsync", "--fs", "zfs", "-o", str(tmp_path / "r"))
    assert out.returncode == 2 and "unknown filesystem 'zfs'" in out.stderr
    out = run("record", "--cmd", "true", "--param", "n", "-o", str(tmp_path / "r"))
    assert out.returncode == 2 and "--param wants key=value" in out.stderr
    assert not (tmp_path / "r").exists()


def test_a_commands_params_are_json_values_for_it_and_its_checker() -> None:
    from powercut.cli.parser import build_parser
    from powercut.cli.record import _record_spec

    argv = ["record", "--cmd", "./db run", "-o", "x"]
    for p in ("n=40", "ratio=0.5", "sync=true", "name=db", "ver=1.2.3", "list=[1]"):
        argv += ["--param", p]
    spec = _record_spec(build_parser().parse_args(argv))
    assert spec.workload.params == {
        "n": 40,
        "ratio": 0.5,
        "sync": True,
        "name": "db",
        "ver": "1.2.3",
        "list": "[1]",
    }


def _fake_recording(tmp_path: Path, data: bytes = b"x" * (256 << 10)) -> Path:
    """A recording directory with a real (tiny) log and a manifest: enough for check/replay to
    get as far as their output paths."""
    from powercut.record import recording

    rec = tmp_path / "rec"
    rec.mkdir()
    with LogWriter(rec / "log.bin") as w:
        w.mark("mkfs")
        w.write(0, data)
        w.flush()
        w.mark("ack:0")
        w.mark("dm-log-writes-end")
    recording.write(
        rec,
        {
            "recording": {"format": 1, "status": "ok"},
            "log": {"file": "log.bin"},
            "data": {"size_bytes": 1 << 20, "final": "data-final.img", "initial": "zeros"},
            "fs": {"fstype": "ext4"},
            "workload": {"name": "append-fsync"},
        },
    )
    return rec


def one_error_line(out: subprocess.CompletedProcess) -> str:
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr and len(lines) == 1, out.stderr
    assert lines[0].startswith("powercut: error: ")
    return lines[0]


def test_unwritable_output_is_one_line_naming_the_path(tmp_path: Path) -> None:
    rec = _fake_recording(tmp_path)
    out = run("check", str(rec), "--out", "/proc/nope/deeper", "--check-in", "vm")
    assert out.returncode == 1 and "/proc/nope" in one_error_line(out)


def test_host_mode_without_root_says_it_needs_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import os

    rec = _fake_recording(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["check", str(rec), "--check-in", "host", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "needs root" in err and len(err.strip().splitlines()) == 1


def test_full_disk_is_one_line(tmp_path: Path) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tiny tmpfs (CI runs as root)")
    rec = _fake_recording(tmp_path)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)], check=True)
    try:
        out = run("replay", str(rec), "--state", "no-cache@3", "-o", str(small / "state.img"))
        assert out.returncode == 1 and "no space left" in one_error_line(out)
        assert not list(small.iterdir())  # nothing half-written left behind
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_missing_recording_and_bad_state_are_one_line(tmp_path: Path) -> None:
    rec = _fake_recording(tmp_path)
    assert "not a recording" in one_error_line(run("check", str(tmp_path / "nope")))
    assert "malformed state id" in one_error_line(
        run("replay", str(rec), "--state", "bogus", "-o", str(tmp_path / "x.img"))
    )


def test_output_into_a_closed_pipe_is_not_an_error(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with LogWriter(big) as w:  # far more output than a pipe buffer holds
        for i in range(4000):
            w.mark(f"note:{i}")
    out = subprocess.run(
        f"{sys.executable} -m powercut.cli log show {big} | head -1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert out.stderr == "" and len(out.stdout.splitlines()) == 1

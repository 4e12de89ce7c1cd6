"""A recording's log that disagrees with its manifest is refused, never judged (#25 item 1): cut at
an entry boundary before the first ack (its states would all pass), cut to the superblock alone, cut
mid-entry, an entry header corrupted, another recording's log copied in, and no state to judge.
Each is one line and exit 1 from ``check`` and ``replay``, before any VM boots."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.core.log.dmlog import END_MARK, open_log
from powercut.core.log.dmlog_writer import LogWriter
from powercut.errors import BadRecording, UsageError
from powercut.record import recording

SS = 512


def _make(d: Path, commits: int = 2, payload: bytes = b"x") -> Path:
    d.mkdir(parents=True)
    with LogWriter(d / "log.bin") as w:
        w.write(0, payload * SS)
        w.flush()
        w.mark("mkfs")
        for i in range(commits):
            w.mark(f"begin:{i}")
            w.write(8 + 8 * i, bytes([65 + i]) * SS)
            w.flush()
            w.mark(f"ack:{i}")
        w.mark(END_MARK)
    manifest = {
        "recording": {"format": 1, "status": "ok"},
        "log": {"file": "log.bin"},
        "data": {"size_bytes": 1 << 20, "final": "data-final.img", "initial": "zeros"},
        "fs": {"fstype": "ext4"},
        "workload": {"cmd": "true"},
    }
    manifest["log"].update(recording.pin_log(d / "log.bin"))
    recording.write(d, manifest)
    return d


def _header_offset(rec: Path, pred) -> int:
    with open_log(rec / "log.bin") as index:
        e = next(e for e in index.entries if pred(e))
        return e.data_offset - (32 if e.mark is not None else index.sectorsize)


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


@pytest.fixture
def rec(tmp_path: Path) -> Path:
    return _make(tmp_path / "rec")


def test_an_intact_log_is_accepted_and_pinned(rec: Path) -> None:
    r = recording.load(rec)
    recording.verify_logs(r)
    pin = r.nodes[0].pin
    assert pin["entries"] == 12 and len(pin["sha256"]) == 64 and pin["used_bytes"] > SS


def test_a_log_cut_before_the_first_ack_is_refused(rec: Path) -> None:
    _truncate(rec / "log.bin", _header_offset(rec, lambda e: e.mark == "ack:0"))
    with pytest.raises(BadRecording, match="holds 6 entries, the recording logged 12"):
        recording.verify_logs(recording.load(rec))


def test_a_log_cut_to_its_superblock_is_refused(rec: Path) -> None:
    _truncate(rec / "log.bin", SS)
    with pytest.raises(BadRecording, match="holds 0 entries"):
        recording.verify_logs(recording.load(rec))


def test_a_log_cut_mid_entry_is_refused(rec: Path) -> None:
    _truncate(rec / "log.bin", _header_offset(rec, lambda e: e.mark == "ack:1") + 100)
    with pytest.raises(BadRecording, match="is damaged: its scan stops"):
        recording.verify_logs(recording.load(rec))


def test_a_corrupted_entry_header_is_refused_not_a_finding(rec: Path) -> None:
    off = _header_offset(rec, lambda e: e.mark == "begin:1")
    with open(rec / "log.bin", "r+b") as f:
        f.seek(off + 16)
        f.write((0xFF00).to_bytes(8, "little"))  # unknown flags
    with pytest.raises(BadRecording, match="is damaged"):
        recording.verify_logs(recording.load(rec))


def test_another_recordings_log_is_refused(rec: Path, tmp_path: Path) -> None:
    other = _make(tmp_path / "other", payload=b"y")  # same shape, other content
    shutil.copy(other / "log.bin", rec / "log.bin")
    with pytest.raises(BadRecording, match="sha256 differs"):
        recording.verify_logs(recording.load(rec))


def test_a_log_without_the_teardown_mark_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "old"
    d.mkdir()
    with LogWriter(
        d / "log.bin"
    ) as w:  # an old recording (no pin): the guest's count and the end mark
        w.write(0, b"x" * SS)
        w.flush()
        w.mark("mkfs")
    recording.write(
        d,
        {
            "recording": {"format": 1, "status": "ok"},
            "log": {"file": "log.bin"},
            "data": {"size_bytes": 1 << 20, "final": "f", "initial": "zeros"},
            "fs": {"fstype": "ext4"},
            "workload": {},
            "result": {"logged_entries": 2},
        },
    )
    with pytest.raises(BadRecording, match="teardown mark"):
        recording.verify_logs(recording.load(d))


def test_a_missing_log_is_refused(rec: Path) -> None:
    (rec / "log.bin").unlink()
    with pytest.raises(BadRecording, match="log is missing"):
        recording.verify_logs(recording.load(rec))


def test_a_campaign_refuses_before_judging(rec: Path, tmp_path: Path) -> None:
    _truncate(rec / "log.bin", _header_offset(rec, lambda e: e.mark == "ack:0"))
    with pytest.raises(BadRecording):
        run_campaign(rec, CampaignSpec.of(check_in="vm"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_no_state_to_judge_is_not_a_pass(tmp_path: Path) -> None:
    d = _make(tmp_path / "empty", commits=0)
    with pytest.raises(UsageError, match="no crash state to judge"):
        run_campaign(d, CampaignSpec.of(check_in="vm", models=("flush",)), tmp_path / "out")


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "{rec}", "--check-in", "vm"],
        ["replay", "{rec}", "--state", "flush@3", "-o", "{out}"],
    ],
)
def test_the_cli_says_one_line_and_exits_1(rec: Path, tmp_path: Path, argv: list[str]) -> None:
    _truncate(rec / "log.bin", SS)
    args = [a.format(rec=rec, out=tmp_path / "img") for a in argv]
    p = subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert (
        len(p.stderr.rstrip("\n").splitlines()) == 1
        and "log.bin" in p.stderr
        and "record again" in p.stderr
    )
    assert not (tmp_path / "img").exists()


def test_replay_refuses_to_overwrite_the_recordings_own_log(rec: Path) -> None:
    before = (rec / "log.bin").read_bytes()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "replay",
            str(rec),
            "--state",
            "flush@3",
            "-o",
            str(rec / "log.bin"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0 and "own file" in p.stderr and "Traceback" not in p.stderr
    assert (rec / "log.bin").read_bytes() == before

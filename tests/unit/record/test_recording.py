"""recording.py: a manifest is validated on load; each missing or garbled key is one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.errors import BadRecording, UsageError
from powercut.record import recording

GOOD = {
    "recording": {"format": 1, "status": "ok"},
    "log": {"file": "log.bin"},
    "data": {"size_bytes": 1 << 20, "final": "data-final.img", "initial": "zeros"},
    "fs": {"fstype": "ext4", "mount_opts": "noatime"},
    "workload": {"name": "append-fsync"},
}


def test_round_trip(tmp_path: Path) -> None:
    recording.write(tmp_path, GOOD)
    rec = recording.load(tmp_path)
    assert rec.ok and rec.data_size == 1 << 20 and rec.log_path == tmp_path / "log.bin"
    assert rec.initial_image is None and rec.fstype == "ext4" and rec.mount_opts == "noatime"
    assert rec.workload_label == "append-fsync" and rec.require_ok() is rec


@pytest.mark.parametrize(
    "section,key", [(s, k) for s, keys in recording.REQUIRED.items() for k in keys]
)
def test_missing_key_is_one_line(tmp_path: Path, section: str, key: str) -> None:
    m = {s: dict(v) for s, v in GOOD.items()}
    del m[section][key]
    recording.write(tmp_path, m)
    with pytest.raises(BadRecording, match=f"has no '{key}'"):
        recording.load(tmp_path)


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(BadRecording, match="not a recording"):
        recording.load(tmp_path)
    (tmp_path / recording.MANIFEST).write_text("[recording\n")
    with pytest.raises(BadRecording, match="not valid TOML"):
        recording.load(tmp_path)
    m = {s: dict(v) for s, v in GOOD.items()}
    m["data"]["size_bytes"] = 1000
    recording.write(tmp_path, m)
    with pytest.raises(BadRecording, match="multiple of 512"):
        recording.load(tmp_path)
    m["data"]["size_bytes"] = 4096
    m["recording"]["format"] = 99
    recording.write(tmp_path, m)
    with pytest.raises(BadRecording, match="format 99"):
        recording.load(tmp_path)
    del m["fs"]
    m["recording"]["format"] = 1
    recording.write(tmp_path, m)
    with pytest.raises(BadRecording, match=r"no \[fs\] section"):
        recording.load(tmp_path)


def test_unfinished_recording_is_refused_for_checking(tmp_path: Path) -> None:
    m = {s: dict(v) for s, v in GOOD.items()}
    m["recording"].update(status="interrupted", error="interrupted by SIGTERM")
    recording.write(tmp_path, m)
    with pytest.raises(
        UsageError, match="did not finish \\(interrupted: interrupted by SIGTERM\\)"
    ):
        recording.load(tmp_path).require_ok()

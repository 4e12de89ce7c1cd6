"""bench/bench_curve.py's tiled recordings: a real recording's log tiled to N entries is a recording
that powercut verifies and judges like any other (its pin, no trace), with N entries, the recording's
mkfs prefix once and its key marks renamed per tile."""

from __future__ import annotations

import tomli_w

from powercut.core.log.dmlog import END_MARK, FUA, open_log
from powercut.record.recording import load, verify_logs
from tests.unit import benchscripts
from tests.unit.logops import build_log


def test_a_tiled_recording_is_verified_and_has_the_entries_asked(tmp_path) -> None:
    curve = benchscripts.load("bench_curve")
    src = tmp_path / "src"
    src.mkdir()
    ops = [
        ("w", 0, 8, 0, 1),
        ("m", "mkfs"),
        ("m", "begin:0"),
        ("w", 16, 4, 0, 3),
        ("f",),
        ("w", 8, 1, FUA, 4),
        ("m", "ack:0"),
        ("m", "begin:1"),
        ("w", 20, 4, 0, 5),
        ("f",),
        ("w", 8, 1, FUA, 6),
        ("m", "ack:1"),
        ("m", END_MARK),
    ]
    build_log(src / "log.bin", ops).close()
    manifest = {
        "recording": {"format": 1, "status": "ok"},
        "fs": {"fstype": "ext4"},
        "workload": {"name": "append-fsync", "trace": True},
        "trace": {"file": "job/syscalls.txt.gz"},
        "data": {"initial": "zeros", "size_bytes": 64 * 512, "final": "data-final.img"},
        "log": {"file": "log.bin", "device_bytes": 0},
    }
    (src / "manifest.toml").write_text(tomli_w.dumps(manifest))
    tiled = load(curve.tiled_recording(load(src), 40, tmp_path / "tiled"))
    verify_logs(tiled)
    assert "trace" not in tiled.manifest and tiled.manifest["workload"]["trace"] is False
    with open_log(tiled.log_path) as idx:
        marks = [e.mark for e in idx.entries if e.is_mark]
        assert len(idx.entries) == tiled.nodes[0].pin["entries"] == 40
    assert marks[0] == "mkfs" and marks.count("mkfs") == 1 and marks[-1] == END_MARK
    assert "ack:0" in marks and "ack:1.0" in marks and len(set(marks)) == len(marks)

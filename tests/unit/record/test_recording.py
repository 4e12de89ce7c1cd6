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


# the one form (format 2) as record/vm.py writes it, and format 1's two layouts of the same disks
NODE0 = {"log": "log-n0.bin", "final": "data-n0-final.img", "entries": 5, "sha256": "a" * 64}
NODE1 = {"log": "log-n1.bin", "final": "data-n1-final.img", "entries": 7, "sha256": "b" * 64}
TWO = {
    "recording": {"format": 2, "status": "ok"},
    "data": {"size_bytes": 1 << 20, "initial": "zeros"},
    "log": {"device_bytes": 1 << 30},
    "fs": {"fstype": "ext4"},
    "workload": {},
    "node": [NODE0, NODE1],
}
OLD_CLUSTER = {
    "recording": {"format": 1, "status": "ok"},
    "log": {"file": "log-n0.bin", "device_bytes": 1 << 30, "entries": 5, "sha256": "a" * 64},
    "data": {"size_bytes": 1 << 20, "final": "data-n0-final.img", "initial": "zeros"},
    "fs": {"fstype": "ext4"},
    "workload": {},
    "cluster": {"nodes": 2, "node": [{**NODE0, "mount": "n0"}, {**NODE1, "mount": "n1"}]},
}


def _nodes(rec: recording.Recording) -> list[tuple[str, str, dict[str, object], int | None]]:
    return [(n.log.name, n.final.name, n.pin, n.logged_entries) for n in rec.nodes]


def test_format_1_of_one_disk_reads_as_the_one_form(tmp_path: Path) -> None:
    old = {s: dict(v) for s, v in GOOD.items()}
    old["log"].update(entries=5, used_bytes=4096, sha256="c" * 64)
    old["files"] = {"map": "job/files.json"}
    old["result"] = {"logged_entries": 4, "workload_rc": 0}
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "files.json").write_text("{}")
    recording.write(tmp_path, old)
    rec = recording.load(tmp_path)
    pin = {"entries": 5, "used_bytes": 4096, "sha256": "c" * 64}
    assert _nodes(rec) == [("log.bin", "data-final.img", pin, 4)]
    assert rec.file_maps == [tmp_path / "job" / "files.json"]
    m = rec.manifest  # upgraded: format 2, and the moved keys left their old sections
    assert m["recording"]["format"] == 2 and "file" not in m["log"] and "final" not in m["data"]
    assert "map" not in m["files"] and m["result"] == {"workload_rc": 0}
    assert recording.upgrade(m) is m  # format 2 as it is
    (tmp_path / "again").mkdir()
    recording.write(tmp_path / "again", m)
    assert _nodes(recording.load(tmp_path / "again")) == _nodes(rec)  # written back, read the same


def test_format_1_of_a_cluster_reads_as_what_format_2_writes(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    recording.write(tmp_path / "old", OLD_CLUSTER)
    recording.write(tmp_path / "new", TWO)
    old = recording.load(tmp_path / "old")
    new = recording.load(tmp_path / "new")
    assert _nodes(old) == _nodes(new) and len(new.nodes) == 2
    assert old.node_logs == (tmp_path / "old" / "log-n0.bin", tmp_path / "old" / "log-n1.bin")
    assert "cluster" not in old.manifest and old.manifest["node"][1]["log"] == "log-n1.bin"


@pytest.mark.parametrize(
    "change,said",
    [
        (lambda m: m.pop("node"), r"no \[\[node\]\] table"),
        (lambda m: m.update(node=[]), r"no \[\[node\]\] table"),
        (lambda m: m["node"][1].pop("final"), r"\[\[node\]\] table 1 has no 'final'"),
        (lambda m: m["node"][0].update(log=3), r"\[\[node\]\] table 0 has no 'log'"),
    ],
)
def test_a_bad_node_table_is_one_line(tmp_path: Path, change, said: str) -> None:
    m = {k: (dict(v) if isinstance(v, dict) else [dict(t) for t in v]) for k, v in TWO.items()}
    change(m)
    recording.write(tmp_path, m)
    with pytest.raises(BadRecording, match=said):
        recording.load(tmp_path)


def test_a_bad_format_1_cluster_is_one_line(tmp_path: Path) -> None:
    m = {k: dict(v) for k, v in OLD_CLUSTER.items()}
    m["cluster"] = {"nodes": 2}
    recording.write(tmp_path, m)
    with pytest.raises(BadRecording, match=r"\[cluster\] has no node tables"):
        recording.load(tmp_path)

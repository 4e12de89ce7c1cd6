"""Repro bundles: the trimmed log is the recording's, byte for byte, up to the cut; a one-disk bundle
is the one layout (format 2: log0.bin, ``nodes``, ``logs``, ``instant``, ``minimized_reasons``,
``cause``, ``blame``); a bundle with a missing or altered log, or no bundle at all, is one clear
error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from powercut.checker import CheckerSpec
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import open_log
from powercut.debug import bundle, repro
from powercut.errors import UsageError
from tests.unit.debug import bundleinputs
from tests.unit.logops import build_log

OPS = [
    ("m", "mkfs"),
    ("m", "begin:1"),
    ("w", 100, 4, 0, 1),
    ("d", 50, 8),
    ("f",),
    ("m", "ack:1"),
    ("w", 104, 4, 0, 3),
    ("f",),
    ("m", "ack:2"),
]


def _bundle(tmp_path: Path, cut: int = 6) -> Path:
    log = tmp_path / "rec" / "log.bin"
    log.parent.mkdir()
    build_log(log, OPS).close()
    v = Verdict(
        "write-cache@6/d2",
        "write-cache",
        6,
        "lost-ack",
        ("acked record(s) [1] missing",),
        1,
        0,
        0.1,
    )
    return bundle.write(
        tmp_path / "b",
        recording=str(log.parent),
        logs=[log],
        cuts=[cut],
        data_size=1 << 20,
        fstype="ext4",
        mount_opts="",
        checker=CheckerSpec(name="append-fsync"),
        params={"n": 2},
        workload={"name": "append-fsync"},
        verdict=v,
    )


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 6, 99])
def test_the_trimmed_log_is_the_recordings_up_to_the_cut(tmp_path: Path, cut: int) -> None:
    b = bundle.load(_bundle(tmp_path, cut))
    with open_log(b.log_path, strict=True) as got, open_log(tmp_path / "rec" / "log.bin") as full:
        n = len(full.entries) if cut in (0, 99) else cut
        assert got.clean and len(got.entries) == n == b.doc["logs"][0]["entries"]
        for a, e in zip(got.entries, full.entries):
            assert (a.flags, a.sector, a.nr_sectors, a.mark) == (
                e.flags,
                e.sector,
                e.nr_sectors,
                e.mark,
            )
            if a.changes_device and not a.is_discard:
                assert bytes(got.data(a)) == bytes(full.data(e))
    assert b.state == "write-cache@6/d2" and b.checker.name == "append-fsync"


def test_a_bundle_travels_alone_and_refuses_a_missing_or_altered_log(tmp_path: Path) -> None:
    src = _bundle(tmp_path)
    moved = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(src, moved)
    shutil.rmtree(tmp_path / "rec")  # the recording is gone: the bundle does not need it
    t = repro.resolve(str(moved))
    assert t.state == "write-cache@6/d2" and t.before == "lost-ack" and t.ctx.fs.name == "ext4"
    with open(moved / "log0.bin", "r+b") as f:
        f.seek(600)
        f.write(b"\xff")
    with pytest.raises(UsageError, match=r": log0.bin was altered \(sha256 "):
        bundle.load(moved)
    (moved / "log0.bin").unlink()
    with pytest.raises(
        UsageError,
        match=r": log0.bin is missing \(the bundle cannot rebuild its state without it\)",
    ):
        bundle.load(moved)
    (moved / "bundle.json").write_text("{")
    with pytest.raises(UsageError, match="not valid JSON"):
        bundle.load(moved)
    with pytest.raises(UsageError, match="neither a repro bundle"):
        repro.resolve(str(tmp_path))
    with pytest.raises(UsageError, match="not a repro bundle directory"):
        bundle.load(tmp_path / "nope")


def test_repro_cli_gives_one_line_for_a_bad_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from powercut.cli import main

    b = _bundle(tmp_path)
    doc = json.loads((b / "bundle.json").read_text())
    doc["logs"][0]["sha256"] = "0" * 64
    (b / "bundle.json").write_text(json.dumps(doc))
    assert main(["repro", str(b)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": log0.bin was altered" in err[0] and "node 0" not in err[0]


KEYS = [  # bundle.json's keys in format 2, for every number of disks, in their order
    "format",
    "nodes",
    "created",
    "recording",
    "logs",
    "data_size",
    "fstype",
    "mount_opts",
    "checker",
    "params",
    "workload",
    "state",
    "instant",
    "verdict",
    "reasons",
    "minimized",
    "minimized_reasons",
    "cause",
    "blame",
    "diagnosis",
]


def test_a_one_disk_bundle_is_the_one_layout(tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    assert sorted(p.name for p in b.iterdir()) == ["bundle.json", "log0.bin"]
    doc = json.loads((b / "bundle.json").read_text())
    assert list(doc) == KEYS and doc["format"] == bundle.FORMAT == 2
    assert doc["nodes"] == 1 and [p["file"] for p in doc["logs"]] == ["log0.bin"]
    assert doc["logs"][0]["sha256"] == bundle.sha256(b / "log0.bin")
    assert (doc["instant"], doc["minimized_reasons"], doc["cause"], doc["blame"]) == (
        6,
        [],
        "",
        [[]],
    )
    got = bundle.load(b)
    assert got.doc == doc and (got.nodes, got.logs, got.log_path) == (
        1,
        (b / "log0.bin",),
        b / "log0.bin",
    )
    assert got.pins == doc["logs"] and got.cause == ""


def test_a_one_disk_diagnosis_is_written_as_a_clusters(tmp_path: Path) -> None:
    """minimized_reasons, cause and blame come from the diagnosis for one disk as for several."""

    d = bundleinputs.blamed_diagnosis("write-cache@6/d2")
    log = tmp_path / "rec" / "log.bin"
    log.parent.mkdir()
    build_log(log, OPS).close()
    v = Verdict("write-cache@6/d2", "write-cache", 6, "lost-ack", ("x",), 1, 0, 0.1)
    b = bundle.load(
        bundle.write(
            tmp_path / "b",
            recording=str(log.parent),
            logs=[log],
            cuts=[6],
            data_size=1 << 20,
            fstype="ext4",
            mount_opts="",
            checker=CheckerSpec(name="append-fsync"),
            params={},
            workload={"name": "append-fsync"},
            verdict=v,
            diagnosis=d,
        )
    )
    assert (b.doc["minimized_reasons"], b.doc["blame"]) == (
        ["acked record(s) [1] missing"],
        [["entry 2: data of /f"]],
    )
    assert b.cause == "lost-ack: lost <- data of /f" and b.state == "write-cache@4/d2"
    assert b.doc["diagnosis"] == d.to_json() and b.doc["instant"] == 6

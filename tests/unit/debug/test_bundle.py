"""Repro bundles: the trimmed log is the recording's, byte for byte, up to the cut; a bundle with a
missing or altered log, or no bundle at all, is one clear error."""

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
        log_path=log,
        data_size=1 << 20,
        fstype="ext4",
        mount_opts="",
        checker=CheckerSpec(name="append-fsync"),
        params={"n": 2},
        workload={"name": "append-fsync"},
        verdict=v,
        cut=cut,
    )


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 6, 99])
def test_the_trimmed_log_is_the_recordings_up_to_the_cut(tmp_path: Path, cut: int) -> None:
    b = bundle.load(_bundle(tmp_path, cut))
    with open_log(b.log_path, strict=True) as got, open_log(tmp_path / "rec" / "log.bin") as full:
        n = len(full.entries) if cut in (0, 99) else cut
        assert got.clean and len(got.entries) == n == b.doc["log"]["entries"]
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
    with open(moved / "log.bin", "r+b") as f:
        f.seek(600)
        f.write(b"\xff")
    with pytest.raises(UsageError, match="log.bin was altered"):
        bundle.load(moved)
    (moved / "log.bin").unlink()
    with pytest.raises(UsageError, match="log.bin is missing"):
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
    doc["log"]["sha256"] = "0" * 64
    (b / "bundle.json").write_text(json.dumps(doc))
    assert main(["repro", str(b)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "log.bin was altered" in err[0]

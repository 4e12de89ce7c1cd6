"""Crash, recover, crash again without a VM (record/vm.py's ``starting_from``, ``start_image``,
``from_section``; the guest job; a bundle's initial image): a recording made from a crash state
takes the first recording's filesystem, starts from that state's image bit for bit, logs that
state's acks (and its begun keys) as marks before it mounts, and a state of it -- judged on the
host, or rebuilt from its repro bundle -- starts from that image, never from zeros."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from powercut.checker import CheckerSpec
from powercut.config import FsSpec, WorkloadSpec
from powercut.core.judging.verdict import Verdict
from powercut.debug import bundle
from powercut.errors import UsageError
from powercut.record import recording
from powercut.record.vm import RecordSpec, Start, from_section, record, start_image, starting_from
from powercut.replay.materialize import replay_state
from powercut.vm import guestjob
from tests.unit.synthrec import SIZE, ext4_recording

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/loop-control") or not shutil.which("mkfs.ext4"),
    reason="needs root, /dev/loop-control and mkfs.ext4",
)


def spec(first: Path, state: str) -> RecordSpec:
    return RecordSpec(
        fs=FsSpec("xfs"), workload=WorkloadSpec(cmd="true"), start=Start(first, state)
    )


@needs_root
def test_the_start_takes_the_first_recording_filesystem_and_its_state_image(
    tmp_path: Path,
) -> None:
    first = recording.load(ext4_recording(tmp_path / "a", commits=3))
    new, loaded = starting_from(spec(first.dir, "flush@12"), 1)
    assert (new.fs.fstype, new.fs.size_mb) == ("ext4", SIZE >> 20)  # not the spec's xfs
    assert loaded.dir == first.dir
    out = tmp_path / "second"
    out.mkdir()
    data = out / "data-final.img"
    states = [e for e in ("flush@" + str(i) for i in range(40))]
    state = next(s for s in states if _acks(first.dir, s) == 2)
    prior = start_image(first, state, out, data, replay_state)
    expect = tmp_path / "expect.img"
    replay_state(first.dir, state, expect)
    assert (out / "initial.img").read_bytes() == expect.read_bytes()
    assert data.read_bytes() == expect.read_bytes()
    assert prior[:2] == ("ack:1", "ack:2")
    assert set(prior[2:]) <= {"begin:3"}
    section = from_section(first, state, prior)
    assert section["state"] == state and section["acked"] == 2
    assert section["recording"] == str(first.dir)
    assert section["log_sha256"] == first.nodes[0].pin["sha256"]


def _acks(rec: Path, state: str) -> int:
    from powercut.core.log.dmlog import open_log
    from powercut.core.states.models import state_from_id

    r = recording.load(rec)
    with open_log(r.log_path) as index:
        try:
            return len(list(state_from_id(index, state).acks))
        except UsageError:
            return -1


@needs_root
def test_a_bad_start_is_one_line_and_nothing_is_recorded(tmp_path: Path) -> None:
    first = ext4_recording(tmp_path / "a", commits=1)
    with pytest.raises(UsageError, match="one data disk only"):
        starting_from(spec(first, "flush@3"), 2)
    with pytest.raises(UsageError, match="needs the replayer"):
        record(spec(first, "flush@3"), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    broken = tmp_path / "broken"
    shutil.copytree(first, broken)
    m = recording.load(broken).manifest
    m["recording"]["status"] = "interrupted"
    recording.write(broken, m)
    with pytest.raises(UsageError, match="did not finish"):
        starting_from(spec(broken, "flush@3"), 1)
    with pytest.raises(UsageError, match="out of range"):  # before any file of the output exists
        starting_from(spec(first, "flush@99999"), 1)
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(UsageError):
        start_image(recording.load(first), "flush@99999", out, out / "d.img", replay_state)
    assert not (out / "initial.img").exists()


def test_the_record_job_says_no_mkfs_and_the_prior_marks_only_when_it_starts_from_a_state() -> None:
    job = guestjob.RecordJob("dm", {"data0": "a", "log0": "b"}, FsSpec(), WorkloadSpec(cmd="true"))
    plain = guestjob.to_json(job)
    assert "mkfs" not in plain and "prior" not in plain  # what an agent before them reads
    from_state = dataclasses.replace(job, mkfs=False, prior=("ack:1", "begin:2"))
    d = guestjob.to_json(from_state)
    assert d["mkfs"] is False and d["prior"] == ["ack:1", "begin:2"]
    back = guestjob.from_json(d)
    assert isinstance(back, guestjob.RecordJob)
    assert (back.mkfs, back.prior) == (False, ("ack:1", "begin:2"))


def _verdict() -> Verdict:
    return Verdict("flush@3", "flush", 3, "lost-ack", ("key 1 lost",), 1, 0, 0.1)


def write_bundle(dest: Path, log: Path, **extra: Any) -> Path:
    """A one-disk bundle of ``_verdict`` from ``log`` (``extra``: bundle.write's initial, start)."""
    return bundle.write(
        dest,
        recording=str(dest.parent),
        data_size=1 << 20,
        fstype="ext4",
        mount_opts="",
        checker=CheckerSpec(command="true"),
        params={},
        workload={"cmd": "true"},
        verdict=_verdict(),
        logs=[log],
        cuts=[0],
        **extra,
    )


def test_a_bundle_carries_the_initial_image_and_a_changed_one_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "log.bin"
    from powercut.core.log.dmlog_writer import LogWriter

    with LogWriter(log) as w:
        w.write(0, b"x" * 4096)
        w.flush()
        w.mark("ack:1")
    image = tmp_path / "initial.img"
    with open(image, "wb") as f:
        f.truncate(1 << 20)
        f.write(b"state")
    dest = write_bundle(
        tmp_path / "b", log, initial=image, start={"recording": "/r", "state": "flush@9"}
    )
    b = bundle.load(dest)
    assert b.initial == dest / "initial.img"
    assert b.initial.read_bytes() == image.read_bytes()
    assert b.doc["from"]["state"] == "flush@9"
    with open(b.initial, "r+b") as f:
        f.write(b"other")
    with pytest.raises(UsageError, match="initial image initial.img was altered"):
        bundle.load(dest)
    b.initial.unlink()
    with pytest.raises(UsageError, match="initial image initial.img is missing"):
        bundle.load(dest)
    plain = write_bundle(tmp_path / "p", log)
    assert bundle.load(plain).initial is None
    assert "initial" not in bundle.load(plain).doc

"""Incremental replay: every state of every model, materialized through every provider that works
here, is byte-identical to the plain replay-from-entry-0 reference; plans agree with
models.durable_entries; discards read as zeros; replay_state rebuilds a state by id; bad input
gives one clear error.  A full disk needs root (skipped elsewhere).  The providers' own tests
(every provider against the reference, XFS workspace, dm-snapshot) are in test_snapshot.py, which
reuses this module's log builders."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from powercut.core.crashmodels.lies import with_lie
from powercut.core.log.dmlog import FUA, LogIndex, open_log
from powercut.core.log.dmlog_writer import LogWriter
from powercut.core.states.models import durable_entries, enumerate_states, state_from_id
from powercut.core.states.stateid import HONEST_MODELS, MODELS
from powercut.errors import BadLog, BadRecording, PowercutError, UsageError
from powercut.linux import process
from powercut.linux.imageio import data_extents
from powercut.replay.materialize import (
    ReplayStats,
    materialize,
    plan,
    reference_image,
    replay_state,
)
from powercut.replay.snapshot import Provider

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (loop devices, mount)")
NSECT = 96  # data device size in sectors of the log's sectorsize


def sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def build(path: Path, ops: list[tuple], ss: int) -> LogIndex:  # type: ignore[type-arg]
    """ops: ("w", sector, nr, flags, fill) | ("f", flags) | ("d", sector, nr) | ("m", text)."""
    with LogWriter(path, ss) as w:
        for op in ops:
            if op[0] == "w":
                _, sector, nr, flags, fill = op
                data = b"".join(bytes([(fill + k) % 251 + 1]) * ss for k in range(nr))
                w.write(sector, data, flags)
            elif op[0] == "f":
                w.flush(op[1])
            elif op[0] == "d":
                w.discard(op[1], op[2])
            else:
                w.mark(op[1])
        w.mark("dm-log-writes-end")
    return open_log(path, strict=True)


def random_ops(seed: int, n: int) -> list[tuple]:  # type: ignore[type-arg]
    r = random.Random(seed)
    ops: list[tuple] = []  # type: ignore[type-arg]
    for i in range(n):
        x = r.random()
        if x < 0.55:
            nr = r.choice([1, 1, 2, 3, 5, 8])
            flags = r.choice([0, 0, 0, 0, FUA, 1, 1 | FUA])  # 1 = FLUSH (a PREFLUSH write)
            ops.append(("w", r.randrange(NSECT - nr), nr, flags, r.randrange(250)))
        elif x < 0.7:
            ops.append(("f", r.choice([0, 0, FUA])))
        elif x < 0.8:
            nr = r.randint(1, 9)
            ops.append(("d", r.randrange(NSECT - nr), nr))
        else:
            ops.append(("m", f"{r.choice(['ack', 'begin'])}:{i}"))
    return ops


HAND = [
    ("w", 0, 2, 0, 1),
    ("w", 4, 1, 0, 2),
    ("f", 0),
    ("m", "begin:a"),
    ("w", 0, 4, 0, 3),
    ("w", 8, 3, FUA, 4),
    ("d", 1, 2),
    ("w", 2, 1, 0, 5),
    ("w", 20, 2, 1, 6),
    ("w", 1, 1, 0, 7),
    ("m", "ack:a"),
    ("f", FUA),
    ("d", 0, 30),
    ("w", 3, 6, 0, 8),
    ("m", "ack:b"),
]
LOGS = {"hand": HAND, "r1": random_ops(1, 40), "r2": random_ops(2, 60), "r3": random_ops(3, 25)}


def check_all(
    idx: LogIndex,
    size: int,
    workspace: Path,
    provider: str | Provider,
    models=MODELS,
    initial: Path | None = None,
    **kw,
) -> int:  # type: ignore[no-untyped-def]
    """Materialize every state of the models; each image must equal the reference."""
    ref = workspace / "ref.img"
    n = 0
    for model in models:
        states = enumerate_states(idx, model, **kw)
        seen = set()
        with contextlib.closing(materialize(idx, initial, size, states, workspace, provider)) as it:
            for state, img in it:
                reference_image(idx, state, size, ref, initial)
                assert os.path.getsize(img) == size or img.is_block_device()
                assert sha(img) == sha(ref), f"{state.id} differs from the reference"
                seen.add(state.id)
                n += 1
        assert seen == {s.id for s in states}
    return n


# -- correctness on the copy provider (always available) -------------------------------------------------
def test_every_state_matches_reference(small_log: LogIndex, tmp_path: Path) -> None:
    n = check_all(
        small_log, NSECT * small_log.sectorsize, tmp_path, "copy", exhaustive_bound=6, samples=8
    )
    assert n > len(small_log)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("powercut-replay-")] == []


def test_plan_agrees_with_durable_entries(small_log: LogIndex) -> None:
    for model in MODELS:
        for state in enumerate_states(small_log, model, exhaustive_bound=6, samples=8):
            p = plan(small_log, state)
            durable = list(
                with_lie(state, small_log.entries, durable_entries(small_log, state))
            )  # + a misdirected copy
            prefix = [(e, None) for e in small_log.entries[: p.base] if e.changes_device]
            assert durable == prefix + list(p.extras), state.id
            if model in ("no-cache", "flush"):
                assert p.base == state.cut and not p.extras
            if (
                model == "torn"
            ):  # the torn write (or an earlier dropped one) is where the clone starts
                assert p.base == min([i for i, _ in state.torn] + list(state.dropped))
                assert sum(sectors is not None for _, sectors in p.extras) == 1


def test_extras_bounded_by_epoch(tmp_path: Path) -> None:
    """The work per state (extras) depends on the epoch, not on how long the log is."""
    ops = [("w", i % 50, 1, 0, i) for i in range(2000)] + [("f", 0)]
    ops += [
        ("w", 60, 1, 0, 1),
        ("w", 61, 1, 0, 2),
        ("w", 62, 2, FUA, 3),
        ("w", 64, 1, 0, 4),
        ("m", "ack:x"),
    ]
    with build(tmp_path / "l.bin", ops, 512) as idx:
        for model in HONEST_MODELS:  # a lie's extras: its commit's writes after it (test_lies.py)
            for s in enumerate_states(idx, model):
                if s.cut > 2001:
                    assert plan(idx, s).base >= 2000 and len(plan(idx, s).extras) <= 4, s.id


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 30), ss=st.sampled_from([512, 4096]))
def test_property_random_logs(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n: int, ss: int
) -> None:
    d = tmp_path_factory.mktemp("h")
    with build(d / "l.bin", random_ops(seed, n), ss) as idx:
        check_all(idx, NSECT * ss, d, "copy", exhaustive_bound=4, samples=4, seed=seed % 1000)


def test_initial_image(tmp_path: Path) -> None:
    size = NSECT * 512
    init = tmp_path / "init.img"
    init.write_bytes(random.Random(7).randbytes(size))
    with build(tmp_path / "l.bin", LOGS["r1"], 512) as idx:
        check_all(idx, size, tmp_path, "copy", models=("no-cache", "write-cache"), initial=init)
        with pytest.raises(UsageError, match="has 10 bytes"):
            (tmp_path / "short.img").write_bytes(b"x" * 10)
            materialize(
                idx, tmp_path / "short.img", size, enumerate_states(idx, "flush"), tmp_path, "copy"
            )


def test_discard_replays_as_zeros_and_holes(tmp_path: Path) -> None:
    ss, size = 4096, 64 * 4096
    with build(
        tmp_path / "l.bin", [("w", 0, 16, 0, 9), ("f", 0), ("d", 4, 8), ("m", "ack:1")], ss
    ) as idx:
        states = enumerate_states(idx, "no-cache")
        for state, img in materialize(idx, None, size, states, tmp_path, "copy"):
            if state.cut >= 3:
                data = img.read_bytes()
                assert data[4 * ss : 12 * ss] == bytes(8 * ss)
                assert data[: 4 * ss] != bytes(4 * ss) and data[12 * ss : 16 * ss] != bytes(4 * ss)
                with open(img, "rb") as f:  # the copy kept the punched hole
                    assert all(
                        not (o < 12 * ss and o + n > 4 * ss)
                        for o, n in data_extents(f.fileno(), size)
                    )
        # write-cache: a dropped discard leaves the data, a kept one zeros it
        wc = {s.id: s for s in enumerate_states(idx, "write-cache")}
        end = len(
            idx.entries
        )  # the end mark is not an ack: no cut of its own, the last cut is the end
        kept = [s for s in wc.values() if s.cut == end and 2 not in s.dropped]
        gone = [s for s in wc.values() if s.cut == end and 2 in s.dropped]
        assert kept and gone
        for state, img in materialize(idx, None, size, kept + gone, tmp_path, "copy"):
            zeros = img.read_bytes()[4 * ss : 12 * ss] == bytes(8 * ss)
            assert zeros == (2 not in state.dropped), state.id


def test_images_valid_until_next_iteration(tmp_path: Path) -> None:
    with build(tmp_path / "l.bin", LOGS["hand"], 512) as idx:
        it = materialize(idx, None, NSECT * 512, enumerate_states(idx, "flush"), tmp_path, "copy")
        _, first = next(it)
        assert first.is_file()
        _, second = next(it)
        assert not first.exists() and second.is_file()
        it.close()  # stopping early cleans the workspace at once
        assert not second.exists()
        assert [p for p in tmp_path.iterdir() if p.name.startswith("powercut-replay-")] == []


def test_walk_is_monotone_and_stats(tmp_path: Path) -> None:
    with build(tmp_path / "l.bin", LOGS["r2"], 512) as idx:
        states = enumerate_states(idx, "write-cache", exhaustive_bound=6, samples=8)
        stats = ReplayStats()
        got = [
            s for s, _ in materialize(idx, None, NSECT * 512, states, tmp_path, "copy", stats=stats)
        ]
        bases = [plan(idx, s).base for s in got]
        assert bases == sorted(bases) and sorted(s.id for s in got) == sorted(s.id for s in states)
        assert stats.states == len(states) and stats.walk_entries <= len(idx)
        assert stats.provider == "copy"


# -- replay_state ---------------------------------------------------------------------------------------------
def fake_recording(d: Path, log_ops: list[tuple], ss: int, size: int) -> Path:  # type: ignore[type-arg]
    d.mkdir()
    build(d / "log.bin", log_ops, ss).close()
    (d / "data-final.img").write_bytes(b"")
    manifest = {
        "recording": {"format": 1, "status": "ok"},
        "fs": {"fstype": "ext4"},
        "workload": {"name": "append-fsync"},
        "data": {"initial": "zeros", "size_bytes": size, "final": "data-final.img"},
        "log": {"file": "log.bin", "device_bytes": 0},
    }
    (d / "manifest.toml").write_text(tomli_w.dumps(manifest))
    return d


def test_replay_state_equals_walk(tmp_path: Path, ss: int) -> None:
    size = NSECT * ss
    rec = fake_recording(tmp_path / "rec", LOGS["r2"], ss, size)
    with open_log(rec / "log.bin") as idx:
        states = [
            s for m in MODELS for s in enumerate_states(idx, m, exhaustive_bound=4, samples=4)
        ]
        walk = {s.id: sha(img) for s, img in materialize(idx, None, size, states, tmp_path, "copy")}
    for sid in sorted(walk)[::7] + [s.id for s in states if "/r" in s.id][:3]:
        out = replay_state(rec, sid, tmp_path / "one.img")
        assert sha(out) == walk[sid], sid
        out2 = replay_state(rec / "log.bin", sid, tmp_path / "two.img", size=size)
        assert sha(out2) == walk[sid]
        with open_log(rec / "log.bin") as idx:
            assert state_from_id(idx, sid).id == sid
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_replay_state_bad_input(tmp_path: Path) -> None:
    size = NSECT * 512
    rec = fake_recording(tmp_path / "rec", HAND, 512, size)
    out = tmp_path / "o.img"
    with pytest.raises(UsageError, match="malformed state id"):
        replay_state(rec, "bogus", out)
    with pytest.raises(UsageError, match="out of range"):
        replay_state(rec, "no-cache@999", out)
    with pytest.raises(UsageError, match="--size"):
        replay_state(rec / "log.bin", "no-cache@3", out)
    with pytest.raises(UsageError, match="past the end"):
        replay_state(rec / "log.bin", "no-cache@6", out, size=4096)
    with pytest.raises(UsageError, match="drop --size"):
        replay_state(rec, "no-cache@3", out, size=size + 512)
    with pytest.raises(UsageError, match="no such"):
        replay_state(tmp_path / "missing", "no-cache@3", out, size=size)
    with pytest.raises(UsageError, match="is a directory"):
        replay_state(rec, "no-cache@3", tmp_path)
    with pytest.raises(UsageError, match="does not exist"):
        replay_state(rec, "no-cache@3", tmp_path / "no" / "o.img")
    (tmp_path / "notrec").mkdir()
    with pytest.raises(BadRecording, match="not a recording"):
        replay_state(tmp_path / "notrec", "no-cache@3", out)
    (rec / "log.bin").unlink()
    with pytest.raises(BadRecording, match="missing"):
        replay_state(rec, "no-cache@3", out)
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(b"\x7fELF" + bytes(4096))
    with pytest.raises(BadLog, match="not a dm-log-writes log"):
        replay_state(foreign, "no-cache@1", out, size=size)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with pytest.raises(BadLog, match="empty file"):
        replay_state(empty, "no-cache@1", out, size=size)
    assert not out.exists()
    for err in (UsageError, BadLog, BadRecording):
        assert issubclass(err, PowercutError)


def test_corrupt_log_tail(tmp_path: Path) -> None:
    """A log whose tail is garbage: the states before it replay, ids past it are refused."""
    with build(tmp_path / "l.bin", LOGS["r1"], 512) as idx:
        n = len(idx)
        last = idx.entries[-2]
    raw = bytearray((tmp_path / "l.bin").read_bytes())
    hdr = last.data_offset - 512
    raw[hdr + 16 : hdr + 24] = (0xFF00).to_bytes(8, "little")  # unknown flags
    (tmp_path / "l.bin").write_bytes(bytes(raw))
    with pytest.raises(BadLog):
        open_log(tmp_path / "l.bin", strict=True)
    out = replay_state(
        tmp_path / "l.bin", f"no-cache@{n - 2}", tmp_path / "o.img", size=NSECT * 512
    )
    assert out.is_file()
    with pytest.raises(UsageError, match="out of range"):
        replay_state(tmp_path / "l.bin", f"no-cache@{n}", tmp_path / "o.img", size=NSECT * 512)


@needs_root
def test_replay_state_full_disk(tmp_path: Path) -> None:
    """An output on a full filesystem: one clear PowercutError line, no partial file left."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    process.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], timeout=30)
    try:
        rec = fake_recording(
            tmp_path / "rec", [("w", 0, 64, 0, 1), ("m", "ack:1")], 4096, 128 * 4096
        )
        with pytest.raises(PowercutError) as ei:
            replay_state(rec, "no-cache@2", mnt / "o.img")
        msg = str(ei.value)
        assert "\n" not in msg and "no space left" in msg and str(mnt / "o.img") in msg
        assert list(mnt.iterdir()) == []
        with open_log(rec / "log.bin") as idx, pytest.raises(PowercutError, match="no space left"):
            list(materialize(idx, None, 128 * 4096, enumerate_states(idx, "no-cache"), mnt, "copy"))
        assert list(mnt.iterdir()) == []
    finally:
        process.run(["umount", str(mnt)], timeout=30)

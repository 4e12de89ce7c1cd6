"""The wal workload and its checker, without a VM: the workload runs in a tmp dir with the mark
hook replaced and fsync/sync/unlink recorded (each with a snapshot of the files); crash states are
made at the file level -- every prefix of the syscalls, "only what was fsynced", truncated or
zeroed segments, a wal.ctl ahead of the log, data.db reverted or half written -- and judged."""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path
from typing import Any

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import wal as wc
from powercut.workloads import wal as ww

Files = dict[str, bytes]


def snapshot(root: Path) -> Files:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())} if root.is_dir() else {}


def run(tmp_path: Path, name: str = "run", **given: Any) -> tuple[Files, list[tuple]]:
    """Run the workload in tmp_path/name; its final files and the events: ("begin"|"ack", txn,
    snapshot), ("pwrite", file, offset, length), ("fsync", file, bytes | None for a directory),
    ("sync", snapshot), ("unlink", file)."""
    where = tmp_path / name
    where.mkdir()
    root = where / "wal"
    events: list[tuple] = []
    real_pwrite, real_unlink = os.pwrite, os.unlink

    def name_of(fd: int) -> Path:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))

    def pwrite(fd: int, data: bytes, pos: int) -> int:
        events.append(("pwrite", name_of(fd).name, pos, len(data)))
        return real_pwrite(fd, data, pos)

    def fsync(fd: int) -> None:  # recorded, not done: durability on the host is not what is tested
        path = name_of(fd)
        events.append(("fsync", path.name, None if path.is_dir() else path.read_bytes()))

    def unlink(path: str) -> None:
        events.append(("unlink", os.path.basename(path)))
        real_unlink(path)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(ww, "MARK", lambda kind, txn: events.append((kind, txn, snapshot(root))))
        m.setattr(os, "pwrite", pwrite)
        m.setattr(os, "fsync", fsync)
        m.setattr(os, "sync", lambda: events.append(("sync", snapshot(root))))
        m.setattr(os, "unlink", unlink)
        m.chdir(where)
        assert ww.WORKLOAD.main(ww.WORKLOAD.params(given)) == 0
    return snapshot(root), events


def judge(
    tmp_path: Path, files: Files | None, acked: Any = (), begun: Any = (), **params: Any
) -> CheckResult:
    mnt = tmp_path / "mnt"
    root = mnt / "wal"
    root.mkdir(parents=True, exist_ok=True)
    for stale in set(os.listdir(root)) - set(files or {}):
        os.unlink(root / stale)
    if files is None:
        root.rmdir()
    for name, data in (files or {}).items():
        (root / name).write_bytes(data)
    return wc.check(
        CheckInput(
            str(mnt), tuple(map(str, acked)), tuple(map(str, begun)), ww.WORKLOAD.params(params)
        )
    )


def cuts(
    events: list[tuple], final: Files, durable_only: bool
) -> list[tuple[Files, set[int], set[int]]]:
    """Crash states at the file level: before every mark and after every fsync, sync and unlink.
    durable_only=False: every syscall so far is durable (a prefix); True: each file as of its last
    fsync (or sync), files never fsynced absent, unlinks immediate."""
    out, durable, acked, begun = [], {}, set(), set()
    for ev in events:
        kind = ev[0]
        if kind == "fsync" and ev[2] is not None:
            durable[ev[1]] = ev[2]
        elif kind == "sync":
            durable = dict(ev[1])
        elif kind == "unlink":
            durable.pop(ev[1], None)
        if kind in ("begin", "ack") and not durable_only:
            out.append((ev[2], set(acked), begun - acked))
        elif kind in ("begin", "ack", "fsync", "sync", "unlink") and durable_only:
            out.append((dict(durable), set(acked), begun - acked))
        if kind in ("begin", "ack"):
            (begun if kind == "begin" else acked).add(ev[1])
    out.append((dict(durable) if durable_only else final, acked, begun - acked))
    return out


def last_seg(files: Files) -> str:
    return max(n for n in files if n.endswith(".seg"))


def image_at(files: Files, txn: int, page: int, **params: Any) -> int:
    """File offset of txn's image of page in the last segment."""
    p = ww.Params.of(params)
    pos = files[last_seg(files)].find(ww.image(p.seed, txn, page, p.page_bytes)[: ww.IMG.size])
    assert pos > 0
    return pos


# -- format and workload ------------------------------------------------------------------------


def test_the_checkers_remembered_crc_is_the_crc(monkeypatch) -> None:
    import random

    monkeypatch.setattr(wc, "MEMO_MAX", 8)
    rng = random.Random(5)
    blobs = [rng.randbytes(rng.randrange(0, 200)) for _ in range(20)]
    for _ in range(3):  # asked again, after the memo filled and was cleared, and as a memoryview
        for b in blobs:
            for start in (0, 0x1234):
                assert (
                    wc.crc32c(b, start) == wc._crc32c(b, start) == wc.crc32c(memoryview(b), start)
                )
    assert len(wc._MEMO) <= 8


def test_crc32c_is_castagnoli_in_both_modules() -> None:
    for crc in (ww.crc32c, wc.crc32c):
        assert crc(b"123456789") == 0xE3069283 and crc(b"") == 0
        assert crc(b"56789", crc(b"1234")) == 0xE3069283  # incremental
    assert ww.CRC_TABLE == wc.CRC_TABLE and ww.DEFAULTS == wc.DEFAULTS


def test_params_are_typed_and_validated() -> None:
    p = ww.WORKLOAD.params({"variant": "no-crc", "group": "3", "page_bytes": "8192"})
    assert (p["variant"], p["group"], p["page_bytes"], p["n"]) == ("no-crc", 3, 8192, 12)
    bad = {
        "variant": "nope",
        "n": -1,
        "group": 0,
        "npages": 0,
        "checkpoint_every": -1,
        "page_bytes": 1000,
        "segment_bytes": 100,
        "dir": "/abs",
    }
    for key, value in bad.items():
        with pytest.raises(ValueError, match=r"^wal: .*\S$") as e:
            ww.Params.of({key: value})
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="variant must be one of"):
        wc.Layout.of({"variant": "nope"})


def test_the_files_are_the_documented_format(tmp_path: Path) -> None:
    files, events = run(tmp_path)
    p = ww.Params.of({})
    segs = sorted(n for n in files if n.endswith(".seg"))
    assert segs == ["00000005.seg", "00000006.seg"] and {len(files[n]) for n in segs} == {
        16384
    }  # preallocated
    # the log: LSN = the segment's start LSN + file offset, CRCs that hold, a SWITCH to the next segment
    lsn_next, txns = None, []
    for name in segs:
        seg = files[name]
        magic, segno, start, crc = ww.SEG.unpack_from(seg)
        assert (magic, f"{segno:08d}.seg", crc) == (b"PCWALSEG", name, ww.crc32c(seg[:20]))
        assert lsn_next in (None, start)
        off, rtype = ww.SEG.size, 0
        while rtype != ww.T_SWITCH and seg[off : off + ww.REC.size].strip(b"\0"):
            length, lsn, rtype, crc = ww.REC.unpack_from(seg, off)
            payload = seg[off + ww.REC.size : off + ww.REC.size + length]
            assert lsn == start + off and crc == ww.crc32c(
                ww.REC.pack(length, lsn, rtype, 0) + payload
            )
            txns += [ww.COMMIT.unpack(payload)[0]] if rtype == ww.T_COMMIT else []
            off += -(-(ww.REC.size + length) // 8) * 8
        lsn_next = start + off
        assert not seg[off:].strip(b"\0")
    assert txns == [9, 10, 11, 12]
    # wal.ctl: the second checkpoint, after txn 10, in segment 5
    ctl = ww.CTL.unpack(files["wal.ctl"])
    assert (
        ctl[0] == b"PCWALCTL"
        and ctl[2] == 10
        and ctl[5] == 5
        and ctl[6] == ww.crc32c(files["wal.ctl"][:44])
    )
    # data.db holds the state after txn 10, as the checker rebuilds it
    lay = wc.Layout.of({})
    want = [bytes(p.page_bytes)] * p.npages
    for t in range(1, 11):
        for page in lay.pages(t):
            want[page] = lay.image(t, page)
    assert files["data.db"] == b"".join(want)
    assert [ww.txn_pages(t, 8) for t in (1, 3, 8, 9)] == [[0], [2, 6], [7], [0, 4]]
    assert (
        sum(e[0] == "unlink" for e in events) == 4
    )  # segments 1..4 removed by the two checkpoints


def fsyncs(events: list[tuple], since: int = 0) -> list[str]:
    return [e[1] if e[2] is not None else "<dir>" for e in events[since:] if e[0] == "fsync"]


@pytest.mark.parametrize("variant", ww.VARIANTS)
def test_setup_is_durable_before_the_first_begin(tmp_path: Path, variant: str) -> None:
    _, events = run(tmp_path, variant=variant)
    first = next(i for i, e in enumerate(events) if e[0] == "begin")
    assert events[first][1] == 1
    assert fsyncs(events[:first]) == ["<dir>", "data.db", "00000001.seg", "wal.ctl", "<dir>"]


def groups(events: list[tuple]) -> list[list[tuple]]:
    """The events from each group's first begin to its last ack."""
    out: list[list[tuple]] = []
    acking = False
    for e in events:
        if e[0] == "begin" and (acking or not out):
            out.append([])
            acking = False
        acking = acking or e[0] == "ack"
        if out and (not acking or e[0] == "ack"):
            out[-1].append(e)
    return out


@pytest.mark.parametrize("group", [1, 3])
def test_correct_one_fsync_per_group_then_its_acks(tmp_path: Path, group: int) -> None:
    _, events = run(tmp_path, group=group, n=7)
    for g in groups(events):
        kinds = [e[0] if e[0] != "pwrite" else "w" for e in g]
        n = len([k for k in kinds if k == "begin"])
        assert kinds == ["begin", "w"] * n + ["fsync"] + ["ack"] * n, kinds
        assert g[-n - 1][1].endswith(".seg")
    assert [len([e for e in g if e[0] == "ack"]) for g in groups(events)] == (
        [1] * 7 if group == 1 else [3, 3, 1]
    )


def test_rotation_and_checkpoint_order_per_variant(tmp_path: Path) -> None:
    seq = {}
    for v in ww.VARIANTS:
        _, events = run(tmp_path, v, variant=v)
        first = next(i for i, e in enumerate(events) if e[0] == "begin")
        seq[v] = fsyncs(events, first)
        syncs = sum(e[0] == "sync" for e in events)
        rotations = sum(
            e[0] == "pwrite" and e[1].endswith(".seg") and e[2] == 0 for e in events[first:]
        )
        assert rotations == (7 if v == "commit-before-data" else 5), v
        assert syncs == (12 + 2 * 3 + rotations if v == "commit-before-data" else 0), (
            v
        )  # commit, checkpoint, rotation
    rotation = [
        "00000002.seg",
        "<dir>",
    ]  # after the old segment's fsync (its SWITCH): the new one, the directory
    checkpoint = ["data.db", "wal.ctl", "<dir>"]
    assert seq["correct"][:14] == (
        ["00000001.seg"] * 3
        + rotation
        + ["00000002.seg"] * 3
        + ["00000003.seg", "<dir>"]
        + ["00000003.seg"]
        + checkpoint
    )
    assert seq["correct"].count("<dir>") == 5 + 2  # five rotations, two checkpoints
    assert seq["no-dir-fsync"] == [f for f in seq["correct"] if f != "<dir>"]
    assert seq["no-crc"] == seq["correct"]
    assert seq["no-fsync"] == [f for f in seq["correct"] if not f.endswith(".seg")]
    assert seq["commit-before-data"] == []
    early = seq["checkpoint-early"]
    at = early.index("wal.ctl")
    assert early[at - 1 : at + 3] == ["00000003.seg", "wal.ctl", "<dir>", "data.db"]
    assert sorted(early) == sorted(seq["correct"])


def test_commit_before_data_keeps_each_commit_in_one_log_block(tmp_path: Path) -> None:
    files, events = run(tmp_path, variant="commit-before-data", page_bytes=1024, n=30)
    first = next(i for i, e in enumerate(events) if e[0] == "begin")
    writes = [e for e in events[first:] if e[0] == "pwrite" and e[1].endswith(".seg")]
    created = [
        e for e in writes if e[2] == 0 and e[3] > 4096
    ]  # a new preallocated segment (its own sync)
    writes = [e for e in writes if e not in created]
    assert len(writes) > 30 and len(created) >= 2
    assert all(e[2] // 4096 == (e[2] + e[3] - 1) // 4096 for e in writes)
    assert (
        judge(tmp_path, files, range(1, 31), variant="commit-before-data", page_bytes=1024).verdict
        == "pass"
    )


# -- crash states made by hand ------------------------------------------------------------------


@pytest.mark.parametrize("variant", ww.VARIANTS)
@pytest.mark.parametrize("group", [1, 3])
def test_intact_run_passes(tmp_path: Path, variant: str, group: int) -> None:
    files, _ = run(tmp_path, variant=variant, group=group)
    r = judge(tmp_path, files, range(1, 13), variant=variant)
    assert r.verdict == "pass" and "the state after txn 12" in r.reasons[0], r


EXPECT = {  # variant -> verdicts seen over the states "each file as of its last fsync"
    "correct": {"pass"},
    "no-crc": {"pass"},
    "no-dir-fsync": {"pass"},
    "commit-before-data": {"pass"},
    "no-fsync": {"pass", "lost-ack"},
    "checkpoint-early": {"pass", "lost-ack"},
}


@pytest.mark.parametrize(
    "variant,group", [(v, 1) for v in ww.VARIANTS] + [("correct", 3), ("no-fsync", 3)]
)
def test_file_level_crash_states(tmp_path: Path, variant: str, group: int) -> None:
    final, events = run(tmp_path, variant=variant, n=8, group=group, checkpoint_every=3)
    for states, want in (
        (cuts(events, final, False), {"pass"}),
        (cuts(events, final, True), EXPECT[variant]),
    ):
        seen: dict[str, list] = {}
        judged = set()
        for files, acked, begun in states:
            key = (tuple(sorted(files.items())), tuple(sorted(acked)), tuple(sorted(begun)))
            if key in judged:  # the same durable files and marks as a state already judged
                continue
            judged.add(key)
            r = judge(tmp_path, files, acked, begun, variant=variant)
            seen.setdefault(r.verdict, []).append((sorted(acked), r.reasons))
        assert set(seen) == want, {k: v[:1] for k, v in seen.items()}
    if variant in ("checkpoint-early", "no-fsync"):
        acked, reasons = seen["lost-ack"][0]
        first_lost = {
            ("checkpoint-early", 1): [1, 2, 3],
            ("no-fsync", 1): [1],
            ("no-fsync", 3): [1],
        }
        want_lost = first_lost[variant, group]
        assert acked == want_lost, (acked, reasons)
        assert (
            reasons[0] == f"acked txn(s) {', '.join(map(str, want_lost))} lost: no txn is visible"
        )


@pytest.mark.parametrize("variant", ww.VARIANTS)
def test_last_segment_truncated_mid_record(tmp_path: Path, variant: str) -> None:
    files, _ = run(tmp_path, variant=variant)
    cut = dict(files)
    name = last_seg(files)
    cut[name] = files[name][: image_at(files, 12, 3) + 1000]  # txn 12 (pages 3, 7) half written
    r = judge(tmp_path, cut, range(1, 12), [12], variant=variant)
    if (
        variant == "commit-before-data"
    ):  # wal.ctl says txn 12 is committed: the database cannot open
        assert (
            r.verdict == "corrupt-data"
            and "cannot open" in r.reasons[0]
            and "through 12" in r.reasons[0]
        ), r
        return
    assert (
        r.verdict == "pass"
        and "the state after txn 11" in r.reasons[0]
        and "absent: 12" in r.reasons[0]
    ), r
    assert "runs past the end" in r.reasons[1], r
    r = judge(tmp_path, cut, range(1, 13), variant=variant)
    assert r.verdict == "lost-ack" and "acked txn(s) 12 lost" in r.reasons[0], r


@pytest.mark.parametrize("variant", ["correct", "no-crc", "no-dir-fsync"])
def test_middle_unit_of_an_unacked_txn_lost(tmp_path: Path, variant: str) -> None:
    """Torn: txn 11's 8 KiB image spans 3 units; its middle one never reached the disk (zeros)
    while its header and its COMMIT did."""
    params = {"variant": variant, "page_bytes": 8192, "n": 11}
    files, _ = run(tmp_path, **params)
    name, img = last_seg(files), image_at(files, 11, 2, **params)
    unit = -(-img // 4096) * 4096
    assert unit + 4096 < img + 8192 < len(files[name])
    torn = dict(files)
    torn[name] = files[name][:unit] + bytes(4096) + files[name][unit + 4096 :]
    r = judge(tmp_path, torn, range(1, 11), [11], **params)
    if variant == "no-crc":
        assert r.verdict == "corrupt-data", r
        lo = unit - img
        assert (
            r.reasons[0]
            == f"page 2 holds txn 11's image except bytes {lo}..{lo + 4095}, which hold zeros"
        )
    else:
        assert r.verdict == "pass" and "fails its CRC" in r.reasons[1], r
        assert judge(tmp_path, torn, range(1, 12), **params).verdict == "lost-ack"


def test_commit_before_data_control_file_ahead_of_the_log(tmp_path: Path) -> None:
    """The write-cache state: the sync's segment write dropped, its wal.ctl write kept."""
    params = {"variant": "commit-before-data", "page_bytes": 1024, "n": 8}
    final, events = run(tmp_path, **params)
    syncs = [e[1] for e in events if e[0] == "sync"]
    checked: list[int] = []
    for before, after in itertools.pairwise(syncs):
        committed = ww.CTL.unpack(after["wal.ctl"])[4]
        if committed == ww.CTL.unpack(before["wal.ctl"])[4]:
            continue  # a checkpoint's syncs
        checked.append(committed)
        ahead = dict(before, **{"wal.ctl": after["wal.ctl"]})
        r = judge(tmp_path, ahead, range(1, committed), [committed], **params)
        assert r.verdict == "corrupt-data", r
        assert f"wal.ctl says txns through {committed} are committed" in r.reasons[0], r
        assert judge(tmp_path, after, range(1, committed), [committed], **params).verdict == "pass"
    assert checked == list(range(2, 9))
    assert judge(tmp_path, final, range(1, 9), **params).verdict == "pass"


def test_checkpoint_early_data_file_reverted(tmp_path: Path) -> None:
    files, _ = run(tmp_path, variant="checkpoint-early")
    reverted = dict(files, **{"data.db": bytes(8 * 4096)})  # the checkpoint's pages never written
    r = judge(tmp_path, reverted, range(1, 13), variant="checkpoint-early")
    assert (
        r.verdict == "lost-ack" and "acked txn 1's page 0 lost: the page holds zeros" in r.reasons
    ), r
    assert "redid txns 11..12" in r.reasons[-1]


def test_correct_redo_repairs_a_half_written_data_file(tmp_path: Path) -> None:
    """A crash in the second checkpoint after half of data.db's pages were written: wal.ctl still
    names the first checkpoint, redo rewrites every page dirtied since."""
    _, events = run(tmp_path)
    data_fsyncs = [i for i, e in enumerate(events) if e[:2] == ("fsync", "data.db")]
    state = next(e[2] for e in reversed(events[: data_fsyncs[2]]) if e[0] in ("begin", "ack"))
    new = next(e[2] for e in events[data_fsyncs[2] :] if e[0] == "fsync" and e[1] == "data.db")
    for keep in (range(4), range(4, 8), range(0, 8, 2)):
        mixed = bytearray(state["data.db"])
        for page in keep:
            mixed[page * 4096 : (page + 1) * 4096] = new[page * 4096 : (page + 1) * 4096]
        r = judge(tmp_path, dict(state, **{"data.db": bytes(mixed)}), range(1, 11))
        assert (
            r.verdict == "pass"
            and "the state after txn 10" in r.reasons[0]
            and "redid txns 6..10" in r.reasons[1]
        )


def recovered(pages: list[bytes]) -> wc.Recovery:
    return wc.Recovery(tuple(pages), wc.Control(0, 0, 0, 0, 1), 0, "test")


def state_after(k: int, lay: wc.Layout) -> list[bytes]:
    pages = [bytes(lay.page_bytes)] * lay.npages
    for t in range(1, k + 1):
        for page in lay.pages(t):
            pages[page] = lay.image(t, page)
    return pages


def test_torn_out_of_order_and_never_begun_states() -> None:
    lay = wc.Layout.of({})
    assert lay.pages(12) == [3, 7]
    half = state_after(11, lay)
    half[3] = lay.image(12, 3)
    r = wc.judge(recovered(half), lay, set(range(1, 12)), {12})
    assert (
        r.verdict == "corrupt-data"
        and r.reasons[0]
        == "txn 12 (begun, not acked) is torn: page 3 has its update but page 7 holds txn 8's image"
    ), r
    assert wc.judge(recovered(half), lay, set(range(1, 13)), set()).verdict == "lost-ack"
    hole = state_after(12, lay)
    hole[2] = lay.image(3, 2)  # txn 11's update of page 2 missing, txn 12 visible
    r = wc.judge(recovered(hole), lay, set(range(1, 11)), {11, 12})
    assert (
        r.verdict == "corrupt-data"
        and "txn 11 (begun, not acked) is absent (page 2 holds txn 3's image) "
        "while later txn 12 is visible"
        in r.reasons[0]
    ), r
    r = wc.judge(recovered(state_after(12, lay)), lay, set(range(1, 11)), {11})
    assert (
        r.verdict == "corrupt-data" and "txn 12's image, but txn 12 never began" in r.reasons[0]
    ), r
    mixed = state_after(5, lay)
    mixed[4] = lay.image(5, 4)[: 4096 - 512] + bytes(512)
    r = wc.judge(recovered(mixed), lay, set(range(1, 5)), {5})
    assert (
        r.verdict == "corrupt-data"
        and r.reasons[0] == "page 4 holds txn 5's image except bytes 3584..4095, which hold zeros"
    ), r
    junk = state_after(2, lay)
    junk[6] = b"\x01" * 4096
    assert wc.judge(recovered(junk), lay, {1, 2}, set()).reasons[0] == "page 6 holds unknown bytes"


def test_missing_or_damaged_database(tmp_path: Path) -> None:
    assert judge(tmp_path, None).verdict == "pass"
    assert judge(tmp_path, None, begun=[1]).verdict == "pass"
    r = judge(tmp_path, None, acked=[1])
    assert r.verdict == "lost-ack" and "missing" in r.reasons[0] and "1 were acked" in r.reasons[0]
    files, _ = run(tmp_path, n=2)
    bad = dict(files, **{"wal.ctl": files["wal.ctl"][:-1] + b"\0"})
    assert judge(tmp_path, bad).verdict == "pass"  # nothing begun: initialisation may be incomplete
    r = judge(tmp_path, bad, [1], [2])
    assert (
        r.verdict == "corrupt-data"
        and r.reasons[0] == "the database cannot open: wal.ctl is damaged (CRC mismatch)"
    )
    short = dict(files, **{"data.db": files["data.db"][:4096]})
    r = judge(tmp_path, short, [1, 2])
    assert r.verdict == "corrupt-data" and "data.db is 4096 bytes" in r.reasons[0]
    no_seg = {k: v for k, v in files.items() if k != "00000001.seg"}
    r = judge(tmp_path, no_seg, [1, 2])
    assert r.verdict == "lost-ack" and "segment 1 is missing" in r.reasons[-1]


def test_registered_through_the_entry_points() -> None:
    from powercut.checker import get as get_checker
    from powercut.workload import get as get_workload

    assert get_workload("wal").main is ww.main and get_checker("wal").check is wc.check
    assert struct.calcsize("<8sQQQQII") == 48 == len(ww.control(1, 2, 3, 4, 5))


def lying(tmp_path: Path, files: Files, acked: Any, **params: Any) -> CheckResult:
    """``judge`` of a lying-disk state (CheckInput.noticed is ``detected`` there)."""
    judge(tmp_path, files, acked, **params)  # writes the files
    return wc.check(
        CheckInput(
            str(tmp_path / "mnt"),
            tuple(map(str, acked)),
            (),
            ww.WORKLOAD.params(params),
            "corrupt-sector@9/w3:s0:b1",
        )
    )


@pytest.mark.parametrize("variant", ["correct", "no-crc"])
def test_under_a_lying_disk_a_crc_drops_and_no_crc_serves(tmp_path: Path, variant: str) -> None:
    """A bit flipped in acked txn 11's record: with the record CRC redo stops there as at the end of
    the log, dropping the acked txn without a word (lost-ack, not detected); without it the damaged
    image is replayed and served (corrupt-data: silent-corruption there).  A wal.ctl failing its CRC
    is refused: detected."""
    params = {"variant": variant, "page_bytes": 8192, "n": 11}
    files, _ = run(tmp_path, **params)
    name, img = last_seg(files), image_at(files, 11, 2, **params)
    rotten = dict(files)
    rotten[name] = (
        files[name][: img + 100] + bytes([files[name][img + 100] ^ 4]) + files[name][img + 101 :]
    )
    r = lying(tmp_path, rotten, range(1, 12), **params)
    if variant == "no-crc":
        assert r.verdict == "corrupt-data" and "page 2 holds" in r.reasons[0], r
    else:
        assert r.verdict == "lost-ack" and "fails its CRC" in " ".join(r.reasons), r
        assert (
            judge(tmp_path, rotten, range(1, 12), **params).verdict == "lost-ack"
        )  # power loss: the same
    bad = dict(files, **{"wal.ctl": files["wal.ctl"][:-1] + b"\0"})
    r = lying(tmp_path, bad, [1], **params)
    assert r.verdict == "detected" and r.reasons[0].startswith("the database cannot open")

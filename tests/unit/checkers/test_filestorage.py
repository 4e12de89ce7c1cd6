"""The filestorage workload and its checker, without a VM: the workload runs in a tmp dir with the
mark hook and os.pwrite/os.fsync recorded; crash states are made by hand on the host (truncation
at every byte, sector subsets of a preallocated file, a status byte flipped back, zeroed data,
dropped transactions) and judged by the checker."""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import filestorage as fsc
from powercut.workloads import filestorage as fsw

TB = 2048
TXN_HDR, DATA_HDR = struct.Struct(">QQcHHH"), struct.Struct(">QQQQHQ")


def run(tmp_path: Path, name: str = "run", **given: object) -> tuple[bytes, list[tuple]]:
    """Run the workload in tmp_path/name; the file's bytes and the events: ("begin"|"ack", tid),
    ("pwrite", offset, bytes), ("fsync", "file"|"dir")."""
    where = tmp_path / name
    where.mkdir()
    events: list[tuple] = []
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, pos: int) -> int:
        events.append(("pwrite", pos, bytes(data)))
        return real_pwrite(fd, data, pos)

    def fsync(fd: int) -> None:  # recorded, not done: durability on the host is not what is tested
        events.append(
            ("fsync", "dir" if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")) else "file")
        )

    with pytest.MonkeyPatch.context() as m:
        m.setattr(fsw, "MARK", lambda kind, tid: events.append((kind, tid)))
        m.setattr(os, "pwrite", pwrite)
        m.setattr(os, "fsync", fsync)
        m.chdir(where)
        assert fsw.WORKLOAD.main(fsw.WORKLOAD.params(given)) == 0
    return (where / "Data.fs").read_bytes(), events


def judge(
    tmp_path: Path, data: bytes, acked: object = (), begun: object = (), **params: object
) -> CheckResult:
    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    (mnt / "Data.fs").unlink(missing_ok=True)  # not truncate + rewrite: ext4 flushes those on close
    (mnt / "Data.fs").write_bytes(data)
    return fsc.check(
        CheckInput(
            str(mnt), tuple(map(str, acked)), tuple(map(str, begun)), fsw.WORKLOAD.params(params)
        )
    )


def pos(tid: int) -> int:
    return 4 + (tid - 1) * TB


def with_status(data: bytes, tid: int, status: bytes) -> bytes:
    return data[: pos(tid) + 16] + status + data[pos(tid) + 17 :]


# -- the workload -------------------------------------------------------------------------------


def test_params_are_typed_checked_and_agree_with_the_checker() -> None:
    p = fsw.WORKLOAD.params({"fsync": "2", "prealloc": "true", "n": "3"})
    assert p["fsync"] == 2 and p["prealloc"] is True and p["n"] == 3 and p["txn_bytes"] == TB
    assert all(fsw.DEFAULTS[k] == v for k, v in fsc.DEFAULTS.items())
    with pytest.raises(ValueError, match="fsync must be 0, 1 or 2"):
        fsw.Params.of({"fsync": 3})
    with pytest.raises(ValueError, match="too small"):
        fsw.Params.of({"txn_bytes": 100})


@pytest.mark.parametrize("prealloc", [False, True])
@pytest.mark.parametrize("policy", [0, 1, 2])
def test_commit_is_vote_then_status_byte_then_the_fsync_policy(
    tmp_path: Path, policy: int, prealloc: bool
) -> None:
    n = 3
    data, events = run(tmp_path, n=n, fsync=policy, prealloc=prealloc)
    first = events.index(("begin", 1))
    setup, commits = events[:first], events[first:]
    assert setup[0] == ("pwrite", 0, b"FS21")
    assert setup[-2:] == [
        ("fsync", "file"),
        ("fsync", "dir"),
    ]  # the file exists durably before any commit
    zeros = b"".join(e[2] for e in setup[1:-2])
    assert zeros == (bytes(len(zeros)) if prealloc else b"") and (len(zeros) > n * TB) == prealloc
    want: list[tuple] = []
    for tid in range(1, n + 1):
        record = data[pos(tid) : pos(tid) + TB]
        want += [("begin", tid), ("pwrite", pos(tid), record[:16] + b"c" + record[17:])]
        want += [("fsync", "file")] * (policy == 2)
        want += [("pwrite", pos(tid) + 16, b" ")]
        want += [("fsync", "file")] * (policy >= 1)
        want += [("ack", tid)]
    assert commits == want


def test_the_file_is_the_documented_layout(tmp_path: Path) -> None:
    data, _ = run(tmp_path)
    n = fsw.DEFAULTS["n"]
    assert len(data) == 4 + n * TB and data[:4] == b"FS21"
    last_rev: dict[int, int] = {}
    for tid in range(1, n + 1):
        tpos = pos(tid)
        t, tl, status, ulen, dlen, elen = TXN_HDR.unpack_from(data, tpos)
        assert (t, tl, status, ulen, elen) == (tid, TB - 8, b" ", len(b"powercut"), 0)
        assert struct.unpack_from(">Q", data, tpos + tl)[0] == tl  # the redundant trailing length
        rpos, nrec = tpos + TXN_HDR.size + ulen + dlen + elen, 0
        while rpos < tpos + tl:
            oid, rtid, prev, tloc, vlen, plen = DATA_HDR.unpack_from(data, rpos)
            assert (rtid, tloc, vlen) == (tid, tpos, 0) and plen > 400
            assert prev == last_rev.get(
                oid, 0
            )  # the back-pointer to this object's previous revision
            last_rev[oid] = rpos
            rpos += DATA_HDR.size + plen
            nrec += 1
        assert rpos == tpos + tl and nrec == 4
    assert any(prev for prev in last_rev.values())
    # the checker's independent rebuild of what was written is byte-identical
    lay = fsc.layout(fsw.DEFAULTS)
    assert data == b"FS21" + b"".join(lay.transaction(t) for t in range(1, n + 1))


def test_prealloc_overwrites_a_zero_filled_file(tmp_path: Path) -> None:
    data, _ = run(tmp_path, prealloc=True)
    plain, _ = run(tmp_path, "plain")
    assert (
        len(data) == 64 * 1024
        and data[: len(plain)] == plain
        and not data[len(plain) :].strip(b"\0")
    )
    rec = fsc.recover(data)
    assert [t.tid for t in rec.txns] == list(range(1, 9))
    assert rec.stop.kind == "end" and "zeros" in rec.stop.why and rec.end == len(plain)
    assert judge(tmp_path, data, range(1, 9)).verdict == "pass"


# -- crash states made by hand ------------------------------------------------------------------


@pytest.mark.parametrize("last_status", [b" ", b"c"])
def test_truncated_at_every_byte_of_the_last_transaction(
    tmp_path: Path, last_status: bytes
) -> None:
    n = 3
    full, _ = run(tmp_path, n=n)
    full = with_status(full, n, last_status)  # finished, or voted only
    for cut in range(pos(n), len(full)):
        data = full[:cut]
        rec = fsc.recover(data)
        assert [t.tid for t in rec.txns] == [1, 2] and rec.end == pos(n), cut
        assert rec.stop.kind == ("end" if cut == pos(n) else "truncated"), (cut, rec.stop)
        ok = judge(tmp_path, data, acked=[1, 2], begun=[n])
        assert ok.verdict == "pass", (cut, ok)
        lost = judge(tmp_path, data, acked=[1, 2, n])
        assert lost.verdict == "lost-ack" and f"txn(s) {n} lost" in lost.reasons[0], (cut, lost)
    whole = judge(tmp_path, full, acked=[1, 2, n])
    assert whole.verdict == ("pass" if last_status == b" " else "lost-ack"), whole


def test_a_committed_transaction_never_begun_is_corrupt(tmp_path: Path) -> None:
    data, _ = run(tmp_path, n=3)
    r = judge(tmp_path, data, acked=[1], begun=[2])
    assert r.verdict == "corrupt-data" and "txn 3" in r.reasons[0] and "never begun" in r.reasons[0]


def test_status_flipped_back_to_c_truncates_there(tmp_path: Path) -> None:
    data, _ = run(tmp_path)
    flipped = with_status(data, 3, b"c")
    rec = fsc.recover(flipped)
    assert (
        [t.tid for t in rec.txns] == [1, 2] and rec.stop.tid == 3 and "status 'c'" in rec.stop.why
    )
    r = judge(tmp_path, flipped, acked=range(1, 9))
    assert (
        r.verdict == "lost-ack"
        and "3, 4, 5, 6, 7, 8 lost" in r.reasons[0]
        and "status 'c'" in r.reasons[0]
    )
    last = with_status(data, 8, b"c")
    assert judge(tmp_path, last, acked=range(1, 8), begun=[8]).verdict == "pass"
    assert judge(tmp_path, last, acked=range(1, 9)).verdict == "lost-ack"


@pytest.mark.parametrize("acked", [True, False])
def test_committed_status_with_zeroed_data_is_corrupt(tmp_path: Path, acked: bool) -> None:
    data, _ = run(tmp_path, n=3)
    lay, tid = fsc.layout(fsw.DEFAULTS), 3
    marks = {"acked": [1, 2, 3]} if acked else {"acked": [1, 2], "begun": [3]}
    body = pos(tid) + TXN_HDR.size + len(b"powercut") + len(b"filestorage txn 3")
    rec1 = lay.record_pos(tid, 1) + DATA_HDR.size
    cases = {  # zeroed range -> what the reason names
        (
            rec1,
            rec1 + lay.sizes(tid)[1],
        ): "data record 1",  # one payload: the structure still adds up
        (body, pos(tid) + TB - 8): "points to a transaction at 0",  # every data record
        (body, pos(tid) + TB): "trailing length 0 disagrees",  # the rest of the record
    }
    for (a, b), named in cases.items():
        zeroed = data[:a] + bytes(b - a) + data[b:]
        r = judge(tmp_path, zeroed, **marks)
        assert r.verdict == "corrupt-data" and "txn 3" in r.reasons[0] and named in r.reasons[0], (
            a,
            b,
            r,
        )
        # the same zeros under status 'c' (voted, the finish not on disk) are an incomplete commit
        r = judge(tmp_path, with_status(zeroed, tid, b"c"), **marks)
        assert r.verdict == ("lost-ack" if acked else "pass"), (a, b, r)


def test_a_dropped_acked_transaction_is_lost_ack(tmp_path: Path) -> None:
    data, _ = run(tmp_path)
    r = judge(tmp_path, data[: pos(5)], acked=range(1, 9))  # appended, never reached the disk
    assert r.verdict == "lost-ack" and "5, 6, 7, 8 lost" in r.reasons[0]
    pre, _ = run(tmp_path, "prealloc", prealloc=True)
    hole = pre[: pos(5)] + bytes(TB) + pre[pos(6) :]  # txn 5's blocks still zeros, 6..8 on disk
    rec = fsc.recover(hole)
    assert len(rec.txns) == 4 and "zeros" in rec.stop.why
    r = judge(tmp_path, hole, acked=range(1, 9))
    assert r.verdict == "lost-ack" and r.reasons[0].startswith("acked txn(s) 5, 6, 7, 8 lost")


def sector_subsets(start: int, end: int) -> list[tuple[int, ...]]:
    """Every subset of the 512-byte sectors in [start, end) that take ``new`` (the rest ``old``)."""
    sectors = list(range(start // 512, -(-end // 512)))
    return [kept for r in range(len(sectors) + 1) for kept in itertools.combinations(sectors, r)]


def mix(old: bytes, new: bytes, kept: tuple[int, ...]) -> bytes:
    out = bytearray(old)
    for s in kept:
        out[s * 512 : (s + 1) * 512] = new[s * 512 : (s + 1) * 512]
    return bytes(out)


@pytest.mark.parametrize("policy", [1, 2])
def test_prealloc_sector_subsets_of_the_last_commit(tmp_path: Path, policy: int) -> None:
    """The last commit's flush window under a write cache: any subset of its sectors durable.  With
    fsync=1 the window holds the whole record *with* status ' ' over zeros, so a header sector
    without the rest is corrupt-data; with fsync=2 the record is durable (status 'c') before the
    status byte is written, and every subset is a clean commit or a clean 'c'."""
    n = 3
    new, _ = run(tmp_path, n=n, prealloc=True)
    old = (
        new[: pos(n)] + bytes(TB) + new[pos(n) + TB :] if policy == 1 else with_status(new, n, b"c")
    )
    hdr_sector = pos(n) // 512
    seen = set()
    for kept in sector_subsets(pos(n), pos(n) + TB):
        state = mix(old, new, kept)
        whole = state[pos(n) : pos(n) + TB] == new[pos(n) : pos(n) + TB]
        r = judge(tmp_path, state, acked=[1, 2], begun=[n])
        if whole:
            want = "pass"
        elif policy == 1 and hdr_sector in kept:
            want = "corrupt-data"
            assert "txn 3" in r.reasons[0] and (
                "status ' '" in r.reasons[0] or "data record" in r.reasons[0]
            ), r
        else:
            want = "pass"  # zeros or status 'c' where txn 3 would be: it is absent
        assert r.verdict == want, (kept, r)
        seen.add(r.verdict)
    assert seen == ({"pass", "corrupt-data"} if policy == 1 else {"pass"})


def test_wrong_seed_or_size_is_not_what_was_written(tmp_path: Path) -> None:
    data, _ = run(tmp_path, n=2)
    assert judge(tmp_path, data, acked=[1, 2]).verdict == "pass"
    r = judge(tmp_path, data, acked=[1, 2], seed=1)
    assert (
        r.verdict == "corrupt-data" and "txn 1" in r.reasons[0] and "data record 0" in r.reasons[0]
    )


def test_file_header_missing_unwritten_or_damaged(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    none = fsc.check(CheckInput(str(empty), ("1",), (), {}))
    assert none.verdict == "lost-ack" and "missing" in none.reasons[0]
    assert fsc.check(CheckInput(str(empty), (), ("1",), {})).verdict == "pass"
    assert judge(tmp_path, b"", begun=[1]).verdict == "pass"
    assert (
        judge(tmp_path, bytes(4096), acked=[1]).verdict == "lost-ack"
    )  # size grew, header never written
    r = judge(tmp_path, b"XS21" + bytes(100), acked=[1])
    assert r.verdict == "corrupt-data" and "file header" in r.reasons[0]


def test_a_junk_header_at_the_end_is_truncated_elsewhere_damaged(tmp_path: Path) -> None:
    data, _ = run(tmp_path, n=2)
    junk = struct.pack(">QQcHHH", 3, 5, b" ", 0, 0, 0)  # length 5 < its own 23-byte header
    rec = fsc.recover(data + junk + b"\xff" * 8)
    assert rec.stop.kind == "truncated" and "invalid header" in rec.stop.why and len(rec.txns) == 2
    assert judge(tmp_path, data + junk + b"\xff" * 8, acked=[1, 2], begun=[3]).verdict == "pass"
    mid = (
        data[: pos(2)] + junk + data[pos(2) + len(junk) :]
    )  # the file still ends in a plausible length
    assert fsc.recover(mid).stop.kind == "damaged"
    assert judge(tmp_path, mid, acked=[1], begun=[2]).verdict == "corrupt-data"


def test_registered_through_the_entry_points() -> None:
    from powercut.checker import get as get_checker
    from powercut.workload import get as get_workload

    assert (
        get_workload("filestorage") is not None
        and get_workload("filestorage").name == "filestorage"
    )
    assert get_checker("filestorage").check is fsc.check

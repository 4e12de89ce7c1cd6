"""The zodb workload and its checker, without a VM: real ZODB runs in a tmp dir with the mark hook;
crash-like states are built from its Data.fs at the file level (truncated inside a transaction,
a status byte set back to 'c', a stale index, flipped bytes in data and in record headers) and
judged by the checker, which runs FileStorage's own recovery on its copy."""

from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import zodb as zc
from powercut.workloads import zodb as zw

N = 8
TXN_HDR = struct.Struct(">8sQcHHH")  # tid, tl, status, ulen, dlen, elen
DATA_HDR = struct.Struct(">8s8sQQHQ")  # oid, tid, prev, tloc, vlen, plen
ALL = range(1, N + 1)


def run(tmp_path: Path, name: str = "run", **given: object) -> tuple[Path, list[tuple[str, int]]]:
    where = tmp_path / name
    where.mkdir()
    events: list[tuple[str, int]] = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(zw, "MARK", lambda kind, i: events.append((kind, i)))
        m.chdir(where)
        assert zw.WORKLOAD.main(zw.WORKLOAD.params(given)) == 0
    return where, events


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, list[tuple[str, int]]]:
    """One run of the workload (defaults): Data.fs, its index as written on close, the marks."""
    where, events = run(tmp_path_factory.mktemp("zodb"))
    return (where / "Data.fs").read_bytes(), (where / "Data.fs.index").read_bytes(), events


def txns(data: bytes) -> list[tuple[int, int, bytes]]:
    """(position, tl, description) of each transaction in a Data.fs."""
    out, pos = [], 4
    while pos < len(data):
        _tid, tl, _status, ulen, dlen, _elen = TXN_HDR.unpack_from(data, pos)
        out.append((pos, tl, data[pos + TXN_HDR.size + ulen : pos + TXN_HDR.size + ulen + dlen]))
        pos += tl + 8
    return out


def txn_of(data: bytes, i: int) -> tuple[int, int]:
    """(start, end) of the transaction that committed key i."""
    pos, tl, descr = next(t for t in txns(data) if t[2] == b"powercut %d" % i)
    return pos, pos + tl + 8


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def judge(
    tmp_path: Path,
    data: bytes,
    acked: object = (),
    begun: object = (),
    index: bytes | None = None,
    **params: object,
) -> CheckResult:
    mnt = tmp_path / "mnt"
    shutil.rmtree(mnt, ignore_errors=True)
    mnt.mkdir()
    (mnt / "Data.fs").write_bytes(data)
    if index is not None:
        (mnt / "Data.fs.index").write_bytes(index)
    return zc.check(
        CheckInput(
            str(mnt), tuple(map(str, acked)), tuple(map(str, begun)), zw.WORKLOAD.params(params)
        )
    )


# -- the workload -------------------------------------------------------------------------------


def test_params_and_values_agree_with_the_checker() -> None:
    assert zw.Params.of(zw.WORKLOAD.params({"n": "3", "value_bytes": "10"})) == zw.Params(
        3, 0, 10, "Data.fs"
    )
    with pytest.raises(ValueError, match="must be >= 0"):
        zw.Params.of({"n": -1})
    assert all(zw.DEFAULTS[k] == v for k, v in zc.DEFAULTS.items())
    assert zw.value(3, 5, 2048) == zc.value(3, 5, 2048) and len(zw.value(0, 1, 2048)) == 2048
    assert zw.value(0, 1, 64) != zw.value(1, 1, 64) and zw.MISSING == zc.MISSING


def test_one_described_transaction_per_commit_between_its_marks(ran: tuple) -> None:
    data, _, events = ran
    assert events == [e for i in ALL for e in (("begin", i), ("ack", i))]
    assert [t[2] for t in txns(data)] == [b"initial database creation", b"powercut setup"] + [
        b"powercut %d" % i for i in ALL
    ]
    first = txn_of(data, 1)
    assert 2048 < first[1] - first[0] < 2048 + 300  # about value_bytes for the first commit


def test_without_zodb_one_line_from_the_workload_and_the_checker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for mod in ("ZODB", "ZODB.FileStorage", "BTrees.IOBTree", "BTrees.check"):
        monkeypatch.setitem(sys.modules, mod, None)  # import fails with ImportError
    monkeypatch.chdir(tmp_path)
    assert zw.WORKLOAD.main(zw.WORKLOAD.params({})) == 1
    assert capsys.readouterr().err == "the zodb workload needs ZODB: pip install 'powercut[apps]'\n"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(
        RuntimeError, match=r"^the zodb workload needs ZODB: pip install 'powercut\[apps\]'$"
    ):
        zc.check(CheckInput(str(tmp_path), ("1",), (), {}))


# -- the checker --------------------------------------------------------------------------------


def test_intact_and_a_stale_or_broken_index_is_no_alarm(tmp_path: Path, ran: tuple) -> None:
    data, index, _ = ran
    r = judge(tmp_path, data, acked=ALL, index=index)
    assert r.verdict == "pass" and r.reasons == (
        "8 acked key(s) intact; 10 transactions, 2 objects, fstest ok",
    )
    end5 = txn_of(data, 5)[1]
    # the index written on close describes the whole file; on this shorter one it would be insane,
    # and one that fits (the file grown again with other bytes) is not trusted either
    assert judge(tmp_path, data[:end5], acked=range(1, 6), index=index).verdict == "pass"
    r = judge(
        tmp_path, data[:end5] + bytes(len(data) - end5), acked=range(1, 6), begun=[6], index=index
    )
    assert r.verdict == "pass" and any("truncated" in line for line in r.reasons[1:]), r
    assert judge(tmp_path, data, acked=ALL, index=b"\0" * 100).verdict == "pass"


@pytest.mark.parametrize("acked", [False, True])
def test_cut_inside_the_last_transaction_is_recovered_to_the_one_before(
    tmp_path: Path, ran: tuple, acked: bool
) -> None:
    data, _, _ = ran
    start, end = txn_of(data, N)
    marks = {"acked": ALL} if acked else {"acked": range(1, N), "begun": [N]}
    for cut in (start + 1, start + TXN_HDR.size, start + 5000, end - 8, end - 1):
        r = judge(tmp_path, data[:cut], **marks)
        if acked:
            assert r.verdict == "lost-ack" and r.reasons[0].startswith(
                "acked key(s) 8 lost: the tree holds 1, 2"
            ), r
        else:
            assert r.verdict == "pass" and "begun, not acked, absent: 8" in r.reasons[0], (cut, r)
        assert any(
            line.startswith("FileStorage: ") and "truncated" in line for line in r.reasons[1:]
        ), r
    voted = (
        data[: start + 16] + b"c" + data[start + 17 :]
    )  # the whole record, its finish not on disk
    assert judge(tmp_path, voted, **marks).verdict == ("lost-ack" if acked else "pass")


def test_a_transaction_never_begun_is_corrupt(tmp_path: Path, ran: tuple) -> None:
    data, _, _ = ran
    r = judge(tmp_path, data, acked=range(1, N))
    assert r.verdict == "corrupt-data" and r.reasons == (
        "transaction 'powercut 8' is committed but was never begun",
    )


def test_a_flipped_byte_in_a_value_is_corrupt_now_or_in_history(tmp_path: Path, ran: tuple) -> None:
    data, _, _ = ran
    start, end = txn_of(data, N)
    at = (
        data.index(zw.value(0, 5, 2048), start, end) + 10
    )  # key 5's value in the last tree revision
    r = judge(tmp_path, flip(data, at), acked=ALL)
    assert r.verdict == "corrupt-data" and r.reasons == (
        "key 5 (acked) now: its value differs from byte 10",
    )
    start3, end3 = txn_of(data, 3)
    at = data.index(zw.value(0, 2, 2048), start3, end3)  # key 2 as transaction 3 wrote the tree
    r = judge(tmp_path, flip(data, at), acked=ALL)
    assert r.verdict == "corrupt-data" and r.reasons == (
        "key 2 (acked) as of txn 3: its value differs from byte 0",
    )


def test_damaged_record_headers_are_corrupt(tmp_path: Path, ran: tuple) -> None:
    data, _, _ = ran
    start, end = txn_of(data, 4)
    _tid, _tl, _status, ulen, dlen, elen = TXN_HDR.unpack_from(data, start)
    rec = start + TXN_HDR.size + ulen + dlen + elen  # its one data record (the tree)
    assert DATA_HDR.unpack_from(data, rec)[3] == start  # tloc points back at the transaction
    cases = {
        rec
        + 24
        + 7: "FileStorage refuses to open Data.fs: CorruptedTransactionError: Data.fs data record "
        f"exceeds transaction record at {rec}",  # tloc
        end - 1: "Data.fs redundant transaction length check failed",  # the trailing length
        rec + DATA_HDR.size + 2: "does not",  # the pickle's first opcodes
    }
    for at, named in cases.items():
        r = judge(tmp_path, flip(data, at), acked=ALL)
        assert r.verdict == "corrupt-data" and named in r.reasons[0], (at, r)
    r = judge(tmp_path, b"FS22" + data[4:], acked=ALL)
    assert r.verdict == "corrupt-data" and "FileStorageFormatError" in r.reasons[0]


def test_no_file_or_no_tree(tmp_path: Path, ran: tuple) -> None:
    data, _, _ = ran
    empty = tmp_path / "empty"
    empty.mkdir()
    assert zc.check(CheckInput(str(empty), ("1",), (), {})).reasons == (
        "Data.fs is missing but key(s) 1 were acked",
    )
    assert zc.check(CheckInput(str(empty), (), ("1",), {})).verdict == "pass"
    setup_end = txn_of(data, 1)[0]
    r = judge(tmp_path, data[:setup_end], begun=[1])
    assert r.verdict == "pass" and "begun, not acked, absent: 1" in r.reasons[0]
    r = judge(tmp_path, data[: txns(data)[1][0]], acked=[1])  # the root, no tree yet
    assert (
        r.verdict == "lost-ack" and r.reasons[0] == "no tree under the root but key(s) 1 were acked"
    )
    assert judge(tmp_path, b"", begun=[1]).reasons[0] == "no root object and nothing acked"


def test_registered_through_the_entry_points() -> None:
    from powercut.checker import get as get_checker
    from powercut.workload import get as get_workload

    assert get_workload("zodb") is zw.WORKLOAD
    assert get_checker("zodb").check is zc.check

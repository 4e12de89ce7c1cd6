"""The sqlite workload and its checker, without a VM: the workload runs for real in a tmp dir with
the mark hook, which copies the database's files at every mark; crash-like states are built from
those copies at the file level (a row deleted with sqlite, a flipped byte, a truncated -wal, a hot
rollback journal caught mid-transaction) and judged by the checker."""

from __future__ import annotations

import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import sqlite as sqc
from powercut.workloads import sqlite as sqw

N = 12
SUFFIXES = ("", "-journal", "-wal", "-shm")
Files = dict[str, bytes]


def files_in(where: Path) -> Files:
    return {
        s: (where / f"app.db{s}").read_bytes() for s in SUFFIXES if (where / f"app.db{s}").exists()
    }


def run(
    tmp_path: Path, name: str = "run", **given: object
) -> tuple[Files, list[tuple], dict[tuple, Files]]:
    """Run the workload in tmp_path/name: the files at the end, the marks and pragmas seen (("begin",
    i, synchronous), ("ack", i)), and a copy of the files at every mark."""
    where = tmp_path / name
    where.mkdir()
    events: list[tuple] = []
    copies: dict[tuple, Files] = {}
    cons: list[sqlite3.Connection] = []
    real_connect = sqw.connect

    def connect(p: sqw.Params) -> sqlite3.Connection:
        cons.append(real_connect(p))
        return cons[-1]

    def mark(kind: str, i: int) -> None:
        sync = cons[0].execute("PRAGMA synchronous").fetchone()[0] if kind == "begin" else None
        events.append((kind, i) + ((sync,) if kind == "begin" else ()))
        copies[(kind, i)] = files_in(where)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(sqw, "MARK", mark)
        m.setattr(sqw, "connect", connect)
        m.chdir(where)
        assert sqw.WORKLOAD.main(sqw.WORKLOAD.params(given)) == 0
    return files_in(where), events, copies


def judge(
    tmp_path: Path, files: Files, acked: object = (), begun: object = (), **params: object
) -> CheckResult:
    mnt = tmp_path / "mnt"
    shutil.rmtree(mnt, ignore_errors=True)
    mnt.mkdir()
    for suffix, data in files.items():
        (mnt / f"app.db{suffix}").write_bytes(data)
    return sqc.check(
        CheckInput(
            str(mnt), tuple(map(str, acked)), tuple(map(str, begun)), sqw.WORKLOAD.params(params)
        )
    )


def edited(tmp_path: Path, files: Files, *sql: tuple[str, tuple]) -> Files:
    """The files after statements run on a copy with sqlite (then checkpointed into one file)."""
    where = tmp_path / "edit"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir()
    for suffix, data in files.items():
        (where / f"app.db{suffix}").write_bytes(data)
    con = sqlite3.connect(where / "app.db", isolation_level=None)
    for stmt, args in sql:
        con.execute(stmt, args)
    con.close()
    return files_in(where)


def wal_commit_ends(wal: bytes) -> list[int]:
    """Byte offsets just after each commit frame of a WAL file."""
    page = struct.unpack(">I", wal[8:12])[0]
    frame, out = 24 + page, []
    for pos in range(32, len(wal) - frame + 1, frame):
        if struct.unpack(">I", wal[pos + 4 : pos + 8])[
            0
        ]:  # "database size after commit": a commit frame
            out.append(pos + frame)
    return out


# -- the workload -------------------------------------------------------------------------------


def test_params_are_checked_and_what_is_written_agrees_with_the_checker() -> None:
    p = sqw.Params.of(
        sqw.WORKLOAD.params({"journal_mode": "delete", "synchronous": "normal", "n": "3"})
    )
    assert (p.journal_mode, p.synchronous, p.n, p.file) == ("DELETE", "NORMAL", 3, "app.db")
    with pytest.raises(ValueError, match="journal_mode must be one of"):
        sqw.Params.of({"journal_mode": "MEMORY"})
    with pytest.raises(ValueError, match="synchronous must be one of"):
        sqw.Params.of({"synchronous": "2"})
    assert all(sqw.DEFAULTS[k] == v for k, v in sqc.DEFAULTS.items())
    for seed, i in [(0, 1), (0, 12), (7, 3)]:
        assert sqw.payload(seed, i) == sqc.payload(seed, i) and sqw.summary(seed, i) == sqc.summary(
            seed, i
        )
    assert sqw.payload(0, 1) != sqw.payload(1, 1)


@pytest.mark.parametrize("sync,level", [("OFF", 0), ("NORMAL", 1), ("FULL", 2), ("EXTRA", 3)])
def test_each_commit_is_marked_and_runs_under_the_synchronous_asked_for(
    tmp_path: Path, sync: str, level: int
) -> None:
    final, events, _ = run(tmp_path, synchronous=sync, n=3)
    assert events == [e for i in (1, 2, 3) for e in (("begin", i, level), ("ack", i))]
    assert set(final) == {""}  # closing the last connection checkpoints and removes the WAL
    assert judge(tmp_path, final, acked=[1, 2, 3]).verdict == "pass"


@pytest.mark.parametrize("mode", ["DELETE", "TRUNCATE", "WAL"])
def test_every_marked_moment_passes_with_its_marks_and_a_dropped_ack_is_seen(
    tmp_path: Path, mode: str
) -> None:
    final, _, copies = run(tmp_path, journal_mode=mode)
    r = judge(tmp_path, final, acked=range(1, N + 1))
    assert r.verdict == "pass" and "txns 1..12" in r.reasons[0]
    if mode == "WAL":
        assert "-wal" in copies[("ack", 1)]  # the commits live in the WAL until the close
    for i in range(1, N + 1):
        assert judge(tmp_path, copies[("ack", i)], acked=range(1, i + 1)).verdict == "pass"
        assert judge(tmp_path, copies[("begin", i)], acked=range(1, i), begun=[i]).verdict == "pass"
        r = judge(tmp_path, copies[("begin", i)], acked=range(1, i + 1))
        assert r.verdict == "lost-ack" and f"acked txn(s) {i} lost" in r.reasons[0], r
    r = judge(tmp_path, copies[("ack", 5)], acked=range(1, 5))  # txn 5 there, never begun
    assert r.verdict == "corrupt-data" and "never begun" in r.reasons[0]


def test_a_deleted_acked_commit_is_lost_and_half_a_commit_is_corrupt(tmp_path: Path) -> None:
    final, _, _ = run(tmp_path, journal_mode="DELETE")
    lost = edited(
        tmp_path,
        final,
        ("DELETE FROM rows WHERE id = 12", ()),
        ("UPDATE summary SET count = ?, last = ?, digest = ?", sqw.summary(0, 11)),
    )
    r = judge(tmp_path, lost, acked=range(1, N + 1))
    assert r.verdict == "lost-ack" and r.reasons == (
        "acked txn(s) 12 lost: the database holds txns 1..11",
    )
    assert judge(tmp_path, lost, acked=range(1, N), begun=[N]).verdict == "pass"
    no_insert = edited(tmp_path, final, ("DELETE FROM rows WHERE id = 12", ()))
    r = judge(tmp_path, no_insert, acked=range(1, N), begun=[N])
    assert r.verdict == "corrupt-data" and "an UPDATE without its INSERT" in r.reasons[0]
    no_update = edited(
        tmp_path, final, ("UPDATE summary SET count = ?, last = ?, digest = ?", sqw.summary(0, 11))
    )
    r = judge(tmp_path, no_update, acked=range(1, N), begun=[N])
    assert (
        r.verdict == "corrupt-data"
        and "row(s) 12 present but the summary stops at txn 11" in r.reasons[0]
    )
    hole = edited(tmp_path, final, ("DELETE FROM rows WHERE id = 4", ()))
    r = judge(tmp_path, hole, acked=range(1, N + 1))
    assert (
        r.verdict == "corrupt-data"
        and "row(s) 4 are missing" in r.reasons[0]
        and "4 lost" in r.reasons[-1]
    )
    changed = edited(tmp_path, final, ("UPDATE rows SET payload = ? WHERE id = 3", (b"x" * 1000,)))
    r = judge(tmp_path, changed, acked=range(1, N + 1))
    assert (
        r.verdict == "corrupt-data"
        and r.reasons[0] == "row 3 (acked): its payload differs from byte 0"
    )


def test_flipped_bytes(tmp_path: Path) -> None:
    final, _, _ = run(tmp_path, journal_mode="DELETE")
    db = final[""]

    def flip(at: int) -> Files:
        return {"": db[:at] + bytes([db[at] ^ 0xFF]) + db[at + 1 :]}

    inside = db.index(sqw.payload(0, 7)) + 100  # in row 7's payload: no structure sees it
    r = judge(tmp_path, flip(inside), acked=range(1, N + 1))
    assert r.verdict == "corrupt-data" and r.reasons == (
        "row 7 (acked): its payload differs from byte 100",
    )
    page = struct.unpack(">H", db[16:18])[0]
    r = judge(
        tmp_path, flip(page + 3), acked=range(1, N + 1)
    )  # page 2's cell count: the b-tree breaks
    assert r.verdict == "corrupt-data" and r.reasons[0].startswith(
        ("PRAGMA integrity_check: ", "app.db: sqlite: ")
    )
    r = judge(tmp_path, flip(0), acked=range(1, N + 1))  # the "SQLite format 3" header
    assert r.verdict == "corrupt-data" and r.reasons == ("app.db: sqlite: file is not a database",)


@pytest.mark.parametrize("sync", ["NORMAL", "FULL"])
def test_a_truncated_wal_loses_a_commit_which_matters_only_if_it_was_acked(
    tmp_path: Path, sync: str
) -> None:
    """The checker judges bytes, not settings: NORMAL and FULL write the same WAL frames and get the
    same verdicts.  They differ in the workload (FULL syncs the WAL at every COMMIT, NORMAL only at
    checkpoints), i.e. in which of these states a recording under a write cache can produce at all."""
    _, events, copies = run(tmp_path, synchronous=sync)
    assert events[0] == ("begin", 1, {"NORMAL": 1, "FULL": 2}[sync])
    k = 9
    state = copies[("ack", k)]
    ends = wal_commit_ends(state["-wal"])
    assert len(ends) == k + 1  # the schema's commit and txns 1..k
    for cut in (
        ends[-2],
        ends[-2] + 100,
        ends[-1] - 1,
    ):  # at a frame boundary, mid-frame, one byte short
        torn = dict(
            state, **{"-wal": state["-wal"][:cut]}
        )  # the -shm as it was: stale, rebuilt on open
        r = judge(tmp_path, torn, acked=range(1, k + 1))
        assert r.verdict == "lost-ack" and r.reasons == (
            f"acked txn(s) {k} lost: the database holds txns 1..{k - 1}",
        )
        r = judge(tmp_path, torn, acked=range(1, k), begun=[k])
        assert r.verdict == "pass" and f"begun, not acked, absent: {k}" in r.reasons[0]
    gone = {
        s: d for s, d in state.items() if s not in ("-wal", "-shm")
    }  # the schema, too, is in the WAL
    r = judge(tmp_path, gone, acked=[1])
    assert r.verdict == "lost-ack" and r.reasons[0].startswith(
        "no schema (tables: []) but txn(s) 1 were acked"
    )
    assert judge(tmp_path, gone, begun=[1]).reasons == ("no schema yet and nothing acked",)
    schema_only = dict(state, **{"-wal": state["-wal"][: ends[0]]})
    r = judge(tmp_path, schema_only, begun=[1])
    assert r.verdict == "pass" and "holds no txn" in r.reasons[0]


def test_a_hot_journal_is_rolled_back_by_the_checker(tmp_path: Path) -> None:
    """A crash mid-transaction in DELETE mode: the database file already holds pages of an unfinished
    transaction (a cache spill), the journal is hot; opening the database rolls it back."""
    final, _, _ = run(tmp_path, journal_mode="DELETE")
    where = tmp_path / "hot"
    where.mkdir()
    (where / "app.db").write_bytes(final[""])
    con = sqlite3.connect(where / "app.db", isolation_level=None)
    con.execute("PRAGMA cache_size = 2")
    con.execute("BEGIN IMMEDIATE")
    con.execute("INSERT INTO rows VALUES (13, ?)", (sqw.payload(0, 13),))
    con.execute("UPDATE summary SET count = ?, last = ?, digest = ?", sqw.summary(0, 13))
    for j in range(100, 140):  # enough dirty pages to spill into the database file
        con.execute("INSERT INTO rows VALUES (?, ?)", (j, b"z" * 3000))
    hot = files_in(where)
    con.execute("ROLLBACK")
    con.close()
    assert set(hot) == {"", "-journal"} and hot[""][: len(final[""])] != final[""]
    r = judge(tmp_path, hot, acked=range(1, N + 1), begun=[N + 1])
    assert r.verdict == "pass" and "txns 1..12" in r.reasons[0] and "absent: 13" in r.reasons[0]
    assert (
        judge(tmp_path, {"": hot[""]}, acked=range(1, N + 1)).verdict == "corrupt-data"
    )  # journal lost


def test_no_database_or_no_schema(tmp_path: Path) -> None:
    assert judge(tmp_path, {}, acked=[1]).reasons == ("app.db is missing but txn(s) 1 were acked",)
    assert judge(tmp_path, {}, begun=[1]).verdict == "pass"
    assert (
        judge(tmp_path, {"": b""}, acked=[1]).verdict == "lost-ack"
    )  # an empty file is an empty database
    assert judge(tmp_path, {"": b""}).verdict == "pass"
    r = judge(tmp_path, {"": b"garbage" * 1000}, begun=[1])
    assert r.verdict == "corrupt-data" and r.reasons == ("app.db: sqlite: file is not a database",)


def test_registered_through_the_entry_points() -> None:
    from powercut.checker import get as get_checker
    from powercut.workload import get as get_workload

    assert get_workload("sqlite") is sqw.WORKLOAD
    assert get_checker("sqlite").check is sqc.check


def test_under_a_lying_disk_sqlite_errors_are_detected(tmp_path: Path) -> None:
    """sqlite's own error or integrity_check: detected under a lying-disk model (it noticed); a flipped
    byte in a row's payload is served as data (corrupt-data: silent-corruption there)."""
    final, _, _ = run(tmp_path, journal_mode="DELETE")
    db = final[""]

    def lying(at: int) -> CheckResult:
        mnt = tmp_path / "mnt"
        shutil.rmtree(mnt, ignore_errors=True)
        mnt.mkdir()
        (mnt / "app.db").write_bytes(db[:at] + bytes([db[at] ^ 0xFF]) + db[at + 1 :])
        return sqc.check(
            CheckInput(
                str(mnt),
                tuple(map(str, range(1, N + 1))),
                (),
                sqw.WORKLOAD.params({}),
                "corrupt-sector@9/w3:s0:b0-7",
            )
        )

    assert lying(db.index(sqw.payload(0, 7)) + 100).verdict == "corrupt-data"
    page = struct.unpack(">H", db[16:18])[0]
    assert lying(page + 3).verdict == "detected"
    assert (
        lying(0).reasons == ("app.db: sqlite: file is not a database",)
        and lying(0).verdict == "detected"
    )

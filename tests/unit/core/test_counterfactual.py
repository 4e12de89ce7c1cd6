"""core/cause/counterfactual.py: which file a write belongs to (the file map), what each rule says was
missing (plan: the file's data and the metadata up to its next sync, the metadata up to a
directory's fsync, the lost writes of the commit in flight), and the what-if state that makes
exactly that durable."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.core.cause import causes
from powercut.core.cause import counterfactual as cf
from powercut.core.cause.rules import registry
from powercut.core.cause.rules.base import Plan, PlanInput
from powercut.core.log.dmlog import FUA
from powercut.core.states.models import space
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from tests.unit.core.test_causes import MNT, T
from tests.unit.logops import build_log


def plan(f, trace, aligned, cut: int, n: int) -> Plan | None:
    """The rule's plan (core/cause/rules/) for a state cut at ``cut`` of a log of ``n`` entries."""
    return registry.plan(f, PlanInput(trace, aligned, MNT, cut, n))


FILES = {"wal": [[100, 8]], "idx": [[200, 8], [300, 8]]}  # 512-byte sectors


def test_each_data_write_belongs_to_the_file_whose_sectors_it_touches(tmp_path: Path) -> None:
    ops = [
        ("m", "mkfs"),
        ("w", 100, 1, 0, 1),
        ("w", 104, 8, 0, 2),
        ("w", 300, 1, 0, 3),
        ("w", 50, 2, 0, 4),
        ("f",),
        ("w", 207, 2, 0, 5),
        ("w", 198, 2, 0, 6),
        ("w", 308, 1, 0, 7),
    ]
    ix = build_log(tmp_path / "log.bin", ops)
    assert cf.owners(ix.entries, FILES, 512) == (
        None,
        "wal",
        "wal",
        "idx",
        None,
        None,
        "idx",
        None,
        None,
    )
    # a log of 4 KiB sectors: sector 25 is bytes 102400.., 512-byte sector 200 of the map
    ix4 = build_log(
        tmp_path / "log4.bin", [("m", "mkfs"), ("w", 25, 1, 0, 1), ("w", 12, 1, 0, 2)], ss=4096
    )
    assert cf.owners(ix4.entries, FILES, 4096) == (None, "idx", "wal")
    assert cf.owners(ix.entries, {}, 512)[1] is None


def traced() -> T:
    """wal and idx changed in commit 1; idx fsynced before ack:1, wal only after it (in commit 2)."""
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).open("idx", "O_WRONLY|O_CREAT", fd=6).fsync_dir()
    t.mark("begin:1").write("wal", fd=5).write("idx", fd=6).fsync("idx", fd=6).mark("ack:1")
    return t.mark("begin:2").fsync("wal", fd=5).mark("ack:2")


def test_a_file_rule_makes_its_file_and_the_metadata_durable_up_to_its_next_sync() -> None:
    t = traced()
    tr = t.trace()
    aligned = sc.align(tr, t.log)
    (f,) = [
        c for c in causes.candidates(tr, t.log, t.log[2][0] + 1, MNT) if c.rule == causes.NO_FSYNC
    ]
    p = plan(f, tr, aligned, 125, 200)
    assert (
        p is not None
        and p.files == frozenset({"wal"})
        and p.sync is not None
        and p.sync.kind == "fsync"
    )
    assert p.until == t.log[-1][0]  # the mark after wal's fsync: ack:2's entry
    assert (
        "/wal's data and the filesystem's metadata as logged up to its next fsync (trace line"
        in p.words()
    )
    # no sync after the ack: to the end of the log
    t2 = (
        T()
        .open("wal", "O_WRONLY|O_CREAT", fd=5)
        .fsync_dir()
        .mark("begin:1")
        .write("wal", fd=5)
        .mark("ack:1")
    )
    (g,) = causes.candidates(t2.trace(), t2.log, t2.log[-1][0] + 1, MNT)
    p2 = plan(g, t2.trace(), sc.align(t2.trace(), t2.log), 115, 300)
    assert (
        p2 is not None
        and (p2.until, p2.sync) == (300, None)
        and "to the end of the recording" in p2.words()
    )


def test_a_directory_rule_makes_only_metadata_durable_and_an_error_nothing() -> None:
    t = (
        T()
        .mark("begin:1")
        .open("sub/new")
        .write("sub/new")
        .fsync("sub/new")
        .mark("ack:1")
        .fsync_dir("sub")
        .mark("x")
    )
    tr = t.trace()
    (f,) = causes.candidates(tr, t.log, t.log[-2][0] + 1, MNT)
    p = plan(f, tr, sc.align(tr, t.log), t.log[-2][0] + 1, 500)
    assert (
        f.rule == causes.NO_DIR_FSYNC
        and p is not None
        and p.files == frozenset()
        and p.until == t.log[-1][0]
    )
    assert "the filesystem's metadata (no file's data)" in p.words()
    e = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    e.fsync("db", ret="-1 EIO (Input/output error)").mark("ack:1")
    g = causes.candidates(e.trace(), e.log, e.log[-1][0] + 1, MNT)[0]
    assert g.rule == causes.ERROR and plan(g, e.trace(), {}, 200, 300) is None


# 0 mkfs | 1 wal, 2 idx, 3 meta, 4 flush | 5 ack:1 | 6 wal, 7 idx, 8 meta | 9 ack:2 | 10 wal, 11 flush
OPS = [
    ("m", "mkfs"),
    ("w", 100, 1, 0, 1),
    ("w", 200, 1, 0, 2),
    ("w", 10, 1, 0, 3),
    ("f",),
    ("m", "ack:1"),
    ("w", 101, 1, 0, 4),
    ("w", 201, 1, 0, 5),
    ("w", 11, 1, 0, 6),
    ("m", "ack:2"),
    ("w", 102, 1, 0, 7),
    ("f",),
]


@pytest.fixture
def sp(tmp_path: Path):
    return space(build_log(tmp_path / "log.bin", OPS))


def test_the_what_if_state_adds_the_files_data_and_metadata_and_nothing_else(sp) -> None:
    owned = cf.owners(sp.entries, FILES, 512)
    failing = sp.make_state("write-cache", 10, [6, 7, 8])  # ack:2 given, its three writes lost
    st = cf.what_if(sp, failing, owned, Plan(causes.NO_FSYNC, "/wal", frozenset({"wal"}), 12))
    assert st is not None and st.id == "what-if@12/a10/d7" and tuple(st.acks) == ("1", "2")
    meta_only = cf.what_if(sp, failing, owned, Plan(causes.NO_DIR_FSYNC, "/", frozenset(), 12))
    assert meta_only is not None and meta_only.dropped == (6, 7, 10)
    everything = cf.what_if(sp, failing, owned, Plan(causes.UNORDERED, "/wal", None, 10))
    assert everything is not None and everything.id == "what-if@10/a10"
    assert (
        cf.what_if(sp, sp.make_state("flush", 10), owned, Plan(causes.UNORDERED, "/wal", None, 10))
        is None
    )
    assert sp.state_from_id(st.id).dropped == st.dropped  # rebuilt where the check runs


def test_unordered_writes_keep_every_write_up_to_their_barrier() -> None:
    t = (
        T()
        .open("wal", "O_WRONLY|O_CREAT")
        .fsync_dir()
        .mark("begin:1")
        .write("wal", 1024)
        .write("wal", 10)
    )
    t.fsync("wal").mark("ack:1")
    tr = t.trace()
    cut = t.log[-1][0]  # before ack:1: the commit in flight
    f = next(c for c in causes.candidates(tr, t.log, cut, MNT) if c.rule == causes.UNORDERED)
    p = plan(f, tr, sc.align(tr, t.log), cut - 5, 400)
    assert p is not None and p.files is None and p.until == t.log[-1][0] and p.sync is f.barrier
    assert p.words().startswith("every write of the commit in flight up to its fsync (trace line")


def test_the_kill_point_is_the_first_mark_from_the_cut_where_everything_is_synced() -> None:
    # commit 1 leaves wal unsynced; commit 2 syncs it
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).fsync_dir()
    t.mark("begin:1").write("wal", fd=5).mark("ack:1").mark("begin:2").fsync("wal", fd=5).mark(
        "ack:2"
    )
    tr = t.trace()
    aligned = sc.align(tr, t.log)
    k = cf.kill_point(
        tr, aligned, MNT, t.log[2][0], 500, written_back=False
    )  # cut at ack:1: wal unsynced
    assert (
        k is not None and k.at is not None and k.at.text == "ack:2" and k.until == t.log[-1][0] + 1
    )
    assert k.words().startswith("every write durable at mark ack:2 (trace line")
    early = cf.kill_point(
        tr, aligned, MNT, t.log[1][0], 500, written_back=False
    )  # at begin:1: nothing unsynced
    assert early is not None and early.at is not None and early.at.text == "begin:1"


def test_without_such_a_mark_the_kill_is_at_the_end_only_if_nothing_changed_after_the_last_mark() -> (
    None
):
    # LOG is written and never synced: no mark has everything synced
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).open("LOG", "O_WRONLY|O_CREAT", fd=7).fsync_dir()
    t.mark("begin:1").write("wal", fd=5).fsync("wal", fd=5).write("LOG", fd=7).mark("ack:1")
    cut = t.log[2][0]
    end = cf.kill_point(t.trace(), sc.align(t.trace(), t.log), MNT, cut, 500, written_back=True)
    assert (
        end is not None
        and (end.at, end.until) == (None, 500)
        and "at the end of the recording" in end.words()
    )
    assert (
        cf.kill_point(t.trace(), sc.align(t.trace(), t.log), MNT, cut, 500, written_back=False)
        is None
    )
    # the program removed its store after its last mark: the end is no kill's state
    t.call('unlink("wal") = 0')
    assert (
        cf.kill_point(t.trace(), sc.align(t.trace(), t.log), MNT, cut, 500, written_back=True)
        is None
    )
    # a new name in a directory is unsynced until the directory's fsync
    d = (
        T()
        .fsync_dir()
        .mark("begin:1")
        .open("new")
        .write("new")
        .fsync("new")
        .mark("ack:1")
        .fsync_dir()
        .mark("x")
    )
    dk = cf.kill_point(
        d.trace(), sc.align(d.trace(), d.log), MNT, d.log[2][0], 500, written_back=False
    )
    assert dk is not None and dk.at is not None and dk.at.text == "x"


def test_the_kill_equivalent_state_keeps_every_write_to_its_point_and_the_cuts_keys(
    tmp_path: Path,
) -> None:
    ops = [
        ("m", "mkfs"),
        ("m", "begin:1"),
        ("w", 100, 1, 0, 1),
        ("m", "ack:1"),
        ("m", "begin:2"),
        ("w", 104, 1, 0, 2),
        ("f",),
        ("m", "ack:2"),
    ]
    sp = space(build_log(tmp_path / "log.bin", ops))
    failing = sp.make_state("flush", 4)
    st = cf.kill_equivalent(sp, failing, cf.Kill(4, 8, None))
    assert (
        st.id == "what-if@8/a4" and st.dropped == () and st.acks == failing.acks and "2" in st.begun
    )


def test_a_plans_file_no_entry_writes_is_unlogged(sp) -> None:
    """A file of the plan the file map ties no write to (truncated or removed before the end: a
    mapping's stores dropped that way never reached the log) is unlogged; a mapped one, metadata-only
    and whole-commit plans never are."""
    owned = cf.owners(sp.entries, {"idx": [[200, 16]]}, 512)  # no blocks of wal in the map
    assert cf.unlogged(owned, Plan(causes.NO_MSYNC, "/wal", frozenset({"wal"}), 12)) == frozenset(
        {"wal"}
    )
    assert cf.unlogged(owned, Plan(causes.NO_FSYNC, "/idx", frozenset({"idx"}), 12)) == frozenset()
    assert (
        cf.unlogged(
            cf.owners(sp.entries, FILES, 512), Plan(causes.NO_MSYNC, "/wal", frozenset({"wal"}), 6)
        )
        == frozenset()
    )  # a write of it anywhere in the log is one
    assert cf.unlogged(owned, Plan(causes.NO_DIR_FSYNC, "/", frozenset(), 12)) == frozenset()
    assert cf.unlogged(owned, Plan(causes.UNORDERED, "/wal", None, 10)) == frozenset()


def test_a_log_ending_with_the_teardown_mark_has_the_page_cache_written_back(
    tmp_path: Path,
) -> None:
    ended = build_log(
        tmp_path / "a.bin", [("m", "mkfs"), ("w", 100, 1, 0, 1), ("m", "dm-log-writes-end")]
    )
    cut = build_log(tmp_path / "b.bin", [("m", "mkfs"), ("w", 100, 1, 0, 1)])
    assert (
        cf.written_back(ended.entries)
        and not cf.written_back(cut.entries)
        and not cf.written_back(())
    )


def test_a_blamed_write_is_owned_as_blame_found_it_at_the_cut(sp) -> None:
    owned = cf.owners(
        sp.entries, {"idx": [[200, 16]]}, 512
    )  # wal deleted before the end: not mapped
    n = len(owned)
    blamed = cf.as_blamed(
        owned,
        [
            {"entry": 1, "what": "data block", "path": "/wal"},
            {"entry": 3, "what": "journal", "path": ""},
            {"entry": 2, "what": "data block", "path": "/a, /b"},  # several: kept
            {"entry": n + 5, "what": "data block", "path": "/x"},  # no such entry
            {"entry": "7", "what": "data block", "path": "/x"},
        ],
    )  # not an entry
    assert blamed[1] == "wal" and blamed[3] is None and blamed[2] == owned[2]
    assert blamed[:1] + blamed[4:] == owned[:1] + owned[4:] and len(blamed) == n
    assert cf.unlogged(blamed, Plan(causes.NO_FSYNC, "/wal", frozenset({"wal"}), 12)) == frozenset()


def test_no_kill_point_after_a_failed_write_or_sync_and_none_at_the_harness_own_marks() -> None:
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).fsync_dir().mark("begin:1").write("wal", fd=5)
    t.fsync("wal", fd=5, ret="-1 EIO (Input/output error)").fsync("wal", fd=5).mark("ack:1").mark(
        "x"
    )
    tr = t.trace()
    assert cf.kill_point(tr, sc.align(tr, t.log), MNT, t.log[2][0], 500, written_back=True) is None
    o = T().open("wal", "O_WRONLY|O_CREAT", fd=5).fsync_dir().mark("begin:1").write("wal", fd=5)
    o.mark("powercut-order-begin").fsync("wal", fd=5).mark("powercut-order-end").mark("ack:1")
    k = cf.kill_point(
        o.trace(), sc.align(o.trace(), o.log), MNT, o.log[2][0], 500, written_back=False
    )
    assert k is not None and k.at is not None and k.at.text == "ack:1"


def test_files_are_named_as_at_the_cut_renames_after_it_undone() -> None:
    # tmp is renamed to CURRENT, then the directory db to old, both after the cut at begin:2
    t = (
        T()
        .open("tmp", "O_WRONLY|O_CREAT", fd=5)
        .write("tmp", fd=5)
        .mark("begin:1")
        .mark("ack:1")
        .mark("begin:2")
    )
    t.call(f'rename("{MNT}/tmp", "{MNT}/CURRENT") = 0').mark("ack:2")
    t.call(f'rename("{MNT}/db", "{MNT}/old") = 0').call(
        f'rename("/elsewhere/a", "{MNT}/b") = 0'
    ).mark("x")
    tr = t.trace()
    aligned = sc.align(tr, t.log)
    owned = ("CURRENT", None, "old/MANIFEST", "b", "wal", "oldish")
    at_cut = cf.as_of(owned, tr, aligned, MNT, t.log[3][0] + 1)  # cut just after begin:2
    assert at_cut == ("tmp", None, "db/MANIFEST", "b", "wal", "oldish")
    assert cf.as_of(owned, tr, aligned, MNT, t.log[-1][0] + 1) == owned  # no rename after the cut


def test_files_removed_or_truncated_after_the_cut_are_named() -> None:
    t = T().open("a", "O_WRONLY|O_CREAT", fd=5).call(f'unlink("{MNT}/gone-before") = 0')
    t.open("CURRENT", "O_WRONLY|O_CREAT", fd=7).open("log", "O_WRONLY|O_CREAT", fd=7)
    t.open("idx", "O_WRONLY|O_CREAT", fd=8).write("idx", fd=8).mark(
        "begin:1"
    )  # idx unsynced at the cut
    t.call(f'unlink("{MNT}/x") = 0').call(
        f'unlink("{MNT}/failed") = -1 ENOENT (No such file or directory)'
    )
    t.call(f'rename("{MNT}/tmp2", "{MNT}/NEW") = 0').open(
        "new", "O_WRONLY|O_CREAT|O_TRUNC", fd=7
    )  # no file
    t.call(f'rename("{MNT}/tmp", "{MNT}/CURRENT") = 0').open("log", "O_WRONLY|O_TRUNC", fd=7)
    t.call(f'truncate("{MNT}/idx", 0) = 0').call('unlink("/tmp/outside") = 0').mark("ack:1")
    tr = t.trace()
    removed = cf.removed_after(tr, sc.align(tr, t.log), MNT, t.log[1][0] + 1)  # cut after begin:1
    assert set(removed) == {"x", "CURRENT", "log", "idx"}
    assert cf.removed_after(tr, sc.align(tr, t.log), MNT, t.log[-1][0] + 1) == {}
    # a plan bounded by a sync keeps the files removed after that sync (still there in its what-if) whose
    # data the log may hold: unsynced at the cut (idx), or changed after it up to the sync
    aligned = sc.align(tr, t.log)
    sync = next(
        o for o in tr.ops if o.kind == sc.OPEN and o.path.endswith("/log") and "O_TRUNC" in o.flags
    )
    cut = t.log[1][0] + 1

    def mixed(p: Plan) -> frozenset[str]:
        return cf.mixed_in(p, removed, tr, aligned, MNT, cut)

    assert cf.changed_after(tr, aligned, MNT, cut, sync.seq) == {"idx", "log", "new"}
    assert mixed(Plan(causes.NO_FSYNC, "/a", frozenset({"a"}), 40, sync)) == frozenset({"idx"})
    assert mixed(Plan(causes.NO_FSYNC, "/idx", frozenset({"idx"}), 40, sync)) == frozenset()
    # to the end of the log: every name changed after the cut is changed in the what-if too
    assert mixed(Plan(causes.NO_FSYNC, "/a", frozenset({"a"}), 40)) == frozenset(
        {"x", "CURRENT", "log", "idx", "tmp", "tmp2"}
    )
    assert mixed(Plan(causes.UNORDERED, "/", None, 40, sync)) == frozenset()  # every lost write


def test_a_plan_to_the_end_is_bounded_by_the_commit_of_its_files_last_write(sp) -> None:
    """A file never synced: its plan ends at the first barrier after its last logged write, not at
    the end of the recording (the program's later renames stay out); unchanged when the file owns
    no entry, when a sync bounds it, or when its last write's commit is the end of the log."""
    owned = cf.owners(sp.entries, FILES, 512)
    n = len(owned)
    early = tuple(None if i in (6, 10) else o for i, o in enumerate(owned))  # wal's last write: #1
    wal = Plan(causes.NO_FSYNC, "/wal", frozenset({"wal"}), n)
    bounded = cf.to_commit(wal, early, sp, 1)
    assert bounded.until == 5 and bounded.commit == 4  # the flush at #4, included
    assert bounded.words().endswith(
        "as logged up to the commit that made its last write durable (log entry #4)"
    )
    assert cf.to_commit(wal, early, sp, 8).until == 8  # never before the cut
    assert (
        cf.to_commit(wal, owned, sp, 1) is wal
    )  # its last write (#10) is committed by the last entry
    nobody = Plan(causes.NO_FSYNC, "/x", frozenset({"x"}), n)
    assert cf.to_commit(nobody, early, sp, 1) is nobody
    synced = Plan(causes.NO_FSYNC, "/wal", frozenset({"wal"}), 6, Op(0, 1, 1, 1.0, sc.FSYNC))
    assert cf.to_commit(synced, early, sp, 1) is synced


def test_the_commit_is_the_fua_write_after_the_flush_that_precedes_it(tmp_path: Path) -> None:
    """A journal commit is logged as a flush, then the commit record written FUA: the plan keeps
    the record (without it the transaction that maps the file's write is not committed)."""
    ops = [("m", "mkfs"), ("w", 100, 1, 0, 1), ("w", 10, 1, 0, 2), ("f",), ("w", 12, 1, FUA, 3)]
    ops += [("m", "ack:1"), ("w", 11, 1, 0, 4), ("f",)]
    sp = space(build_log(tmp_path / "log.bin", ops))
    owned = cf.owners(sp.entries, FILES, 512)
    p = cf.to_commit(Plan(causes.NO_FSYNC, "/wal", frozenset({"wal"}), len(owned)), owned, sp, 1)
    assert p.commit == 4 and p.until == 5

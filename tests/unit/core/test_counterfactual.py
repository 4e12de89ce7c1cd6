"""core/counterfactual.py: which file a write belongs to (the file map), what each rule says was
missing (plan: the file's data and the metadata up to its next sync, the metadata up to a
directory's fsync, the lost writes of the commit in flight), and the what-if state that makes
exactly that durable."""
from __future__ import annotations

from pathlib import Path

import pytest

from powercut.core import causerules as cr
from powercut.core import causes
from powercut.core import counterfactual as cf
from powercut.core import syscalls as sc
from powercut.core.models import space
from tests.unit.core.test_causes import MNT, T
from tests.unit.logops import build_log

FILES = {"wal": [[100, 8]], "idx": [[200, 8], [300, 8]]}   # 512-byte sectors


def test_each_data_write_belongs_to_the_file_whose_sectors_it_touches(tmp_path: Path) -> None:
    ops = [("m", "mkfs"), ("w", 100, 1, 0, 1), ("w", 104, 8, 0, 2), ("w", 300, 1, 0, 3), ("w", 50, 2, 0, 4),
           ("f",), ("w", 207, 2, 0, 5), ("w", 198, 2, 0, 6), ("w", 308, 1, 0, 7)]
    ix = build_log(tmp_path / "log.bin", ops)
    assert cf.owners(ix.entries, FILES, 512) == (None, "wal", "wal", "idx", None, None, "idx", None, None)
    # a log of 4 KiB sectors: sector 25 is bytes 102400.., 512-byte sector 200 of the map
    ix4 = build_log(tmp_path / "log4.bin", [("m", "mkfs"), ("w", 25, 1, 0, 1), ("w", 12, 1, 0, 2)], ss=4096)
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
    (f,) = [c for c in causes.candidates(tr, t.log, t.log[2][0] + 1, MNT) if c.rule == cr.NO_FSYNC]
    p = cf.plan(f, tr, aligned, MNT, cut=125, n=200)
    assert p is not None and p.files == frozenset({"wal"}) and p.sync is not None and p.sync.kind == "fsync"
    assert p.until == t.log[-1][0]                 # the mark after wal's fsync: ack:2's entry
    assert "/wal's data and the filesystem's metadata as logged up to its next fsync (trace line" in p.words()
    # no sync after the ack: to the end of the log
    t2 = T().open("wal", "O_WRONLY|O_CREAT", fd=5).fsync_dir().mark("begin:1").write("wal", fd=5).mark("ack:1")
    (g,) = causes.candidates(t2.trace(), t2.log, t2.log[-1][0] + 1, MNT)
    p2 = cf.plan(g, t2.trace(), sc.align(t2.trace(), t2.log), MNT, cut=115, n=300)
    assert p2 is not None and (p2.until, p2.sync) == (300, None) and "to the end of the recording" in p2.words()


def test_a_directory_rule_makes_only_metadata_durable_and_an_error_nothing() -> None:
    t = T().mark("begin:1").open("sub/new").write("sub/new").fsync("sub/new").mark("ack:1").fsync_dir("sub").mark("x")
    tr = t.trace()
    (f,) = causes.candidates(tr, t.log, t.log[-2][0] + 1, MNT)
    p = cf.plan(f, tr, sc.align(tr, t.log), MNT, cut=t.log[-2][0] + 1, n=500)
    assert f.rule == cr.NO_DIR_FSYNC and p is not None and p.files == frozenset() and p.until == t.log[-1][0]
    assert "the filesystem's metadata (no file's data)" in p.words()
    e = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    e.fsync("db", ret="-1 EIO (Input/output error)").mark("ack:1")
    g = causes.candidates(e.trace(), e.log, e.log[-1][0] + 1, MNT)[0]
    assert g.rule == cr.ERROR and cf.plan(g, e.trace(), {}, MNT, cut=200, n=300) is None


# 0 mkfs | 1 wal, 2 idx, 3 meta, 4 flush | 5 ack:1 | 6 wal, 7 idx, 8 meta | 9 ack:2 | 10 wal, 11 flush
OPS = [("m", "mkfs"), ("w", 100, 1, 0, 1), ("w", 200, 1, 0, 2), ("w", 10, 1, 0, 3), ("f",), ("m", "ack:1"),
       ("w", 101, 1, 0, 4), ("w", 201, 1, 0, 5), ("w", 11, 1, 0, 6), ("m", "ack:2"), ("w", 102, 1, 0, 7), ("f",)]


@pytest.fixture
def sp(tmp_path: Path):
    return space(build_log(tmp_path / "log.bin", OPS))


def test_the_what_if_state_adds_the_files_data_and_metadata_and_nothing_else(sp) -> None:
    owned = cf.owners(sp.entries, FILES, 512)
    failing = sp.make_state("write-cache", 10, [6, 7, 8])    # ack:2 given, its three writes lost
    st = cf.what_if(sp, failing, owned, cf.Plan(cr.NO_FSYNC, "/wal", frozenset({"wal"}), 12))
    assert st is not None and st.id == "what-if@12/a10/d7" and tuple(st.acks) == ("1", "2")
    meta_only = cf.what_if(sp, failing, owned, cf.Plan(cr.NO_DIR_FSYNC, "/", frozenset(), 12))
    assert meta_only is not None and meta_only.dropped == (6, 7, 10)
    everything = cf.what_if(sp, failing, owned, cf.Plan(cr.UNORDERED, "/wal", None, 10))
    assert everything is not None and everything.id == "what-if@10/a10"
    assert cf.what_if(sp, sp.make_state("flush", 10), owned, cf.Plan(cr.UNORDERED, "/wal", None, 10)) is None
    assert sp.state_from_id(st.id).dropped == st.dropped   # rebuilt where the check runs


def test_unordered_writes_keep_every_write_up_to_their_barrier() -> None:
    t = T().open("wal", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("wal", 1024).write("wal", 10)
    t.fsync("wal").mark("ack:1")
    tr = t.trace()
    cut = t.log[-1][0]                                  # before ack:1: the commit in flight
    f = next(c for c in causes.candidates(tr, t.log, cut, MNT) if c.rule == cr.UNORDERED)
    p = cf.plan(f, tr, sc.align(tr, t.log), MNT, cut=cut - 5, n=400)
    assert p is not None and p.files is None and p.until == t.log[-1][0] and p.sync is f.barrier
    assert p.words().startswith("every write of the commit in flight up to its fsync (trace line")

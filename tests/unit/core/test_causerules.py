"""core/causerules.py and core/tracefacts.py: each cause rule's facts on small synthetic traces --
which file, which calls, which ack, how long a sync ran -- with no sentence involved."""
import pytest

from powercut.core import causerules as cr
from powercut.core import syscalls as sc
from powercut.core import tracefacts as tf
from powercut.core.syscalls import Op
from tests.unit.core.test_causes import MNT, T, kv, race


def at_ack(t: T, key: str) -> tf.AtAck:
    """The facts at the ack of ``key``: the trace walked up to it, as core/causes.commits does."""
    trace = t.trace()
    pending = tf.Pending(MNT)
    splits, seqs = tf.split_syncs(trace)
    since, begun = -1, {}
    for o in trace.ops:
        if o.kind != sc.MARK:
            pending.step(o)
        elif o.text.startswith("begin:"):
            begun[o.text[6:]] = o.seq
        elif o.text == f"ack:{key}":
            return tf.AtAck(o, begun.get(key, since), pending, tf.running_syncs(splits, seqs, o))
        elif o.text.startswith("ack:"):
            since = o.seq
    raise AssertionError(f"no ack:{key}")


def test_the_rules_keep_their_order_and_ids():
    assert tuple(r.id for r in cr.ACK_RULES) == cr.RANK[:6]
    assert tuple(r.id for r in cr.CUT_RULES) == (cr.REPLACED, cr.UNORDERED, cr.TORN)
    assert set(cr.RULES) == {*cr.RANK, cr.TORN, cr.LIED, cr.UNSEEN, cr.BEYOND}


def test_acked_after_error_finds_the_failed_call():
    t = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    t.fsync("db", ret="-1 EIO (Input/output error)").fsync("db").mark("ack:1")
    t.mark("begin:2").write("a", fd=9).mark("ack:2")
    (f,) = cr.acked_after_error(at_ack(t, "1"))
    assert isinstance(f, cr.FailedCall) and f.subject == "/db" and f.ack.text == "ack:1"
    assert (f.failed.kind, f.failed.error) == (sc.FSYNC, "EIO") and f.evidence == (f.failed, f.ack)
    # a later commit that does not touch the file: not its failure
    assert cr.acked_after_error(at_ack(t, "2")) == []


def test_rename_before_fsync_finds_the_rename_and_the_unsynced_source():
    (f,) = cr.rename_before_fsync(at_ack(kv(durable=False, n=1), "0"))
    assert isinstance(f, cr.RenameBeforeSync)
    assert (f.subject, f.source, f.rename.kind) == ("/store.json", "/store.json.tmp", sc.RENAME)
    assert [(o.kind, o.nbytes) for o in f.unsynced] == [(sc.WRITE, 210)]
    assert f.evidence[-2:] == (f.rename, f.ack)
    assert cr.rename_before_fsync(at_ack(kv(durable=True, n=1), "0")) == []


def test_sync_still_running_finds_the_sync_and_how_long_it_ran():
    at = at_ack(race(ack_inside=True), "1")
    (f,) = cr.sync_still_running(at)
    assert isinstance(f, cr.SyncStillRunning) and f.subject == "/log" and f.ack.text == "ack:1"
    assert f.sync.kind == sc.FSYNC and f.other_thread and f.duration == pytest.approx(0.02)
    assert f.evidence[-2:] == (f.ack, f.sync)
    assert cr.no_fsync(at) == []                     # the same file is not also "never synced"
    assert cr.sync_still_running(at_ack(race(ack_inside=False), "1")) == []


def test_no_fsync_keeps_every_change_and_shows_the_last_four():
    t = T().open("wal", "O_WRONLY|O_CREAT|O_DIRECT").fsync_dir().mark("begin:1")
    for n in range(1, 7):
        t.write("wal", n)
    t.call(f"sync_file_range(5<{MNT}/wal>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0").mark("ack:1")
    (f,) = cr.no_fsync(at_ack(t, "1"))
    assert isinstance(f, cr.Unsynced) and f.subject == "/wal" and f.direct and f.range_synced
    assert [o.nbytes for o in f.changes] == [1, 2, 3, 4, 5, 6] and [o.nbytes for o in f.shown] == [3, 4, 5, 6]
    assert f.evidence == (*f.shown, f.ack)


def test_no_fsync_not_for_o_sync_writes_nor_for_what_sync_made_durable():
    t = T().open("f", "O_WRONLY|O_CREAT|O_SYNC").fsync_dir().mark("begin:1").write("f").mark("ack:1")
    assert cr.no_fsync(at_ack(t, "1")) == []
    t = T().open("f", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("f").call("sync() = 0").mark("ack:1")
    assert cr.broken(at_ack(t, "1")) == []


def test_no_dir_fsync_finds_the_directory_and_its_name_changes():
    t = T().mark("begin:1").open("sub/new").write("sub/new").fsync("sub/new").mark("ack:1")
    (f,) = cr.no_dir_fsync(at_ack(t, "1"))
    assert isinstance(f, cr.UnsyncedNames) and f.subject == "/sub"
    assert [o.kind for o in f.changes] == [sc.OPEN] and f.changes[0].path == f"{MNT}/sub/new"


def test_broken_lists_the_strongest_rule_first():
    t = T().open("db", "O_WRONLY|O_CREAT").open("tmp", fd=6).fsync_dir().mark("begin:1")
    t.call(f'write(5<{MNT}/db>, "x"..., 100) = -1 ENOSPC (No space left on device)')
    t.write("tmp", 300, fd=6).call('rename("tmp", "cur") = 0').open("sub/new", fd=7).mark("ack:1")
    assert [(f.rule, f.subject) for f in cr.broken(at_ack(t, "1"))] == [
        (cr.ERROR, "/db"), (cr.RENAME, "/cur"), (cr.NO_FSYNC, "/cur"), (cr.NO_DIR_FSYNC, "/"),
        (cr.NO_DIR_FSYNC, "/sub")]


def op(seq: int, kind: str, path: str = "", error: str = "") -> Op:
    return Op(seq, seq + 1, 1, 1.0 + seq, kind, path, error=error, text=f"{kind} #{seq}")


def test_unordered_writes_finds_the_writes_one_barrier_covered():
    w1, w2, bad, sync = op(1, sc.WRITE, "/m/a"), op(2, sc.WRITE, "/m/b"), op(3, sc.WRITE, "/m/a", "EIO"), op(4, sc.FSYNC, "/m/a")
    f = cr.unordered_writes(tf.InFlight((w1, w2, bad, sync), None, "/m"))
    assert isinstance(f, cr.UnorderedWrites) and f.subject == "/a, /b" and f.ack is None
    assert f.writes == (w1, w2) and f.barrier == sync and f.evidence == (w1, w2, sync)
    assert cr.unordered_writes(tf.InFlight((w1, sync, w2, op(5, sc.SYNC)), None, "/m")) is None


def test_unchecked_tear_needs_a_tear_and_names_the_writes():
    w, ack = op(1, sc.WRITE, "/m/seg"), op(7, sc.MARK)
    assert cr.unchecked_tear(tf.InFlight((w,), ack, "/m"), ()) is None
    f = cr.unchecked_tear(tf.InFlight((w,), ack, "/m"), (17, 18))
    assert isinstance(f, cr.Tear) and (f.subject, f.writes, f.entries, f.ack) == ("/seg", (w,), (17, 18), ack)
    empty = cr.unchecked_tear(tf.InFlight((), None, "/m"), (5,))
    assert isinstance(empty, cr.Tear) and empty.subject == "its writes" and empty.evidence == ()


def test_in_flight_is_the_commit_between_the_marks_around_the_cut():
    t = T().open("wal", "O_WRONLY|O_CREAT").mark("begin:1").write("wal").write("wal").fsync("wal").mark("ack:1")
    trace = t.trace()
    w = tf.in_flight(trace, sc.align(trace, t.log), t.log[-1][0], MNT)
    assert [o.kind for o in w.calls] == [sc.WRITE, sc.WRITE, sc.FSYNC] and w.ack is not None and w.ack.text == "ack:1"
    assert tf.in_flight(trace, sc.align(trace, t.log), t.log[-1][0] + 1, MNT).ack is None


def test_running_syncs_are_those_that_began_before_the_ack_and_returned_after():
    trace = race(ack_inside=True).trace()
    splits, seqs = tf.split_syncs(trace)
    acks = [o for o in trace.ops if o.kind == sc.MARK and o.text.startswith("ack:")]
    assert [set(tf.running_syncs(splits, seqs, a)) for a in acks] == [{f"{MNT}/log"}, {f"{MNT}/log"}]
    sync = Op(5, 6, 1, 1.5, sc.SYNC, start=1.0)
    assert set(tf.running_syncs([sync], [5], Op(4, 5, 2, 1.2, sc.MARK))) == {""}
    assert tf.running_syncs([sync], [5], Op(4, 5, 2, 1.0, sc.MARK)) == {}          # began with the ack: not before
    late = Op(5, 6, 1, 100.0, sc.FSYNC, "/f", start=1.0)
    assert tf.running_syncs([late], [5], Op(4, 5, 2, 1.2, sc.MARK)) == {}          # a minute later: not looked at


def test_pending_follows_renames_and_directory_fsyncs():
    p = tf.Pending("/m")
    p.step(Op(0, 1, 1, 1.0, sc.OPEN, "/m/a.tmp", flags=("O_WRONLY", "O_CREAT")))
    p.step(Op(1, 2, 1, 1.0, sc.WRITE, "/m/a.tmp", nbytes=5))
    p.step(Op(2, 3, 1, 1.0, sc.RENAME, "/m/a.tmp", "/m/a"))
    assert list(p.dirty) == ["/m/a"] and p.opened["/m/a"] == ("O_WRONLY", "O_CREAT") and len(p.renames) == 1
    p.step(Op(3, 4, 1, 1.0, sc.FSYNC, "/m"))
    assert p.renames == [] and p.entries == {} and list(p.dirty) == ["/m/a"]
    p.step(Op(4, 5, 1, 1.0, sc.WRITE, "/elsewhere/x", nbytes=1))
    assert list(p.dirty) == ["/m/a"]
    assert tf.rel("/m/a", "/m") == "/a" and tf.rel("/m", "/m") == "/" and tf.rel("/x", "/m") == "/x"

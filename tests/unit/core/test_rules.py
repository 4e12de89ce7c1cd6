"""core/causerules.py and core/trace/tracefacts.py: each cause rule's facts on small synthetic traces --
which file, which calls, which ack, how long a sync ran -- with no sentence involved."""

import dataclasses
import sys

import pytest

from powercut.core.cause import causes
from powercut.core.cause.rules import (
    acked_after_error,
    no_dir_fsync,
    no_fsync,
    outcomes,
    registry,
    rename_before_fsync,
    sync_still_running,
    unchecked_tear,
    unordered_writes,
)
from powercut.core.trace import syscalls as sc
from powercut.core.trace import tracefacts as tf
from powercut.core.trace.syscalls import Op
from tests.unit.core.test_causes import MNT, T, kv, race


def at_ack(t: T, key: str) -> tf.AtAck:
    """The facts at the ack of ``key``: the trace walked up to it, as core/cause/causes.commits does."""
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
    assert tuple(r.id for r in registry.ACK_RULES) == registry.RANK[:6]
    assert tuple(r.id for r in registry.CUT_RULES) == (
        causes.REPLACED,
        causes.POINTER,
        causes.UNORDERED,
        causes.TORN,
    )
    assert causes.RULES == (
        *registry.RANK,
        causes.RECOVERY,
        causes.LIED,
        causes.UNSEEN,
        causes.BEYOND,
    )


def test_every_rule_has_every_part_and_is_registered_once():
    for r in registry.REGISTERED:
        assert r.id and r.where in ("ack", "cut") and r.advice.strip(), r.id
        assert r.finding.rule == r.id and registry.rule(r.id) is r
        assert all(callable(part) for part in (r.check, r.sentence, r.plan, r.note)), r.id
        mod = sys.modules[r.check.__module__]
        assert mod.__doc__ and r.id in mod.__doc__ and mod.RULE is r, (
            r.id
        )  # one module, its doc names it
    assert len({r.finding for r in registry.REGISTERED}) == len(registry.REGISTERED)


def test_a_finding_no_entry_declares_is_an_error_not_an_empty_sentence():
    @dataclasses.dataclass(frozen=True)
    class Stranger:
        rule = "stranger"

    with pytest.raises(KeyError):
        registry.sentence(Stranger())
    with pytest.raises(TypeError, match="no broken rule"):
        registry.plan(outcomes.NoAckBefore(), None)  # type: ignore[arg-type]


def test_acked_after_error_finds_the_failed_call():
    t = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    t.fsync("db", ret="-1 EIO (Input/output error)").fsync("db").mark("ack:1")
    t.mark("begin:2").write("a", fd=9).mark("ack:2")
    (f,) = acked_after_error.check(at_ack(t, "1"))
    assert (
        isinstance(f, acked_after_error.FailedCall) and f.subject == "/db" and f.ack.text == "ack:1"
    )
    assert (f.failed.kind, f.failed.error) == (sc.FSYNC, "EIO") and f.evidence == (f.failed, f.ack)
    # a later commit that does not touch the file: not its failure
    assert acked_after_error.check(at_ack(t, "2")) == []


def test_rename_before_fsync_finds_the_rename_and_the_unsynced_source():
    (f,) = rename_before_fsync.check(at_ack(kv(durable=False, n=1), "0"))
    assert isinstance(f, rename_before_fsync.RenameBeforeSync)
    assert (f.subject, f.source, f.rename.kind) == ("/store.json", "/store.json.tmp", sc.RENAME)
    assert [(o.kind, o.nbytes) for o in f.unsynced] == [(sc.WRITE, 210)]
    assert f.evidence[-2:] == (f.rename, f.ack)
    assert rename_before_fsync.check(at_ack(kv(durable=True, n=1), "0")) == []


def test_sync_still_running_finds_the_sync_and_how_long_it_ran():
    at = at_ack(race(ack_inside=True), "1")
    (f,) = sync_still_running.check(at)
    assert (
        isinstance(f, sync_still_running.SyncStillRunning)
        and f.subject == "/log"
        and f.ack.text == "ack:1"
    )
    assert f.sync.kind == sc.FSYNC and f.other_thread and f.duration == pytest.approx(0.02)
    assert f.evidence[-2:] == (f.ack, f.sync)
    assert no_fsync.check(at) == []  # the same file is not also "never synced"
    assert sync_still_running.check(at_ack(race(ack_inside=False), "1")) == []


def test_no_fsync_keeps_every_change_and_shows_the_last_four():
    t = T().open("wal", "O_WRONLY|O_CREAT|O_DIRECT").fsync_dir().mark("begin:1")
    for n in range(1, 7):
        t.write("wal", n)
    t.call(f"sync_file_range(5<{MNT}/wal>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0").mark("ack:1")
    (f,) = no_fsync.check(at_ack(t, "1"))
    assert isinstance(f, no_fsync.Unsynced) and f.subject == "/wal" and f.direct and f.range_synced
    assert [o.nbytes for o in f.changes] == [1, 2, 3, 4, 5, 6] and [o.nbytes for o in f.shown] == [
        3,
        4,
        5,
        6,
    ]
    assert f.evidence == (*f.shown, f.ack)


def test_no_fsync_not_for_o_sync_writes_nor_for_what_sync_made_durable():
    t = (
        T()
        .open("f", "O_WRONLY|O_CREAT|O_SYNC")
        .fsync_dir()
        .mark("begin:1")
        .write("f")
        .mark("ack:1")
    )
    assert no_fsync.check(at_ack(t, "1")) == []
    t = (
        T()
        .open("f", "O_WRONLY|O_CREAT")
        .fsync_dir()
        .mark("begin:1")
        .write("f")
        .call("sync() = 0")
        .mark("ack:1")
    )
    assert registry.broken(at_ack(t, "1")) == []


def test_no_dir_fsync_finds_the_directory_and_its_name_changes():
    t = T().mark("begin:1").open("sub/new").write("sub/new").fsync("sub/new").mark("ack:1")
    (f,) = no_dir_fsync.check(at_ack(t, "1"))
    assert isinstance(f, no_dir_fsync.UnsyncedNames) and f.subject == "/sub"
    assert [o.kind for o in f.changes] == [sc.OPEN] and f.changes[0].path == f"{MNT}/sub/new"


def test_broken_lists_the_strongest_rule_first():
    t = T().open("db", "O_WRONLY|O_CREAT").open("tmp", fd=6).fsync_dir().mark("begin:1")
    t.call(f'write(5<{MNT}/db>, "x"..., 100) = -1 ENOSPC (No space left on device)')
    t.write("tmp", 300, fd=6).call('rename("tmp", "cur") = 0').open("sub/new", fd=7).mark("ack:1")
    assert [(f.rule, f.subject) for f in registry.broken(at_ack(t, "1"))] == [
        (causes.ERROR, "/db"),
        (causes.RENAME, "/cur"),
        (causes.NO_FSYNC, "/cur"),
        (causes.NO_DIR_FSYNC, "/"),
        (causes.NO_DIR_FSYNC, "/sub"),
    ]


def op(seq: int, kind: str, path: str = "", error: str = "") -> Op:
    return Op(seq, seq + 1, 1, 1.0 + seq, kind, path, error=error, text=f"{kind} #{seq}")


def test_unordered_writes_finds_the_writes_one_barrier_covered():
    w1, w2, bad, sync = (
        op(1, sc.WRITE, "/m/a"),
        op(2, sc.WRITE, "/m/b"),
        op(3, sc.WRITE, "/m/a", "EIO"),
        op(4, sc.FSYNC, "/m/a"),
    )
    f = unordered_writes.check(tf.InFlight((w1, w2, bad, sync), None, "/m"))
    assert (
        isinstance(f, unordered_writes.UnorderedWrites) and f.subject == "/a, /b" and f.ack is None
    )
    assert f.writes == (w1, w2) and f.barrier == sync and f.evidence == (w1, w2, sync)
    assert unordered_writes.check(tf.InFlight((w1, sync, w2, op(5, sc.SYNC)), None, "/m")) is None


def test_unchecked_tear_needs_a_tear_and_names_the_writes():
    w, ack = op(1, sc.WRITE, "/m/seg"), op(7, sc.MARK)
    assert unchecked_tear.check(tf.InFlight((w,), ack, "/m"), ()) is None
    f = unchecked_tear.check(tf.InFlight((w,), ack, "/m"), (17, 18))
    assert isinstance(f, unchecked_tear.Tear) and (f.subject, f.writes, f.entries, f.ack) == (
        "/seg",
        (w,),
        (17, 18),
        ack,
    )
    empty = unchecked_tear.check(tf.InFlight((), None, "/m"), (5,))
    assert (
        isinstance(empty, unchecked_tear.Tear)
        and empty.subject == "its writes"
        and empty.evidence == ()
    )


def test_in_flight_is_the_commit_between_the_marks_around_the_cut():
    t = (
        T()
        .open("wal", "O_WRONLY|O_CREAT")
        .mark("begin:1")
        .write("wal")
        .write("wal")
        .fsync("wal")
        .mark("ack:1")
    )
    trace = t.trace()
    w = tf.in_flight(trace, sc.align(trace, t.log), t.log[-1][0], MNT)
    assert (
        [o.kind for o in w.calls] == [sc.WRITE, sc.WRITE, sc.FSYNC]
        and w.ack is not None
        and w.ack.text == "ack:1"
    )
    assert tf.in_flight(trace, sc.align(trace, t.log), t.log[-1][0] + 1, MNT).ack is None


def test_running_syncs_are_those_that_began_before_the_ack_and_returned_after():
    trace = race(ack_inside=True).trace()
    splits, seqs = tf.split_syncs(trace)
    acks = [o for o in trace.ops if o.kind == sc.MARK and o.text.startswith("ack:")]
    assert [set(tf.running_syncs(splits, seqs, a)) for a in acks] == [
        {f"{MNT}/log"},
        {f"{MNT}/log"},
    ]
    sync = Op(5, 6, 1, 1.5, sc.SYNC, start=1.0)
    assert set(tf.running_syncs([sync], [5], Op(4, 5, 2, 1.2, sc.MARK))) == {""}
    assert (
        tf.running_syncs([sync], [5], Op(4, 5, 2, 1.0, sc.MARK)) == {}
    )  # began with the ack: not before
    late = Op(5, 6, 1, 100.0, sc.FSYNC, "/f", start=1.0)
    assert (
        tf.running_syncs([late], [5], Op(4, 5, 2, 1.2, sc.MARK)) == {}
    )  # a minute later: not looked at


def test_pending_follows_renames_and_directory_fsyncs():
    p = tf.Pending("/m")
    p.step(Op(0, 1, 1, 1.0, sc.OPEN, "/m/a.tmp", flags=("O_WRONLY", "O_CREAT")))
    p.step(Op(1, 2, 1, 1.0, sc.WRITE, "/m/a.tmp", nbytes=5))
    p.step(Op(2, 3, 1, 1.0, sc.RENAME, "/m/a.tmp", "/m/a"))
    assert (
        list(p.dirty) == ["/m/a"]
        and p.opened["/m/a"] == ("O_WRONLY", "O_CREAT")
        and len(p.renames) == 1
    )
    p.step(Op(3, 4, 1, 1.0, sc.FSYNC, "/m"))
    assert p.renames == [] and p.entries == {} and list(p.dirty) == ["/m/a"]
    p.step(Op(4, 5, 1, 1.0, sc.WRITE, "/elsewhere/x", nbytes=1))
    assert list(p.dirty) == ["/m/a"]
    assert tf.rel("/m/a", "/m") == "/a" and tf.rel("/m", "/m") == "/" and tf.rel("/x", "/m") == "/x"


def test_pointer_before_data_needs_the_pointers_bytes_to_name_an_unsynced_file():
    from powercut.core.cause.rules import pointer_before_data as pbd
    from tests.unit.core.test_causes import pointer

    def window(t: T) -> tf.InFlight:
        trace = t.trace()
        return tf.in_flight(trace, sc.align(trace, t.log), t.log[-1][0], MNT)

    f = pbd.check(window(pointer()))
    assert isinstance(f, pbd.PointerBeforeData) and (f.subject, f.pointer) == (
        "/MANIFEST-000002",
        "/CURRENT",
    )
    assert (
        f.publish.kind == sc.RENAME
        and f.names.kind == sc.WRITE
        and [o.nbytes for o in f.writes] == [120]
    )
    assert f.evidence[-2:] == (f.names, f.publish)
    assert pbd.check(window(pointer(synced=True))) is None  # the MANIFEST synced first: the fix
    assert pbd.check(window(pointer(named=False))) is None  # CURRENT names another file
    # a pointer whose bytes name no file (a file number): recovery reading it, then the file, names it
    t = pointer(named=False)
    trace = t.trace()
    followed = tf.in_flight(
        trace, sc.align(trace, t.log), t.log[-1][0], MNT, ("LOG", "CURRENT", "MANIFEST-000002")
    )
    g = pbd.check(followed)
    assert isinstance(g, pbd.PointerBeforeData) and (g.subject, g.pointer, g.names) == (
        "/MANIFEST-000002",
        "/CURRENT",
        None,
    )
    assert g.evidence[-1] == g.publish and len(g.evidence) == 2
    assert (
        "while recovery goes from it to /MANIFEST-000002 (it read /CURRENT, then /MANIFEST-000002), whose own"
        in registry.sentence(g)
    )
    assert (
        pbd.check(
            tf.in_flight(
                trace, sc.align(trace, t.log), t.log[-1][0], MNT, ("MANIFEST-000002", "CURRENT")
            )
        )
        is None
    )  # read before the pointer: not led to
    # the pointer's own path in strace's fd<path> is no name it holds
    t = (
        T()
        .open("a", "O_WRONLY|O_CREAT", fd=5)
        .open("a.idx", "O_WRONLY|O_CREAT", fd=6)
        .mark("begin:1")
    )
    t.write("a", fd=5).call(f'write(6<{MNT}/a.idx>, "zzz", 3) = 3').fsync("a.idx", fd=6).mark(
        "ack:1"
    )
    assert pbd.check(window(t)) is None
    # a sync() before the pointer's made everything durable
    t = T().mark("begin:1").open("M", fd=5).write("M", fd=5).call("sync() = 0")
    t.open("P", fd=6).call(f'write(6<{MNT}/P>, "name M here", 11) = 11').fsync("P", fd=6).mark(
        "ack:1"
    )
    assert pbd.check(window(t)) is None


def test_written_by_counts_each_files_bytes_to_the_end_of_the_commit_the_cut_fell_in():
    t = (
        T()
        .open("a", "O_WRONLY|O_CREAT", fd=5)
        .mark("begin:1")
        .write("a", 100, fd=5)
        .write("a", 20, fd=5)
    )
    t.open("b.tmp", "O_WRONLY|O_CREAT|O_TRUNC", fd=6).write("b.tmp", 7, fd=6).call(
        'rename("b.tmp", "b") = 0'
    )
    t.call(f"ftruncate(5<{MNT}/a>, 50) = 0").mark("ack:1").mark("begin:2").write(
        "a", 1000, fd=5
    ).mark("ack:2")
    trace = t.trace()
    aligned = sc.align(trace, t.log)
    assert tf.written_by(trace, aligned, t.log[2][0], MNT) == {
        "a": 50,
        "b": 7,
    }  # the cut in commit 1
    assert tf.written_by(trace, aligned, t.log[-1][0], MNT) == {"a": 1050, "b": 7}

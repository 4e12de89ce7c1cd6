"""core/trace/latetrace.py: a late flush is cleared only where the trace proves that no write of the
program's was in flight while it ran: the program had nothing unsynced and changed nothing from
before the flush was issued until after it completed, or the flush is a data sync's own (the k-th
flush between two marks, the k-th of as many sync calls with data, nothing else unsynced)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from powercut.core.log.dmlog import FLUSH, FUA, MARK, ORDER_BEGIN, ORDER_END, Entry
from powercut.core.log.markorder import late_writes
from powercut.core.trace import syscalls as sc
from powercut.core.trace.latetrace import quiet
from tests.unit.core.test_syscalls import mark_line

MNT = "/run/powercut/mnt"


def log(*spec: str) -> list[Entry]:
    """'w' plain write, 'F' barrier flush, 'U' FUA write, 'o' an ordering flush, any other word a mark."""
    out: list[Entry] = []
    for i, s in enumerate(spec):
        flags, n, mark = {
            "w": (0, 8, None),
            "F": (FLUSH, 0, None),
            "U": (FUA, 8, None),
            "o": (FLUSH, 0, None),
        }.get(s, (MARK, 0, s))
        out.append(Entry(i, flags, 100 + i * 8 if n else 0, n, 0, mark))
    return out


def ordered(mark: str) -> list[str]:
    return [ORDER_BEGIN, "o", ORDER_END, mark]


# begin:0's commit; a late flush F (a write logged after it) between ack:0 and begin:1
LOG = log(
    "mkfs",
    "w",
    *ordered("begin:0"),
    "w",
    "F",
    *ordered("ack:0"),
    "w",
    "F",
    "w",
    *ordered("begin:1"),
    "w",
    "F",
    *ordered("ack:1"),
)
LATE = 13  # the flush between ack:0 and begin:1


def trace(*middle: str, before: tuple[str, ...] = (), tail: tuple[str, ...] = ()) -> sc.Trace:
    """The program's calls: ``before`` inside begin:0's commit, ``middle`` between ack:0 and begin:1."""
    t = iter(x / 10 for x in range(1, 1000))
    marks = lambda m: [mark_line(9, next(t), x) for x in (ORDER_BEGIN, ORDER_END, m)]  # noqa: E731
    lines = [
        *marks("begin:0"),
        *(f"9 {next(t):.6f} {c}" for c in before),
        *marks("ack:0"),
        *(f"9 {next(t):.6f} {c}" for c in middle),
        *marks("begin:1"),
        *(f"9 {next(t):.6f} {c}" for c in tail),
        *marks("ack:1"),
    ]
    return sc.parse("\n".join(lines), "/")


OPEN = f'openat(AT_FDCWD<{MNT}>, "wal", O_RDWR|O_CREAT, 0666) = 3<{MNT}/wal>'
WRITE = f'write(3<{MNT}/wal>, "x", 1) = 1'
FSYNC = f"fsync(3<{MNT}/wal>) = 0"
DIRSYNC = (f'openat(AT_FDCWD</>, "{MNT}", O_RDONLY) = 4<{MNT}>', f"fsync(4<{MNT}>) = 0")
COMMIT = (OPEN, WRITE, FSYNC, *DIRSYNC)


def test_the_hand_log_has_its_late_flushes():
    late = late_writes(LOG)
    assert LATE in late.flushes and not late.unordered


def test_a_quiet_program_clears_the_flush():
    got = quiet(LOG, late_writes(LOG), trace(before=COMMIT), MNT)
    assert LATE in got.cleared and LATE not in got.kept


def test_a_write_while_the_flush_may_run_keeps_it():
    got = quiet(LOG, late_writes(LOG), trace(WRITE, before=COMMIT), MNT)
    assert LATE in got.kept and LATE not in got.cleared


def test_unsynced_data_before_the_window_keeps_it():
    got = quiet(LOG, late_writes(LOG), trace(before=(OPEN, WRITE, *DIRSYNC)), MNT)
    assert LATE in got.kept


def test_an_unsynced_new_name_keeps_it():
    """The file is fsynced but its directory is not: a name change is pending."""
    got = quiet(
        LOG,
        late_writes(LOG),
        trace(
            before=(
                f'openat(AT_FDCWD<{MNT}>, "new", O_RDWR|O_CREAT, 0666) = 4<{MNT}/new>',
                f"fsync(4<{MNT}/new>) = 0",
            )
        ),
        MNT,
    )
    assert LATE in got.kept


def test_a_sync_of_clean_files_changes_nothing():
    got = quiet(LOG, late_writes(LOG), trace(FSYNC, before=COMMIT), MNT)
    assert LATE in got.cleared


def test_calls_outside_the_filesystem_do_not_count():
    got = quiet(
        LOG, late_writes(LOG), trace('write(1</dev/pts/0>, "hi", 2) = 2', before=COMMIT), MNT
    )
    assert LATE in got.cleared


def test_no_trace_a_blind_trace_or_unordered_marks_clear_nothing():
    late = late_writes(LOG)
    assert quiet(LOG, late, None, MNT).cleared == frozenset()
    blind = trace(before=COMMIT)
    blind.blind = ["stores through a shared mapping"]
    assert quiet(LOG, late, blind, MNT).cleared == frozenset()
    bare = log("mkfs", "w", "begin:0", "w", "F", "ack:0", "F", "w", "begin:1", "w", "F", "ack:1")
    assert late_writes(bare).unordered
    assert quiet(bare, late_writes(bare), trace(before=COMMIT), MNT).cleared == frozenset()


def test_interleaved_order_marks_clear_nothing():
    nested = log(
        "mkfs",
        "w",
        ORDER_BEGIN,
        *ordered("begin:0"),
        "o",
        ORDER_END,
        "w",
        "F",
        *ordered("ack:0"),
        "w",
        "F",
        "w",
        *ordered("begin:1"),
        "w",
        "F",
        *ordered("ack:1"),
    )
    late = late_writes(nested)
    assert late and quiet(nested, late, trace(before=COMMIT), MNT).cleared == frozenset()


def test_a_flush_after_a_mark_sent_another_way_is_kept():
    """Before the program's first mark (set-up after mkfs) nothing bounds when the flush was issued."""
    got = quiet(LOG, late_writes(LOG), trace(before=COMMIT), MNT)
    assert all(f in got.kept for f in (*late_writes(LOG).flushes, *late_writes(LOG).fuas) if f < 2)


def test_a_change_still_running_when_the_next_mark_returned_keeps_it():
    lines = trace(before=COMMIT)
    t_begin1 = next(o for o in lines.ops if o.kind == sc.MARK and o.text == "begin:1").time
    late_write = sc.Op(
        len(lines.ops), 0, 9, t_begin1 + 0.5, sc.WRITE, f"{MNT}/wal", nbytes=1, start=t_begin1 - 0.5
    )
    lines.ops.append(late_write)
    assert LATE in quiet(LOG, late_writes(LOG), lines, MNT).kept


DATA_CHANGES = (
    WRITE,
    f"ftruncate(3<{MNT}/wal>, 0) = 0",
    f"fallocate(3<{MNT}/wal>, 0, 0, 4096) = 0",
)
NAME_CHANGES = (
    f'rename("{MNT}/wal", "{MNT}/wal2") = 0',
    f'unlink("{MNT}/wal") = 0',
    f'mkdir("{MNT}/d", 0777) = 0',
)


@settings(max_examples=200, deadline=None)
@given(where=st.integers(0, 3), call=st.sampled_from([*DATA_CHANGES, *NAME_CHANGES]))
def test_a_change_keeps_the_flush_unless_a_sync_of_its_own_flushed_it(
    where: int, call: str
) -> None:
    """Wherever one change call lands between ack:0's begin mark and begin:1's, the flush is kept --
    except a data change that the next fsync makes durable: the window's one flush is that fsync's
    own, in flight only after the data's writes completed.  The same trace without it clears it."""
    calls = [FSYNC, FSYNC, FSYNC]
    calls.insert(where, call)
    got = quiet(LOG, late_writes(LOG), trace(*calls, before=COMMIT), MNT)
    assert LATE in (got.cleared if call in DATA_CHANGES and where < 3 else got.kept)
    assert (
        LATE in quiet(LOG, late_writes(LOG), trace(FSYNC, FSYNC, FSYNC, before=COMMIT), MNT).cleared
    )


# -- the flush of a sync call: the k-th flush between two marks is the k-th data sync's own ----------
OTHER = (
    f'openat(AT_FDCWD<{MNT}>, "idx", O_RDWR|O_CREAT, 0666) = 5<{MNT}/idx>',
    f'write(5<{MNT}/idx>, "y", 1) = 1',
)


def test_the_flush_of_an_fsync_with_data_is_cleared_though_the_program_wrote_around_it():
    """write, fsync, write (the next commit's data, logged after the flush): the one flush between
    the marks is the fsync's own; the later write was issued after the fsync returned."""
    assert (
        LATE in quiet(LOG, late_writes(LOG), trace(WRITE, FSYNC, WRITE, before=COMMIT), MNT).cleared
    )


def test_more_data_syncs_than_flushes_keeps_it():
    """Two fsyncs with data each need their own flush; the log has one: which one it is is not told."""
    assert (
        LATE
        in quiet(LOG, late_writes(LOG), trace(WRITE, FSYNC, WRITE, FSYNC, before=COMMIT), MNT).kept
    )


def test_an_fsync_without_data_does_not_bound_the_flush():
    assert LATE in quiet(LOG, late_writes(LOG), trace(FSYNC, WRITE, before=COMMIT), MNT).kept


def test_another_file_unsynced_while_the_flush_ran_keeps_it():
    """Background writeback may have had the other file's data in flight while the fsync's flush ran."""
    assert (
        LATE in quiet(LOG, late_writes(LOG), trace(*OTHER, WRITE, FSYNC, before=COMMIT), MNT).kept
    )


def test_writes_started_without_a_flush_keep_it():
    rng = f"sync_file_range(3<{MNT}/wal>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0"
    assert LATE in quiet(LOG, late_writes(LOG), trace(WRITE, FSYNC, rng, before=COMMIT), MNT).kept


def test_another_thread_changing_files_keeps_it():
    lines = trace(WRITE, FSYNC, WRITE, before=COMMIT)
    sync = next(o for o in lines.ops if o.kind == sc.FSYNC and o.time > 0.9)
    lines.ops.insert(
        lines.ops.index(sync), sc.Op(0, 0, 8, sync.time - 0.01, sc.WRITE, f"{MNT}/wal", nbytes=1)
    )
    lines.ops[:] = [sc.dataclasses.replace(o, seq=i) for i, o in enumerate(lines.ops)]
    assert LATE in quiet(LOG, late_writes(LOG), lines, MNT).kept


def test_a_change_running_at_the_next_mark_keeps_even_a_syncs_own_flush():
    """A write by another process (a shell workload's marker is one) that began before begin:1's
    ioctl returned and ended after it is not among the calls between the marks: nothing is cleared."""
    lines = trace(WRITE, FSYNC, WRITE, before=COMMIT)
    assert LATE in quiet(LOG, late_writes(LOG), lines, MNT).cleared
    t_begin1 = next(o for o in lines.ops if o.kind == sc.MARK and o.text == "begin:1").time
    lines.ops.append(
        sc.Op(
            len(lines.ops),
            0,
            8,
            t_begin1 + 0.5,
            sc.WRITE,
            f"{MNT}/wal",
            nbytes=1,
            start=t_begin1 - 0.5,
        )
    )
    assert LATE in quiet(LOG, late_writes(LOG), lines, MNT).kept


def _two_syncs_log() -> list[Entry]:
    """ack:0's window with two flushes, each with a write after it, then begin:1; the second flush
    is one bio with its FUA write (the FLUSH|FUA entry, then the FUA data at the same sector)."""
    base = log(
        "mkfs",
        "w",
        *ordered("begin:0"),
        "w",
        "F",
        *ordered("ack:0"),
        "w",
        "F",
        "w",
        "F",
        "U",
        "w",
        *ordered("begin:1"),
        "w",
        "F",
        *ordered("ack:1"),
    )
    second = 15
    assert base[second].flags == FLUSH and base[second + 1].flags == FUA
    base[second] = Entry(second, FLUSH | FUA, base[second + 1].sector, 0, 0, None)
    return base


def test_each_flush_is_its_own_syncs_and_the_fua_of_its_bio_goes_with_it():
    two = _two_syncs_log()
    late = late_writes(two)
    assert {13, 15} <= set(late.flushes) and 16 in late.fuas
    got = quiet(two, late, trace(WRITE, FSYNC, WRITE, FSYNC, WRITE, before=COMMIT), MNT)
    assert {13, 15, 16} <= got.cleared


def test_data_changed_before_the_previous_sync_returned_keeps_them():
    """idx written before wal's fsync: that fsync's flush may have made idx's data durable too, so
    idx's fsync need not send a flush of its own -- the two flushes are not told apart."""
    two = _two_syncs_log()
    idx_sync = f"fsync(5<{MNT}/idx>) = 0"
    got = quiet(
        two, late_writes(two), trace(*OTHER, WRITE, FSYNC, idx_sync, WRITE, before=COMMIT), MNT
    )
    assert not {13, 15, 16} & got.cleared


def test_cleared_flushes_leave_the_note_and_are_counted():
    late = late_writes(LOG)
    everything = frozenset((*late.flushes, *late.fuas))
    assert not late_writes(LOG, cleared=everything)
    two = LOG + log(*["x"] * len(LOG), "w", "F", "w", *ordered("begin:2"))[len(LOG) :]
    assert len(late_writes(two).flushes) == 2
    some = late_writes(two, cleared=frozenset({LATE}))
    assert LATE not in some.flushes and len(some.flushes) == 1 and some.cleared == 1
    assert "1 more cleared by the system-call trace" in some.note()


def test_a_space_told_what_the_trace_cleared_drops_the_note_for_every_model():
    from powercut.core.states.models import CrashSpace
    from powercut.core.states.selection import log_notes

    late = late_writes(LOG)
    assert any("in flight" in n for n in log_notes(CrashSpace(LOG), "write-cache"))
    quiet_space = CrashSpace(LOG, cleared=frozenset((*late.flushes, *late.fuas)))
    assert not any(
        "in flight" in n for m in ("write-cache", "torn-4k") for n in log_notes(quiet_space, m)
    )


def test_late_flushes_are_split_into_setup_and_commit_parts():
    """A late flush bounded by the first key mark keeps out set-up states only; the one after ack:0
    may reach a commit window: two notes, the first the space's set-up note."""
    from powercut.core.log.markorder import late_parts
    from powercut.core.states.models import CrashSpace

    both = log(
        *(
            ["mkfs", "w", "F", "w"]
            + [e.mark or {0: "w", FLUSH: "F", FUA: "U"}[e.flags & (FLUSH | FUA)] for e in LOG[2:]]
        )
    )
    setup, commits = late_parts(both)
    assert setup.setup_only and setup.flushes == (2,) and "affects begin:0" in setup.note()
    assert not commits.setup_only and LATE + 2 in commits.flushes
    sp = CrashSpace(both)
    assert sp.setup_notes == (setup.note(),) and sp.notes[-2:] == (setup.note(), commits.note())


def test_after_the_last_traced_mark_the_trace_end_bounds_the_flush():
    """A flush after the program's last mark (the job's own end mark is in the log only) is bounded
    by the end of the trace: strace follows the program until it exits."""
    tail_log = LOG + log(*["x"] * len(LOG), "w", "F", "w", "dm-log-writes-end")[len(LOG) :]
    late = late_writes(tail_log)
    last = max(late.flushes)
    assert last > LATE and tail_log[-1].mark == "dm-log-writes-end"
    assert last in quiet(tail_log, late, trace(before=COMMIT), MNT).cleared
    assert last in quiet(tail_log, late, trace(before=COMMIT, tail=(WRITE,)), MNT).kept

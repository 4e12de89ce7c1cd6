"""The files a race exploration holds (core/recording/races.py), read from a trace: synced before an ack,
most synced first, with their time inside the kernel; the commits' median; an exact glob."""

from __future__ import annotations

import fnmatch

from powercut.core.recording.races import commit_seconds, glob_for, synced_files
from powercut.core.trace.syscalls import parse

MNT = "/run/powercut/mnt"


def mark(t: float, text: str) -> str:
    return (
        f"7 {t} ioctl(3</dev/mapper/control>, DM_TARGET_MSG, {{version=[4, 0, 0], data_size=0, "
        f'data_start=0, name="powercut-rec", message="mark {text}"}}) = 0 <0.000100>'
    )


TRACE = [
    mark(1.0, "begin:0"),
    f'7 1.1 pwrite64(4<{MNT}/store.log>, "x", 1, 0) = 1 <0.000010>',
    f"8 1.2 fdatasync(4<{MNT}/store.log>) = 0 <0.200000>",
    f"9 1.2 fsync(5<{MNT}/store.idx>) = 0 <0.010000>",
    f"9 1.25 fsync(6<{MNT}>) = 0 <0.001000>",
    mark(1.3, "ack:0"),
    mark(1.4, "begin:1"),
    f"8 1.5 fdatasync(4<{MNT}/store.log>) = 0 <0.100000>",
    "8 1.55 fsync(7</tmp/elsewhere>) = 0 <0.100000>",
    f"9 1.55 fsync(5<{MNT}/store.idx>) = -1 EIO (Input/output error) <0.000100>",
    mark(1.8, "ack:1"),
    f"9 1.9 fsync(5<{MNT}/late.db>) = 0 <0.000100>",
]


def test_files_synced_before_an_ack_most_synced_first() -> None:
    got = synced_files(parse(TRACE, MNT), MNT)
    assert [(f.path, f.calls) for f in got] == [("store.log", 2), (".", 1), ("store.idx", 1)]
    log = got[0]
    assert abs(log.seconds - 0.3) < 1e-9 and abs(log.longest - 0.2) < 1e-9
    assert synced_files(parse(TRACE[:5], MNT), MNT) == []  # no ack: nothing to explore


def test_the_commits_median_and_an_exact_glob() -> None:
    assert abs(commit_seconds(parse(TRACE, MNT)) - 0.35) < 1e-9
    g = glob_for("db[1]/a*b?.log")
    assert fnmatch.fnmatchcase("db[1]/a*b?.log", g) and not fnmatch.fnmatchcase("db1/axbc.log", g)


# -- held syncs placed where the program called them (--delay-sync's log) ------------------------------

HELD_TRACE = [
    f'8 1.00 openat(AT_FDCWD<{MNT}>, "store.log", O_WRONLY|O_CREAT|O_APPEND, 0666) = 4<{MNT}/store.log>',
    mark(1.01, "begin:0"),
    f'8 1.02 write(4<{MNT}/store.log>, "x", 100) = 100 <0.000010>',
    mark(1.05, "ack:0"),  # thread 7 replies ...
    f"8 1.25 fdatasync(4<{MNT}/store.log>) = 0 <0.001000>",  # ... while 8's sync is held
    f"8 1.30 fdatasync(4<{MNT}/store.log>) = 0 <0.001000>",  # a later, unheld one
]


def test_a_held_sync_is_placed_where_the_program_called_it() -> None:
    from powercut.core.recording.races import with_holds
    from powercut.core.recording.syncdelay import holds

    log = (
        f"fdatasync\t200000000\t8\t1.030000\t{MNT}/store.log\n"
        f"fdatasync\t0\t8\t1.2985\t{MNT}/store.log\n"
    )
    tr = with_holds(parse(HELD_TRACE, MNT), holds(log))
    syncs = [o for o in tr.ops if o.kind == "fdatasync"]
    assert [(o.began, o.held) for o in syncs] == [(1.03, 0.2), (syncs[1].began, 0.0)] and syncs[
        1
    ].began > 1.29
    # another thread's hold, another file's, or an old log without threads and times: nothing placed
    for other in (
        f"fdatasync\t200000000\t9\t1.03\t{MNT}/store.log\n",
        f"fdatasync\t200000000\t8\t1.03\t{MNT}/other.log\n",
        f"fdatasync\t200000000\t{MNT}/store.log\n",
        f"fsync\t200000000\t8\t1.03\t{MNT}/store.log\n",
    ):
        assert all(o.held == 0 for o in with_holds(parse(HELD_TRACE, MNT), holds(other)).ops), other


def test_a_hold_matches_the_first_sync_its_thread_entered_after_the_call() -> None:
    from powercut.core.recording.races import with_holds
    from powercut.core.recording.syncdelay import holds

    # called at 1.26: the sync that entered the kernel at 1.249 was an earlier one
    tr = with_holds(
        parse(HELD_TRACE, MNT), holds(f"fdatasync\t1000000\t8\t1.26\t{MNT}/store.log\n")
    )
    assert [o.held for o in tr.ops if o.kind == "fdatasync"] == [0.0, 0.001]


SUPERVISED = [
    mark(1.01, "begin:0"),
    f'8 1.02 write(4<{MNT}/store.log>, "x", 100) = 100 <0.000010>',
    f"8 1.0300 fdatasync(4<{MNT}/store.log> <unfinished ...>",  # strace sees it enter, then the hold
    mark(1.05, "ack:0"),  # thread 7 replies meanwhile
    "8 1.2312 <... fdatasync resumed>) = 0 <0.201200>",
    f"8 1.2400 fdatasync(4<{MNT}/store.log>) = 0 <0.200900>",  # held again, nothing in between
]


def test_the_supervisors_hold_keeps_the_call_where_strace_saw_it_enter() -> None:
    """The supervisor is notified after strace's entry stop: its time is a little later than the
    trace's, and the call has not returned then; the trace's entry stays the call's start."""
    from powercut.core.recording.races import with_holds
    from powercut.core.recording.syncdelay import holds

    log = (
        f"fdatasync\t200000000\t8\t1.030150\t{MNT}/store.log\n"
        f"fdatasync\t200000000\t8\t1.240120\t{MNT}/store.log\n"
    )
    tr = with_holds(parse(SUPERVISED, MNT), holds(log))
    syncs = [o for o in tr.ops if o.kind == "fdatasync"]
    assert [(o.began, o.held) for o in syncs] == [(1.03, 0.2), (1.24, 0.2)]
    ack = next(o for o in tr.ops if o.kind == "mark" and o.text == "ack:0")
    assert syncs[0].began < ack.time < syncs[0].time  # the ack was sent while the held sync ran


def test_a_sync_of_the_set_up_alone_is_no_candidate() -> None:
    setup = [
        f"7 0.5 fsync(6<{MNT}/table.db>) = 0 <0.010000>",
        f"7 0.6 fsync(9<{MNT}/control>) = 0 <0.001000>",
    ]
    got = synced_files(parse(setup + TRACE, MNT), MNT)
    assert [f.path for f in got] == ["store.log", ".", "store.idx"]

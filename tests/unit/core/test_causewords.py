"""core/cause/causewords.py: the sentences of the cause rules' findings, on findings built by hand (no
trace): each names the ack, the file and the calls its facts hold, and nothing they do not."""

import pytest

from powercut.core.cause import causewords as cw
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
from powercut.core.trace.syscalls import Op


def op(
    seq: int,
    kind: str,
    path: str = "",
    *,
    pid: int = 1,
    time: float = 1.0,
    start: float = -1.0,
    **kw,
) -> Op:
    return Op(seq, seq + 1, pid, time, kind, path, start=start, **kw)


ACK = op(9, sc.MARK, text="ack:7", time=2.0)


def running(start: float, time: float, pid: int = 2) -> sync_still_running.SyncStillRunning:
    return sync_still_running.SyncStillRunning(
        "/log",
        ACK,
        op(10, sc.FSYNC, "/m/log", pid=pid, time=time, start=start),
        (op(3, sc.WRITE, "/m/log", nbytes=64),),
    )


def test_a_sync_still_running_says_how_long_it_ran():
    s = registry.sentence(running(1.99, 2.0185))
    assert s.startswith(
        "ack:7 was given while the fsync of /log in another thread was still running"
    )
    assert "returned after it (28.5 ms in all)" in s
    assert " in another thread" not in registry.sentence(running(1.99, 2.0185, pid=1))


@pytest.mark.parametrize(
    "start, time",
    [
        (-1.0, 2.01),  # not split by strace: its start is unknown
        (2.01, 2.01),  # no time between its start and its return
        (2.02, 2.01),
    ],
)  # a clock that went back
def test_a_sync_whose_duration_is_unknown_or_zero_gets_no_figure(start: float, time: float):
    s = registry.sentence(running(start, time))
    assert "returned after it (a while in all) --" in s
    assert " ms in all" not in s and "-" not in s.split("(")[1].split(")")[0]


def test_each_finding_is_said_with_its_facts():
    w = op(3, sc.WRITE, "/m/wal", nbytes=100, text="write(...) = 100")
    fail = op(4, sc.FDATASYNC, "/m/db", error="EIO")
    failed = registry.sentence(acked_after_error.FailedCall("/db", ACK, fail))
    assert failed.startswith("ack:7 was given after fdatasync of /db failed (EIO)")
    link = op(5, sc.LINK, "/m/a.tmp", path2="/m/a")
    assert registry.sentence(
        rename_before_fsync.RenameBeforeSync("/a", ACK, link, "/a.tmp", (w,))
    ).startswith(
        "/a.tmp was linked over /a before its data was fsynced, and ack:7 was given with no fsync in between: "
        "the link can reach the disk before the data, leaving /a empty or stale"
    )
    assert "a name in /sub was created, renamed or removed" in registry.sentence(
        no_dir_fsync.UnsyncedNames("/sub", ACK, (w,))
    )
    assert registry.sentence(outcomes.RulesKept(ACK)).startswith(
        "the program did everything the rules ask before ack:7"
    )
    assert registry.sentence(outcomes.NoAckBefore()).startswith("no ack was given before the crash")


def test_no_fsync_counts_the_calls_it_shows_and_says_why_o_direct_did_not_count():
    trunc = op(2, sc.TRUNCATE, "/m/f", nbytes=4096)
    writes = tuple(op(3 + i, sc.WRITE, "/m/f", nbytes=10) for i in range(5))
    f = no_fsync.Unsynced("/f", ACK, (trunc, *writes), direct=True)
    said = registry.sentence(f)
    assert (
        "changing /f (4 calls, 40 bytes) with no fsync or fdatasync of it in between (O_DIRECT bypasses"
        in said
    )
    assert registry.note(f) == "O_DIRECT bypasses the page cache, not the disk's write cache"
    assert "changing /f (1 call) with no fsync" in registry.sentence(
        no_fsync.Unsynced("/f", ACK, (trunc,))
    )
    assert registry.sentence(no_fsync.Unsynced("/f", ACK, (trunc,))).endswith("in between")


def test_the_commit_in_flight_is_named_by_its_ack_else_by_what_the_trace_has():
    w1, w2 = op(1, sc.WRITE, "/m/a", text="w1"), op(2, sc.WRITE, "/m/a", text="w2")
    barrier = op(3, sc.SYNC, text="sync() = 0")
    unordered = unordered_writes.UnorderedWrites("/a", ACK, (w1, w2), barrier)
    assert "(ack:7) made 2 writes (/a) durable with one sync" in registry.sentence(unordered)
    assert "(sync() = 0) made 2 writes" in registry.sentence(
        unordered_writes.UnorderedWrites("/a", None, (w1, w2), barrier)
    )
    torn = unchecked_tear.Tear("/a", None, (w1, w2), (3,))
    assert (
        "commit in flight (w2; /a): part of it reached the disk, part did not (log entry #3),"
        in registry.sentence(torn)
    )
    assert "(the end; its writes)" in registry.sentence(
        unchecked_tear.Tear("its writes", None, (), (3, 4))
    )
    assert (
        registry.note(unchecked_tear.Tear("its writes", None, (), (3, 4)))
        == " (log entries #3, #4)"
    )


def test_a_lying_disk_is_said_by_what_it_did_and_what_the_program_did():
    lie = outcomes.DiskLie("flush-ignored", 7, 8, dropped=tuple(range(7, 15)), verdict="lost-ack")
    assert registry.sentence(lie).startswith(
        "the disk acked a FLUSH without emptying its cache: writes #7, #8, #9, #10, "
        "#11, #12 ... before it were lost, and an acked commit was gone without an error"
    )
    assert "wrote write #1's data at sector 2 instead" in registry.sentence(
        outcomes.DiskLie("misdirected-write", 1, 2)
    )
    served = registry.sentence(outcomes.DiskLie("x", 1, 2, verdict="corrupt-data"))
    assert "the program answered corrupt-data without noticing" in served


def test_evidence_lines_and_alike():
    ops = [op(i, sc.WRITE, "/m/f", text=f"write #{i}") for i in range(8)] + [ACK]
    lines = cw.evidence_lines(ops)
    assert len(lines) == cw.EVIDENCE_LINES and lines[-1] == "line 10, pid 1: mark ack:7"
    assert lines[0] == "line 4, pid 1: write #3"
    assert cw.alike(0) == "" and cw.alike(1) == " (and 1 more acked commit alike)"
    assert cw.alike(2) == " (and 2 more acked commits alike)"

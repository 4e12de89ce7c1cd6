"""core/causewords.py: the sentences of the cause rules' findings, on findings built by hand (no
trace): each names the ack, the file and the calls its facts hold, and nothing they do not."""
import pytest

from powercut.core import causerules as cr
from powercut.core import causewords as cw
from powercut.core import syscalls as sc
from powercut.core.syscalls import Op


def op(seq: int, kind: str, path: str = "", *, pid: int = 1, time: float = 1.0, start: float = -1.0, **kw) -> Op:
    return Op(seq, seq + 1, pid, time, kind, path, start=start, **kw)


ACK = op(9, sc.MARK, text="ack:7", time=2.0)


def running(start: float, time: float, pid: int = 2) -> cr.SyncStillRunning:
    return cr.SyncStillRunning("/log", ACK, op(10, sc.FSYNC, "/m/log", pid=pid, time=time, start=start),
                               (op(3, sc.WRITE, "/m/log", nbytes=64),))


def test_a_sync_still_running_says_how_long_it_ran():
    s = cw.sentence(running(1.99, 2.0185))
    assert s.startswith("ack:7 was given while the fsync of /log in another thread was still running")
    assert "returned after it (28.5 ms in all)" in s
    assert " in another thread" not in cw.sentence(running(1.99, 2.0185, pid=1))


@pytest.mark.parametrize("start, time", [(-1.0, 2.01),     # not split by strace: its start is unknown
                                         (2.01, 2.01),     # no time between its start and its return
                                         (2.02, 2.01)])    # a clock that went back
def test_a_sync_whose_duration_is_unknown_or_zero_gets_no_figure(start: float, time: float):
    s = cw.sentence(running(start, time))
    assert "returned after it (a while in all) --" in s
    assert " ms in all" not in s and "-" not in s.split("(")[1].split(")")[0]

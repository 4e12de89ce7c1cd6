"""The recording's fault plan end to end (``--fault``; the pytest marker's ``fault=``): a user's own
program, which only marks its commits, meets an EIO at a chosen mark without a line of fault code.

The program overwrites records in place in a preallocated file and fsyncs each.  The plan fails the
file's sectors from ``begin:2`` (a mark made with the C ``powercut-mark``, which calls into the plan)
until ``retry:*``.  The variant that retries the failed fsync -- Linux reports the error once, so the
retry succeeds -- and acks is caught as ``acked-after-error``; the variant that stops at the error
passes.  A plan that never fires fails the recording with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.errors import PowercutError
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm
pytest_plugins = ["pytester"]

PROGRAM = """
import os
import subprocess
from pathlib import Path

import powercut
import pytest

REC = 4096


def put(mount, n=4, retry=False):
    fd = os.open(Path(mount) / "log", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"." * (REC * n), 0)      # allocated before the fault: its sectors are known
    os.fsync(fd)
    for i in range(n):
        subprocess.run(["powercut-mark", f"begin:{i}"], check=True)   # the C tool moves the plan too
        os.pwrite(fd, f"rec{i}".encode().ljust(REC, b"-"), i * REC)
        try:
            os.fsync(fd)
        except OSError as e:
            if not retry:
                print(f"fsync of record {i}: {e.strerror}: stopping", flush=True)
                raise SystemExit(3)
            subprocess.run(["powercut-mark", f"retry:{i}"], check=True)
            os.fsync(fd)                        # 0: the kernel reported the error once (fsyncgate)
        powercut.ack(i)


def check(state):
    if not state.acked:
        return                                  # nothing promised yet (the file may not exist)
    data = (Path(state.mount) / "log").read_bytes()
    for key in state.acked:
        want = f"rec{key}".encode()
        assert data[int(key) * REC:int(key) * REC + len(want)] == want, f"acked record {key} is lost"


@pytest.mark.powercut(fs="ext4", fault="eio-range,file=log,mark=begin:2,until=retry:*",
                      expect="acked-after-error")
def test_retrying_fsync_after_eio_is_caught(crashtest):
    out = crashtest(put, check, params={"retry": True})
    assert out.summary.failures and {f.verdict for f in out.summary.failures} == {"acked-after-error"}


@pytest.mark.powercut(fs="ext4", fault="eio-range,file=log,mark=begin:2,until=retry:*")
def test_stopping_at_the_first_eio_passes(crashtest):
    out = crashtest(put, check, params={"retry": False})
    assert out.summary.total > 0
"""


def test_a_plan_in_the_pytest_marker_catches_the_retry_and_passes_the_stop(
    pytester: pytest.Pytester,
) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("host mode needs root")
    pytester.makepyfile(test_log=PROGRAM)
    res = pytester.runpytest_subprocess(
        "--powercut-check-in=host",
        "--powercut-models=flush,write-cache",
        f"--powercut-out={pytester.path / 'pc-out'}",
        "-p",
        "no:cacheprovider",
        timeout=1800,
    )
    print(res.stdout.str())
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_retrying_fsync_after_eio_is_caught: acked-after-error*"])


def test_a_plan_that_never_fires_fails_the_recording(tmp_path: Path) -> None:
    spec = RecordSpec(
        fs=FsSpec(fstype="ext4", size_mb=64),
        accel="auto",
        timeout_s=600,
        workload=WorkloadSpec(
            cmd="powercut-mark ack:1 && powercut-mark ack:2", fault="eio-writes,mark=ack:*,nth=3"
        ),
    )
    with pytest.raises(PowercutError, match=r"never fired \(2 marks matched"):
        record(spec, tmp_path / "rec")

"""checker.py: the external checker command -- JSON answer, exit-code fallback, timeout kills the
whole process group -- and the verdict vocabulary."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from powercut.checker import MAX_REASONS
from powercut.errors import CheckerError, UsageError

from powercut.checker import CheckerSpec, CheckInput, CheckResult
from powercut.core.verdict import SEVERITY, Verdict, check_name, worst


@pytest.fixture
def inp(tmp_path: Path) -> CheckInput:
    return CheckInput(str(tmp_path), ("1", "2"), ("3",), {"n": 3}, "flush@9")


def test_exit_code_protocol(inp: CheckInput) -> None:
    ok = CheckerSpec(command="python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d[\"acked\"]), d[\"state\"])'")
    r = ok.run(inp)
    assert r.verdict == "pass" and r.reasons == ("2 flush@9",)
    # exit 1 without JSON is the generic fail: the words of its output are never parsed for a verdict
    lost = CheckerSpec(command="echo 'record 2 lost'; exit 1").run(inp)
    assert lost == CheckResult("fail", ("record 2 lost",))
    assert CheckerSpec(command="exit 1").run(inp) == CheckResult("fail", ("checker command exited 1",))
    crashed = CheckerSpec(command="echo boom >&2; exit 7").run(inp)
    assert crashed.verdict == "checker-crashed" and "boom" in crashed.reasons[0]
    assert CheckerSpec().run(inp).verdict == "pass"  # no checker: mount + fsck only


def test_json_answer_wins_over_the_exit_code(inp: CheckInput) -> None:
    r = CheckerSpec(command="""echo '{"verdict": "corrupt-data", "reasons": ["key 2 lost its tail"]}'; exit 1""").run(inp)
    assert r == CheckResult("corrupt-data", ("key 2 lost its tail",))
    r = CheckerSpec(command="""echo '{"verdict": "lost-ack", "reasons": ["2"]}'""").run(inp)
    assert r.verdict == "lost-ack"
    assert CheckerSpec(command="""echo '{"verdict": "fail", "reasons": "x"}'; exit 1""").run(inp) == CheckResult("fail", ("x",))
    # an unknown verdict in JSON is the checker's error, never a pass (#25): exit 0 does not rescue it
    with pytest.raises(CheckerError, match="'fine'"):
        CheckerSpec(command="""echo '{"verdict": "fine"}'""").run(inp)


def test_a_checker_that_cannot_run_is_an_error_not_a_finding(inp: CheckInput, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an executable file"):
        CheckerSpec(command=str(tmp_path / "no-such-checker.py")).validate()
    with pytest.raises(UsageError, match="not an executable command on PATH"):
        CheckerSpec(command="no-such-checker-xyz --strict").validate()
    with pytest.raises(UsageError, match="timeout"):
        CheckerSpec(command="true", timeout_s=0).validate()
    for ok in ("true", "FOO=1 python3 -c 'pass'", "cd sub && ./x", "/bin/sh -c 'exit 0'"):
        CheckerSpec(command=ok).validate()   # found, or shell syntax it cannot judge: run and see
    with pytest.raises(CheckerError, match="cannot run .exit 127."):
        CheckerSpec(command="FOO=1 no-such-checker-xyz").run(inp)
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(CheckerError, match="cannot run .exit 126."):
        CheckerSpec(command=str(script)).run(inp)


def test_a_chatty_checker_is_capped(inp: CheckInput) -> None:
    r = CheckerSpec(command="yes 'a very long line of output' | head -n 100000; exit 1").run(inp)
    assert r.verdict == "fail" and len(r.reasons) == MAX_REASONS + 1 and "99960 more lines" in r.reasons[-1]
    r = CheckerSpec(command="python3 -c 'print(\"x\" * 100000)'").run(inp)
    assert len(r.reasons[0]) < 500


def test_timeout_kills_the_checkers_grandchildren(inp: CheckInput, tmp_path: Path) -> None:
    pidfile = tmp_path / "gc.pid"
    t = time.monotonic()
    r = CheckerSpec(command=f"sleep 60 & echo $! > {pidfile}; wait", timeout_s=0.5).run(inp)
    assert r.verdict == "checker-crashed" and "timed out" in r.reasons[0]
    assert time.monotonic() - t < 10
    pid = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail("the checker's grandchild outlived the timeout (it would keep the mount busy)")


def test_verdict_vocabulary() -> None:
    assert worst(["pass", "fsck-error", "lost-ack"]) == "lost-ack"
    assert worst(["corrupt-data", "kernel-panic", "timeout"]) == "kernel-panic"
    assert worst([]) == "pass"
    assert SEVERITY[-1] == "flaky" and check_name("pass") == "pass"
    with pytest.raises(ValueError, match="unknown verdict"):
        check_name("meh")
    with pytest.raises(ValueError):
        CheckResult("meh")
    fl = Verdict("a", "flush", 1, "flaky", (), 0, 0, 0.0, first=("lost-ack", "x"))
    assert not fl.finding and fl.failed and Verdict.from_json(fl.to_json()) == fl

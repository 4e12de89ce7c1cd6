"""checker.py: the external checker command -- JSON answer on the last line, progress before it,
protocol errors, exit-code fallback, a crash a pipeline hid, timeout kills the whole process group --
and the verdict vocabulary."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from powercut.checker import MAX_REASONS, CheckerSpec, CheckInput, CheckResult
from powercut.core.judging.verdict import SEVERITY, Verdict, check_name, worst
from powercut.errors import CheckerError, UsageError


@pytest.fixture
def inp(tmp_path: Path) -> CheckInput:
    return CheckInput(str(tmp_path), ("1", "2"), ("3",), {"n": 3}, "flush@9")


def test_exit_code_protocol(inp: CheckInput) -> None:
    ok = CheckerSpec(
        command='python3 -c \'import json,sys; d=json.load(sys.stdin); print(len(d["acked"]), d["state"])\''
    )
    r = ok.run(inp)
    assert r.verdict == "pass" and r.reasons == ("2 flush@9",)
    # exit 1 without JSON is the generic fail: the words of its output are never parsed for a verdict
    lost = CheckerSpec(command="echo 'record 2 lost'; exit 1").run(inp)
    assert lost == CheckResult("fail", ("record 2 lost",))
    assert CheckerSpec(command="exit 1").run(inp) == CheckResult(
        "fail", ("checker command exited 1",)
    )
    crashed = CheckerSpec(command="echo boom >&2; exit 7").run(inp)
    assert crashed.verdict == "checker-crashed" and "boom" in crashed.reasons[0]
    assert CheckerSpec().run(inp).verdict == "pass"  # no checker: mount + fsck only


def test_json_answer_wins_over_the_exit_code(inp: CheckInput) -> None:
    r = CheckerSpec(
        command="""echo '{"verdict": "corrupt-data", "reasons": ["key 2 lost its tail"]}'; exit 1"""
    ).run(inp)
    assert r == CheckResult("corrupt-data", ("key 2 lost its tail",))
    r = CheckerSpec(command="""echo '{"verdict": "lost-ack", "reasons": ["2"]}'""").run(inp)
    assert r.verdict == "lost-ack"
    assert CheckerSpec(command="""echo '{"verdict": "fail", "reasons": ["x"]}'; exit 1""").run(
        inp
    ) == CheckResult("fail", ("x",))
    # an unknown verdict in JSON is the checker's error, never a pass (#25): exit 0 does not rescue it
    with pytest.raises(CheckerError, match="'fine'"):
        CheckerSpec(command="""echo '{"verdict": "fine"}'""").run(inp)


LOST = """echo '{"verdict": "lost-ack", "reasons": ["key 2 lost"]}'"""


@pytest.mark.parametrize(
    "before",
    [
        "echo 'checking 4 keys'",  # the case: one progress line
        "python3 -c 'print(\"checking 4 keys\")'",
        "sh -c 'echo child says hi'",  # a child (pg_ctl, sqlite3) shares stdout
        "echo; echo \"{'k': 1}\"; echo '{\"checked\": 4}'",  # dict-like progress is still progress
        "echo '[1/2] {\"verdict\"' ",
    ],
)
def test_progress_before_the_json_answer_is_not_the_answer(inp: CheckInput, before: str) -> None:
    """#37: the verdict is the last non-empty stdout line; what comes before is progress, never a pass."""
    r = CheckerSpec(command=f"{before}; {LOST}").run(inp)
    assert r.verdict == "lost-ack" and r.reasons[0] == "key 2 lost"
    assert len(r.reasons) > 1 and r.reasons[1].startswith(
        "output: "
    )  # progress kept for the record, after


def _protocol_error(inp: CheckInput, command: str) -> str:
    with pytest.raises(CheckerError) as e:
        CheckerSpec(command=command).run(inp)
    text = str(e.value)
    assert (
        "\n" not in text and len(text) < 600 and "flush@9" in text and "fix the checker" in text
    ), text
    return text


@pytest.mark.parametrize(
    "command, words",
    [
        (f"{LOST}; echo done", "line 1 of 2 is a JSON verdict.*not the last.*lost-ack.*'done'"),
        (f"{LOST}; {LOST}", "line 1 of 2 is a JSON verdict"),  # two answers: which one? neither
        (
            """echo '{"verdict": "lost-ack", "reasons": [}'""",
            "starts like a JSON answer but is not JSON",
        ),
        (
            """echo '{"verdict": "lost-ack"} and more'""",
            "starts like a JSON answer but is not JSON",
        ),
        ("""echo "{'verdict': 'lost-ack'}" """, "starts like a JSON answer but is not JSON"),
        ("""echo checking; echo '{"result": "lost-ack"}'""", 'no "verdict" key'),
        ("""echo checking; echo '{"verdict": "fine"}'""", "verdict 'fine', which is none of"),
        (
            """echo '{"verdict": "lost-ack", "reasons": "key 2 lost"}'""",
            "reasons must be a list of strings",
        ),
        ("""echo '{"verdict": "lost-ack", "reasons": [2]}'""", "reasons must be a list of strings"),
        (
            """python3 -c 'import json; print(json.dumps({"verdict": "lost-ack"}, indent=2))'""",
            "over several lines",
        ),
        ("""echo '{"verdict": "pass"}'; echo '{"verdict": "lost-ack"}'; exit 1""", "line 1 of 2"),
    ],
)
def test_a_protocol_violation_is_the_checkers_error_in_one_line(
    inp: CheckInput, command: str, words: str
) -> None:
    text = _protocol_error(inp, command)
    assert re.search(words, text), text


def test_the_offending_line_is_truncated(inp: CheckInput) -> None:
    text = _protocol_error(
        inp, f"""echo '{{"verdict": "lost-ack", "reasons": ["{"x" * 5000}"]}}'; echo done"""
    )
    assert "[...]" in text


def test_a_crash_a_pipeline_hid_is_checker_crashed_not_pass(inp: CheckInput) -> None:
    """`sh -c 'python3 checker.py | cat'` exits 0 when the checker raises (no pipefail): its stderr
    tells, and exit 0 is then no pass."""
    r = CheckerSpec(
        command="echo checking; python3 -c 'import sys; sys.stdin.read(); raise KeyError(7)' | cat"
    ).run(inp)
    assert (
        r.verdict == "checker-crashed"
        and "KeyError: 7" in r.reasons[0]
        and "pipefail" in r.reasons[0]
    )
    r = CheckerSpec(command="no-such-checker-xyz | cat").run(inp)
    assert r.verdict == "checker-crashed" and "not found" in r.reasons[0]
    r = CheckerSpec(command="python3 -c 'import os; os.kill(os.getpid(), 11)' | cat").run(inp)
    assert r.verdict in (
        "checker-crashed",
        "pass",
    )  # a shell may not report a pipeline's dead member (bash)
    if os.path.realpath("/bin/sh").endswith("dash"):
        assert r.verdict == "checker-crashed" and "Segmentation fault" in r.reasons[0]
    # the JSON answer still wins; exit 1 stays the generic fail; clean stderr talk is no crash
    assert (
        CheckerSpec(command=f"python3 -c 'raise KeyError(7)' | cat; {LOST}").run(inp).verdict
        == "lost-ack"
    )
    assert CheckerSpec(command="python3 -c 'raise KeyError(7)'").run(inp).verdict == "fail"
    assert CheckerSpec(command="echo 'warning: key 3: not found' >&2; echo ok").run(
        inp
    ) == CheckResult("pass", ("ok",))


@pytest.mark.parametrize(
    "stderr, line",
    [
        (
            'Traceback (most recent call last):\n  File "c.py", line 3, in <module>\n    x[1]\nKeyError: 1\n',
            "KeyError: 1",
        ),
        (
            "Fatal Python error: Segmentation fault\n\nCurrent thread ...\n",
            "Fatal Python error: Segmentation fault",
        ),
        ("/bin/sh: 1: my-check: not found\n", "/bin/sh: 1: my-check: not found"),
        (
            "bash: line 1: my-check: command not found\n",
            "bash: line 1: my-check: command not found",
        ),
        ("sh: ./check.py: Permission denied\n", "sh: ./check.py: Permission denied"),
        ("Segmentation fault (core dumped)\n", "Segmentation fault (core dumped)"),
        ("Killed\n", "Killed"),
        (
            "bash: line 1: 4242 Aborted                 (core dumped) ./check\n",
            "bash: line 1: 4242 Aborted",
        ),
        ("key 3: not found\nall good\n", None),
        ("checked: Killed processes 0\n", None),
        ("", None),
    ],
)
def test_crash_signatures_on_stderr(stderr: str, line: str | None) -> None:
    from powercut.checker import crash_line

    got = crash_line(stderr)
    assert (got is None) if line is None else (got is not None and got.startswith(line)), got


def test_plain_exit_codes_without_json(inp: CheckInput) -> None:
    assert CheckerSpec(command="echo checking 4 keys; echo all there").run(inp) == CheckResult(
        "pass", ("checking 4 keys", "all there")
    )
    assert CheckerSpec(command="echo checking 4 keys; echo key 2 lost; exit 1").run(
        inp
    ) == CheckResult("fail", ("checking 4 keys", "key 2 lost"))


def test_a_checker_that_cannot_run_is_an_error_not_a_finding(
    inp: CheckInput, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="not an executable file"):
        CheckerSpec(command=str(tmp_path / "no-such-checker.py")).validate()
    with pytest.raises(UsageError, match="not an executable command on PATH"):
        CheckerSpec(command="no-such-checker-xyz --strict").validate()
    with pytest.raises(UsageError, match="timeout"):
        CheckerSpec(command="true", timeout_s=0).validate()
    for ok in ("true", "FOO=1 python3 -c 'pass'", "cd sub && ./x", "/bin/sh -c 'exit 0'"):
        CheckerSpec(command=ok).validate()  # found, or shell syntax it cannot judge: run and see
    with pytest.raises(CheckerError, match="cannot run .exit 127."):
        CheckerSpec(command="FOO=1 no-such-checker-xyz").run(inp)
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    with pytest.raises(CheckerError, match="cannot run .exit 126."):
        CheckerSpec(command=str(script)).run(inp)


def test_a_chatty_checker_is_capped(inp: CheckInput) -> None:
    r = CheckerSpec(command="yes 'a very long line of output' | head -n 100000; exit 1").run(inp)
    assert (
        r.verdict == "fail"
        and len(r.reasons) == MAX_REASONS + 1
        and "99960 more lines" in r.reasons[-1]
    )
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


def test_a_checker_meeting_an_io_or_checksum_error_under_a_lying_disk_noticed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import errno as _errno

    from powercut import checker as chk

    def reads(inp: CheckInput) -> CheckResult:
        raise OSError(_errno.EBADMSG, "Bad message", "/mnt/append.log")

    monkeypatch.setattr(chk, "get", lambda name: chk.Checker(name, "", reads))
    spec = chk.CheckerSpec(name="x")
    got = spec.run(CheckInput("/mnt", ("1",), (), {}, "corrupt-sector@9/w3:s0:b1"))
    assert (
        got.verdict == "detected"
        and "EBADMSG" in got.reasons[0]
        and "/mnt/append.log" in got.reasons[0]
    )
    assert CheckInput("/m", (), (), {}, "lost-write@9/w3").noticed == "detected"
    assert CheckInput("/m", (), (), {}, "torn-4k@9/s0").noticed == "corrupt-data"
    with pytest.raises(OSError):  # under power loss: the checker's crash, as before
        spec.run(CheckInput("/mnt", ("1",), (), {}, "write-cache@9"))

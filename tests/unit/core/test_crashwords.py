"""What a crashed program said (core/judging/crashwords.py): a Rust panic's message (both formats), a Go
panic with the first frame in the program, a Java exception's root cause, a Python traceback's
exception -- never Rust's RUST_BACKTRACE note; None for stderr without a crash.  And a checker
command that crashes so is judged by that message (checker.run_command)."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.checker import CheckerSpec, CheckInput
from powercut.core.judging.crashwords import crash_message

RUST = """\
opening the store
thread 'main' panicked at src/storage.rs:212:9:
assertion failed: storage.raw_file_len()? >= header.layout().len()
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
"""
RUST_OLD = """\
thread 'main' panicked at 'called `Result::unwrap()` on an `Err` value: Corrupted', src/main.rs:10:5
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
"""
GO = """\
panic: manifest corrupted (field 'comparer'): missing [file=MANIFEST-000004]

goroutine 1 [running]:
panic({0x4c2f60?, 0xc000012345?})
\t/usr/local/go/src/runtime/panic.go:811 +0x168
main.open({0x7ffd1c, 0x6})
\t/src/check/main.go:41 +0x1d2
main.main()
\t/src/check/main.go:17 +0x25
exit status 2
"""
JAVA = """\
Exception in thread "main" java.lang.IllegalStateException: cannot open the store
\tat org.example.Store.open(Store.java:88)
\tat org.example.Check.main(Check.java:12)
Caused by: java.io.EOFException: log record 7 is truncated
\tat org.example.Log.read(Log.java:301)
\t... 2 more
"""
PYTHON = """\
Traceback (most recent call last):
  File "/x/check.py", line 3, in <module>
    raise KeyError(1)
KeyError: 1

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/x/check.py", line 5, in <module>
    raise ValueError("acked key k0: not found")
ValueError: acked key k0: not found
"""


@pytest.mark.parametrize(
    "stderr, said",
    [
        (
            RUST,
            "panicked at src/storage.rs:212:9: assertion failed: storage.raw_file_len()? >= header.layout().len()",
        ),
        (
            RUST_OLD,
            "panicked at src/main.rs:10:5: called `Result::unwrap()` on an `Err` value: Corrupted",
        ),
        (
            GO,
            "panic: manifest corrupted (field 'comparer'): missing [file=MANIFEST-000004] (in main.open, main.go:41)",
        ),
        (JAVA, "java.io.EOFException: log record 7 is truncated"),
        (PYTHON, "ValueError: acked key k0: not found"),
    ],
)
def test_each_languages_crash_is_said_in_its_own_words(stderr: str, said: str) -> None:
    assert crash_message(stderr) == said


def test_stderr_without_a_crash_says_nothing() -> None:
    assert crash_message("") is None
    assert crash_message("opening\nchecked 3 keys\n") is None
    # a Go panic with no frame of the program: the panic line alone
    assert (
        crash_message(
            "panic: boom\n\ngoroutine 1 [running]:\nruntime.throw()\n\t/go/src/runtime/x.go:1\n"
        )
        == "panic: boom"
    )


@pytest.fixture
def inp(tmp_path: Path) -> CheckInput:
    return CheckInput(str(tmp_path), ("1",), (), {}, "flush@9")


def test_a_crashed_checker_is_judged_by_its_panic_not_its_last_line(
    inp: CheckInput, tmp_path: Path
) -> None:
    (tmp_path / "rust.txt").write_text(RUST)
    (tmp_path / "py.txt").write_text(PYTHON)
    r = CheckerSpec(command="cat rust.txt >&2; exit 101").run(inp)
    assert (
        r.verdict == "checker-crashed"
        and "assertion failed: storage.raw_file_len()" in r.reasons[0]
    )
    assert "RUST_BACKTRACE" not in r.reasons[0] and "exited 101" in r.reasons[0]
    # an uncaught Python exception exits 1 (fail) with nothing on stdout: its exception is the reason
    r = CheckerSpec(command="cat py.txt >&2; exit 1").run(inp)
    assert r.verdict == "fail" and r.reasons == (
        "checker command exited 1: ValueError: acked key k0: not found",
    )
    # no crash in stderr: its last line, as before
    r = CheckerSpec(command="echo boom >&2; exit 7").run(inp)
    assert r.verdict == "checker-crashed" and r.reasons == ("checker command exited 7: boom",)

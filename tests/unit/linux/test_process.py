"""process.py: timeouts kill the whole process group, results carry duration and timed-out,
errors carry a copy-pasteable argv, the live-group registry feeds the interrupt handler."""
from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

import pytest

from powercut.errors import CommandFailed, EnvironmentNotReady
from powercut.linux import process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _gone_soon(pid: int) -> bool:
    """True once ``pid`` has exited (waits up to 2.5 s: a killed group takes a moment to die)."""
    for _ in range(50):
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def test_result_has_duration_and_output() -> None:
    res = process.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10, check=False)
    assert res.returncode == 3 and res.stdout == "out\n" and res.stderr == "err\n"
    assert not res.timed_out and not res.ok and res.duration_s >= 0


def test_timeout_kills_the_group_grandchild_included(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # the grandchild ignores nothing special; it would outlive a plain kill of its parent
    cmd = f"sleep 60 & echo $! > {pidfile}; wait"
    t = time.monotonic()
    res = process.run(["sh", "-c", cmd], timeout=1, check=False)
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t < 10
    grandchild = int(pidfile.read_text())
    assert _gone_soon(grandchild), "the grandchild outlived the timeout"


def test_a_finished_command_leaves_no_background_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    process.run(["sh", "-c", f"(sleep 60 >/dev/null 2>&1 &  echo $! > {pidfile})"], timeout=10)
    pid = int(pidfile.read_text())
    assert _gone_soon(pid)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no os.pidfd_open on this platform")
def test_waiting_after_the_pipes_close_does_not_poll_with_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    # the child closes its pipes at once and exits 0.3 s later: subprocess's own wait(timeout)
    # would poll waitpid with sleeps (1 ms, 2, 4...); the pidfd wait returns when it exits
    sleeps: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
    t = time.monotonic()
    res = process.run(["sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 4"], timeout=10, check=False)
    assert res.returncode == 4 and not res.timed_out
    assert 0.3 <= time.monotonic() - t < 5
    assert sleeps == []


def test_timeout_after_the_pipes_close_still_kills() -> None:
    t = time.monotonic()
    res = process.run(["sh", "-c", "exec >&- 2>&-; sleep 30"], timeout=0.5, check=False)
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t < 10


def test_timeout_with_check_raises_with_shlex_argv() -> None:
    with pytest.raises(CommandFailed) as e:
        process.run(["sh", "-c", "sleep 5", "my arg"], timeout=0.3)
    assert e.value.timed_out
    assert shlex.join(["sh", "-c", "sleep 5", "my arg"]) in str(e.value)


def test_nonzero_exit_raises_with_stderr_tail() -> None:
    with pytest.raises(CommandFailed, match="exited 2: boom") as e:
        process.run(["sh", "-c", "echo boom >&2; exit 2"], timeout=10)
    assert e.value.returncode == 2 and "'sh' -c" not in str(e.value) and "sh -c" in str(e.value)


def test_missing_binary_is_environment_error() -> None:
    with pytest.raises(EnvironmentNotReady, match="no-such-tool-xyz not found"):
        process.run(["no-such-tool-xyz"], timeout=5)
    with pytest.raises(EnvironmentNotReady, match="install the Debian package foo"):
        process.require("no-such-tool-xyz", "foo")


def test_run_shell_is_explicit_and_gets_stdin(tmp_path: Path) -> None:
    res = process.run_shell("cat; pwd", timeout=10, input="hello\n", cwd=str(tmp_path))
    assert res.argv[:2] == (process.SHELL, "-c")
    assert res.stdout == f"hello\n{tmp_path}\n"


def test_spawned_registers_and_kill_all_kills(tmp_path: Path) -> None:
    p = process.Spawned(["sleep", "60"])
    try:
        assert p.pid in process.live_groups()
        assert process.kill_all(signal.SIGKILL) >= 1
        assert p.wait(5) is not None
    finally:
        p.kill()
    assert p.pid not in process.live_groups()


def test_spawned_context_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    with process.Spawned(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"]) as p:
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            time.sleep(0.02)
        assert p.poll() is None
    grandchild = int(pidfile.read_text())
    assert _gone_soon(grandchild)


def _child_reports(out: str) -> int:
    print(os.getcwd(), os.environ.get("ONLY"), os.environ.get("HOME"), os.getpgrp() == os.getpid())
    return 7


def test_forked_runs_a_function_with_its_own_cwd_env_and_output(tmp_path: Path) -> None:
    with open(tmp_path / "o", "w") as so, open(tmp_path / "e", "w") as se:
        with process.Forked(lambda: _child_reports("x"), stdout=so, stderr=se, env={"ONLY": "1"},
                            cwd=str(tmp_path)) as p:
            assert p.wait(30) == 7
    assert (tmp_path / "o").read_text().split() == [str(tmp_path), "1", "None", "True"]


def test_forked_exceptions_and_exits_become_exit_codes(tmp_path: Path) -> None:
    def boom() -> int:
        raise RuntimeError("the child's own error")

    def leaves() -> int:
        raise SystemExit(4)

    with open(tmp_path / "o", "w") as so, open(tmp_path / "e", "w") as se:
        for fn, code in ((boom, 1), (leaves, 4)):
            with process.Forked(fn, stdout=so, stderr=se, env={}, cwd=str(tmp_path)) as p:
                assert p.wait(30) == code
    assert "RuntimeError: the child's own error" in (tmp_path / "e").read_text()


def test_forked_timeout_returns_none_and_kill_takes_its_group(tmp_path: Path) -> None:
    def sleeper() -> int:
        return process.Spawned(["sleep", "60"]).wait(None) or 0   # a grandchild: killed with the group

    with open(tmp_path / "o", "w") as so, open(tmp_path / "e", "w") as se:
        p = process.Forked(sleeper, stdout=so, stderr=se, env=dict(os.environ), cwd=str(tmp_path))
        t = time.monotonic()
        assert p.wait(0.3) is None and time.monotonic() - t < 5
        pid = p.pid
        p.kill()
    assert _gone_soon(pid) and p.poll() is not None and pid not in process.live_groups()

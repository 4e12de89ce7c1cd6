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


@pytest.fixture(params=["lean", "popen"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each behaviour of ``run`` on both of its paths: posix_spawn with a pidfd (no stdin data, no
    cwd) and Popen (what it was, and what stdin data or a cwd take)."""
    if request.param == "lean" and not process._lean[0]:
        pytest.skip("no pidfd_open/memfd_create/posix_spawnp here")
    monkeypatch.setattr(process, "_lean", [request.param == "lean"])
    return str(request.param)


def test_result_has_duration_and_output(path: str) -> None:
    res = process.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10, check=False)
    assert res.returncode == 3 and res.stdout == "out\n" and res.stderr == "err\n"
    assert not res.timed_out and not res.ok and res.duration_s >= 0


def test_timeout_kills_the_group_grandchild_included(path: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # the grandchild ignores nothing special; it would outlive a plain kill of its parent
    cmd = f"sleep 60 & echo $! > {pidfile}; wait"
    t = time.monotonic()
    res = process.run(["sh", "-c", cmd], timeout=1, check=False)
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t < 10
    grandchild = int(pidfile.read_text())
    assert _gone_soon(grandchild), "the grandchild outlived the timeout"


def test_a_finished_command_leaves_no_background_child(path: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    process.run(["sh", "-c", f"(sleep 60 >/dev/null 2>&1 &  echo $! > {pidfile})"], timeout=10)
    pid = int(pidfile.read_text())
    assert _gone_soon(pid)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="no os.pidfd_open on this platform")
def test_waiting_after_the_pipes_close_does_not_poll_with_sleeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
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


def test_timeout_after_the_pipes_close_still_kills(path: str) -> None:
    t = time.monotonic()
    res = process.run(["sh", "-c", "exec >&- 2>&-; sleep 30"], timeout=0.5, check=False)
    assert res.timed_out and res.returncode is None
    assert time.monotonic() - t < 10


def test_timeout_with_check_raises_with_shlex_argv(path: str) -> None:
    with pytest.raises(CommandFailed) as e:
        process.run(["sh", "-c", "sleep 5", "my arg"], timeout=0.3)
    assert e.value.timed_out
    assert shlex.join(["sh", "-c", "sleep 5", "my arg"]) in str(e.value)


def test_nonzero_exit_raises_with_stderr_tail(path: str) -> None:
    with pytest.raises(CommandFailed, match="exited 2: boom") as e:
        process.run(["sh", "-c", "echo boom >&2; exit 2"], timeout=10)
    assert e.value.returncode == 2 and "'sh' -c" not in str(e.value) and "sh -c" in str(e.value)


def test_missing_binary_is_environment_error(path: str) -> None:
    with pytest.raises(EnvironmentNotReady, match="no-such-tool-xyz not found"):
        process.run(["no-such-tool-xyz"], timeout=5)
    with pytest.raises(EnvironmentNotReady, match="install the Debian package foo"):
        process.require("no-such-tool-xyz", "foo")


def test_text_output_has_universal_newlines_and_bytes_stay_bytes(path: str) -> None:
    cmd = ["sh", "-c", "printf 'a\\r\\nb\\rc\\n'; printf 'e\\r\\n' >&2"]
    res = process.run(cmd, timeout=10)
    assert (res.stdout, res.stderr) == ("a\nb\nc\n", "e\n")
    raw = process.run(cmd, timeout=10, text=False)
    assert (raw.stdout, raw.stderr) == (b"a\r\nb\rc\n", b"e\r\n")


def test_the_child_reads_an_empty_stdin_and_is_registered_while_it_runs(
    path: str, tmp_path: Path
) -> None:
    seen: list[list[int]] = []
    real = process._register
    process_register = lambda pid: (real(pid), seen.append(process.live_groups()))  # noqa: E731
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(process, "_register", process_register)
        res = process.run(["sh", "-c", "cat; echo done"], timeout=10)
    assert res.stdout == "done\n"
    assert seen and seen[0] and process.live_groups() == []


def test_a_large_output_is_read_whole(path: str) -> None:
    res = process.run(["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"], timeout=30)
    assert len(res.stdout) == 3_000_000 and set(res.stdout) == {"x"}


def test_the_program_is_found_on_the_childs_path_and_a_bad_one_is_one_line(
    path: str, tmp_path: Path
) -> None:
    tool = tmp_path / "bin" / "only-here"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho found\n")
    tool.chmod(0o755)
    env = {"PATH": f"{tool.parent}:/usr/bin:/bin"}
    assert process.run(["only-here"], timeout=10, env=env).stdout == "found\n"
    with pytest.raises(EnvironmentNotReady, match="only-here not found"):
        process.run(["only-here"], timeout=10)
    tool.chmod(0o644)
    with pytest.raises(EnvironmentNotReady, match="only-here"):
        process.run([str(tool)], timeout=10)


@pytest.mark.skipif(not process._lean[0], reason="no pidfd_open/memfd_create/posix_spawn here")
def test_without_a_pidfd_the_lean_path_polls_and_still_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    assert process.run(["sh", "-c", "sleep 0.2; exit 5"], timeout=10, check=False).returncode == 5
    t = time.monotonic()
    res = process.run(["sleep", "30"], timeout=0.5, check=False)
    assert res.timed_out and res.returncode is None and time.monotonic() - t < 10


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
        with process.Forked(
            lambda: _child_reports("x"), stdout=so, stderr=se, env={"ONLY": "1"}, cwd=str(tmp_path)
        ) as p:
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
        return (
            process.Spawned(["sleep", "60"]).wait(None) or 0
        )  # a grandchild: killed with the group

    with open(tmp_path / "o", "w") as so, open(tmp_path / "e", "w") as se:
        p = process.Forked(sleeper, stdout=so, stderr=se, env=dict(os.environ), cwd=str(tmp_path))
        t = time.monotonic()
        assert p.wait(0.3) is None and time.monotonic() - t < 5
        pid = p.pid
        p.kill()
    assert _gone_soon(pid) and p.poll() is not None and pid not in process.live_groups()

"""The --delay-sync supervisor (vm-images/powercut_holdsync.c), compiled with the host's cc and run
natively: a raw fdatasync (no libc wrapper, as a Go program makes it) on a matching file is held,
in another thread and in a forked child too, while another file's sync is not; msync is held by
its mapping's file; the log's lines; the program's exit status and its death by a signal pass
through; a bad command line or a missing program is one line."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.core.recording import syncdelay

SOURCE = Path(__file__).resolve().parents[3] / "vm-images" / "powercut_holdsync.c"
HOLD_NS = 150_000_000

# raw system calls through syscall(2): what a static Go binary does, no libc fsync in between
PROGRAM = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double timed(long nr, long arg0, long arg1, long arg2) {
    double t = now();
    if (syscall(nr, arg0, arg1, arg2) != 0)
        exit(3);
    return now() - t;
}

static int held_fd;

static void *in_thread(void *out) {
    *(double *)out = timed(SYS_fdatasync, held_fd, 0, 0);
    return NULL;
}

int main(int argc, char **argv) {
    held_fd = open("held.log", O_RDWR | O_CREAT, 0644);
    int other = open("other.log", O_RDWR | O_CREAT, 0644);
    if (held_fd < 0 || other < 0 || ftruncate(held_fd, 4096) != 0)
        return 4;
    printf("held %.1f\n", timed(SYS_fdatasync, held_fd, 0, 0));
    printf("other %.1f\n", timed(SYS_fsync, other, 0, 0));
    double t = 0;
    pthread_t th;
    pthread_create(&th, NULL, in_thread, &t);
    pthread_join(th, NULL);
    printf("thread %.1f\n", t);
    char *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, held_fd, 0);
    map[0] = 'x';
    printf("msync %.1f\n", timed(SYS_msync, (long)map, 4096, MS_SYNC));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        printf("child %.1f\n", timed(SYS_fdatasync, held_fd, 0, 0));
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    return argc > 1 ? atoi(argv[1]) : 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    d = tmp_path_factory.mktemp("holdsync")
    supervisor = d / syncdelay.SUPERVISOR
    subprocess.run(
        ["cc", "-O2", "-Wall", "-Werror", "-o", str(supervisor), str(SOURCE)],
        check=True,
        timeout=120,
    )
    (d / "program.c").write_text(PROGRAM)
    subprocess.run(
        ["cc", "-O2", "-pthread", "-o", str(d / "program"), str(d / "program.c")],
        check=True,
        timeout=120,
    )
    return supervisor, d / "program"


def supervised(
    built: tuple[Path, Path], work: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    supervisor, program = built
    rules = syncdelay.parse_all([f"held.log={HOLD_NS // 1_000_000}ms"])
    argv = syncdelay.supervisor_argv(str(supervisor), rules, str(work), str(work / "hold.log"))
    return subprocess.run(
        [*argv, str(program), *args], cwd=work, capture_output=True, text=True, timeout=60
    )


def test_a_raw_sync_of_the_matching_file_is_held_in_every_thread_and_child(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    p = supervised(built, tmp_path)
    assert p.returncode == 0, p.stderr
    ms = {k: float(v) for k, v in (line.split() for line in p.stdout.splitlines())}
    hold_ms = HOLD_NS / 1e6
    assert all(ms[k] >= hold_ms for k in ("held", "thread", "msync", "child")), ms
    assert ms["other"] < hold_ms, ms
    log = (tmp_path / "hold.log").read_text()
    assert log.startswith(syncdelay.LISTENING + "\n")
    summary = syncdelay.held_summary(log, str(tmp_path))
    assert summary["files"] == {
        "held.log": {"calls": 4, "held": 4},
        "other.log": {"calls": 1, "held": 0},
    }
    held = [h for h in syncdelay.holds(log) if h.ns]
    assert {h.call for h in held} == {"fdatasync", "msync"} and all(
        h.called > 0 and h.tid > 0 for h in held
    )


def test_the_programs_exit_status_and_its_death_by_a_signal_pass_through(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    assert supervised(built, tmp_path, "7").returncode == 7
    supervisor, _ = built
    killed = subprocess.run(
        [str(supervisor), "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == -signal.SIGTERM


@pytest.mark.parametrize(
    "argv",
    [
        ["-r", "oops", "--", "true"],
        [
            "--",
        ],
        ["-x", "1", "--", "true"],
    ],
)
def test_a_bad_command_line_is_one_line_exit_2(built: tuple[Path, Path], argv: list[str]) -> None:
    p = subprocess.run([str(built[0]), *argv], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_a_missing_program_is_one_line_exit_127(built: tuple[Path, Path], tmp_path: Path) -> None:
    p = subprocess.run(
        [str(built[0]), "-l", str(tmp_path / "log"), "--", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 127 and "nothing" in p.stderr and len(p.stderr.strip().splitlines()) == 1

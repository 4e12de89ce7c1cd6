"""The guest's checker-VM jobs, one handler per job kind (guestjob): ``check`` judges states,
``diagnose`` minimizes and blames failures, ``shell`` opens a shell in one recovered state.  Each
rebuilds its states with dm-snapshot over a pristine replayed incrementally inside the guest, on a
scratch disk, and writes one progress line before and one after each step, so the host can
attribute a panic or a hang to its state."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut import registry
from powercut.check.context import CheckContext, with_faults
from powercut.check.judge import judge
from powercut.core.crashstate import CrashState
from powercut.core.dmlog import LogIndex, open_log
from powercut.core.models import CrashSpace, space
from powercut.core.verdict import Verdict
from powercut.linux import filesystems, process
from powercut.linux.blockdev import find_disk
from powercut.linux.jsonlines import JsonLines
from powercut.linux.mounts import mount, umount
from powercut.replay.materialize import materialize
from powercut.vm.guestjob import GUEST_MNT as MNT
from powercut.vm.guestjob import SCRATCH_MKFS, SHELL_READY, CheckJob, DiagnoseJob, ShellJob, StateSource, uptime

log = logging.getLogger(__name__)

WORK = "/run/powercut/work"


@dataclass(slots=True)
class _Session:
    """A job's open log, its crash space, the judging context, the scratch work dir, the progress file."""

    ctx: CheckContext
    index: LogIndex
    space: CrashSpace
    work: Path
    progress: JsonLines
    size: int
    ready: float | None = None      # when the first state began (uptime)

    def states(self, ids: tuple[str, ...]) -> Iterator[tuple[CrashState, Path]]:
        t = time.monotonic()
        for state, img in materialize(self.index, None, self.size, [self.space.state_from_id(i) for i in ids],
                                      self.work, provider="dm-snapshot"):
            log.debug("%s: materialized in %.3f s", state.id, time.monotonic() - t)
            yield state, img
            t = time.monotonic()

    def judge(self, state: CrashState, img: Path) -> Verdict:
        if self.ready is None:   # the boot timeline: kernel start -> this VM judges its first state
            self.ready = uptime()
            log.info("first state begins %.2f s after the kernel", self.ready)
        self.progress.add({"begin": state.id})
        v = judge(self.ctx, str(img), state, MNT)
        self.progress.add({"verdict": v.to_json()})
        return v


@contextlib.contextmanager
def prepared(src: StateSource) -> Iterator[CheckContext]:
    """The judging context of a job's source, with the scratch disk mounted at WORK (both the
    one-disk jobs here and the cluster job, guest/clustercheck.py)."""
    for key, ref in src.entries.items():
        registry.preset(*key.split("/", 1), ref)  # type: ignore[call-arg]  # key: "group/name"
    if src.fsck:
        filesystems.preset_fsck(src.fstype, src.fsck)
    scratch = find_disk(src.disks["scratch"])
    os.makedirs(WORK, exist_ok=True)
    if not src.scratch_ready:
        process.run([*SCRATCH_MKFS, scratch], timeout=300)
    mount(scratch, WORK, "ext4", "noatime")
    try:
        yield CheckContext(filesystems.get(src.fstype), src.checker, dict(src.params), src.mount_opts)
    finally:
        umount(WORK)


@contextlib.contextmanager
def _session(src: StateSource, jobdir: Path) -> Iterator[_Session]:
    with prepared(src) as ctx, open_log(src.log) as index, \
            JsonLines(jobdir / "progress.jsonl", durable=False) as progress:
        yield _Session(with_faults(ctx, index), index, space(index), Path(WORK), progress, src.size)


def check(job: CheckJob, jobdir: Path) -> dict[str, Any]:
    """The checker VM: judge each listed state."""
    n = 0
    with _session(job.src, jobdir) as s:
        for state, img in s.states(job.states):
            s.judge(state, img)
            n += 1
    return {"judged": n, "first_state_s": s.ready}


def diagnose_job(job: DiagnoseJob, jobdir: Path) -> dict[str, Any]:
    """Minimize and blame the failures the host asked about (debug.diagnose), one progress line each."""
    # only this job needs them, and every checker VM imports this module: under TCG an import costs
    # 10-50x what it does natively, paid at each VM's start
    from powercut.debug.diagnose import Workspace, diagnose, without_tear
    with _session(job.src, jobdir) as s:
        ws = Workspace(s.index, job.src.size, None, s.work / "diagnose", "dm-snapshot",
                       job.floor if job.floor >= 0 else None, s.space)
        for first in map(Verdict.from_json, job.failures):
            s.progress.add({"begin-diagnosis": first.state})
            state = s.space.state_from_id(first.state)
            if job.tear_only:
                s.progress.add({"diagnosis": {"state": first.state,
                                              "without_tear": without_tear(s.ctx, ws, state, first)}})
                continue
            s.progress.add({"diagnosis": diagnose(s.ctx, ws, state, first, budget=job.budget).to_json()})
    return {"diagnosed": len(job.failures)}


def shell(job: ShellJob, jobdir: Path) -> dict[str, Any]:
    """``powercut repro --shell``: judge the state, then mount it (the kernel replays its journal) and
    run an interactive shell in it on the console; the VM powers off when the shell exits."""
    with _session(job.src, jobdir) as s:
        for state, img in s.states((job.state,)):
            v = s.judge(state, img)
            shell_on(s.ctx, [(str(img), MNT)], state.id, state.acks, v, MNT)
    return {"judged": 1}


def shell_on(ctx: CheckContext, mounts: Sequence[tuple[str, str]], sid: str, acks: Sequence[str], v: Verdict,
             cwd: str) -> None:
    """Mount each (device, mount point) -- the kernel replays its journal -- and run an interactive
    shell in ``cwd`` on the console (one disk's ``shell``, a cluster's guest/clustercheck.cluster_shell)."""
    done: list[str] = []
    try:
        for device, mnt in mounts:
            os.makedirs(mnt, exist_ok=True)
            mount(device, mnt, ctx.fs.name, ctx.state_mount_opts)
            done.append(mnt)
        where = f"{cwd} (your shell's cwd)" if done == [cwd] else f"{', '.join(done)} (your shell's cwd: {cwd})"
        with open("/dev/console", "r+b", buffering=0) as tty:
            tty.write((f"\n=== {sid}: {v.verdict}: {v.reasons[0] if v.reasons else ''}\n"
                       f"{SHELL_READY.decode()} {where}; acked: {', '.join(acks) or '-'}"
                       "; exit (or Ctrl-D) powers the VM off\n").encode())
            env = dict(os.environ, PS1=f"powercut {sid}# ", HOME="/tmp")
            with process.Spawned(["/bin/sh", "-i"], stdin=tty, stdout=tty, stderr=tty, cwd=cwd, env=env) as sh:
                sh.wait(None)
    finally:
        os.chdir("/")
        for mnt in reversed(done):
            umount(mnt)

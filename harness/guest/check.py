"""The guest's check job: the checker VM's loop over states (replay inside the guest, a dm-snapshot per state, judge), a shell in one recovered state, and diagnoses."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from powercut.core.verdict import Verdict
from powercut.guest.record import MNT
from powercut.linux import filesystems, process
from powercut.linux.blockdev import find_disk
from powercut.linux.jsonlines import JsonLines
from powercut.linux.mounts import mount, umount
from powercut.vm.guestjob import CheckJob

log = logging.getLogger("powercut.guest")


def check(job: CheckJob, jobdir: Path) -> dict[str, Any]:
    """The checker VM: rebuild the listed states with dm-snapshot over an incrementally replayed
    pristine (on a scratch disk) and judge each; progress.jsonl gets a "begin" line before and the
    verdict after each state, so the host can attribute a panic or hang to its state."""
    from powercut.check.context import CheckContext
    from powercut.check.judge import judge
    from powercut.core.dmlog import open_log
    from powercut.core.models import space
    from powercut.replay.materialize import materialize

    scratch = find_disk(job.disks["scratch"])
    work = "/run/powercut/work"
    os.makedirs(work, exist_ok=True)
    process.run(["mkfs.ext4", "-F", "-q", "-E", "nodiscard", "-O", "^has_journal", scratch], timeout=300)
    mount(scratch, work, "ext4", "noatime")
    ctx = CheckContext(filesystems.get(job.fstype), job.checker, dict(job.params), job.mount_opts)
    n = 0
    with open_log(job.log) as index, JsonLines(jobdir / "progress.jsonl", durable=False) as progress:
        sp = space(index)
        states = [sp.state_from_id(i) for i in job.states]
        t = time.monotonic()
        for state, img in materialize(index, None, job.size, states, Path(work), provider="dm-snapshot"):
            log.debug("%s: materialized in %.3f s", state.id, time.monotonic() - t)
            progress.add({"begin": state.id})
            v = judge(ctx, str(img), state, MNT)
            progress.add({"verdict": v.to_json()})
            n += 1
            t = time.monotonic()
            if job.shell:
                _shell(ctx, str(img), state, v)
        _diagnose(job, ctx, index, Path(work), progress)
    umount(work)
    return {"judged": n}


def _shell(ctx: Any, device: str, state: Any, v: Any) -> None:
    """``powercut repro --shell``: the state recovered (mounted: the kernel replays its journal) and an
    interactive shell in it, on the console; the VM powers off when the shell exits."""
    os.makedirs(MNT, exist_ok=True)
    mount(device, MNT, ctx.fs.name, ctx.state_mount_opts)
    try:
        with open("/dev/console", "r+b", buffering=0) as tty:
            tty.write((f"\n=== {state.id}: {v.verdict}: {v.reasons[0] if v.reasons else ''}\n"
                       f"=== recovered and mounted at {MNT} (your shell's cwd); acked: {', '.join(state.acks) or '-'}"
                       "; exit (or Ctrl-D) powers the VM off\n").encode())
            env = dict(os.environ, PS1=f"powercut {state.id}# ", HOME="/tmp")
            with process.Spawned(["/bin/sh", "-i"], stdin=tty, stdout=tty, stderr=tty, cwd=MNT, env=env) as sh:
                sh.wait(None)
    finally:
        os.chdir("/")
        umount(MNT)


def _diagnose(job: CheckJob, ctx: Any, index: Any, work: Path, progress: Any) -> None:
    """Minimize and blame the failures the host asked about (diagnose.py), one progress line each."""
    from powercut.core.models import space
    from powercut.debug.diagnose import Where, diagnose, without_tear

    sp = space(index)
    where = Where(index, job.size, None, work / "diagnose", "dm-snapshot", job.floor if job.floor >= 0 else None, sp)
    for first in map(Verdict.from_json, job.diagnose):
        progress.add({"begin-diagnosis": first.state})
        state = sp.state_from_id(first.state)
        if job.tear_only:
            progress.add({"diagnosis": {"state": first.state, "without_tear": without_tear(ctx, where, state, first)}})
            continue
        d = diagnose(ctx, where, state, first, budget=job.budget)
        progress.add({"diagnosis": d.to_json()})

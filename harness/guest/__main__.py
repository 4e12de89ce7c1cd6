"""The guest agent: ``python -m powercut.guest /run/powercut/job/job.json`` (runs inside the VM, as
root, on the host's userspace shared read-only).

Every step is logged to ``agent.log`` in the job share and the outcome goes to ``result.json``
there (guestjob.GuestResult); the exit status is 0 when the job itself worked (a workload that
fails is reported in the result, not as a crash).  Device-mapper by ioctl (linux/dm.py), mounts by
mount(2) (linux/mounts.py): in a TCG guest each fork+exec costs more than the operation."""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from powercut.errors import CommandFailed, PowercutError
from powercut.linux import loopcache
from powercut.vm import guestjob
from powercut.vm.guestjob import GuestResult

log = logging.getLogger("powercut.guest")

# kind -> (module, handler): each job imports only its own handler's modules (under TCG every
# module the agent imports before its first state costs its boot time)
JOBS = {
    "record": ("powercut.guest.record", "record"),
    "mark-bench": ("powercut.guest.markbench", "mark_bench"),
    "check": ("powercut.guest.check", "check"),
    "diagnose": ("powercut.guest.check", "diagnose_job"),
    "shell": ("powercut.guest.check", "shell"),
    "bench": ("powercut.guest.bench", "bench_job"),
}


def handler(kind: str) -> Callable[[Any, Path], dict[str, Any]]:
    module, name = JOBS[kind]
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    started = guestjob.uptime()
    loopcache.GUARD = False  # no guardian process: the VM's loop devices die with it
    args = sys.argv[1:] if argv is None else argv
    jobfile = Path(args[0])
    jobdir = jobfile.parent
    logging.basicConfig(
        filename=jobdir / "agent.log",
        level=logging.DEBUG,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    log.info("agent started %.2f s after the kernel (Python start and imports included)", started)
    while True:  # a serving agent runs job after job (guestjob.wait_next) in one boot
        seq, serve = guestjob.peek(jobfile)
        result = GuestResult(False, "guest agent did not start the job")
        try:
            job = guestjob.load(jobfile)
            log.info("job %d: %s%s", seq, job.kind, " (serving)" if serve else "")
            result = GuestResult(
                True, data={"agent_started_s": started, **handler(job.kind)(job, jobdir)}
            )
        except PowercutError as e:
            log.error("%s", e)
            result = GuestResult(
                False, e.one_line(), e.stderr_tail if isinstance(e, CommandFailed) else ""
            )
        except Exception as e:  # reported to the host, which turns it into one clear line
            log.exception("guest job crashed")
            result = GuestResult(False, f"guest agent crashed: {type(e).__name__}: {e}")
        guestjob.write_result(jobdir, result, seq)
        os.sync()
        if not (serve and guestjob.wait_next(jobdir, seq)):
            return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

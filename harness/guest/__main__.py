"""The guest agent: ``python -m powercut.guest /run/powercut/job/job.json`` (runs inside the VM, as
root, on the host's userspace shared read-only).

Every step is logged to ``agent.log`` in the job share and the outcome goes to ``result.json``
there (guestjob.GuestResult); the exit status is 0 when the job itself worked (a workload that
fails is reported in the result, not as a crash).  Device-mapper by ioctl (linux/dm.py), mounts by
mount(2) (linux/mounts.py): in a TCG guest each fork+exec costs more than the operation."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from powercut.errors import CommandFailed, PowercutError
from powercut.guest.check import check, diagnose_job, shell
from powercut.guest.record import mark_bench, record
from powercut.vm import guestjob
from powercut.vm.guestjob import GuestResult

log = logging.getLogger("powercut.guest")


def bench(job: Any, jobdir: Path) -> dict[str, Any]:
    """``powercut bench``'s guest half (guest/bench.py)."""
    from powercut.guest.bench import bench_job
    return bench_job(job, jobdir)


JOBS = {"record": record, "mark-bench": mark_bench, "check": check, "diagnose": diagnose_job, "shell": shell,
        "bench": bench}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    jobfile = Path(args[0])
    jobdir = jobfile.parent
    logging.basicConfig(filename=jobdir / "agent.log", level=logging.DEBUG,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    result = GuestResult(False, "guest agent did not start the job")
    try:
        job = guestjob.load(jobfile)
        result = GuestResult(True, data=JOBS[job.kind](job, jobdir))
    except PowercutError as e:
        log.error("%s", e)
        result = GuestResult(False, e.one_line(), e.stderr_tail if isinstance(e, CommandFailed) else "")
    except Exception as e:  # reported to the host, which turns it into one clear line
        log.exception("guest job crashed")
        result = GuestResult(False, f"guest agent crashed: {type(e).__name__}: {e}")
    guestjob.write_result(jobdir, result)
    os.sync()
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The guest's mark-bench job: what one mark costs on a real log-writes target -- the ioctl from
Python, unordered and ordered, and running powercut-mark (C and Python), unordered and ordered."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from powercut import marks
from powercut.guest.stack import log_writes_status, stack, unstack
from powercut.linux import dm, environ, process
from powercut.linux.blockdev import find_disk, sectors
from powercut.marks import ORDER_ENV, mark
from powercut.vm.guestjob import MarkBenchJob


def mark_bench(job: MarkBenchJob, jobdir: Path) -> dict[str, Any]:
    """Cost per mark on a real log-writes target: the ioctl from Python, unordered and ordered, and
    running powercut-mark (C and Python), unordered and ordered."""
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    target = dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    _, order_dev, info = stack(job.dm_name, target, sectors(data))
    n = job.n
    costs: dict[str, Any] = {"ioctl_marks": n, **info}
    for kind, order in (("ioctl", None), ("ioctl_ordered", order_dev)):
        t = time.perf_counter()
        for i in range(n):
            mark(f"{kind}:{i}", job.dm_name, order_dev=order)
        costs[f"{kind}_us"] = round((time.perf_counter() - t) / n * 1e6, 1)
    marks.close()
    m = costs["cmd_marks"] = max(10, n // 10)
    tools = {"python": os.path.join(os.path.dirname(sys.executable), "powercut-mark")}
    if job.tools_dir:
        tools["c"] = os.path.join(job.tools_dir, "powercut-mark")
    for kind, tool in tools.items():
        for suffix, extra in (("", {}), ("_ordered", {ORDER_ENV: order_dev})):
            env = {k: v for k, v in os.environ.items() if k != ORDER_ENV}
            env.update({environ.DM_NAME: job.dm_name, **extra})
            t = time.perf_counter()
            for i in range(m):
                process.run([tool, f"{kind}{suffix}:{i}"], env=env, timeout=60)
            costs[f"cmd_{kind}{suffix}_us"] = round((time.perf_counter() - t) / m * 1e6, 1)
    unstack(job.dm_name)
    status = log_writes_status(job.dm_name)
    dm.remove(job.dm_name)
    return {**costs, **status}

"""The guest agent: ``python -m powercut.guest /run/powercut/job/job.json`` (runs inside the VM, as
root, on the host's userspace shared read-only).

Every step is logged to ``agent.log`` in the job share and the outcome goes to ``result.json``
there (guestjob.GuestResult); the exit status is 0 when the job itself worked (a workload that
fails is reported in the result, not as a crash).  Device-mapper by ioctl (dm.py), mounts by
mount(2) (mounts.py): in a TCG guest each fork+exec costs more than the operation."""
from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import dm, filesystems, guestjob, process
from .errors import CommandFailed, PowercutError
from .guestjob import CheckJob, GuestResult, MarkBenchJob, RecordJob
from .journal import JsonLines
from .marks import mark
from .mounts import mount, umount
from .verdict import Verdict

log = logging.getLogger("powercut.guest")

MNT = "/run/powercut/mnt"


def find_disk(serial: str) -> str:
    """/dev/<name> of the disk whose serial is ``serial`` (virtio: /sys/block/X/serial; ATA: VPD 0x80)."""
    for blk in sorted(Path("/sys/block").iterdir()):
        for candidate in (blk / "serial", blk / "device" / "serial", blk / "device" / "vpd_pg80"):
            try:
                raw = candidate.read_bytes()
            except OSError:
                continue
            text = raw[4:] if candidate.name == "vpd_pg80" else raw
            if text.decode(errors="replace").strip().strip("\0") == serial:
                return f"/dev/{blk.name}"
    raise PowercutError(f"no disk with serial {serial} in the guest ({', '.join(os.listdir('/sys/block'))})")


def sectors(dev: str) -> int:
    return int(Path(f"/sys/block/{os.path.basename(dev)}/size").read_text())


def log_writes_status(name: str) -> dict[str, Any]:
    # "<start> <len> log-writes <logged_entries> <highest_sector> [logging_disabled]" per target
    out = dm.status(name)[0].split()
    return {"logged_entries": int(out[3]), "highest_sector": int(out[4]),
            "logging_disabled": "logging_disabled" in out[5:]}


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def run_workload(job: RecordJob, dev: str, jobdir: Path) -> dict[str, Any]:
    wl = job.workload
    argv = ["/bin/sh", "-c", wl.cmd] if wl.cmd else [sys.executable, "-m", "powercut.workload", wl.name]
    env = {"PATH": guestjob.guest_path(job.tools_dir), "HOME": "/tmp", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "POWERCUT_DM_NAME": job.dm_name, "POWERCUT_DEVICE": dev,
           "POWERCUT_MOUNT": MNT, "POWERCUT_FSTYPE": job.fs.fstype, "POWERCUT_PARAMS": json.dumps(wl.params or {})}
    start = time.monotonic()
    with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
        with process.Spawned(argv, cwd=MNT, env=env, stdout=out, stderr=err) as proc:
            rc = proc.wait(wl.timeout_s)
            # leaving the block kills the whole group: its leftovers must not keep the filesystem busy
    return {"workload_rc": rc, "workload_timed_out": rc is None, "workload_s": round(time.monotonic() - start, 3)}


def record(job: RecordJob, jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime()}
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    fs = filesystems.get(job.fs.fstype)
    t0 = time.monotonic()
    dev = dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    process.run(fs.mkfs_argv(dev, job.fs.mkfs_opts), timeout=600)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    mark("mkfs", job.dm_name)
    os.makedirs(MNT, exist_ok=True)
    mount(dev, MNT, fs.name, job.fs.mount_opts)
    res["uptime_workload_start"] = uptime()
    (jobdir / "started").write_text(f"{time.time()}\n")
    res.update(run_workload(job, dev, jobdir))
    umount(MNT, lazy_fallback=False)
    res.update(log_writes_status(job.dm_name))
    dm.remove(job.dm_name)
    return res


def mark_bench(job: MarkBenchJob, jobdir: Path) -> dict[str, Any]:
    """Cost per mark: the ioctl from Python vs running powercut-mark, on a real log-writes target."""
    data, logdev = find_disk(job.disks["data"]), find_disk(job.disks["log"])
    dm.create(job.dm_name, [(0, sectors(data), "log-writes", f"{data} {logdev}")])
    n = job.n
    t = time.perf_counter()
    for i in range(n):
        mark(f"ioctl:{i}", job.dm_name)
    ioctl_s = (time.perf_counter() - t) / n
    env = dict(os.environ, POWERCUT_DM_NAME=job.dm_name)
    m = max(10, n // 10)
    costs = {}
    tools = {"python": os.path.join(os.path.dirname(sys.executable), "powercut-mark")}
    if job.tools_dir:
        tools["c"] = os.path.join(job.tools_dir, "powercut-mark")
    for kind, tool in tools.items():
        t = time.perf_counter()
        for i in range(m):
            process.run([tool, f"{kind}:{i}"], env=env, timeout=60)
        costs[f"cmd_{kind}_us"] = round((time.perf_counter() - t) / m * 1e6, 1)
    status = log_writes_status(job.dm_name)
    dm.remove(job.dm_name)
    return {"ioctl_marks": n, "ioctl_us": round(ioctl_s * 1e6, 1), "cmd_marks": m, **costs, **status}


def check(job: CheckJob, jobdir: Path) -> dict[str, Any]:
    """The checker VM: rebuild the listed states with dm-snapshot over an incrementally replayed
    pristine (on a scratch disk) and judge each; progress.jsonl gets a "begin" line before and the
    verdict after each state, so the host can attribute a panic or hang to its state."""
    from .check import CheckContext, judge
    from .log import open_log
    from .models import space
    from .replay import materialize

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
    from .diagnose import Where, diagnose, without_tear
    from .models import space

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


def bench(job: Any, jobdir: Path) -> dict[str, Any]:
    """``powercut bench``'s guest half (benchguest.py)."""
    from .benchguest import bench_job
    return bench_job(job, jobdir)


JOBS = {"record": record, "mark-bench": mark_bench, "check": check, "bench": bench}


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

"""The guest-side half of a job: ``python -m powercut.guest /run/powercut/job/job.json``.

Runs inside the VM (as root, on the host's userspace shared read-only).  Every step is logged to
``agent.log`` in the job share and the outcome goes to ``result.json`` there; the exit status is 0
when the job itself worked (a workload that fails is reported in result.json, not as a crash)."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import process
from .errors import CommandFailed, PowercutError
from .marks import mark

log = logging.getLogger("powercut.guest")

MKFS = {"ext4": ["mkfs.ext4", "-F", "-q"], "xfs": ["mkfs.xfs", "-f", "-q"], "btrfs": ["mkfs.btrfs", "-f", "-q"]}


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


def dm_create(name: str, table: str) -> str:
    process.run(["dmsetup", "create", name, "--noudevsync", "--table", table], timeout=60)
    node = f"/dev/mapper/{name}"
    if not os.path.exists(node):  # no udev in the guest: make the node ourselves
        info = process.run(["dmsetup", "info", "-c", "--noheadings", "-o", "major,minor", name], timeout=30)
        major, minor = (int(x) for x in info.stdout.strip().split(":"))
        os.makedirs("/dev/mapper", exist_ok=True)
        os.mknod(node, 0o600 | 0o060000, os.makedev(major, minor))
    return node


def log_writes_status(name: str) -> dict[str, Any]:
    out = process.run(["dmsetup", "status", name], timeout=30).stdout.split()
    # "<start> <len> log-writes <logged_entries> <highest_sector> [logging_disabled]"
    return {"logged_entries": int(out[3]), "highest_sector": int(out[4]),
            "logging_disabled": "logging_disabled" in out[5:]}


def run_workload(job: dict[str, Any], env: dict[str, str], cwd: str, jobdir: Path) -> dict[str, Any]:
    wl = job["workload"]
    if wl.get("cmd"):
        argv = ["/bin/sh", "-c", wl["cmd"]]
    else:
        argv = [sys.executable, "-m", "powercut.workload", wl["name"]]
    start = time.monotonic()
    with open(jobdir / "workload.out", "wb") as out, open(jobdir / "workload.err", "wb") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=wl["timeout_s"])
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out, rc = True, None
        try:  # the workload's leftovers must not keep the filesystem busy
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return {"workload_rc": rc, "workload_timed_out": timed_out, "workload_s": round(time.monotonic() - start, 3)}


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def record(job: dict[str, Any], jobdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"uptime_agent_start": uptime()}
    data, logdev = find_disk(job["disks"]["data"]), find_disk(job["disks"]["log"])
    name = job["dm_name"]
    n = sectors(data)
    t0 = time.monotonic()
    dev = dm_create(name, f"0 {n} log-writes {data} {logdev}")
    fs = job["fs"]
    process.run(MKFS[fs["fstype"]] + list(fs["mkfs_opts"]) + [dev], timeout=600)
    res["mkfs_s"] = round(time.monotonic() - t0, 3)
    mark("mkfs", name)
    mnt = "/run/powercut/mnt"
    os.makedirs(mnt, exist_ok=True)
    mount = ["mount", "-t", fs["fstype"]] + (["-o", fs["mount_opts"]] if fs["mount_opts"] else []) + [dev, mnt]
    process.run(mount, timeout=120)
    scripts = os.path.dirname(sys.executable)
    if job.get("tools_dir"):  # the C powercut-mark, ahead of the Python one
        scripts = f"{job['tools_dir']}:{scripts}"
    env = {"PATH": f"{scripts}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "POWERCUT_DM_NAME": name, "POWERCUT_DEVICE": dev, "POWERCUT_MOUNT": mnt, "POWERCUT_FSTYPE": fs["fstype"],
           "POWERCUT_PARAMS": json.dumps(job["workload"].get("params") or {})}
    res["uptime_workload_start"] = uptime()
    (jobdir / "started").write_text(f"{time.time()}\n")
    res.update(run_workload(job, env, mnt, jobdir))
    for attempt in range(5):
        try:
            process.run(["umount", mnt], timeout=120)
            break
        except CommandFailed:
            if attempt == 4:
                raise
            time.sleep(0.5)
    res.update(log_writes_status(name))
    process.run(["dmsetup", "remove", "--noudevsync", name], timeout=120)
    return res


def mark_bench(job: dict[str, Any], jobdir: Path) -> dict[str, Any]:
    """Cost per mark: the ioctl from Python vs forking powercut-mark, on a real log-writes target."""
    data, logdev = find_disk(job["disks"]["data"]), find_disk(job["disks"]["log"])
    name = job["dm_name"]
    dm_create(name, f"0 {sectors(data)} log-writes {data} {logdev}")
    n = int(job.get("n", 200))
    t = time.perf_counter()
    for i in range(n):
        mark(f"ioctl:{i}", name)
    ioctl_s = (time.perf_counter() - t) / n
    env = dict(os.environ, POWERCUT_DM_NAME=name)
    m = max(10, n // 10)
    costs = {}
    tools = {"python": os.path.join(os.path.dirname(sys.executable), "powercut-mark")}
    if job.get("tools_dir"):
        tools["c"] = os.path.join(job["tools_dir"], "powercut-mark")
    for kind, tool in tools.items():
        t = time.perf_counter()
        for i in range(m):
            subprocess.run([tool, f"{kind}:{i}"], env=env, check=True)
        costs[f"cmd_{kind}_us"] = round((time.perf_counter() - t) / m * 1e6, 1)
    status = log_writes_status(name)
    process.run(["dmsetup", "remove", "--noudevsync", name], timeout=120)
    return {"ioctl_marks": n, "ioctl_us": round(ioctl_s * 1e6, 1), "cmd_marks": m, **costs, **status}


def _append(path: Path, obj: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(obj, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())


def check(job: dict[str, Any], jobdir: Path) -> dict[str, Any]:
    """The checker VM: rebuild the listed states with dm-snapshot over an incrementally replayed
    pristine (on a scratch disk) and judge each; progress.jsonl gets a "begin" line before and the
    verdict after each state, so the host can attribute a panic or hang to its state."""
    from .check import CheckerSpec, judge
    from .log import open_log
    from .models import state_from_id
    from .replay import materialize

    scratch = find_disk(job["disks"]["scratch"])
    work = "/run/powercut/work"
    os.makedirs(work, exist_ok=True)
    process.run(["mkfs.ext4", "-F", "-q", "-E", "nodiscard", "-O", "^has_journal", scratch], timeout=300)
    process.run(["mount", "-o", "noatime", scratch, work], timeout=60)
    checker = CheckerSpec(**job["checker"])
    progress = jobdir / "progress.jsonl"
    n = 0
    with open_log(job["log"]) as index:
        states = [state_from_id(index, i) for i in job["states"]]
        for state, img in materialize(index, None, job["size"], states, Path(work), provider="dm-snapshot"):
            _append(progress, {"begin": state.id})
            v = judge(str(img), job["fstype"], state, checker, job["params"], "/run/powercut/mnt",
                      mount_opts=job.get("mount_opts", ""))
            _append(progress, {"verdict": v.to_json()})
            n += 1
    process.run(["umount", work], timeout=60, check=False)
    return {"judged": n}


JOBS = {"record": record, "mark-bench": mark_bench, "check": check}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    jobfile = Path(args[0])
    jobdir = jobfile.parent
    logging.basicConfig(filename=jobdir / "agent.log", level=logging.DEBUG,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    job = json.loads(jobfile.read_text())
    result: dict[str, Any] = {"ok": False}
    try:
        result.update(JOBS[job["kind"]](job, jobdir))
        result["ok"] = True
    except PowercutError as e:
        log.error("%s", e)
        result["error"] = e.one_line()
        if isinstance(e, CommandFailed):
            result["stderr_tail"] = e.stderr_tail
    except Exception as e:  # reported to the host, which turns it into one clear line
        log.exception("guest job crashed")
        result["error"] = f"guest agent crashed: {type(e).__name__}: {e}"
    (jobdir / "result.json").write_text(json.dumps(result, indent=1))
    os.sync()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

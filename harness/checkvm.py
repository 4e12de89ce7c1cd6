"""``--check-in vm`` (the default): one long-lived checker VM judges many states.

The guest rebuilds each state with dm-snapshot over an incrementally replayed pristine (no boot per
state) and streams a "begin" line and then the verdict of each state to ``progress.jsonl`` in the
job share.  The host copies each verdict into the journal (fsync'd) as it arrives.  A state that
panics the guest kernel, or hangs longer than the per-state timeout, is that state's finding
(kernel-panic / timeout): the VM is restarted and the campaign goes on with the next state."""
from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .check import CheckerSpec, Journal, Verdict, split_by_base
from .config import DiskSpec, ShareSpec, VmSpec
from .errors import GuestHang, GuestPanic, PowercutError, VmError
from .models import CrashState

log = logging.getLogger(__name__)

MAX_FAILED_BOOTS = 2


class _Tail:
    """Follows progress.jsonl: which state is in progress, new verdicts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0
        self.current: str | None = None
        self.since = time.monotonic()
        self.verdicts: list[Verdict] = []

    def poll(self) -> list[Verdict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.pos += end
        new = []
        for line in data[:end].splitlines():
            obj = json.loads(line)
            if "begin" in obj:
                self.current, self.since = obj["begin"], time.monotonic()
            else:
                v = Verdict.from_json(obj["verdict"])
                new.append(v)
                self.current = None
        return new


def check_vm(rec_dir: Path, index: Any, data_size: int, fstype: str, states: list[CrashState], checker: CheckerSpec,
             params: dict[str, Any], journal: Journal, workdir: Path, *, accel: str = "auto", memory_mb: int = 1024,
             state_timeout: float = 300.0, on_verdict: Callable[[Verdict], None] | None = None,
             mount_opts: str = "") -> None:
    from powercut.images.build import build_image

    from .record import job_script
    from .vm.qemu import run_vm

    image = build_image()
    by_id = {s.id: s for s in states}
    boots_without_progress = 0
    attempt = 0
    while True:
        todo = [s for s in states if s.id not in journal.done]
        if not todo:
            return
        ordered = split_by_base(index, todo, 1)[0]
        attempt += 1
        run = workdir / f"vm{attempt}"
        if run.exists():
            shutil.rmtree(run)
        jobdir = run / "job"
        jobdir.mkdir(parents=True)
        scratch = run / "scratch.img"
        with open(scratch, "wb") as f:
            f.truncate(3 * data_size + (512 << 20))
        job = {"kind": "check", "log": f"/run/powercut/rec/{Path(index.path).name}", "size": data_size,
               "fstype": fstype, "mount_opts": mount_opts, "params": params,
               "checker": {"name": checker.name, "command": checker.command, "timeout_s": checker.timeout_s},
               "states": [s.id for s in ordered], "disks": {"scratch": "pcscratch"}}
        (jobdir / "job.json").write_text(json.dumps(job))
        (jobdir / "job.sh").write_text(job_script("/run/powercut/job"))
        spec = VmSpec(kernel=image.kernel, initrd=image.initrd, memory_mb=memory_mb,
                      disks=(DiskSpec(str(scratch), "pcscratch", cache="unsafe"),),
                      shares=(ShareSpec("hostroot", "/"), ShareSpec("job", str(jobdir), readonly=False),
                              ShareSpec("rec", str(Path(index.path).parent))),
                      accel=accel,  # type: ignore[arg-type]
                      timeout_s=60 + state_timeout * (len(ordered) + 1), console_path=str(run / "console.log"),
                      name=f"powercut-check-{os.getpid()}", modules=(fstype,), cmdline=("powercut.mount=rec",))
        tail = _Tail(jobdir / "progress.jsonl")
        lock = threading.Lock()
        progressed = False

        def drain() -> None:
            nonlocal progressed
            with lock:
                for v in tail.poll():
                    if v.state not in journal.done:
                        journal.add(v)
                        progressed = True
                        if on_verdict:
                            on_verdict(v)

        def watchdog() -> str | None:
            drain()
            if tail.current and time.monotonic() - tail.since > state_timeout:
                return f"state {tail.current} did not finish within {state_timeout:g} s"
            return None

        failure: VmError | None = None
        try:
            run_vm(spec, rundir=run, watchdog=watchdog)
        except VmError as e:
            failure = e
        drain()
        if failure is None:
            result = _result(jobdir)
            if not result.get("ok"):
                raise PowercutError(f"the checker VM failed: {result.get('error')} (see {jobdir}/agent.log)")
            continue
        culprit = tail.current
        if culprit is None or culprit not in by_id:
            boots_without_progress = 0 if progressed else boots_without_progress + 1
            if boots_without_progress >= MAX_FAILED_BOOTS:
                raise PowercutError(f"the checker VM failed {MAX_FAILED_BOOTS} times before judging any state: "
                                    f"{failure.one_line()}")
            continue
        s = by_id[culprit]
        kind = "kernel-panic" if isinstance(failure, GuestPanic) else "timeout" if isinstance(failure, GuestHang) \
            else "kernel-panic"
        tail_lines = [line for line in failure.console_tail.splitlines() if line.strip()][-3:]
        v = Verdict(s.id, s.model, s.cut, kind, (failure.one_line(), *tail_lines), len(s.acks), len(s.begun),
                    round(time.monotonic() - tail.since, 3))
        journal.add(v)
        if on_verdict:
            on_verdict(v)
        log.warning("state %s: %s; restarting the checker VM", s.id, kind)


def _result(jobdir: Path) -> dict[str, Any]:
    try:
        return json.loads((jobdir / "result.json").read_text())
    except (OSError, ValueError):
        return {"ok": False, "error": "the guest agent wrote no result"}

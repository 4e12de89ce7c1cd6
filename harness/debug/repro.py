"""``powercut repro`` (host): rebuild one failing state -- from a repro bundle, or from a recording and
a state id -- and judge it again where checks run (a checker VM by default: a possibly corrupt
image never meets the host kernel), optionally keeping its image."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext, context_for
from powercut.check.host import check_host
from powercut.check.vm import VmCheckSpec, check_vm, shell_vm
from powercut.core.dmlog import open_log
from powercut.core.models import space
from powercut.core.verdict import Verdict
from powercut.debug import bundle
from powercut.errors import UsageError
from powercut.linux import filesystems
from powercut.record import recording
from powercut.replay.materialize import replay_state


@dataclass(frozen=True, slots=True)
class Target:
    """What a repro needs: the log, the data device size, how to judge, and what was seen before."""

    log_path: Path
    size: int
    initial: Path | None
    ctx: CheckContext
    state: str
    before: str = ""              # the verdict the bundle recorded ("" for a recording)
    source: str = ""


def resolve(path: str, state: str = "") -> Target:
    p = Path(path)
    if (p / bundle.MANIFEST).exists():
        b = bundle.load(p)
        fs = filesystems.get(str(b.doc["fstype"]))
        ctx = CheckContext(fs, b.checker, dict(b.doc.get("params") or {}), str(b.doc.get("mount_opts", "")))
        return Target(b.log_path, int(b.doc["data_size"]), None, ctx, state or b.state, str(b.doc.get("verdict", "")),
                      f"bundle {p}")
    if (p / recording.MANIFEST).exists():
        if not state:
            raise UsageError(f"{path} is a recording: give the state to rebuild with --state ID")
        rec = recording.load(p).require_ok()
        return Target(rec.log_path, rec.data_size, rec.initial_image, context_for(rec), state, "", f"recording {p}")
    raise UsageError(f"{path}: neither a repro bundle ({bundle.MANIFEST}) nor a recording ({recording.MANIFEST})")


def run(target: Target, *, check_in: str = "vm", accel: str = "auto", keep_image: str = "",
        state_timeout_s: float = 300.0) -> Verdict:
    """Judge the target's state once; ``keep_image``: also write its (unrecovered) image there."""
    got: list[Verdict] = []
    work = Path(tempfile.mkdtemp(prefix="powercut-repro-"))
    try:
        with open_log(target.log_path) as index:
            st = space(index).state_from_id(target.state)
            if keep_image:
                replay_state(target.log_path, target.state, keep_image, size=target.size, initial=target.initial)
            if check_in == "host":
                check_host(target.ctx, index, target.size, [st], got.append, work, initial=target.initial)
            else:
                spec = VmCheckSpec.default(accel=accel, state_timeout_s=state_timeout_s)
                check_vm(target.ctx, target.log_path, index, target.size, [st], got.append, work, spec)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not got:
        raise UsageError(f"state {target.state} was not judged")
    return got[0]


def shell(target: Target, *, accel: str = "auto") -> Verdict | None:
    """Judge the state in a checker VM, then a shell in it on the recovered, mounted state."""
    work = Path(tempfile.mkdtemp(prefix="powercut-shell-"))
    try:
        with open_log(target.log_path) as index:
            st = space(index).state_from_id(target.state)
            return shell_vm(target.ctx, target.log_path, target.size, st, work, VmCheckSpec.default(accel=accel))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def describe(target: Target, v: Verdict) -> list[str]:
    lines = [f"{target.state} ({target.source}): {v.verdict}"]
    lines += [f"  {r}" for r in v.reasons[:8]]
    if target.before:
        same = "the same verdict as in the bundle" if v.verdict == target.before else \
            f"the bundle recorded {target.before}"
        lines.append(f"  {'still fails' if v.failed else 'no longer fails'}: {same}")
    return lines


def exit_status(v: Verdict) -> int:
    return 3 if v.failed else 0


def info(target: Target) -> dict[str, Any]:
    return {"log": str(target.log_path), "size": target.size, "state": target.state, "fstype": target.ctx.fs.name}

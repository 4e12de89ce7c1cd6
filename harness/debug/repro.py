"""``powercut repro`` (host): rebuild one failing state -- from a repro bundle, or from a recording and
a state id -- and judge it again where checks run (a checker VM by default: a possibly corrupt
image never meets the host kernel), optionally keeping its image."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext, LogSource, context_for, with_faults
from powercut.check.place import Place
from powercut.check.vm import shell_vm
from powercut.core import causes
from powercut.core.dmlog import open_log
from powercut.core.models import space
from powercut.core.verdict import Verdict
from powercut.debug import bundle
from powercut.errors import UsageError
from powercut.linux import filesystems
from powercut.record import recording
from powercut.replay.materialize import replay_state

CHECKER_SAID = ("lost-ack", "corrupt-data", "fail", "checker-crashed")   # verdicts only a checker gives


@dataclass(frozen=True, slots=True)
class Target:
    """What a repro rebuilds (the log source and the state), how it is judged, and what was seen before."""

    src: LogSource
    ctx: CheckContext
    state: str
    before: str = ""              # the verdict the bundle recorded ("" for a recording)
    source: str = ""
    why: dict[str, Any] | None = None   # the bundle's cause in the program's terms (debug/cause.py)


def resolve(path: str, state: str = "") -> Target:
    p = Path(path)
    if (p / bundle.MANIFEST).exists():
        b = bundle.load(p)
        fs = filesystems.get(str(b.doc["fstype"]))
        ctx = CheckContext(fs, b.checker, dict(b.doc.get("params") or {}), str(b.doc.get("mount_opts", "")))
        before = str(b.doc.get("verdict", ""))
        if before in CHECKER_SAID and not (b.checker.name or b.checker.command or b.checker.function):
            raise UsageError(f"bundle {p} names no checker, but its verdict {before} came from one: judged without "
                             "it the state would seem to pass; write the bundle again with powercut check")
        b.checker.validate()   # a command this machine cannot run is refused here, not judged as "no longer fails"
        return Target(LogSource(b.log_path, int(b.doc["data_size"])), ctx, state or b.state,
                      str(b.doc.get("verdict", "")), f"bundle {p}", b.doc.get("why") or None)
    if (p / recording.MANIFEST).exists():
        if not state:
            raise UsageError(f"{path} is a recording: give the state to rebuild with --state ID")
        rec = recording.load(p).require_ok()
        recording.verify_log(rec)
        return Target(LogSource.of(rec), context_for(rec), state, "", f"recording {p}")
    raise UsageError(f"{path}: neither a repro bundle ({bundle.MANIFEST}) nor a recording ({recording.MANIFEST})")


def run(target: Target, place: Place, *, keep_image: str = "") -> Verdict:
    """Judge the target's state once where ``place`` says; ``keep_image``: also write its
    (unrecovered) image there."""
    got: list[Verdict] = []
    place.require()
    src = target.src
    work = Path(tempfile.mkdtemp(prefix="powercut-repro-"))
    try:
        with open_log(src.path) as index:
            st = space(index).state_from_id(target.state)
            if keep_image:
                replay_state(src.path, target.state, keep_image, size=src.size, initial=src.initial)
            place.judge(with_faults(target.ctx, index), src, index, [st], got.append, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not got:
        raise UsageError(f"state {target.state} was not judged")
    return got[0]


def shell(target: Target, place: Place) -> Verdict | None:
    """Judge the state in a checker VM, then a shell in it on the recovered, mounted state."""
    work = Path(tempfile.mkdtemp(prefix="powercut-shell-"))
    try:
        with open_log(target.src.path) as index:
            st = space(index).state_from_id(target.state)
            return shell_vm(target.ctx, target.src, st, work, place.vm())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def describe(target: Target, v: Verdict) -> list[str]:
    lines = []
    if target.why and v.failed:   # the cause in the program's terms leads, as in the check that found it
        c = causes.Cause.from_json(target.why)
        lines += [f"cause ({c.rule}): {c.sentence}", *(f"  | {e}" for e in c.evidence[-4:])]
    lines.append(f"{target.state} ({target.source}): {v.verdict}")
    lines += [f"  {r}" for r in v.reasons[:8]]
    if target.before:
        same = "the same verdict as in the bundle" if v.verdict == target.before else \
            f"the bundle recorded {target.before}"
        lines.append(f"  {'still fails' if v.failed else 'no longer fails'}: {same}")
    return lines


def exit_status(v: Verdict) -> int:
    return 3 if v.failed else 0


def info(target: Target) -> dict[str, Any]:
    return {"log": str(target.src.path), "size": target.src.size, "state": target.state, "fstype": target.ctx.fs.name}

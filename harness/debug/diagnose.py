"""From a failing state to its cause (host and guest): minimize it by judging candidate states for
real (core/shrink.py drives, this module materializes and judges), then blame the minimized state's
writes (debug/blame.py) on the recovered image of its cut; for the verdict matrix, whether a failing
torn state needs its tear (``without_tear``: its twin without the tear fails alike -- the same verdict
and the same reason kinds, ``fails_alike``/``reason_kind``).  Runs where the check runs: on the host over
loop devices, or inside the checker VM over dm-snapshots (``provider``)."""
from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext
from powercut.check.judge import judge
from powercut.core.crashstate import CrashState
from powercut.core.models import CrashSpace
from powercut.core.shrink import Judged, minimize, reason_class
from powercut.core.verdict import Verdict
from powercut.debug.blame import Culprit, blame, writes_that_matter
from powercut.errors import UsageError
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import mount, umount
from powercut.replay.materialize import materialize

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 60


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A failing state, its minimized form and the writes it comes down to."""

    state: str
    verdict: str
    minimized: str
    minimized_reasons: tuple[str, ...]
    reason_class: str
    calls: int
    one_at_a_time: int
    exhausted: bool
    culprits: tuple[Culprit, ...]
    seconds: float

    @property
    def cause(self) -> str:
        """What groups failures of one bug: the verdict, its reason class and what the culprits are."""
        short = {"lost": "lost", "torn": "torn", "not": "late", "durable,": "present"}
        objs = sorted({f"{short.get(c.how.split(' ')[0], c.how)} {c.what}" + (f" of {c.path}" if c.path else "")
                       for c in self.culprits})
        return f"{self.verdict}: {self.reason_class} <- " + ("; ".join(objs) or "no write (the cut alone)")

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "verdict": self.verdict, "minimized": self.minimized,
                "minimized_reasons": list(self.minimized_reasons), "reason_class": self.reason_class,
                "calls": self.calls, "one_at_a_time": self.one_at_a_time, "exhausted": self.exhausted,
                "culprits": [c.to_json() for c in self.culprits], "cause": self.cause, "seconds": self.seconds}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Diagnosis":
        cs = tuple(Culprit(**{k: v for k, v in c.items() if k != "text"}) for c in d.get("culprits", ()))
        return Diagnosis(str(d["state"]), str(d["verdict"]), str(d["minimized"]), tuple(d.get("minimized_reasons", ())),
                         str(d.get("reason_class", "")), int(d.get("calls", 0)), int(d.get("one_at_a_time", 0)),
                         bool(d.get("exhausted", False)), cs, float(d.get("seconds", 0.0)))


@dataclass(frozen=True, slots=True)
class Workspace:
    """What it takes to rebuild and judge states: the log, the data device, where to work."""

    index: Any
    size: int
    initial: Path | None
    workdir: Path
    provider: str = "auto"
    floor: int | None = None
    space: CrashSpace | None = None   # the log's CrashSpace, when the caller has one (else built per call)

    def crash_space(self) -> CrashSpace:
        return self.space if self.space is not None else CrashSpace(self.index)


def diagnose(ctx: CheckContext, ws: Workspace, state: CrashState, first: Verdict, *,
             budget: int = DEFAULT_BUDGET) -> Diagnosis:
    """Minimize ``state`` (judged ``first``) and blame what is left."""
    t0 = time.monotonic()
    sp = ws.crash_space()
    mnt = str(ws.workdir / "mnt")

    def judge_one(candidate: CrashState) -> Verdict:
        return _with_image(ws, candidate, lambda dev: judge(ctx, dev, candidate, mnt))

    floor = ws.floor if ws.floor is not None and ws.floor < state.cut else None
    shrunk = minimize(sp, state, judge_one, budget=budget, expected=first, floor=floor)
    culprits = tuple(blame_state(ctx, ws, sp, shrunk.minimized, mnt))
    return Diagnosis(state.id, first.verdict, shrunk.minimized.id, shrunk.reasons, shrunk.signature[1],
                     shrunk.calls, shrunk.one_at_a_time, shrunk.exhausted, culprits, round(time.monotonic() - t0, 2))


def blame_state(ctx: CheckContext, ws: Workspace, sp: CrashSpace, state: CrashState, mnt: str, *,
                settle: bool = False) -> list[Culprit]:
    """Blame on the image of the state's cut with every write kept (for a prefix state: up to the
    flush its cut came too early for), recovered by a mount; with ``settle`` up to the commit that
    follows the culprits (``settled``: delayed allocation writes a file's data before the journal
    commit that maps it, so on the image without it the data blocks read as free)."""
    items = writes_that_matter(sp, state)
    cut = max([state.cut] + [i + 1 for i, _ in items])  # for a prefix state: up to the flush it came before
    cut = settled(sp, cut) if settle else cut
    kept = sp.make_state("no-cache", min(cut, sp.n))

    def run(dev: str) -> list[Culprit]:
        try:
            mount(dev, mnt, ctx.fs.name, ctx.state_mount_opts)
            umount(mnt)
        except Exception as e:  # an unrecoverable image is still worth a try with the tools
            log.info("blame: recovery mount of %s failed: %s", kept.id, e)
        return blame(sp, state, ctx.fs.name, dev)

    return _with_image(ws, kept, run)


def settled(sp: CrashSpace, cut: int) -> int:
    """``cut`` moved past the next barrier flush at or after it and the FUA writes right after that
    flush (a journal's commit block): the image where the writes before ``cut`` are mapped."""
    b = next((e.index for e in sp.entries[max(cut - 1, 0):] if sp.is_barrier(e.index)), None)
    if b is None:
        return min(cut, sp.n)
    j = b + 1
    while j < sp.n and sp.entries[j].is_fua and sp.entries[j].changes_device:
        j += 1
    return max(cut, j)


def _with_image(ws: Workspace, state: CrashState, use: Any) -> Any:
    (ws.workdir / "diag").mkdir(parents=True, exist_ok=True)
    walk = materialize(ws.index, ws.initial, ws.size, [state], ws.workdir / "diag", ws.provider)
    with contextlib.closing(walk):
        for _, img in walk:
            if stat.S_ISBLK(os.stat(img).st_mode):
                return use(str(img))
            with LoopDevice(img) as dev:
                return use(dev)
    raise RuntimeError(f"no image for {state.id}")


def without_tear(ctx: CheckContext, ws: Workspace, state: CrashState, first: Verdict) -> str:
    """For a failing torn state: the id of the same state without its tear -- the torn write kept
    whole, or lost whole -- that fails the same way (``fails_alike``: the same verdict and the same
    reason kinds), or "" if the tear is needed for the failure.  A torn model combines tears with
    write-cache losses; a failure that survives the tear's removal is a write-cache finding, not a
    tear's.  The verdict alone is not enough (issue #37): a tear that makes a record fail its
    checksum, or makes a record without one read as garbage, is a torn-only bug even where the
    write-cache losses in the same state already fail with that verdict."""

    sp = ws.crash_space()
    mnt = str(ws.workdir / "mnt")
    ((t, _),) = state.torn
    for dropped in (state.dropped, tuple(sorted({*state.dropped, t}))):
        try:
            cand = sp.make_state("write-cache", state.cut, dropped)
        except UsageError:
            continue
        v = _with_image(ws, cand, lambda dev, c=cand: judge(ctx, dev, c, mnt))
        if fails_alike(v, first):
            return cand.id
    return ""


# -- the reason kind: what the torn-cell rule compares besides the verdict ------------------------

_QUOTED = re.compile(r"""(?<![\w'"])b?(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")(?!\w)""")
_DIRS = re.compile(r"(?<![\w/.])/(?:[^\s/:,;()\[\]]+/)+(?=[^\s/:,;()\[\]])")
_BRACKETED = re.compile(r"\[[^\[\]]*\]")
_MARK_KEY = re.compile(r"\b(ack|begin):[^\s,;()\[\]]+")


def reason_kind(reason: str) -> str:
    """The kind of failure a checker's reason names, without its instance (keys, offsets, byte
    counts, paths), by one rule that holds for any checker's text:

    1. particulars normalised: quoted strings and bytes reprs (``'k17'``, ``b'FS21'``) become
       ``'#'``; a mark's key (``ack:k17``, ``begin:7``) ``ack:#``; an absolute path its last
       component (the mount point differs between the check and this re-check); hex values, digit
       runs, lists and ranges of them ``#`` (core.shrink's reason_class); a bracketed list ``[#]``;
    2. then its head: the text before the first ``": "`` outside brackets (the whole text if none).
       Checkers name the kind of failure first and the particulars after the colon -- "acked txn(s)
       # lost: recovery keeps # transaction(s) and stops at <where and why>", "the database cannot
       open: <what stopped recovery>", "record #: checksum mismatch", "garbage: byte # at offset #",
       "pg_amcheck: <its line>".  What follows the colon is where recovery stopped or which byte
       differs: it differs between a write torn and the same write lost whole ("fails its CRC" vs
       "zeros at ..."), which are one bug.

    So "record 3: checksum mismatch" and "record 12: checksum mismatch" are one kind (``record #``),
    "lost ack:7" and "lost ack:k9" another (``lost ack:#``: no space after its colon)."""
    text = _MARK_KEY.sub(r"\1:#", _DIRS.sub("", _QUOTED.sub("'#'", reason)))
    text = _BRACKETED.sub("[#]", reason_class(text))
    depth = 0
    for i, c in enumerate(text):
        depth += (c in "([{") - (c in ")]}")
        if c == ":" and depth <= 0 and (i + 1 == len(text) or text[i + 1].isspace()) and text[:i].strip():
            return text[:i].strip()
    return text.strip()


def reason_kinds(reasons: Any) -> frozenset[str]:
    return frozenset(reason_kind(r) for r in reasons)


def fails_alike(twin: Judged, torn: Judged) -> bool:
    """The torn-cell rule: a failing torn state's twin without its tear fails the same way -- the
    same verdict and the same set of reason kinds (a kind the tear adds, or one it takes away, is
    the tear's).  A verdict or CheckResult each."""
    return (twin.verdict == torn.verdict and twin.verdict != "pass"
            and reason_kinds(twin.reasons) == reason_kinds(torn.reasons))

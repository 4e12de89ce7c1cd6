"""From a failing state of N >= 1 disks to its cause (host and guest): minimize it by judging
candidate states for real (core/judging/nodesshrink.py chooses them a disk at a time, core/judging/shrink.py for
each disk; this module materializes and judges), then blame each disk's minimized state
(debug/blame.py) on the recovered image of its cut; for the verdict matrix, whether a failing torn
state of one disk needs its tear (``without_tear``: its twin without the tear fails alike -- the
same verdict and the same reason kinds, ``fails_alike``/``reason_kind``).  Runs where the check
runs: on the host over loop devices, or inside the checker VM over dm-snapshots (``provider``);
one disk's images and mount point are ``workdir``'s own, node i's under ``n<i>``
(``Workspace.where``)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.check.context import CheckContext
from powercut.check.judge import judge_nodes
from powercut.core.judging.nodesshrink import minimize_nodes
from powercut.core.judging.shrink import Judged, reason_class
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import Nodes, NodesState
from powercut.debug.blame import Culprit, blame, writes_that_matter
from powercut.debug.diagnosis import Diagnosis, cause_of
from powercut.errors import UsageError
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import mount, umount
from powercut.replay.materialize import materialize

log = logging.getLogger(__name__)

DEFAULT_BUDGET = 60
# Where one disk's blame reads the image up to the commit after its culprits (``settled``), as a
# cluster's always did: ext4 and xfs allocate a file's data when it is written back, before the
# journal commit that maps it; btrfs copies on write, and a transaction's tree blocks mean nothing
# until the superblock after its barrier points at them.  On the image without that commit the data
# reads as free (append-fsync fsync=false: "free block", not "data block of /append.log").
SETTLE_FS = frozenset({"ext4", "xfs", "btrfs"})


@dataclass(frozen=True, slots=True)
class Workspace:
    """What it takes to rebuild and judge states of N >= 1 disks: their crash spaces (``disks``) and
    opened logs (``indexes``, node 0 first), the data devices' size, where to work, the image disk
    0's log starts from (check/context.LogSource's ``initial``; None: zeros), the snapshot provider,
    each disk's floor entry (the floor mark's; None: none)."""

    disks: Nodes
    indexes: tuple[LogIndex, ...]
    size: int
    workdir: Path
    initial: Path | None = None
    provider: str = "auto"
    floors: tuple[int | None, ...] = ()

    def where(self, what: str, node: int) -> Path:
        """Node ``node``'s directory for ``what`` (its images: ``diag``, its mount point: ``mnt``):
        ``workdir/what/n<node>``, whatever the number of nodes."""
        return self.workdir / what / f"n{node}"


def diagnose(
    ctx: CheckContext,
    ws: Workspace,
    state: NodesState,
    first: Verdict,
    *,
    budget: int = DEFAULT_BUDGET,
) -> Diagnosis:
    """Minimize ``state`` (judged ``first``; ``budget`` judge calls shared by the disks) and blame
    what is left on each disk.  Each disk's blame reaches the commit after its culprits
    (``blame_state``'s ``settle``): with several disks always, as the cluster's blame always did;
    with one, on the filesystems of ``SETTLE_FS`` (all three)."""
    t0 = time.monotonic()
    several = len(ws.disks) > 1
    shrunk = minimize_nodes(
        ws.disks,
        state,
        lambda cand: judge_state(ctx, ws, cand),
        budget=budget,
        expected=first,
        floors=ws.floors,
    )
    nodes = []
    for n, node_state in enumerate(shrunk.minimized.nodes):
        culprits = blame_state(ctx, ws, n, node_state, settle=several or ctx.fs.name in SETTLE_FS)
        nodes.append(
            {
                **(shrunk.nodes[n].to_json() if several else {}),
                "culprits": [c.to_json() for c in culprits],
            }
        )
    cause = cause_of(first.verdict, shrunk.signature[1], [node["culprits"] for node in nodes])
    return Diagnosis(
        state.id,
        first.verdict,
        shrunk.minimized.id,
        shrunk.reasons,
        shrunk.signature[1],
        shrunk.calls,
        shrunk.exhausted,
        tuple(nodes),
        cause,
        round(time.monotonic() - t0, 2),
        shrunk.one_at_a_time,
    )


def judge_state(ctx: CheckContext, ws: Workspace, state: NodesState) -> Verdict:
    """One state of the disks judged on its images (check/judge.judge_nodes: one disk's verdict has
    its cut, several disks' the instant)."""
    mnts = [str(ws.where("mnt", n)) for n in range(len(state.nodes))]
    at = state.cut
    with contextlib.ExitStack() as stack:
        devs = [stack.enter_context(_image(ws, n, s)) for n, s in enumerate(state.nodes)]
        return judge_nodes(ctx, devs, state.nodes, mnts, sid=state.id, model=state.model, at=at)


def blame_state(
    ctx: CheckContext, ws: Workspace, node: int, state: CrashState, *, settle: bool = False
) -> list[Culprit]:
    """Blame disk ``node``'s ``state`` on the image of its cut with every write kept (for a prefix
    state: up to the flush its cut came too early for), recovered by a mount; with ``settle`` up to
    the commit that follows the culprits (``settled``: delayed allocation writes a file's data
    before the journal commit that maps it, copy on write its trees before the superblock that
    points at them, so on the image without it the data blocks read as free)."""
    sp = ws.disks.nodes[node]
    items = writes_that_matter(sp, state)
    cut = max(
        [state.cut] + [i + 1 for i, _ in items]
    )  # for a prefix state: up to the flush it came before
    cut = settled(sp, cut) if settle else cut
    kept = sp.make_state("no-cache", min(cut, sp.n))
    mnt = ws.where("mnt", node)
    with _image(ws, node, kept) as dev:
        try:
            mnt.mkdir(parents=True, exist_ok=True)
            mount(dev, str(mnt), ctx.fs.name, ctx.state_mount_opts)
            umount(str(mnt))
        except Exception as e:  # an unrecoverable image is still worth a try with the tools
            log.info("blame: recovery mount of %s failed: %s", kept.id, e)
        return blame(sp, state, ctx.fs.name, dev)


def settled(sp: CrashSpace, cut: int) -> int:
    """``cut`` moved past the next barrier flush at or after it and the FUA writes right after that
    flush (a journal's commit block): the image where the writes before ``cut`` are mapped."""
    b = next((e.index for e in sp.entries[max(cut - 1, 0) :] if sp.is_barrier(e.index)), None)
    if b is None:
        return min(cut, sp.n)
    j = b + 1
    while j < sp.n and sp.entries[j].is_fua and sp.entries[j].changes_device:
        j += 1
    return max(cut, j)


@contextlib.contextmanager
def _image(ws: Workspace, node: int, state: CrashState) -> Iterator[str]:
    """Disk ``node``'s image of ``state`` as a block device (a loop device over a file image), while inside."""
    where = ws.where("diag", node)
    where.mkdir(parents=True, exist_ok=True)
    walk = materialize(
        ws.indexes[node], ws.initial if node == 0 else None, ws.size, [state], where, ws.provider
    )
    with contextlib.closing(walk):
        for _, img in walk:
            if stat.S_ISBLK(os.stat(img).st_mode):
                yield str(img)
            else:
                with LoopDevice(img) as dev:
                    yield dev
            return
    raise RuntimeError(f"no image for {state.id}")


def without_tear(ctx: CheckContext, ws: Workspace, state: CrashState, first: Verdict) -> str:
    """For a failing torn state of one disk: the id of the same state without its tear -- the torn
    write kept whole, or lost whole -- that fails the same way (``fails_alike``: the same verdict and
    the same reason kinds), or "" if the tear is needed for the failure.  A torn model combines tears with
    write-cache losses; a failure that survives the tear's removal is a write-cache finding, not a
    tear's.  The verdict alone is not enough (issue #37): a tear that makes a record fail its
    checksum, or makes a record without one read as garbage, is a torn-only bug even where the
    write-cache losses in the same state already fail with that verdict."""

    sp = ws.disks.nodes[0]
    ((t, _),) = state.torn
    for dropped in (state.dropped, tuple(sorted({*state.dropped, t}))):
        try:
            cand = sp.make_state("write-cache", state.cut, dropped)
        except UsageError:
            continue
        v = judge_state(ctx, ws, ws.disks.make(cand.model, [cand]))
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
        if (
            c == ":"
            and depth <= 0
            and (i + 1 == len(text) or text[i + 1].isspace())
            and text[:i].strip()
        ):
            return text[:i].strip()
    return text.strip()


def reason_kinds(reasons: Any) -> frozenset[str]:
    return frozenset(reason_kind(r) for r in reasons)


def fails_alike(twin: Judged, torn: Judged) -> bool:
    """The torn-cell rule: a failing torn state's twin without its tear fails the same way -- the
    same verdict and the same set of reason kinds (a kind the tear adds, or one it takes away, is
    the tear's).  A verdict or CheckResult each."""
    return (
        twin.verdict == torn.verdict
        and twin.verdict != "pass"
        and reason_kinds(twin.reasons) == reason_kinds(torn.reasons)
    )

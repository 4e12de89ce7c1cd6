"""Injected I/O errors from inside a recording's workload (guest side): ``powercut.fault(...)``,
``powercut.recover()``, and ``powercut-fault on|off`` for any language.

The recording job puts the filesystem on a device-mapper layer above dm-log-writes and names it in
$POWERCUT_FAULT_DEV (``<dm name>:<lower device>:<sectors>``).  A fault swaps that layer's table
(``dm.reload``: suspend without freezing the filesystem, load, resume), so a failed write or flush
never reaches the log and every crash state stays one the disk could hold:

* ``fault("eio-writes")`` -- dm-flakey with ``error_writes`` and an up interval of 0 (always down):
  every write and every flush (an fsync's cache flush included) fails with EIO; reads work.
* ``fault("eio-range", ranges)`` -- a linear table with dm ``error`` segments over the given
  512-byte sector ranges: reads and writes there fail with EIO; flushes and other sectors work (a
  disk with bad sectors, or a thin pool out of space under one file).  ``file_sectors(path)``
  gives a file's ranges (FIEMAP; its blocks must be allocated: preallocate, then fsync).
* ``recover()`` -- the plain linear table again (a transient error is over).

Each switch is an ordered mark in the log (core/log/faultwindows.py): ``powercut-fault:on:...`` before the
swap, ``powercut-fault:off`` after the swap back.

**The recording's fault plan** (``--fault`` on record and run, ``fault=`` in the pytest marker;
core/faults.FaultPlan) switches a fault without touching the program: $POWERCUT_FAULT_PLAN holds the
plan and $POWERCUT_FAULT_STATE its state file (JSON, under an flock: any number of processes mark).
Mark triggers run in the marking call itself (``plan_mark``, from marks.mark; the C powercut-mark
execs ``powercut-fault hook TEXT`` when TEXT matches $POWERCUT_FAULT_MARKS and the plan is not
spent), so the fault is on before the mark's caller goes on; write-count, time and start triggers
run in the recording job (guest/record.py).

**A cluster recording** (``--fault 1=PLAN``: core/recording/nodefaults.NodesFaults) has a fault layer per node,
each named in $POWERCUT_FAULT_NODES (node order); ``fault(kind, node=i)`` and ``recover(node=i)``
(``powercut-fault --node I on ...``) switch node i's, and its ``powercut-fault:`` marks go to node
i's log only, under the cluster's mark lock (the other logs' marks stay in step: a fault mark is not
a key mark, core/states/nodes.py).  $POWERCUT_FAULT_PLAN then holds the per-node setting and
$POWERCUT_FAULT_STATE names the state file of which each node's is a sibling (``node_state``): each
node's plan runs on its own (its trigger, its state, its window)."""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import struct
import sys
from dataclasses import dataclass
from typing import Any

from powercut._logmark import (
    MARK_NODES_ENV,
    TIMING_ENV,
    MarkError,
    insert,
    insert_on_nodes,
    node_pairs,
)
from powercut.core.log.faultwindows import FAULT_OFF, KINDS, FaultPlan, PlanState, on_mark
from powercut.core.recording.nodefaults import NodesFaults
from powercut.linux import dm, environ

FAULT_ENV = environ.FAULT_DEV
PLAN_ENV = environ.FAULT_PLAN
PLAN_STATE_ENV = environ.FAULT_STATE
PLAN_MARKS_ENV = environ.FAULT_MARKS  # the globs that may move the plan, one per line (C prefilter)
NODES_ENV = (
    environ.FAULT_NODES
)  # a cluster: every node's fault layer (Target.spec), comma separated
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_UNUSABLE = 0x2 | 0x4 | 0x8 | 0x80 | 0x100  # unknown, delalloc, encoded, not aligned, inline
EXTENT = struct.Struct("=QQQ2QI3I")  # struct fiemap_extent, 56 bytes
HEADER = struct.Struct("=QQIIII")  # struct fiemap, 32 bytes


class FaultError(OSError):
    pass


@dataclass(frozen=True, slots=True)
class Target:
    """The fault layer: its dm name, the device under it, its size (sectors); the log-writes target's
    name and order device for the switch marks (None: from the workload's environment); ``node``: a
    cluster's node (its marks go to its log only, under the cluster's mark lock), -1 for one disk."""

    name: str
    lower: str
    size: int
    dm_name: str | None = None
    order_dev: str | None = None
    node: int = -1

    @staticmethod
    def parse(spec: str, **kw: Any) -> "Target":
        name, _, rest = spec.partition(":")
        lower, _, size = rest.rpartition(":")
        if not name or not lower or not size.isdigit():
            raise FaultError(
                0, f"${FAULT_ENV} is not set: faults work only inside a powercut recording"
            )
        return Target(name, lower, int(size), **kw)

    def spec(self) -> str:
        return f"{self.name}:{self.lower}:{self.size}"

    def mark(self, text: str) -> None:
        """A switch mark into this layer's log (a cluster node's: its log alone, under the mark lock)."""
        if self.node >= 0:
            insert_on_nodes(text, f"{self.dm_name}={self.order_dev or ''}")
        else:
            insert(text, self.dm_name, self.order_dev)


def _device(node: int | None = None) -> Target:
    if node is not None and (node != 0 or environ.text(NODES_ENV)):
        return node_target(node)
    if not environ.text(FAULT_ENV) and environ.text(NODES_ENV):
        raise FaultError(
            0,
            "a cluster recording has a fault layer per node: name it (powercut.fault(kind, "
            "node=1); powercut-fault --node 1 on ...)",
        )
    return Target.parse(environ.text(FAULT_ENV))


def node_target(node: int) -> Target:
    """Node ``node``'s fault layer in a cluster recording ($POWERCUT_FAULT_NODES, $POWERCUT_NODES)."""
    specs = [s for s in environ.text(NODES_ENV).split(",") if s]
    names = node_pairs(environ.text(MARK_NODES_ENV))
    if not specs or len(names) != len(specs):
        raise FaultError(0, f"${NODES_ENV} is not set: node= works only inside a cluster recording")
    if not 0 <= node < len(specs):
        raise FaultError(0, f"node {node}: the cluster has nodes 0..{len(specs) - 1}")
    name, order = names[node]
    return Target.parse(specs[node], dm_name=name, order_dev=order, node=node)


def table(
    kind: str, lower: str, size: int, ranges: tuple[tuple[int, int], ...] = ()
) -> list[tuple[int, int, str, str]]:
    """The device-mapper table of the fault layer for ``kind`` ("" for none: plain linear)."""
    if not kind:
        return [(0, size, "linear", f"{lower} 0")]
    if kind == "eio-writes":
        return [(0, size, "flakey", f"{lower} 0 0 1 1 error_writes")]
    if kind != "eio-range":
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    out, pos = [], 0
    for start, n in sorted(ranges):
        if start < pos or start + n > size or n <= 0:
            raise ValueError(
                f"sector range {start}+{n} overlaps another or is outside the device ({size} sectors)"
            )
        if start > pos:
            out.append((pos, start - pos, "linear", f"{lower} {pos}"))
        out.append((start, n, "error", ""))
        pos = start + n
    if pos < size:
        out.append((pos, size - pos, "linear", f"{lower} {pos}"))
    return out


def fault(
    kind: str,
    ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...] = (),
    *,
    target: Target | None = None,
    node: int | None = None,
) -> None:
    """From now on the workload's device (a cluster's: node ``node``'s) fails I/O as ``kind`` says
    (see the module docstring).  In timing mode ($POWERCUT_TIMING: ``powercut bench --workload``)
    nothing fails: a no-op."""
    if environ.text(TIMING_ENV):
        return
    t = target or _device(node)
    rng = tuple((int(s), int(n)) for s, n in ranges)
    new = table(kind, t.lower, t.size, rng)  # validated before anything is marked
    t.mark(on_mark(kind, rng))
    try:
        dm.reload(t.name, new)
    except dm.DmError as e:
        raise FaultError(e.errno, f"cannot switch {t.name} to {kind}: {e}") from None


def recover(*, target: Target | None = None, node: int | None = None) -> None:
    """The device (a cluster's: node ``node``'s) works again (the plain linear table), then
    ``powercut-fault:off`` is marked."""
    if environ.text(TIMING_ENV):
        return
    t = target or _device(node)
    try:
        dm.reload(t.name, table("", t.lower, t.size))
    except dm.DmError as e:
        raise FaultError(e.errno, f"cannot switch {t.name} back: {e}") from None
    t.mark(FAULT_OFF)


def plan_env(plan: FaultPlan | NodesFaults, state_path: str) -> dict[str, str]:
    """What the workload's environment carries of a plan, or of a cluster's plans per node (the
    recording job sets it)."""
    plans = [plan] if isinstance(plan, FaultPlan) else [p for _, p in plan.nodes]
    globs = dict.fromkeys(g for p in plans for g in (p.on_glob, p.until) if g)
    return {PLAN_ENV: str(plan), PLAN_STATE_ENV: state_path, PLAN_MARKS_ENV: "\n".join(globs)}


def node_state(state_path: str, node: int) -> str:
    """Node ``node``'s plan state file in a cluster recording: a sibling of ``state_path``."""
    base = state_path.removesuffix(".json")
    return f"{base}-n{node}.json"


class PlanRun:
    """A plan and its state file, locked for each step (marks may come from many processes)."""

    def __init__(
        self, plan: FaultPlan, state_path: str, target: Target | None = None, mount: str = "."
    ) -> None:
        self.plan = plan
        self.path = state_path
        self.target = target
        self.mount = mount

    @staticmethod
    def from_env() -> "PlanRun | None":
        text, path = environ.text(PLAN_ENV), environ.text(PLAN_STATE_ENV)
        if not text or not path:
            return None
        return PlanRun(FaultPlan.parse(text), path, None, environ.text(environ.MOUNT, "."))

    @staticmethod
    def all_from_env() -> "list[PlanRun]":
        """The plan of one disk, or each planned node's of a cluster ($POWERCUT_FAULT_NODES set)."""
        if not environ.text(NODES_ENV):
            one = PlanRun.from_env()
            return [one] if one is not None else []
        text, path = environ.text(PLAN_ENV), environ.text(PLAN_STATE_ENV)
        mounts = environ.text(environ.MOUNTS).split(":")
        return (
            [
                PlanRun(
                    plan,
                    node_state(path, node),
                    node_target(node),
                    mounts[node] if node < len(mounts) else ".",
                )
                for node, plan in NodesFaults.parse(text).nodes
            ]
            if text and path
            else []
        )

    def state(self) -> PlanState:
        try:
            with open(self.path) as f:
                return PlanState.from_json(json.load(f))
        except FileNotFoundError:
            return PlanState()

    def _locked(self, move) -> str:
        fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            before = self.state()
            if before.error:
                return ""
            after, action = move(before)
            try:
                if action == "on":
                    self._on()
                elif action == "off":
                    recover(target=self.target)
            except (FaultError, MarkError, ValueError, OSError) as e:
                why = (
                    f"{e.filename}: {e.strerror}"
                    if isinstance(e, OSError) and e.filename and e.strerror
                    else str(e)
                )
                after = PlanState(
                    after.matches, before.on, before.off, f"fault plan '{self.plan}': {why}"
                )
                self._save(after)
                raise FaultError(getattr(e, "errno", 0) or 0, after.error) from None
            self._save(after)
            return action
        finally:
            os.close(fd)

    def _on(self) -> None:
        ranges = self.plan.sectors
        if self.plan.file:
            ranges = tuple(file_sectors(os.path.join(self.mount, self.plan.file)))
            if not ranges:
                raise FaultError(0, f"{self.plan.file} has no blocks on the device yet")
        fault(self.plan.kind, ranges, target=self.target)

    def _save(self, st: PlanState) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(st.to_json(), f)
        os.replace(tmp, self.path)
        spent = st.error or (st.on and (st.off or not self.plan.until))
        if spent:
            open(self.path + ".done", "w").close()

    def on_mark(self, text: str) -> str:
        """A user mark was inserted: move the plan; the action taken ("on", "off" or "")."""
        return self._locked(lambda st: self.plan.step(st, text))

    def fire(self) -> str:
        """A job-side trigger (start, writes, after) is met: switch on unless already on."""
        return self._locked(
            lambda st: (st, "") if st.on else (PlanState(st.matches, True, False), "on")
        )


def plan_mark(text: str) -> None:
    """Called by marks.mark after each mark it inserted: the plan's mark triggers.  A switch that
    cannot be made is a FaultError (the mark's caller sees it; the recording fails on it)."""
    if text.startswith("powercut-") or os.path.exists(environ.text(PLAN_STATE_ENV) + ".done"):
        return
    globs = [g for g in environ.text(PLAN_MARKS_ENV).split("\n") if g]
    if not any(fnmatch.fnmatchcase(text, g) for g in globs):
        return
    failed: FaultError | None = None
    for run in PlanRun.all_from_env():  # a cluster's nodes each move their own plan
        if os.path.exists(run.path + ".done"):
            continue
        try:
            run.on_mark(text)
        except FaultError as e:
            failed = failed or e
    if failed is not None:
        raise failed


def file_sectors(path: str) -> list[tuple[int, int]]:
    """The 512-byte sector ranges of the device that hold ``path``'s blocks (FIEMAP, without syncing:
    asking writes nothing back, so dirty data stays dirty for the fault to meet).  Every extent must
    be allocated and mapped one to one (not ext4 delalloc, not a compressed or inline extent; btrfs
    maps logical addresses, not the device's: refused): preallocate the file and fsync it first."""
    out: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _is_btrfs(os.path.realpath(path)):
            raise FaultError(
                0, f"{path}: btrfs extents are logical addresses, not the device's sectors"
            )
        start, count = 0, 64
        while True:
            buf = bytearray(HEADER.size + count * EXTENT.size)
            HEADER.pack_into(buf, 0, start, 2**64 - 1 - start, 0, 0, count, 0)
            fcntl.ioctl(fd, FS_IOC_FIEMAP, buf, True)
            mapped = HEADER.unpack_from(buf, 0)[3]
            last = False
            for i in range(mapped):
                logical, physical, length, _r1, _r2, flags, *_ = EXTENT.unpack_from(
                    buf, HEADER.size + i * EXTENT.size
                )
                if flags & FIEMAP_UNUSABLE:
                    raise FaultError(
                        0,
                        f"{path}: an extent at byte {logical} has no fixed place on the device "
                        f"(FIEMAP flags {flags:#x}): preallocate and fsync the file first",
                    )
                out.append((physical // 512, (length + 511) // 512))
                start = logical + length
                last = bool(flags & FIEMAP_EXTENT_LAST)
            if last or mapped == 0:
                return out
    finally:
        os.close(fd)


def _is_btrfs(path: str) -> bool:
    try:
        with open("/proc/self/mountinfo") as f:
            best = max(
                (line.split() for line in f),
                key=lambda p: len(p[4]) if path.startswith(p[4]) else -1,
            )
        return best[best.index("-") + 1] == "btrfs"
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    usage = (
        "usage: powercut-fault [--node I] on eio-writes | on eio-range (FILE | START+SECTORS) ... | off\n"
        f"  (inside a powercut recording: needs ${FAULT_ENV}, or a cluster's --node I; 'powercut-fault\n"
        "  hook MARK' is the C powercut-mark's call into the recording's fault plan)"
    )
    if not args or args[0] in ("-h", "--help"):
        print(usage, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    node: int | None = None
    if args[0] == "--node":
        if len(args) < 3 or not args[1].isdigit():
            print(usage, file=sys.stderr)
            return 2
        node, args = int(args[1]), args[2:]
    try:
        if args == ["off"]:
            recover(node=node)
        elif len(args) == 2 and args[0] == "hook":
            plan_mark(args[1])
        elif len(args) >= 2 and args[0] == "on" and args[1] in KINDS:
            ranges: list[tuple[int, int]] = []
            for a in args[2:]:
                s, plus, n = a.partition("+")
                ranges += (
                    [(int(s), int(n))] if plus and s.isdigit() and n.isdigit() else file_sectors(a)
                )
            fault(args[1], ranges, node=node)
        else:
            print(usage, file=sys.stderr)
            return 2
    except (FaultError, MarkError, ValueError, OSError) as e:
        print(f"powercut-fault: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Judge one crash state (host and guest): recover (mount: the kernel replays its journal, as after
a real power loss) -> the workload's checker -> unmount -> read-only fsck -> a verdict with reasons.

``judge_nodes`` (a state of N >= 1 disks; ``judge``: one disk's, the minimization's) works on any
block devices and runs wherever they are: on the host over loop devices (check/host.py) or inside
the checker VM over dm-snapshots (the guest agent, check/vm.py).  A mount
that fails carries the kernel's own words about it (its /dev/kmsg lines), so an unmountable state
can be told from a harness problem.  A lying-disk state with an unreadable sector is judged over a
device-mapper layer that fails reads there (linux/badsector.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import time
from collections.abc import Sequence

from powercut.check.context import CheckContext
from powercut.check.readtrace import ReadTracer
from powercut.checker import CheckInput, CheckResult
from powercut.core.crashmodels.lies import unreadable_of
from powercut.core.judging.verdict import Verdict, lie_verdict
from powercut.core.states.crashstate import CrashState
from powercut.errors import CheckerError
from powercut.linux import process
from powercut.linux.badsector import unreadable
from powercut.linux.mounts import MountError, mount, umount

log = logging.getLogger(__name__)

KMSG_LINES = 6


def fsck(ctx: CheckContext, device: str) -> tuple[bool, str]:
    """Read-only fsck: (clean, what it said: the meaning of its exit code and its last lines)."""
    res = process.run(ctx.fs.fsck_argv(device), timeout=ctx.fsck_timeout_s, check=False)
    if res.returncode in ctx.fs.fsck_clean:
        return True, "clean"
    text = (res.stdout + res.stderr).strip().splitlines()
    return False, f"{ctx.fs.fsck[0]} {ctx.fs.explain_fsck(res.returncode)}: " + " | ".join(
        text[-3:]
    )


def judge(ctx: CheckContext, device: str, state: CrashState, mnt: str) -> Verdict:
    """The verdict for one disk's state whose image is the block device ``device`` (``judge_nodes``
    of one disk)."""
    return judge_nodes(
        ctx, (device,), (state,), (mnt,), sid=state.id, model=state.model, at=state.cut
    )


def judge_nodes(
    ctx: CheckContext,
    devices: Sequence[str],
    states: Sequence[CrashState],
    mnts: Sequence[str],
    *,
    sid: str,
    model: str,
    at: int,
    t0: float | None = None,
) -> Verdict:
    """The verdict for one state of N >= 1 disks (one disk's, or each node's of a cluster state:
    core/states/nodes.NodesState) whose images are the block devices ``devices``, mounted at ``mnts``.
    ``sid``, ``model``: the state's; ``at``: where it lies (one disk: its cut; a cluster: its
    instant); ``t0``: when its judging began (default: now).

    Every disk is mounted in turn (the kernel recovers each).  A disk that fails to mount is the
    state's finding (``mount-failed``) with the kernel's words and that disk's fsck; the checker
    does not run then.  Else the workload's checker is given every mount (``CheckInput.mounts``
    for several disks, the first as ``mount``); a failure of a recording with injected I/O errors
    is judged again with the acks made before the first error (``after_error``); every disk is
    unmounted and fsck'd read-only, and a disk's fsck error makes a passing state ``fsck-error``.
    A lying-disk state (core/crashmodels/lies.py) is judged over its unreadable sector's EIO layer, if it has
    one, and its verdict read as "noticed or served" (verdict.lie_verdict).  With several disks
    each reason about one disk names it (``node i: ``).  With ``ctx.trace_reads`` the verdict's
    ``read`` says what the checker opened and read (check/readtrace.py; its first run, not
    ``after_error``'s), the same verdict all the same."""
    t0 = time.monotonic() if t0 is None else t0
    with contextlib.ExitStack() as layers:
        devs = [
            layers.enter_context(unreadable(dev, unreadable_of(s)))
            for dev, s in zip(devices, states)
        ]
        v = _judge(ctx, devs, states, mnts, sid, model, at, t0)
    seen = lie_verdict(v.verdict, model)
    if seen == v.verdict:
        return v
    return dataclasses.replace(
        v, verdict=seen, reasons=(*v.reasons, f"({v.verdict} under a lying disk is {seen})")
    )


def _judge(
    ctx: CheckContext,
    devs: Sequence[str],
    states: Sequence[CrashState],
    mnts: Sequence[str],
    sid: str,
    model: str,
    at: int,
    t0: float,
) -> Verdict:
    reasons: list[str] = []
    first = states[0]  # every disk's state tells the same keys (one instant)
    several = len(devs) > 1

    def node(i: int) -> str:
        return f"node {i}: " if several else ""

    tracer: ReadTracer | None = None

    def done(verdict: str) -> Verdict:
        return Verdict(
            sid,
            model,
            at,
            verdict,
            tuple(reasons),
            len(first.acks),
            len(first.begun),
            round(time.monotonic() - t0, 3),
            read=tracer.files() if tracer is not None else (),
        )

    mounted: list[str] = []
    t_mount = time.monotonic()
    try:
        for i, (dev, mnt) in enumerate(zip(devs, mnts)):
            os.makedirs(mnt, exist_ok=True)
            kmsg = KernelLog()
            try:
                mount(dev, mnt, ctx.fs.name, ctx.state_mount_opts)
            except MountError as e:
                reasons.append(f"{node(i)}mount failed: {e.one_line()}")
                reasons.extend(
                    f"{node(i)}kernel: {line}" for line in kmsg.lines_about(dev, ctx.fs.name)
                )
                for m in reversed(mounted):
                    unmount(m)
                mounted = []
                ok, report = fsck(ctx, dev)
                reasons.append(f"{node(i)}fsck: {report}")
                return done("mount-failed")
            finally:
                kmsg.close()
            mounted.append(mnt)
        t_checker = time.monotonic()
        try:
            # CheckInput makes a KeyPrefix (state.acks) a tuple
            given = CheckInput(
                mnts[0],
                first.acks,  # type: ignore[arg-type]
                first.begun,
                ctx.params,
                sid,
                mounts=tuple(mnts) if several else (),
            )
            if ctx.trace_reads:  # the files under the mounts sized now, then the checker traced
                tracer = ReadTracer(ctx.checker, mnts)
                result = tracer.run(given)
            else:
                result = ctx.checker.run(given)
            if result.verdict in AFTER_ERROR_FROM:
                result = after_error(ctx, first, given, result)
        except CheckerError:  # the checker cannot run or answers no verdict: the harness's error
            raise
        except Exception as e:  # a checker's bug is that state's finding, not the campaign's end
            log.exception("checker crashed on %s", sid)
            result = CheckResult("checker-crashed", (f"{type(e).__name__}: {e}",))
    finally:
        t_umount = time.monotonic()
        for m in reversed(mounted):
            unmount(m)
    reasons.extend(result.reasons)
    verdict = result.verdict
    t_fsck = time.monotonic()
    for i, dev in enumerate(devs):
        ok, report = fsck(ctx, dev)
        if not ok:
            reasons.append(f"{node(i)}fsck: {report}")
            verdict = verdict if verdict != "pass" else "fsck-error"
    log.debug(
        "%s: mount %.3f checker %.3f umount %.3f fsck %.3f s",
        sid,
        t_checker - t_mount,
        t_umount - t_checker,
        t_fsck - t_umount,
        time.monotonic() - t_fsck,
    )
    return done(verdict)


AFTER_ERROR_FROM = ("fail", "lost-ack", "corrupt-data")
BUSY_RETRIES_S = (0.0005, 0.001, 0.002, 0.004)


def unmount(mnt: str) -> None:
    """umount(2) the state's mount.  A busy mount is retried within milliseconds first: with two
    host workers about 2% of unmounts meet a passing EBUSY (another thread's fork -- an fsck --
    holds a copy of this process's open files, a checker's under this mount among them, until it
    execs), where ``umount``'s backoff for a truly busy mount waits 0.1 s; it takes over after
    these few milliseconds, lazy detach and all."""
    for delay in BUSY_RETRIES_S:
        try:
            umount(mnt, attempts=1, lazy_fallback=False)
            return
        except MountError as e:
            if e.errno != errno.EBUSY:
                raise
        log.debug("%s busy: retrying in %.1f ms", mnt, delay * 1000)
        time.sleep(delay)
    umount(mnt)


def after_error(
    ctx: CheckContext, state: CrashState, given: CheckInput, result: CheckResult
) -> CheckResult:
    """A failing state of a recording with injected I/O errors, judged again (same mount) with only
    the acks a program that stops at its first error could have made (core/log/faultwindows.py; a
    cluster's: at the first error any node's disk gave, CheckContext.trusted_acks): passing then, it
    fails because of acks made after an error -- ``acked-after-error``, naming the node(s) whose
    device failed.  Otherwise the failure stands as the checker said."""
    found = ctx.trusted_acks(state.acks)
    if found is None:
        return result
    trusted, who, why = found
    dropped = state.acks[len(trusted) :]
    begun = tuple(dict.fromkeys((*state.begun, *dropped)))
    again = ctx.checker.run(dataclasses.replace(given, acked=trusted, begun=begun))
    if again.verdict != "pass":
        return result
    key = dropped[0]
    return CheckResult(
        "acked-after-error",
        (
            f"commit {key} was acked after {who} failed I/O during it ({why}); with only the "
            f"{len(trusted)} ack(s) before it the state passes: acks {list(dropped[:8])} are the program's "
            f"after an I/O error, and {result.verdict}: " + "; ".join(result.reasons[:2]),
        ),
    )


class KernelLog:
    """The kernel's messages from now on (/dev/kmsg, read without blocking); empty where the
    kernel log cannot be read (not root)."""

    def __init__(self) -> None:
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            self.fd = -1

    def read(self) -> list[str]:
        out: list[str] = []
        while self.fd >= 0:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as e:  # EPIPE: records were overwritten; go on from the next one
                if e.errno == 32:
                    continue
                break
            if not rec:
                break
            head, _, msg = rec.decode(errors="replace").partition(";")
            out.append(msg.split("\n", 1)[0].strip())
        return out

    def lines_about(self, device: str, fstype: str) -> list[str]:
        """The messages naming the device (``XFS (loop3): ...``, ``EXT4-fs (dm-2): ...``) or the
        filesystem, the last few."""
        dev = os.path.basename(os.path.realpath(device))
        names = (dev, fstype.upper(), f"{fstype}:", "BTRFS", "EXT4-fs")
        lines = [m for m in self.read() if any(n in m for n in names)]
        return [m for m in lines if dev in m or fstype.upper() in m.upper()][-KMSG_LINES:]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

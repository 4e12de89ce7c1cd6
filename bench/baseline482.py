"""fstests' generic/482 procedure, done the way its scripts and ``replay-log`` do it (issue #42), as
the baseline of bench_check.py:

* the states: every FUA entry from the ``mkfs`` mark on (``_log_writes_find_next_fua``: the first
  entry at or after the start whose flags have FUA, then again from the entry after it);
* per state: replay the log **from entry 0** onto one reused block device up to and including that
  entry (``replay-log -vv --replay DEV --limit N+1``: per entry, one read of its header sector and
  one read of its data from the log, one ``pwrite`` of the data -- ``BLKDISCARD`` for a discard, no
  write for a mark or an empty flush -- each entry printed, then one ``fsync`` of the device), then
  ``mount``, ``umount`` and ``fsck -t FSTYPE -nf`` (``_dmthin_mount``, ``_dmthin_check_fs``).

Nothing between states resets the device, as in the test: replaying from entry 0 rewrites every
block the log wrote.  With ``replay_log`` (a path to fstests' own ``src/log-writes/replay-log``,
built by you from fstests' sources) each step runs that tool instead of this re-implementation,
as the test's shell does (a ``--find`` and a ``--replay`` process per state).  This project does
not carry fstests code: this module is written from the tool's documented behaviour."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPER = struct.Struct("<QQQI")  # magic, version, nr_entries, sectorsize
ENTRY = struct.Struct("<QQQQ")  # sector, nr_sectors, flags, data_len
FUA, DISCARD, MARK = 2, 4, 8
BLKDISCARD = 0x1277


@dataclass(frozen=True, slots=True)
class Result:
    states: int
    seconds: float
    tool: str  # "python re-implementation" or the replay-log path

    @property
    def rate(self) -> float:
        return self.states / self.seconds if self.seconds else 0.0


def accept(inp: object) -> bool:
    """A checker that accepts every state (bench_curve.py: the same mount, umount and fsck, no
    workload-specific reads)."""
    return True


def entries(log: Path) -> tuple[int, int, list[tuple[int, str]]]:
    """(sectorsize, nr_entries, [(flags, mark text)] per entry), reading the log as replay-log does."""
    with open(log, "rb") as f:
        _, _, nr, ss = SUPER.unpack(f.read(SUPER.size))
        out = []
        pos = ss
        for _ in range(nr):
            f.seek(pos)
            sector, nr_sectors, flags, data_len = ENTRY.unpack(f.read(ENTRY.size))
            text = ""
            if flags & MARK:
                text = f.read(data_len).decode("utf-8", "replace")
            pos += (
                ss if flags & (MARK | DISCARD) else ss + nr_sectors * ss
            )  # a discard carries no data
            out.append((flags, text))
    return ss, nr, out


def fua_points(log: Path, start_mark: str = "mkfs") -> list[int]:
    """The entries generic/482 checks: each FUA entry from the start mark on."""
    _, _, es = entries(log)
    start = next((i for i, (f, t) in enumerate(es) if f & MARK and t == start_mark), None)
    if start is None:
        raise ValueError(f"no {start_mark!r} mark in {log}")
    return [i for i in range(start, len(es)) if es[i][0] & FUA]


def replay(log: Path, dev: str, limit: int, verbose: int) -> None:
    """``replay-log -vv --log LOG --replay DEV --limit LIMIT``: entries 0..LIMIT-1 onto DEV."""
    lfd = os.open(log, os.O_RDONLY)
    rfd = os.open(dev, os.O_WRONLY)
    try:
        head = os.read(lfd, SUPER.size)
        _, _, nr, ss = SUPER.unpack(head)
        os.lseek(lfd, ss, os.SEEK_SET)
        for n in range(min(limit, nr)):
            raw = os.read(lfd, ss)  # the entry's header sector
            sector, nr_sectors, flags, _ = ENTRY.unpack_from(raw)
            size = nr_sectors * ss
            os.write(
                verbose,
                f"replaying {n}@{n}: sector {sector}, size {size}, flags 0x{flags:x}\n".encode(),
            )
            if not size:
                continue
            if flags & DISCARD:
                try:
                    fcntl.ioctl(rfd, BLKDISCARD, struct.pack("QQ", sector * ss, size))
                except OSError:
                    os.pwrite(rfd, bytes(size), sector * ss)
                continue
            os.pwrite(rfd, os.read(lfd, size), sector * ss)
        os.fsync(rfd)
    finally:
        os.close(rfd)
        os.close(lfd)


def run(
    log: Path,
    dev: str,
    fstype: str,
    mnt: Path,
    points: Sequence[int],
    *,
    replay_log: str = "",
    verbose_out: Path | None = None,
) -> Result:
    """generic/482's loop over ``points`` onto ``dev`` (a block device holding nothing that matters)."""
    mnt.mkdir(parents=True, exist_ok=True)
    out = verbose_out or mnt.parent / "seqres.full"
    vfd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    t = time.perf_counter()
    try:
        prev = None
        for cur in points:
            if replay_log:  # the shell's two processes per state: --find, then --replay
                start = 0 if prev is None else prev + 1
                subprocess.run(
                    [
                        replay_log,
                        "--find",
                        "--log",
                        str(log),
                        "--next-fua",
                        "--start-entry",
                        str(start),
                    ],
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                subprocess.run(
                    [
                        replay_log,
                        "-vv",
                        "--log",
                        str(log),
                        "--replay",
                        dev,
                        "--limit",
                        str(cur + 1),
                    ],
                    check=True,
                    stdout=vfd,
                    stderr=vfd,
                )
            else:
                replay(log, dev, cur + 1, vfd)
            subprocess.run(["mount", "-t", fstype, dev, str(mnt)], check=True)
            subprocess.run(["umount", str(mnt)], check=True)
            subprocess.run(["fsck", "-t", fstype, "-nf", dev], check=True, stdout=vfd, stderr=vfd)
            prev = cur
    finally:
        os.close(vfd)
    return Result(len(points), time.perf_counter() - t, replay_log or "python re-implementation")


def run_on_scratch(rec: Any, work: Path, points: Sequence[int], replay_log: str = "") -> Result:
    """``run`` over ``points`` of recording ``rec``'s log on a scratch loop device of its data size
    (made, attached, detached and removed here), as the test uses one reused device."""
    img = work / "scratch.img"
    with open(img, "wb") as f:
        f.truncate(rec.data_size)
    dev = subprocess.run(
        ["losetup", "--find", "--show", str(img)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    try:
        return run(rec.log_path, dev, rec.fstype, work / "mnt", points, replay_log=replay_log)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True, timeout=60)
        img.unlink()

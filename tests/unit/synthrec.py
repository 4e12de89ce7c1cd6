"""A recording made without a VM, for host-mode tests (root: loop devices, mount): a real ext4
(mkfs.ext4 on an image file, no journal) written into a dm-log-writes log block by block and
flushed, the mkfs mark, then commits -- each appends a line to the file ``data`` through a real
mount, its changed blocks are logged in one flush window, then an informational mark and the ack.
``CHECKER`` is a checker command for it: an acked commit whose line is missing is a lost ack."""

from __future__ import annotations

import subprocess
from pathlib import Path

from powercut.core.log.dmlog_writer import LogWriter
from powercut.linux.loopdev import LoopDevice
from powercut.linux.mounts import mount, umount
from powercut.record import recording

BS = 4096
SIZE = 16 << 20

CHECKER = """python3 -c '
import json, os, sys
d = json.load(sys.stdin)
text = open("data").read() if os.path.exists("data") else ""
lost = [k for k in d["acked"] if f"commit {k}\\n" not in text]
print(json.dumps({"verdict": "lost-ack" if lost else "pass", "reasons": [f"key {k} lost" for k in lost]}))'"""


def _blocks(path: Path) -> dict[int, bytes]:
    data = path.read_bytes()
    return {i // BS: data[i : i + BS] for i in range(0, len(data), BS)}


def ext4_recording(d: Path, commits: int = 2, *, fault_at: int = 0, unread: bool = False) -> Path:
    """``d``/rec: ext4 and ``commits`` acked commits (keys 1..commits, the line ``commit K``).
    ``fault_at`` K: commit K is made in a fault window (core/log/faultwindows: the device failed every
    write) and acked anyway -- none of its writes is logged, the next commit's carry its line.
    ``unread``: each commit also appends a block to the file ``other``, which CHECKER never reads."""
    d.mkdir(parents=True, exist_ok=True)
    img = d / "fs.img"
    with open(img, "wb") as f:
        f.truncate(SIZE)
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-b", str(BS), "-O", "^has_journal", str(img)],
        check=True,
        timeout=120,
    )
    snaps = [_blocks(img)]
    mnt = d / "mnt"
    mnt.mkdir(exist_ok=True)
    for k in range(1, commits + 1):
        with LoopDevice(img) as dev:
            mount(dev, str(mnt), "ext4")
            with open(mnt / "data", "ab") as f:
                f.write(f"commit {k}\n".encode())
            if unread:
                with open(mnt / "other", "ab") as f:
                    f.write(bytes([k]) * BS)
            umount(str(mnt))
        snaps.append(_blocks(img))
    rec = d / "rec"
    rec.mkdir()
    with LogWriter(rec / "log.bin") as w:
        zero = bytes(BS)
        for n, blk in snaps[0].items():
            if blk != zero:
                w.write(n * (BS // 512), blk)
        w.flush()
        w.mark("mkfs")
        logged = snaps[0]  # what the log holds so far
        for k in range(1, commits + 1):
            w.mark(f"begin:{k}")
            if k == fault_at:  # the device failed its writes and its flush: none reached the log
                w.mark("powercut-fault:on:eio-writes")
                w.mark("powercut-fault:off")
            else:
                for n, blk in snaps[k].items():
                    if blk != logged[n]:
                        w.write(n * (BS // 512), blk)
                logged = snaps[k]
                w.flush()
            w.mark("note:informational")
            w.mark(f"ack:{k}")
        w.mark("dm-log-writes-end")  # the teardown mark every real recording ends with
    img.unlink()
    manifest = {
        "recording": {"format": 2, "status": "ok"},
        "data": {"size_bytes": SIZE, "initial": "zeros"},
        "fs": {"fstype": "ext4"},
        "workload": {"cmd": "synthetic"},
        "node": [
            {"log": "log.bin", "final": "data-final.img", **recording.pin_log(rec / "log.bin")}
        ],
    }
    recording.write(rec, manifest)
    return rec

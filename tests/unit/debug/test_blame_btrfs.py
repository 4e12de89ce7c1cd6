"""Blame on btrfs (debug/btrfsmap.py through blame's mapper) on real small btrfs images made by
mkfs.btrfs: every answer is checked against the image's own bytes, found without the mapper -- a
file's data by its (random, unique) content, the superblock at 64 KiB, each tree block by the header
it carries (its fsid, its own logical address, its owner tree, its level).  The host test mounts an
image to have a log tree on disk (an fsync's), as a crash right after the fsync leaves it."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from powercut.core.states.models import CrashSpace
from powercut.debug import blame, btrfsmap
from powercut.linux import process
from tests.unit.logops import build_log

pytestmark = pytest.mark.skipif(
    shutil.which("mkfs.btrfs") is None or shutil.which("btrfs") is None,
    reason="needs btrfs-progs (mkfs.btrfs, btrfs)",
)

BLOCK = 4096
MIB = 1 << 20


def _mkfs(img: Path, root: Path | None = None) -> None:
    with open(img, "wb") as fh:
        fh.truncate(128 * MIB)
    subprocess.run(
        ["mkfs.btrfs", "-q", *(["-r", str(root)] if root else []), str(img)],
        check=True,
        capture_output=True,
    )


def _fsid(img: Path) -> bytes:
    text = subprocess.run(
        ["btrfs", "inspect-internal", "dump-super", str(img)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    sb = btrfsmap.super_fields(text)
    return uuid.UUID(sb.get("metadata_uuid") or sb["fsid"]).bytes


def _headers(img: Path) -> dict[int, tuple[int, int, int]]:
    """Every block of the image that starts a tree block of this filesystem, by its own header
    (past the first MiB: the primary superblock is in it):
    device block -> (logical address, owner id, level)."""
    fsid = _fsid(img)
    out = {}
    with open(img, "rb") as fh:
        data = fh.read()
    for at in range(MIB, len(data), BLOCK):
        h = data[at : at + btrfsmap.HEADER]
        if h[32:48] == fsid and at not in (
            sb for sb, _ in btrfsmap.SUPERBLOCKS
        ):  # a superblock has the fsid too
            out[at // BLOCK] = (
                int.from_bytes(h[48:56], "little"),
                int.from_bytes(h[88:96], "little"),
                h[100],
            )
    return out


def _map(img: Path, blocks: list[int]) -> dict[int, tuple[str, str, str]]:
    size, m = blame.MAPPERS["btrfs"](
        str(img), [SimpleNamespace(sector=b * 8, nr_sectors=8) for b in blocks], process.run
    )
    assert size == BLOCK
    return m


def test_btrfs_blocks_map_to_their_files_and_trees(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "wal").mkdir(parents=True)
    content = random.Random(52).randbytes(64 * 1024)
    (root / "wal" / "wal-000002.log").write_bytes(content)
    (root / "notes.txt").write_bytes(b"hi\n")
    img = tmp_path / "img"
    _mkfs(img, root)
    image = img.read_bytes()
    data = [
        image.find(content[k : k + BLOCK]) // BLOCK for k in (0, 8 * BLOCK, len(content) - BLOCK)
    ]
    assert all(b > 0 for b in data)
    heads = _headers(img)
    assert heads, "mkfs.btrfs wrote no tree block?"
    end = (
        len(image) // BLOCK - 1
    )  # the device's last block: no chunk this small a filesystem allocates
    m = _map(img, [*data, 65536 // BLOCK, *heads, end])
    for b in data:
        assert m[b] == ("data block", "/wal/wal-000002.log", ""), (b, m[b])
    assert m[65536 // BLOCK] == ("superblock", "", "the primary copy")
    trees = {
        btrfsmap.tree_name(btrfsmap.ROOT_IDS.get(owner, str(owner)))
        for _, owner, _ in heads.values()
    }
    assert {"root tree", "extent tree", "chunk tree", "dev tree", "fs tree", "csum tree"} <= trees
    for b, (logical, owner, level) in heads.items():
        if (
            m[b][0] == "free block"
        ):  # only mkfs's first trees (logical = physical, before its chunks): in no chunk
            assert logical == b * BLOCK and "in no chunk" in m[b][2], (b, m[b], heads[b])
            continue
        want = f"{btrfsmap.tree_name(btrfsmap.ROOT_IDS.get(owner, str(owner)))} {'leaf' if level == 0 else 'node'}"
        assert m[b][0] == want, (b, m[b], heads[b])
        if want == "fs tree leaf" and "not in use" not in m[b][2]:
            assert {"/wal/wal-000002.log", "/notes.txt", "/wal"} <= set(m[b][1].split(", ")), m[b]
    assert m[end][0] == "free block"


def test_a_block_of_no_tree_and_no_file_is_free(tmp_path: Path) -> None:
    img = tmp_path / "img"
    _mkfs(img)
    text = subprocess.run(
        ["btrfs", "inspect-internal", "dump-tree", "-t", "chunk", str(img)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    table = btrfsmap.chunks(text, 1)
    assert {c.kind for c in table} >= {"DATA", "METADATA", "SYSTEM"}
    data = next(c for c in table if c.kind == "DATA")
    last = (
        data.stripes[0] + data.length
    ) // BLOCK - 1  # an empty filesystem's data chunk: nothing in it yet
    heads = _headers(img)
    meta = next(c for c in table if c.kind == "METADATA")
    unused = next(
        b
        for b in range(meta.stripes[0] // BLOCK, (meta.stripes[0] + meta.length) // BLOCK)
        if not any(h <= b < h + 4 for h in heads)
    )
    m = _map(img, [last, unused, 0])
    assert m[last][0] == "free block" and "not in use" in m[last][2]
    assert m[unused][0] == "free block" and "never used" in m[unused][2]
    assert m[0][0] == "reserved area"


@pytest.mark.root
@pytest.mark.skipif(
    os.geteuid() != 0 or "btrfs" not in Path("/proc/filesystems").read_text(),
    reason="needs root and btrfs in the host kernel (a loop mount)",
)
def test_an_fsync_log_tree_leaf_names_the_file_it_logs(tmp_path: Path) -> None:
    """A crash right after an fsync: the log tree (no extent items) is on the disk; blame's image is
    recovered by a mount (the log replayed, then freed), and the block still reads as the log tree
    leaf of the file fsynced."""
    img, mnt, crash = tmp_path / "img", tmp_path / "mnt", tmp_path / "crash.img"
    _mkfs(img)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True)
    try:
        fd = os.open(mnt / "a.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, random.Random(1).randbytes(3 * BLOCK))
        os.fsync(fd)
        os.close(fd)
        shutil.copyfile(
            img, crash
        )  # the disk at the crash: the fsync's log, no transaction commit since
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    before = {b: h for b, h in _headers(crash).items() if h[1] == 2**64 - 6}  # owner TREE_LOG
    assert before, "the fsync left no log tree block"
    subprocess.run(
        ["mount", "-o", "loop", str(crash), str(mnt)], check=True
    )  # blame's recovery mount
    subprocess.run(["umount", str(mnt)], check=True)
    m = _map(crash, list(before))
    named = [m[b] for b in before if m[b][1]]
    assert named and all(
        w == "log tree leaf" and p == "/a.log" and "replayed" in n for w, p, n in named
    ), m


def test_an_image_btrfs_cannot_read_is_said_so_not_mapped_as_free(tmp_path: Path) -> None:
    img = tmp_path / "zeros.img"
    with open(img, "wb") as fh:
        fh.truncate(8 * MIB)
    sp = CrashSpace(
        build_log(
            tmp_path / "log.bin", [("m", "begin:1"), ("w", 4096, 8, 0, 1), ("f",), ("m", "ack:1")]
        )
    )
    (c,) = blame.blame(sp, sp.make_state("write-cache", 2, [1]), "btrfs", str(img))
    assert (c.how, c.what, c.note) == (
        "lost",
        "unmapped",
        "the filesystem's tool could not read the image",
    )

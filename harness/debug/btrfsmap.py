"""btrfs blocks -> what they are (host and guest), with btrfs-progs' own ``btrfs inspect-internal``
on an unmounted image of one device, for debug/blame.py.  A device block is *physical*; btrfs
addresses *logical* bytes, so first the chunk tree (``dump-tree -t chunk``: each chunk's logical
start, length, type and its stripes' device offsets; single and DUP profiles, the only ones one
device has) turns a physical block into a logical address and the kind of chunk it is in.  Then:

* the superblock (64 KiB, and its mirrors at 64 MiB and 256 GiB) and the reserved first MiB;
* a DATA chunk block: the file whose extent covers it, from the fs tree's file extents
  (``dump-tree -t fs``: EXTENT_DATA items, the file's name from its INODE_REF items up to the
  root directory); else an extent of another tree (the extent tree's data backref: a subvolume's
  inode); else free on the image (blame's: the cut's, recovered by a mount, which commits a
  transaction of its own, so tree blocks written before it may be copied elsewhere by then);
* a METADATA or SYSTEM chunk block: the tree block it is part of -- its start from the extent tree
  (a tree block in use) or from the block's own header (a block freed since: copied on write, or
  a log tree replayed at mount; log tree blocks never have extent items) -- read with ``dump-tree
  -b``: its owner (root, extent, chunk, dev, fs, csum, log, free space ... tree, or a subvolume),
  node or leaf, and for an fs, subvolume or log tree leaf the files its items are about.

Returns the same shape as the ext4 and xfs mappers: block -> (what, path, note)."""

from __future__ import annotations

import bisect
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Found = tuple[str, str, str]

SUPERBLOCKS = ((65536, "primary"), (64 << 20, "mirror 1"), (256 << 30, "mirror 2"))
SUPER_BYTES = 4096
RESERVED = 1 << 20  # btrfs allocates no chunk in the device's first MiB
HEADER = 101  # struct btrfs_header: csum 32, fsid 16, bytenr 8, ... owner 8, nritems 4, level 1
FILES_NAMED = 4  # a leaf names this many files (ext4's inode table names as many)
FS_TREE = "FS_TREE"
TREES = {
    "ROOT_TREE": "root tree",
    "EXTENT_TREE": "extent tree",
    "CHUNK_TREE": "chunk tree",
    "DEV_TREE": "dev tree",
    FS_TREE: "fs tree",
    "CSUM_TREE": "csum tree",
    "TREE_LOG": "log tree",
    "QUOTA_TREE": "quota tree",
    "UUID_TREE": "uuid tree",
    "FREE_SPACE_TREE": "free space tree",
    "DATA_RELOC_TREE": "data reloc tree",
    "TREE_RELOC": "reloc tree",
    "BLOCK_GROUP_TREE": "block group tree",
    "RAID_STRIPE_TREE": "raid stripe tree",
}
ROOT_IDS = {
    1: "ROOT_TREE",
    2: "EXTENT_TREE",
    3: "CHUNK_TREE",
    4: "DEV_TREE",
    5: FS_TREE,
    7: "CSUM_TREE",
    8: "QUOTA_TREE",
    9: "UUID_TREE",
    10: "FREE_SPACE_TREE",
    11: "BLOCK_GROUP_TREE",
    12: "RAID_STRIPE_TREE",
    2**64 - 6: "TREE_LOG",
    2**64 - 7: "TREE_LOG_FIXUP",
    2**64 - 8: "TREE_RELOC",
    2**64 - 9: "DATA_RELOC_TREE",
}
FILE_TREES = (FS_TREE, "TREE_LOG")  # trees whose leaves' items are keyed by the fs tree's inodes

_KEY = re.compile(r"^\s*item \d+ key \((\S+) (\S+) (\S+)\)")
_CHUNK = re.compile(r"^\s*length (\d+) owner \d+ stripe_len \d+ type (\S+)")
_STRIPE = re.compile(r"^\s*stripe \d+ devid (\d+) offset (\d+)")
_DATA_REF = re.compile(r"extent data backref root (\S+) objectid (\d+)")
_BLOCK = re.compile(r"^(leaf|node) (\d+) (?:level (\d+) )?items \d+ .*owner (\S+)")


class Spans:
    """Disjoint [lo, hi) ranges with a value each, found by bisection."""

    def __init__(self, rows: Iterable[tuple[int, int, Any]] = ()) -> None:
        self.rows = sorted(rows, key=lambda r: (r[0], r[1]))
        self.starts = [r[0] for r in self.rows]

    def at(self, x: int) -> tuple[int, int, Any] | None:
        i = bisect.bisect_right(self.starts, x) - 1
        return self.rows[i] if i >= 0 and self.rows[i][0] <= x < self.rows[i][1] else None


@dataclass(frozen=True, slots=True)
class Chunk:
    logical: int
    length: int
    kind: str  # DATA | METADATA | SYSTEM | DATA|METADATA (mixed)
    stripes: tuple[int, ...]  # this device's physical offsets of the chunk's copies


@dataclass(slots=True)
class Files:
    """The fs tree's inodes: names (INODE_REF: parent, name), directories, file extents."""

    refs: dict[int, tuple[int, str]] = field(default_factory=dict)
    dirs: set[int] = field(default_factory=set)
    extents: Spans = field(default_factory=Spans)  # disk extents: (start, end, inode)

    def path(self, ino: int) -> str:
        parts: list[str] = []
        seen: set[int] = set()
        while ino in self.refs and ino not in seen and self.refs[ino][0] != ino:
            seen.add(ino)
            ino, name = self.refs[ino]
            parts.append(name)
        if ino == 256:  # the root directory
            return "/" + "/".join(reversed(parts))
        return f"inode {ino}" + "".join(f"/{p}" for p in reversed(parts))

    def file_at(self, logical: int) -> int | None:
        row = self.extents.at(logical)
        return None if row is None else int(row[2])


def super_fields(text: str) -> dict[str, str]:
    """``dump-super``'s ``name<TAB>value`` lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and not line.startswith(("\t", " ")):
            out.setdefault(parts[0], parts[1].strip())
    return out


def chunks(text: str, devid: int) -> list[Chunk]:
    """The chunk tree's chunks (``dump-tree -t chunk``), with this device's stripes."""
    out: list[Chunk] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _KEY.match(line):
            if cur is not None and cur["length"]:
                out.append(Chunk(cur["logical"], cur["length"], cur["kind"], tuple(cur["stripes"])))
            cur = (
                {"logical": int(m.group(3)), "length": 0, "kind": "", "stripes": []}
                if m.group(2) == "CHUNK_ITEM"
                else None
            )
        elif cur is not None and (c := _CHUNK.match(line)):
            kinds = [k for k in ("DATA", "METADATA", "SYSTEM") if k in c.group(2).split("|")]
            cur["length"], cur["kind"] = int(c.group(1)), "|".join(kinds)
        elif cur is not None and (st := _STRIPE.match(line)) and int(st.group(1)) == devid:
            cur["stripes"].append(int(st.group(2)))
    if cur is not None and cur["length"]:
        out.append(Chunk(cur["logical"], cur["length"], cur["kind"], tuple(cur["stripes"])))
    return out


def files(text: str) -> Files:
    """The fs tree (``dump-tree -t fs``): each inode's first name, its directories, its file extents."""
    out = Files()
    spans: list[tuple[int, int, int]] = []
    key: tuple[str, str, str] | None = None
    for line in text.splitlines():
        if m := _KEY.match(line):
            key = (m.group(1), m.group(2), m.group(3))
            continue
        if key is None or not key[0].isdigit():
            continue
        ino = int(key[0])
        if (
            key[1] == "INODE_REF"
            and ino not in out.refs
            and (n := re.search(r"\bname: (.*)$", line))
        ):
            out.refs[ino] = (int(key[2]), n.group(1))
        elif key[1] == "INODE_ITEM" and (mode := re.search(r"\bmode (\d+)", line)):
            if mode.group(1).startswith("40"):
                out.dirs.add(ino)
        elif key[1] == "EXTENT_DATA" and (
            x := re.search(r"extent data disk byte (\d+) nr (\d+)", line)
        ):
            start, nr = int(x.group(1)), int(x.group(2))
            if start:  # 0: a hole
                spans.append((start, start + nr, ino))
    out.extents = Spans(spans)
    return out


@dataclass(slots=True)
class Extents:
    """The extent tree: the tree blocks in use, (start, end, owner), and the data extents,
    (start, end, [(root, inode)])."""

    trees: Spans
    data: Spans

    def tree_at(self, logical: int) -> tuple[int, str] | None:
        """(start, owner) of the tree block in use that holds ``logical``."""
        row = self.trees.at(logical)
        return None if row is None else (row[0], str(row[2]))

    def data_at(self, logical: int) -> list[tuple[str, int]] | None:
        """The (root, inode) backrefs of the data extent in use that holds ``logical`` ([]: only
        shared backrefs), None when no extent does."""
        row = self.data.at(logical)
        return None if row is None else list(row[2])


def extents(text: str, nodesize: int) -> Extents:
    """The extent tree (``dump-tree -t extent``): METADATA_ITEM / EXTENT_ITEM keys and their backrefs."""
    trees: dict[int, list[Any]] = {}
    data: dict[int, list[Any]] = {}
    bytenr = 0
    for line in text.splitlines():
        if m := _KEY.match(line):
            bytenr = int(m.group(1)) if m.group(1).isdigit() else 0
            kind, off = m.group(2), m.group(3)
            if kind == "METADATA_ITEM":
                trees[bytenr] = [bytenr + nodesize, ""]
            elif kind == "EXTENT_ITEM":
                data[bytenr] = [bytenr + int(off), []]
            elif kind == "TREE_BLOCK_REF" and bytenr in trees and not trees[bytenr][1]:
                trees[bytenr][1] = _root(off)
            continue
        if "flags TREE_BLOCK" in line and bytenr in data:  # a tree block without skinny metadata
            trees[bytenr] = [data.pop(bytenr)[0], ""]
        elif (
            (t := re.search(r"tree block backref root (\S+)", line))
            and bytenr in trees
            and not trees[bytenr][1]
        ):
            trees[bytenr][1] = _root(t.group(1))
        elif (d := _DATA_REF.search(line)) and bytenr in data:
            data[bytenr][1].append((_root(d.group(1)), int(d.group(2))))
    return Extents(
        Spans((lo, hi, owner) for lo, (hi, owner) in trees.items()),
        Spans((lo, hi, refs) for lo, (hi, refs) in data.items()),
    )


def _root(text: str) -> str:
    """A root as dump-tree names it (``FS_TREE``, ``256``), numbers of well-known trees by their name."""
    return ROOT_IDS.get(int(text), text) if text.isdigit() else text


def tree_name(owner: str) -> str:
    if owner.isdigit():
        return f"subvolume {owner} tree" if int(owner) >= 256 else f"tree {owner}"
    return TREES.get(owner, owner.lower().replace("_", " "))


@dataclass(frozen=True, slots=True)
class Block:
    """A tree block as ``dump-tree -b`` reads it: node or leaf, its owner, its items' objectids."""

    kind: str
    owner: str
    objectids: tuple[int, ...]


def tree_blocks(text: str) -> dict[int, Block]:
    """``dump-tree -b X [-b Y ...]``'s blocks, by start."""
    out: dict[int, Block] = {}
    start: int | None = None
    kind, owner = "", ""
    ids: list[int] = []
    for line in text.splitlines():
        if (m := _BLOCK.match(line)) and int(m.group(2)) != start:
            if start is not None:
                out[start] = Block(kind, owner, tuple(ids))
            start = int(m.group(2))
            kind = m.group(1)
            owner = _root(m.group(4))
            ids = []
        elif (k := _KEY.match(line)) and k.group(1).isdigit():
            ids.append(int(k.group(1)))
    if start is not None:
        out[start] = Block(kind, owner, tuple(ids))
    return out


def describe_block(block: Block, names: Files, in_use: bool) -> Found:
    """What a tree block is: ``fs tree leaf`` of the files its items are about, ``extent tree node``, ..."""
    what = f"{tree_name(block.owner)} {block.kind}"
    path = ""
    if block.kind == "leaf" and block.owner in FILE_TREES:
        inos = sorted({i for i in block.objectids if i >= 256})
        paths = list(dict.fromkeys(names.path(i) for i in inos))
        path = ", ".join(paths[:FILES_NAMED]) + (
            f" (+{len(paths) - FILES_NAMED} more)" if len(paths) > FILES_NAMED else ""
        )
    if block.owner == "TREE_LOG":
        note = (
            "the fsync log: log trees have no extent items; replayed at the next mount, then freed"
        )
    elif in_use:
        note = ""
    else:
        note = "not in use on the recovered image: copied on write since (the recovery mount commits too), or freed"
    return what, path, note


def physical(b: int, size: int, table: Iterable[Chunk]) -> tuple[Chunk, int, int] | None:
    """(the chunk, the logical address, the device offset of the copy it is in) of device block ``b``."""
    at = b * size
    for c in table:
        for s in c.stripes:
            if s <= at < s + c.length:
                return c, c.logical + at - s, s
    return None


def header_start(
    read: Callable[[int, int], bytes],
    chunk: Chunk,
    stripe: int,
    logical: int,
    fsid: bytes,
    size: int,
    nodesize: int,
) -> int | None:
    """The start of the tree block that holds ``logical`` from the blocks' own headers (a block
    freed since the cut has no extent item): the nearest start at or below it, a sector at a time,
    whose header names this filesystem and that start."""
    for back in range(0, nodesize, size):
        start = logical - back
        if start < chunk.logical:
            break
        head = read(stripe + start - chunk.logical, HEADER)
        if (
            len(head) == HEADER
            and head[32:48] == fsid
            and int.from_bytes(head[48:56], "little") == start
        ):
            return start
    return None


def map_blocks(
    device: str,
    wanted: list[int],
    size: int,
    sb: dict[str, str],
    run: Callable[..., Any],
    read: Callable[[int, int], bytes],
) -> dict[int, Found]:
    """Each wanted device block (of ``size`` bytes) -> (what, path, note); ``sb``: dump-super's
    fields; ``read(offset, n)``: n bytes of the device."""
    nodesize = int(sb.get("nodesize", "0") or 0)
    devid = int(sb.get("dev_item.devid", "1") or 1)
    fsid = uuid.UUID(sb.get("metadata_uuid") or sb.get("fsid", "")).bytes

    def dump(*args: str, check: bool = True) -> str:
        return str(
            run(
                ["btrfs", "inspect-internal", "dump-tree", *args, device], timeout=300, check=check
            ).stdout
        )

    # a tree it cannot read raises (CommandFailed): blame then says the tool could not read the image
    table = chunks(dump("-t", "chunk"), devid)
    names = files(dump("-t", "fs"))
    used = extents(dump("-t", "extent"), nodesize)
    out: dict[int, Found] = {}
    starts: dict[int, tuple[int, bool]] = {}  # block -> (its tree block's start, in use)
    for b in wanted:
        sup = next((n for at, n in SUPERBLOCKS if at <= b * size < at + SUPER_BYTES), None)
        found = physical(b, size, table)
        if sup is not None:
            out[b] = ("superblock", "", f"the {sup} copy")
            continue
        if found is None:
            out[b] = (
                ("reserved area", "", "the first MiB: no chunk, no filesystem data")
                if b * size < RESERVED
                else ("free block", "", "in no chunk at the cut: unallocated space")
            )
            continue
        chunk, logical, stripe = found
        tree = used.tree_at(logical) if chunk.kind != "DATA" else None
        if tree is not None:
            starts[b] = (tree[0], True)
        elif "DATA" in chunk.kind and (
            chunk.kind == "DATA"
            or used.data_at(logical) is not None
            or names.file_at(logical) is not None
        ):
            out[b] = _data(logical, names, used)
        elif (
            start := header_start(read, chunk, stripe, logical, fsid, size, nodesize)
        ) is not None:
            starts[b] = (start, False)
        else:
            out[b] = (
                "free block",
                "",
                f"in a {chunk.kind.lower()} chunk, no tree block there: never used",
            )
    wanted_starts = sorted({s for s, _ in starts.values()})
    batch = [a for s in wanted_starts for a in ("-b", str(s))]
    blocks = tree_blocks(dump(*batch, check=False)) if wanted_starts else {}
    for (
        s
    ) in wanted_starts:  # one block it cannot read stops a whole batch: those left, one at a time
        if s not in blocks:
            blocks.update(tree_blocks(dump("-b", str(s), check=False)))
    for b, (start, in_use) in starts.items():
        blk = blocks.get(start)
        out[b] = (
            describe_block(blk, names, in_use)
            if blk is not None
            else ("tree block", "", f"at logical {start}: dump-tree could not read it")
        )
    return out


def _data(logical: int, names: Files, used: Extents) -> Found:
    ino = names.file_at(logical)
    if ino is not None:
        return ("directory block" if ino in names.dirs else "data block"), names.path(ino), ""
    refs = used.data_at(logical)
    if refs:  # another tree's file (a subvolume's)
        root, ino = refs[0]
        return "data block", "", f"inode {ino} of the {tree_name(root)}"
    if refs is not None:
        return "data block", "", "an extent with shared backrefs only (a snapshot's)"
    return (
        "free block",
        "",
        "not in use on the recovered image: allocated later, or freed (e.g. a deleted file)",
    )

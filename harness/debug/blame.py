"""Blame (host and guest): the writes that matter in a (minimized) failing state, mapped to what they
are in the filesystem -- with the filesystem's own tools -- and placed among the workload's marks:
"the data block of /wal/wal-000002.log (entry #159), written after begin:17, not yet flushed when
ack:17 was given".  Runs where the check runs (in the checker VM by default), on an image of the
state's cut with every write kept and the journal recovered (mount + umount), so the metadata
that maps a block is the metadata the kernel would see.

ext4: ``debugfs`` (icheck: block -> inode, ncheck: inode -> path, stat: its type) and the group
layout from ``dumpe2fs`` (superblocks, group descriptors, bitmaps, inode tables: which inodes);
xfs: ``xfs_db`` (blockget + blockuse); btrfs: ``btrfs inspect-internal dump-super/dump-tree``
through the chunk tree's physical-to-logical mapping (debug/btrfsmap.py: files from the fs tree's
file extents, tree blocks by their owner -- root, extent, chunk, dev, fs, csum, log ... tree -- and
an fs or log tree leaf by the files its items are about).  Other filesystems: not mapped, and it
says so."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.log.dmlog import FLUSH, FUA
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import CrashSpace
from powercut.debug import btrfsmap
from powercut.errors import PowercutError
from powercut.linux import process

log = logging.getLogger(__name__)

SECTOR = 512
ICHECK_BATCH = 64  # blocks per debugfs icheck (its -R argument list is limited)
BLOCKS_PER_WRITE = 32  # a large write is mapped at this many evenly spaced blocks
LATE = "not yet durable at the cut"  # a write after the cut: it never reached the disk before it
KINDS_NAMED = 3  # a page-cache line names this many kinds of object (and how many more)


@dataclass(frozen=True, slots=True)
class Culprit:
    """One write that matters: what happened to it in the state, what it is, where it sits."""

    entry: int
    sector: int
    nr_sectors: int
    how: str  # lost | torn | not yet durable | durable (the last before the cut)
    what: str  # file data | directory | inode table | journal | allocation metadata | ...
    path: str = ""
    place: str = ""
    note: str = ""  # why a mapping could not be made, or what more is known

    def describe(self) -> str:
        obj = f"{self.what} of {self.path}" if self.path else self.what
        return (
            f"{self.how}: {obj} (entry #{self.entry}, sectors {self.sector}+{self.nr_sectors})"
            + (f", {self.place}" if self.place else "")
            + (f" [{self.note}]" if self.note else "")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "sector": self.sector,
            "nr_sectors": self.nr_sectors,
            "how": self.how,
            "what": self.what,
            "path": self.path,
            "place": self.place,
            "note": self.note,
            "text": self.describe(),
        }


def writes_that_matter(sp: CrashSpace, state: CrashState) -> list[tuple[int, str]]:
    """(entry, how) for the writes a state's failure is about: its lost and torn writes; for a prefix
    state (nothing lost), the writes after its cut up to the flush that would have made them
    durable -- what the cut came too early for."""
    out = [(i, "lost") for i in state.dropped]
    out += [
        (i, f"torn ({len(s)} of {sp.entries[i].nr_sectors} sectors persisted)")
        for i, s in state.torn
    ]
    if out:
        return sorted(out)
    last = next((e for e in reversed(sp.entries[: state.cut]) if e.changes_device), None)
    if last is not None:
        out.append((last.index, "durable, the last write before the cut"))
    for e in sp.entries[state.cut :]:
        if e.changes_device:
            out.append((e.index, LATE))
        if (e.flags & FLUSH and e.index not in sp.ordering) or (e.flags & FUA and e.changes_device):
            break
    return out


def place(sp: CrashSpace, entry: int, state: CrashState) -> str:
    """Where a write sits among the key marks, relative to the state's cut: the key mark before it,
    then the first that holds of: a FUA write is durable when done ("a FUA write, done before the
    cut" / "the crash came before it"); an ack given after it before the cut with no barrier
    between ("not yet flushed when ack:N was given"); a barrier after it before the cut ("the flush
    at #F came before the cut": a lying disk's loss); the barrier after it ("the crash came before
    the flush at #F"), or none ("never flushed").  A flush named is followed by the first ack mark
    after it, "(before ack:N)", or by nothing when no ack follows it."""
    es = sp.entries
    before = next(
        (e for e in reversed(es[:entry]) if e.ack_key is not None or e.begin_key is not None), None
    )
    where = (
        f"written after {before.mark}" if before is not None else "written before the first commit"
    )
    barrier = next((e for e in es[entry + 1 :] if sp.is_barrier(e.index)), None)
    w = es[entry]
    if w.is_fua and w.changes_device:  # durable when done: no later flush needed
        return f"{where}; a FUA write" + (
            ", done before the cut"
            if entry < state.cut
            else f", the crash came before it{_next_ack(sp, entry)}"
        )
    if entry < state.cut:
        ack = next((e for e in es[entry + 1 : state.cut] if e.ack_key is not None), None)
        if ack is not None and (barrier is None or ack.index < barrier.index):
            return f"{where}, not yet flushed when {ack.mark} was given"
        if barrier is not None and barrier.index < state.cut:
            return f"{where}; the flush at #{barrier.index}{_next_ack(sp, barrier.index)} came before the cut"
    if barrier is None:
        return f"{where}; never flushed"
    return f"{where}; the crash came before the flush at #{barrier.index}{_next_ack(sp, barrier.index)}"


def _next_ack(sp: CrashSpace, i: int) -> str:
    """`` (before ack:N)`` for the first ack mark after entry ``i``; "" when none follows."""
    ack = next((e for e in sp.entries[i + 1 :] if e.ack_key is not None), None)
    return f" (before {ack.mark})" if ack is not None else ""


def blame(
    sp: CrashSpace,
    state: CrashState,
    fstype: str,
    device: str,
    run: Callable[..., Any] = process.run,
) -> list[Culprit]:
    """The culprits of ``state``; ``device`` holds the recovered image of its cut with every write kept."""
    mapper = MAPPERS.get(fstype)
    out = []
    items = writes_that_matter(sp, state)
    blocks: dict[int, list[int]] = {}
    size = 0
    mapping: dict[int, tuple[str, str, str]] = {}
    if mapper is not None:
        try:
            size, mapping = mapper(device, [sp.entries[i] for i, _ in items], run)
        except PowercutError as err:
            log.warning("blame: %s", err.one_line())
            mapping = {}
            size = 0
    for i, how in items:
        e = sp.entries[i]
        if mapper is None:
            what = "unmapped"
            path = ""
            note = f"{fstype}: blocks are not mapped to files (see harness/debug/blame.py)"
        elif not size:
            what = "unmapped"
            path = ""
            note = "the filesystem's tool could not read the image"
        else:
            found = [mapping.get(b, ("unknown", "", "")) for b in _blocks(e, size)]
            blocks[i] = _blocks(e, size)
            what, path, note = _merge(found)
        out.append(Culprit(i, e.sector, e.nr_sectors, how, what, path, place(sp, i, state), note))
    return out


def lines(culprits: Sequence[dict[str, Any]]) -> list[str]:
    """A state's blamed writes (Culprit JSON) as a reader's lines: one a write, except when every
    missing write (lost, torn, or after the cut) is after the cut -- a page-cache write, which never
    reached the disk before it.  Those are one line, with how many, their entries, what they are
    (the files' data first, then other objects of files, then the rest) and where they sit; a
    "durable" write keeps its own line before it."""
    missing = [c for c in culprits if not str(c.get("how", "")).startswith("durable")]
    if not missing or any(c.get("how") != LATE for c in missing):
        return [str(c.get("text", "")) for c in culprits]
    kept = [str(c.get("text", "")) for c in culprits if c not in missing]
    n = len(missing)
    files_first = sorted(
        missing, key=lambda c: (not c.get("path"), c.get("what") != "data block")
    )  # stable
    kinds = list(
        dict.fromkeys(
            f"{c.get('what', '')} of {c['path']}" if c.get("path") else str(c.get("what", ""))
            for c in files_first
        )
    )
    more = f" (+{len(kinds) - KINDS_NAMED} more)" if len(kinds) > KINDS_NAMED else ""
    entries = _ranges(sorted(int(c["entry"]) for c in missing))
    return kept + [
        f"{n} write{'s' if n > 1 else ''} never reached the disk before the cut (page-cache "
        f"write{'s' if n > 1 else ''}, entr{'ies' if n > 1 else 'y'} {entries}): "
        + "; ".join(kinds[:KINDS_NAMED])
        + more
        + _where(missing)
    ]


def _ranges(entries: list[int]) -> str:
    """``#13-#17, #20``."""
    runs: list[list[int]] = []
    for i in entries:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"#{a}" if a == b else f"#{a}-#{b}" for a, b in runs)


def _where(culprits: Sequence[dict[str, Any]]) -> str:
    """Where the writes sit (Culprit.place): the place they share; else, when they differ only in
    the key mark they were written after, the first's and the last's mark and the rest once; else
    the first's and the last's place."""
    places = list(dict.fromkeys(str(c.get("place", "")) for c in culprits if c.get("place")))
    if not places:
        return ""
    if len(places) == 1:
        return f"; {places[0]}"
    split = [_HEAD.match(p) for p in places]
    if all(split) and len({m.group(2) for m in split if m}) == 1:
        first, last = split[0], split[-1]
        assert first is not None and last is not None
        return (
            f"; {first.group(1)} (the first) to {last.group(1).removeprefix('written ')} (the last)"
            f"{first.group(2)}"
        )
    return f"; the first {places[0]} | the last {places[-1]}"


_HEAD = re.compile(r"^(written (?:after [^\s;,]+|before the first commit))(.*)$")


def _blocks(e: Any, block_size: int) -> list[int]:
    """The filesystem blocks a write covers (a large write: BLOCKS_PER_WRITE of them, evenly
    spaced, first and last included)."""
    first = e.sector * SECTOR // block_size
    last = ((e.sector + e.nr_sectors) * SECTOR - 1) // block_size
    n = last - first + 1
    if n <= BLOCKS_PER_WRITE:
        return list(range(first, last + 1))
    return sorted({first + (n - 1) * k // (BLOCKS_PER_WRITE - 1) for k in range(BLOCKS_PER_WRITE)})


def _merge(found: list[tuple[str, str, str]]) -> tuple[str, str, str]:
    kinds = list(dict.fromkeys(found))
    if len(kinds) == 1:
        return kinds[0]
    what = " + ".join(dict.fromkeys(k[0] for k in kinds))
    path = ", ".join(dict.fromkeys(k[1] for k in kinds if k[1]))
    return what, path, "; ".join(dict.fromkeys(k[2] for k in kinds if k[2]))


# -- ext4 --------------------------------------------------------------------------------------------
ROOT_INODE = 2  # ext4's root directory
_LAYOUT = re.compile(
    r"(Primary superblock|Backup superblock|Group descriptors|Reserved GDT blocks|Block bitmap|"
    r"Inode bitmap|Inode table) at (\d+)(?:-(\d+))?"
)
_GROUP = re.compile(r"^Group (\d+):", re.M)


def _ext4(
    device: str, entries: list[Any], run: Callable[..., Any]
) -> tuple[int, dict[int, tuple[str, str, str]]]:
    stats = run(["debugfs", "-R", "stats", device], timeout=120).stdout
    size = int(_field(stats, "Block size") or 0)
    ipg, isize = (
        int(_field(stats, "Inodes per group") or 0),
        int(_field(stats, "Inode size") or 256),
    )
    journal = int(_field(stats, "Journal inode") or 8)
    if not size:
        return 0, {}
    wanted = sorted({b for e in entries for b in _blocks(e, size)})
    out: dict[int, tuple[str, str, str]] = {}
    inode_of = _icheck(run, device, wanted)
    paths = _ncheck(run, device, sorted({i for i in inode_of.values() if i != journal}))
    if ROOT_INODE in inode_of.values():  # ncheck names no path for the root directory itself
        paths[ROOT_INODE] = ("/", "directory")
    for b, ino in inode_of.items():
        if ino == journal:
            out[b] = ("journal", "", "a journal block: replayed at mount, it belongs to no file")
        else:
            kind = "directory block" if paths.get(ino, ("", ""))[1] == "directory" else "data block"
            out[b] = (kind, paths.get(ino, (f"inode {ino}", ""))[0], "")
    layout = run(["dumpe2fs", device], timeout=120, check=False).stdout
    for b in wanted:
        if b not in out:
            out[b] = _ext4_meta(b, layout, size, ipg, isize)
    tables = {b: v for b, v in out.items() if v[0] == "inode table" and v[2]}
    if tables:
        inos = sorted({int(x) for v in tables.values() for x in v[2].split()[1].split("-")})
        named = _ncheck(run, device, list(range(inos[0], inos[-1] + 1))) if len(inos) else {}
        for b, (what, _, note) in tables.items():
            lo, hi = (int(x) for x in note.split()[1].split("-"))
            files = [named[i][0] for i in range(lo, hi + 1) if i in named]
            out[b] = (what, ", ".join(files[:4]), note)
    return size, out


def _field(text: str, name: str) -> str | None:
    m = re.search(rf"^{re.escape(name)}:\s*(\S+)", text, re.M)
    return m.group(1) if m else None


def _icheck(run: Callable[..., Any], device: str, blocks: list[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for k in range(0, len(blocks), ICHECK_BATCH):  # debugfs -R takes a limited argument list
        text = run(
            ["debugfs", "-R", "icheck " + " ".join(map(str, blocks[k : k + ICHECK_BATCH])), device],
            timeout=120,
        ).stdout
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                out[int(parts[0])] = int(parts[1])
    return out


def _ncheck(run: Callable[..., Any], device: str, inodes: list[int]) -> dict[int, tuple[str, str]]:
    """inode -> (path, "directory" | "file")."""
    out: dict[int, tuple[str, str]] = {}
    if not inodes:
        return out
    for k in range(0, len(inodes), ICHECK_BATCH):
        text = run(
            ["debugfs", "-R", "ncheck " + " ".join(map(str, inodes[k : k + ICHECK_BATCH])), device],
            timeout=120,
        ).stdout
        for line in text.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0].isdigit():
                out.setdefault(int(parts[0]), ("/" + parts[1].lstrip("/"), "file"))
    for ino in list(out):
        st = run(["debugfs", "-R", f"stat <{ino}>", device], timeout=120, check=False).stdout
        if "Type: directory" in st:
            out[ino] = (out[ino][0], "directory")
    return out


def _ext4_meta(b: int, layout: str, size: int, ipg: int, isize: int) -> tuple[str, str, str]:
    groups = [(int(m.group(1)), m.start()) for m in _GROUP.finditer(layout)]
    for n, (g, start) in enumerate(groups):
        end = groups[n + 1][1] if n + 1 < len(groups) else len(layout)
        for m in _LAYOUT.finditer(layout, start, end):
            lo = int(m.group(2))
            hi = int(m.group(3) or lo)
            if lo <= b <= hi:
                kind = m.group(1)
                if kind == "Inode table":
                    per = size // isize
                    first = g * ipg + (b - lo) * per + 1
                    return "inode table", "", f"inodes {first}-{first + per - 1}"
                if kind in ("Block bitmap", "Inode bitmap"):
                    return "allocation metadata", "", f"{kind.lower()} of group {g}"
                return "superblock/group descriptors", "", f"{kind.lower()} (group {g})"
    return (
        "free block",
        "",
        "not in use at the cut: allocated later, or freed (e.g. a deleted file)",
    )


# -- xfs ---------------------------------------------------------------------------------------------
_XFS_USE = re.compile(r"block (\d+) \((\d+)/(\d+)\) type (\S+)(?: inode (\d+))?(?: (\S+))?")


def _xfs(
    device: str, entries: list[Any], run: Callable[..., Any]
) -> tuple[int, dict[int, tuple[str, str, str]]]:
    sb = run(
        ["xfs_db", "-r", "-c", "sb 0", "-c", "p blocksize agblocks", device], timeout=120
    ).stdout
    size = int(_field(sb.replace(" = ", ": "), "blocksize") or 0)
    agblocks = int(_field(sb.replace(" = ", ": "), "agblocks") or 0)
    if not size or not agblocks:
        return 0, {}
    wanted = sorted({b for e in entries for b in _blocks(e, size)})
    cmds = ["-c", "blockget -n"]
    for b in wanted:  # a linear block number -> (ag, agbno) -> the fsblock xfs_db wants
        ag, agbno = divmod(b, agblocks)
        fsb = (ag << max(agblocks - 1, 1).bit_length()) | agbno
        cmds += ["-c", f"fsblock {fsb}", "-c", "blockuse -n"]
    text = run(["xfs_db", "-r", *cmds, device], timeout=300, check=False).stdout
    out: dict[int, tuple[str, str, str]] = {}
    uses = [m for m in _XFS_USE.finditer(text)]
    for b, m in zip(wanted, uses):
        kind, path = m.group(4), m.group(6) or ""
        what = {
            "data": "data block",
            "dir": "directory block",
            "log": "journal",
            "inode": "inode table",
            "free1": "free block",
            "free2": "free block",
            "bmap": "allocation metadata",
        }.get(kind, kind)
        out[b] = (what, path, "" if path or what != "data block" else f"inode {m.group(5)}")
    return size, out


# -- btrfs (debug/btrfsmap.py) -----------------------------------------------------------------------


def _btrfs(
    device: str, entries: list[Any], run: Callable[..., Any]
) -> tuple[int, dict[int, tuple[str, str, str]]]:
    sb = btrfsmap.super_fields(
        run(["btrfs", "inspect-internal", "dump-super", device], timeout=120).stdout
    )
    size = int(sb.get("sectorsize", "0") or 0)
    if not size or not sb.get("nodesize"):
        return 0, {}
    wanted = sorted({b for e in entries for b in _blocks(e, size)})

    def read(at: int, n: int) -> bytes:
        with open(device, "rb") as fh:
            fh.seek(at)
            return fh.read(n)

    return size, btrfsmap.map_blocks(device, wanted, size, sb, run, read)


MAPPERS: dict[str, Callable[..., tuple[int, dict[int, tuple[str, str, str]]]]] = {
    "ext4": _ext4,
    "xfs": _xfs,
    "btrfs": _btrfs,
}

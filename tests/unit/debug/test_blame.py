"""blame.py: which writes a state's failure is about, where they sit among the marks, and the
mapping of blocks to filesystem objects from the tools' own output (canned here; the real tools
run in tests/vm/test_triage_vm.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from powercut.core.states.models import CrashSpace
from powercut.debug import blame
from tests.unit.logops import build_log

OPS = [
    ("m", "mkfs"),
    ("m", "begin:1"),
    ("w", 100, 4, 0, 1),
    ("w", 200, 2, 0, 2),
    ("f",),
    ("m", "ack:1"),
    ("m", "begin:2"),
    ("w", 104, 4, 0, 3),
    ("w", 300, 2, 0, 4),
    ("f",),
    ("m", "ack:2"),
]


def _space(tmp_path: Path) -> CrashSpace:
    return CrashSpace(build_log(tmp_path / "log.bin", OPS))


def test_lost_and_torn_writes_are_what_a_state_is_about(tmp_path: Path) -> None:
    sp = _space(tmp_path)
    wc = sp.make_state("write-cache", 9, [7])
    assert blame.writes_that_matter(sp, wc) == [(7, "lost")]
    torn = sp.make_state("torn", 8, (), [(7, [0, 1])])
    assert blame.writes_that_matter(sp, torn) == [(7, "torn (2 of 4 sectors persisted)")]
    # a prefix state: the last write it has and the writes up to the flush it came before
    prefix = sp.make_state("no-cache", 8)
    assert blame.writes_that_matter(sp, prefix) == [
        (7, "durable, the last write before the cut"),
        (8, "not yet durable at the cut"),
    ]


def test_place_among_the_marks(tmp_path: Path) -> None:
    sp = _space(tmp_path)
    assert (
        blame.place(sp, 7, sp.make_state("write-cache", 9, [7]))
        == "written after begin:2; the crash came before the flush at #9 (before ack:2)"
    )
    # an ack given while the write was not flushed (an ack-early bug)
    st = sp.make_state("no-cache", 6)
    assert (
        blame.place(sp, 3, sp.make_state("write-cache", 4, [3]))
        == "written after begin:1; the crash came before the flush at #4 (before ack:1)"
    )
    assert blame.place(sp, 2, st).startswith("written after begin:1")
    ack_early = CrashSpace(
        build_log(tmp_path / "b.bin", [("m", "begin:1"), ("w", 8, 2, 0, 1), ("m", "ack:1"), ("f",)])
    )
    s = ack_early.make_state("write-cache", 3, [1])
    assert (
        blame.place(ack_early, 1, s)
        == "written after begin:1, not yet flushed when ack:1 was given"
    )


DEBUGFS_STATS = (
    "Block size:               1024\nInodes per group:         2048\nInode size:\t          256\n"
    "Journal inode:            8\n"
)
DUMPE2FS = """Group 0: (Blocks 1-8192) csum 0xdf21
  Primary superblock at 1, Group descriptors at 2-3
  Reserved GDT blocks at 4-259
  Block bitmap at 260 (+259), csum 0xee5dc730
  Inode bitmap at 276 (+275), csum 0x1472618f
  Inode table at 292-803 (+291)
"""


def fake_run(argv: list[str], timeout: float, check: bool = True) -> SimpleNamespace:
    cmd = argv[2] if argv[0] == "debugfs" else ""
    if argv[0] == "dumpe2fs":
        return SimpleNamespace(stdout=DUMPE2FS, returncode=0)
    if cmd == "stats":
        return SimpleNamespace(stdout=DEBUGFS_STATS, returncode=0)
    if cmd.startswith("icheck"):
        table = {
            "50": "12",
            "51": "12",
            "100": "<block not found>",
            "150": "8",
            "101": "<block not found>",
            "60": "2",
        }
        rows = [f"{b}\t{table.get(b, '<block not found>')}" for b in cmd.split()[1:]]
        return SimpleNamespace(stdout="Block\tInode number\n" + "\n".join(rows), returncode=0)
    if cmd.startswith("ncheck"):
        known = {"12": "//wal/wal-000002.log", "13": "//wal"}
        rows = [f"{i}\t{known[i]}" for i in cmd.split()[1:] if i in known]
        return SimpleNamespace(stdout="Inode\tPathname\n" + "\n".join(rows), returncode=0)
    if cmd.startswith("stat"):
        return SimpleNamespace(
            stdout="Inode: 13   Type: directory" if "<13>" in cmd else "Type: regular", returncode=0
        )
    raise AssertionError(argv)


def test_ext4_blocks_map_to_files_journal_and_metadata() -> None:
    e = lambda sector, nr: SimpleNamespace(sector=sector, nr_sectors=nr)  # noqa: E731
    size, m = blame._ext4(
        "/dev/x",
        [e(100, 4), e(300, 2), e(520, 2), e(584, 2), e(200, 2), e(10000, 2), e(120, 2)],
        fake_run,
    )
    assert size == 1024
    assert m[50] == m[51] == ("data block", "/wal/wal-000002.log", "")
    assert m[60] == (
        "directory block",
        "/",
        "",
    )  # inode 2: ncheck names no path for it (was "data block of inode 2")
    assert m[150][0] == "journal"
    assert m[260] == ("allocation metadata", "", "block bitmap of group 0")
    assert m[292] == ("inode table", "", "inodes 1-4")
    assert m[100] == ("superblock/group descriptors", "", "reserved gdt blocks (group 0)")
    assert m[5000][0] == "free block" and "deleted" in m[5000][2]


def test_culprit_text() -> None:
    c = blame.Culprit(159, 18058, 2, "lost", "data block", "/Data.fs", "written after begin:2")
    assert (
        c.describe()
        == "lost: data block of /Data.fs (entry #159, sectors 18058+2), written after begin:2"
    )
    assert c.to_json()["text"] == c.describe()


def test_a_large_write_is_mapped_at_a_bounded_number_of_blocks() -> None:
    e = SimpleNamespace(sector=8, nr_sectors=2048)  # 1 MiB in 1 KiB blocks: 1024 blocks
    got = blame._blocks(e, 1024)
    assert len(got) == blame.BLOCKS_PER_WRITE and got[0] == 4 and got[-1] == 4 + 1023
    assert blame._blocks(SimpleNamespace(sector=8, nr_sectors=4), 1024) == [4, 5]


def test_writes_that_never_reached_the_disk_read_as_one_line(tmp_path: Path) -> None:
    """A minimized state whose missing writes all come after its cut (page-cache writes) says so in
    one line -- how many, their entries, their file, where they sit -- not a line per block; a state
    that lost writes the disk had keeps a line per write."""
    ops = [
        ("m", "mkfs"),
        ("m", "begin:0"),
        ("w", 300, 2, 0, 1),
        ("f",),
        ("m", "ack:0"),
        ("m", "begin:1"),
        ("m", "ack:1"),
        ("w", 100, 2, 0, 2),
        ("w", 102, 2, 0, 3),
        ("f",),
        ("m", "begin:2"),
        ("m", "ack:2"),
    ]
    sp = CrashSpace(build_log(tmp_path / "log.bin", ops))
    state = sp.make_state("no-cache", 6)  # ack:1 given, its writes (#7, #8) not yet written
    culprits = [c.to_json() for c in blame.blame(sp, state, "ext4", "/dev/x", fake_run)]
    assert [c["how"] for c in culprits] == [
        "durable, the last write before the cut",
        blame.LATE,
        blame.LATE,
    ]
    got = blame.lines(culprits)
    assert got[0] == culprits[0]["text"] and len(got) == 2
    assert got[1] == (
        "2 writes never reached the disk before the cut (page-cache writes, entries #7-#8): data block"
        " of /wal/wal-000002.log; written after ack:1; the crash came before the flush at #9 (before ack:2)"
    )
    lost = sp.make_state("write-cache", 9, [7])
    assert blame.lines(
        [c.to_json() for c in blame.blame(sp, lost, "ext4", "/dev/x", fake_run)]
    ) == [
        "lost: data block of /wal/wal-000002.log (entry #7, sectors 100+2), written after ack:1; the crash came "
        "before the flush at #9 (before ack:2)"
    ]


def test_a_page_cache_line_names_its_kinds_and_where_the_writes_sit() -> None:
    late = [
        {"how": blame.LATE, "entry": i, "what": w, "path": p, "place": pl, "text": f"w{i}"}
        for i, w, p, pl in [
            (4, "data block", "/a", "written after ack:1; never flushed"),
            (5, "journal", "", "written after ack:1; never flushed"),
            (7, "data block", "/b", "written after ack:2; never flushed"),
            (8, "inode table", "", "written after ack:2; never flushed"),
            (9, "data block", "/a", "written after ack:2; never flushed"),
        ]
    ]
    (line,) = blame.lines(late)
    assert line.startswith(
        "5 writes never reached the disk before the cut (page-cache writes, entries #4-#5, #7-#9): "
        "data block of /a; data block of /b; journal (+1 more)"
    )  # the files' data first
    assert line.endswith(
        ": data block of /a; data block of /b; journal (+1 more); written after ack:1 (the first) to "
        "after ack:2 (the last); never flushed"
    )
    one = dict(late[0], entry=4)
    assert blame.lines([one]) == [
        "1 write never reached the disk before the cut (page-cache write, entry #4): "
        "data block of /a; written after ack:1; never flushed"
    ]
    assert blame.lines([]) == []
    fua = dict(late[4], place="written after ack:2; a FUA write, the crash came before it")
    assert blame.lines([late[0], fua])[0].endswith(
        "data block of /a; the first written after ack:1; never flushed | "
        "the last written after ack:2; a FUA write, the crash came before it"
    )
    torn = dict(late[1], how="torn (1 of 2 sectors persisted)")
    assert blame.lines([late[0], torn]) == ["w4", "w5"]

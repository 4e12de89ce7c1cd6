"""core/cause/causes.py: the durability rule a failing state's program broke, from its trace."""

import pytest

from powercut.core.cause import causes
from powercut.core.trace import syscalls as sc
from tests.unit.core.test_syscalls import mark_line

MNT = "/run/powercut/mnt"


class T:
    """A trace and its log's marks, built call by call (each mark at the next log entry, 10 apart)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.log: list[tuple[int, str]] = [(100, "mkfs")]
        self.t = 1.0

    def call(self, text: str, pid: int = 1) -> "T":
        self.t += 0.01
        self.lines.append(f"{pid} {self.t:.6f} {text}")
        return self

    def mark(self, text: str, pid: int = 1) -> "T":
        self.t += 0.01
        self.lines.append(mark_line(pid, self.t, text))
        self.log.append((self.log[-1][0] + 10, text))
        return self

    def open(self, name: str, flags: str = "O_WRONLY|O_CREAT|O_TRUNC", fd: int = 5) -> "T":
        return self.call(f'openat(AT_FDCWD<{MNT}>, "{name}", {flags}, 0666) = {fd}<{MNT}/{name}>')

    def write(self, name: str, n: int = 100, fd: int = 5, ret: str = "") -> "T":
        return self.call(f'write({fd}<{MNT}/{name}>, "x"..., {n}) = {ret or n}')

    def fsync(self, name: str, fd: int = 5, call: str = "fsync", ret: str = "0") -> "T":
        return self.call(f"{call}({fd}<{MNT}/{name}>) = {ret}")

    def fsync_dir(self, name: str = "") -> "T":
        path = f"{MNT}/{name}".rstrip("/")
        return self.call(
            f'openat(AT_FDCWD<{MNT}>, "{name or "."}", O_RDONLY|O_DIRECTORY) = 6<{path}>'
        ).call(f"fsync(6<{path}>) = 0")

    def trace(self) -> sc.Trace:
        return sc.parse("\n".join(self.lines))

    def explain(self, cut: int | None = None, **kw) -> causes.Cause:
        return causes.explain(
            self.trace(), self.log, cut if cut is not None else self.log[-1][0] + 1, MNT, **kw
        )


def kv(durable: bool, n: int = 2) -> T:
    t = T()
    t.open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4)
    for i in range(n):
        t.mark(f"begin:{i}").open("store.json.tmp").write("store.json.tmp", 210)
        if durable:
            t.fsync("store.json.tmp")
        t.call('rename("store.json.tmp", "store.json") = 0')
        if durable:
            t.fsync_dir()
        t.mark(f"ack:{i}")
    return t


def test_rename_before_fsync_is_the_cause_of_the_kvstore_without_fsync():
    c = kv(durable=False).explain(reasons=["acknowledged key k1 is lost"])
    assert c.rule == causes.RENAME
    assert "/store.json.tmp was renamed over /store.json before its data was fsynced" in c.sentence
    assert "ack:0" in c.sentence and "1 more acked commit alike" in c.sentence
    assert any("rename(" in e for e in c.evidence) and c.evidence[-1].endswith("mark ack:0")
    assert any("no fsync or fdatasync" in o for o in c.others) and any(
        "fsync of the directory" in o for o in c.others
    )


def test_the_durable_kvstore_breaks_no_rule():
    commits = causes.commits(kv(durable=True).trace(), MNT)
    assert [c.key for c in commits] == ["0", "1"] and all(not c.violations for c in commits)
    c = kv(durable=True).explain(reasons=["lost"])
    assert c.rule == causes.BEYOND and "did everything the rules ask before ack:1" in c.sentence


def test_no_fsync_names_the_file_and_what_was_written():
    t = T().open("wal").mark("begin:1").write("wal", 100).write("wal", 28).mark("ack:1")
    c = t.explain()
    assert c.rule == causes.NO_FSYNC and c.subject == "/wal"
    assert "changing /wal (2 calls, 128 bytes) with no fsync or fdatasync" in c.sentence


@pytest.mark.parametrize(
    "flags, rule",
    [
        ("O_WRONLY|O_SYNC", None),
        ("O_WRONLY|O_DSYNC", None),
        ("O_WRONLY|O_DIRECT", causes.NO_FSYNC),
        ("O_WRONLY", causes.NO_FSYNC),
    ],
)
def test_sync_opens_are_synced_and_o_direct_is_not(flags, rule):
    t = (
        T()
        .open("f", "O_WRONLY|O_CREAT")
        .fsync_dir()
        .open("f", flags)
        .mark("begin:1")
        .write("f")
        .mark("ack:1")
    )
    violations = causes.commits(t.trace(), MNT)[0].violations
    assert [v.rule for v in violations] == ([rule] if rule else [])
    if "O_DIRECT" in flags:
        assert "O_DIRECT bypasses the page cache" in violations[0].sentence()


def test_fdatasync_msync_and_sync_are_barriers_sync_file_range_is_not():
    for barrier in ("fdatasync(5<{m}/f>) = 0", "sync() = 0", "syncfs(5<{m}/f>) = 0"):
        t = (
            T()
            .open("f", "O_WRONLY|O_CREAT")
            .fsync_dir()
            .mark("begin:1")
            .write("f")
            .call(barrier.format(m=MNT))
        )
        assert not causes.commits(t.mark("ack:1").trace(), MNT)[0].violations, barrier
    t = T().open("f", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("f")
    t.call(
        f"sync_file_range(5<{MNT}/f>, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE|SYNC_FILE_RANGE_WRITE) = 0"
    ).mark("ack:1")
    (v,) = causes.commits(t.trace(), MNT)[0].violations
    assert (
        v.rule == causes.NO_FSYNC and "sync_file_range is not a durability barrier" in v.sentence()
    )


def test_a_new_file_needs_its_directory_fsynced():
    t = T().mark("begin:1").open("sub/new").write("sub/new").fsync("sub/new").mark("ack:1")
    c = t.explain()
    assert c.rule == causes.NO_DIR_FSYNC and c.subject == "/sub"
    t2 = (
        T()
        .mark("begin:1")
        .open("sub/new")
        .write("sub/new")
        .fsync("sub/new")
        .fsync_dir("sub")
        .mark("ack:1")
    )
    assert not causes.commits(t2.trace(), MNT)[0].violations


def test_acked_after_a_failed_fsync():
    t = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    t.fsync("db", ret="-1 EIO (Input/output error)").mark("ack:1")
    c = t.explain()
    assert c.rule == causes.ERROR and "fsync of /db failed (EIO)" in c.sentence
    # a retried fsync that succeeds does not clear it: the error may have dropped the dirty pages
    # (Linux marks them clean), so the retry has nothing left to write
    t2 = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    t2.fsync("db", ret="-1 EIO (Input/output error)").fsync("db").mark("ack:1")
    t2.mark("begin:2").write("db").fsync("db").mark("ack:2")
    assert [v.rule for v in causes.commits(t2.trace(), MNT)[0].violations] == [causes.ERROR]
    assert not causes.commits(t2.trace(), MNT)[1].violations
    # the checker names only the later key: the failed fsync before the cut is still the cause
    c2 = t2.explain(reasons=["lost ack:2"])
    assert (
        c2.rule == causes.ERROR and "ack:1 was given after fsync of /db failed (EIO)" in c2.sentence
    )


def test_only_acks_before_the_cut_and_the_lost_keys_count():
    t = T().open("a", "O_WRONLY|O_CREAT").open("b", "O_WRONLY|O_CREAT", fd=6).fsync_dir()
    t.mark("begin:1").write("a").fsync("a").mark("ack:1")  # durable
    t.mark("begin:2").write("b", fd=6).mark("ack:2")  # not
    cut_after_1 = t.log[-3][0] + 1  # after ack:1, before begin:2
    assert t.explain(cut=cut_after_1).rule == causes.BEYOND
    c = t.explain(reasons=["lost ack:2"])
    assert c.rule == causes.NO_FSYNC and c.subject == "/b"
    # the checker names key 1 (durable by the rules): the rules have no complaint about it
    assert t.explain(reasons=["key 1 is lost"]).rule == causes.BEYOND


def test_unordered_writes_in_the_commit_in_flight():
    t = T().open("wal", "O_WRONLY|O_CREAT").fsync_dir()
    t.mark("begin:1").write("wal", 1024).write("wal", 64).fsync("wal").mark("ack:1")
    t.mark("begin:2").write("wal", 1024).write("wal", 64).fsync("wal").mark("ack:2")
    cut = t.log[-2][0] + 1  # after begin:2, before ack:2: commit 2 in flight
    c = t.explain(cut=cut, verdict="corrupt-data")
    assert c.rule == causes.UNORDERED and c.subject == "/wal"
    assert "(ack:2) made 2 writes (/wal) durable with one fsync" in c.sentence
    # a prefix state (it lost nothing: the crash came between the writes) is explained alike
    assert t.explain(cut=cut, verdict="lost-ack").rule == causes.UNORDERED


def test_no_ack_before_the_cut():
    t = T().open("f").mark("begin:1").write("f").mark("ack:1")
    assert t.explain(cut=101).rule == causes.BEYOND


def test_blame_agrees_or_both_are_said():
    c = kv(durable=False).explain()
    agree = causes.with_blame(
        c,
        [{"path": "/store.json", "what": "data block", "text": "lost: data block of /store.json"}],
    )
    assert agree.blame.startswith("blame agrees: lost: data block of /store.json")
    other = causes.with_blame(
        c, [{"path": "", "what": "superblock/group descriptors", "text": "durable: superblock"}]
    )
    assert other.blame.startswith("blame names other blocks")
    assert causes.with_blame(c, []).blame == ""


def test_cause_round_trips_through_json():
    c = causes.with_blame(
        kv(durable=False).explain(), [{"path": "/x", "what": "data block", "text": "t"}]
    )
    assert causes.Cause.from_json(c.to_json()) == c
    assert c.lines()[0].startswith("cause (rename-before-fsync): ")


def test_lost_keys_reads_the_checkers_words():
    keys = ["1", "2", "k3", "10"]
    assert causes.lost_keys(["lost ack:2"], keys) == ["2"]
    assert causes.lost_keys(["acknowledged key k3 is lost"], keys) == ["k3"]
    assert causes.lost_keys(["record 10: checksum mismatch"], keys) == ["10"]
    assert causes.lost_keys(["the database cannot open"], keys) == []


def test_sync_is_a_barrier_for_the_commit_in_flight_too():
    # wal commit-before-data: the record that commits and its data, then one sync()
    t = T().open("seg", "O_WRONLY|O_CREAT").open("ctl", "O_WRONLY|O_CREAT", fd=6).call("sync() = 0")
    t.mark("begin:1").write("seg", 1104).write("ctl", 48, fd=6).call("sync() = 0").mark("ack:1")
    cut = t.log[-1][0] - 1  # inside commit 1: no ack before the cut
    c = t.explain(cut=cut, verdict="corrupt-data")
    assert c.rule == causes.UNORDERED and c.subject == "/seg, /ctl"
    assert "made 2 writes (/seg, /ctl) durable with one sync" in c.sentence
    assert c.evidence[-1].endswith("sync() = 0")
    # ordered by a sync between them: no such cause
    t2 = (
        T().open("seg", "O_WRONLY|O_CREAT").open("ctl", "O_WRONLY|O_CREAT", fd=6).call("sync() = 0")
    )
    t2.mark("begin:1").write("seg", 1104).call("sync() = 0").write("ctl", 48, fd=6).call(
        "sync() = 0"
    ).mark("ack:1")
    assert t2.explain(cut=t2.log[-1][0] - 1, verdict="corrupt-data").rule == causes.BEYOND


def test_a_torn_write_no_rule_prevents_is_named_as_a_tear():
    t = T().open("seg", "O_WRONLY|O_CREAT").call("sync() = 0")
    t.mark("begin:1").write("seg", 8192).call("sync() = 0").mark("ack:1")
    c = t.explain(cut=t.log[-1][0] - 1, verdict="corrupt-data", torn=[177])
    assert c.rule == causes.TORN and c.subject == "/seg"
    assert (
        "tore a write of the commit in flight (ack:1; /seg)" in c.sentence and "#177" in c.sentence
    )
    assert "checksum" in c.sentence


def race(ack_inside: bool) -> T:
    """append-fsync with ack_on_issue: thread 2 acks while thread 1's fsync runs (strace splits the
    fsync: <unfinished ...> ... <... fsync resumed>), or after it returned."""
    t = T().open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4)
    for i in range(2):
        t.mark(f"begin:{i}").write("log", 64, fd=4)
        if ack_inside:
            t.call("fsync(4</run/powercut/mnt/log> <unfinished ...>")
            t.mark(f"ack:{i}", pid=2)
            t.call("<... fsync resumed>) = 0")
        else:
            t.fsync("log", fd=4).mark(f"ack:{i}", pid=2)
    return t


def test_an_ack_given_while_its_fsync_runs_is_the_race_not_a_missing_fsync():
    c = race(ack_inside=True).explain(reasons=["acknowledged record 1 is lost"])
    assert c.rule == causes.EARLY
    assert (
        "ack:1" in c.sentence and "fsync of /log in another thread was still running" in c.sentence
    )
    assert "began before the ack and returned after it (20.0 ms in all)" in c.sentence
    assert any("mark ack:1" in e for e in c.evidence) and c.evidence[-1].endswith("= 0")
    assert not any("no fsync or fdatasync" in o for o in c.others)


def test_an_ack_after_its_fsync_returned_breaks_no_rule():
    assert all(not c.violations for c in causes.commits(race(ack_inside=False).trace(), MNT))


def test_a_split_fsync_that_returned_before_the_ack_is_an_fsync():
    t = T().open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4).mark("begin:0").write("log", 64, fd=4)
    t.call("fsync(4</run/powercut/mnt/log> <unfinished ...>").call("getpid() = 7", pid=2)
    t.call("<... fsync resumed>) = 0").mark("ack:0")
    assert all(not c.violations for c in causes.commits(t.trace(), MNT))
    assert sc.parse("\n".join(t.lines)).ops[-2].start > 0


def test_a_split_fsync_records_when_it_began():
    tr = race(ack_inside=True).trace()
    f = next(o for o in tr.ops if o.kind == sc.FSYNC)
    assert f.start > 0 and f.began == f.start < f.time


def test_a_lying_disk_state_is_explained_by_what_the_disk_did():
    c = causes.lie_cause(
        "corrupt-sector",
        114,
        39,
        bits=3,
        verdict="silent-corruption",
        reasons=["page 2 holds unknown bytes"],
    )
    assert c.rule == causes.LIED and c.rule in causes.RULES
    assert c.sentence.startswith(
        "the disk flipped 3 bit(s) of sector 39, last written by write #114, and the "
        "program served the result as good data, with no error"
    )
    assert c.evidence == ("page 2 holds unknown bytes",)
    m = causes.lie_cause("misdirected-write", 102, 200, dest=229378, verdict="lost-ack")
    assert "wrote write #102's data at sector 229378 instead of its own sector 200" in m.sentence
    assert "an acked commit was gone without an error" in m.sentence
    f = causes.lie_cause("flush-ignored", 7, 8, dropped=range(7, 15), verdict="lost-ack")
    assert "writes #7, #8, #9, #10, #11, #12 ... before it were lost" in f.sentence


def test_an_ack_sent_while_its_files_sync_was_held_is_that_race():
    """--delay-sync's log places the held fdatasync where the program called it: before the ack, in
    another thread -- the rule is ack-before-sync-returned, said as the hold, not no-fsync."""
    from powercut.core.recording.races import with_holds
    from powercut.core.recording.syncdelay import holds

    t = (
        T()
        .open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4)
        .fsync_dir()
        .mark("begin:1")
        .write("log", fd=4)
    )
    called = t.t + 0.001
    t.mark("ack:1", pid=2)
    t.t += 0.2
    t.fsync("log", fd=4, call="fdatasync")
    plain = causes.explain(t.trace(), t.log, t.log[-1][0] + 1, MNT)
    assert plain.rule == causes.NO_FSYNC
    held = with_holds(t.trace(), holds(f"fdatasync\t200000000\t1\t{called:.6f}\t{MNT}/log\n"))
    c = causes.explain(held, t.log, t.log[-1][0] + 1, MNT)
    assert c.rule == causes.EARLY and c.subject == "/log"
    assert (
        "ack:1 was sent while the fdatasync of /log that covers it, called by another thread"
        in c.sentence
    )
    assert "was still held (--delay-sync holds it 200 ms before it runs)" in c.sentence
    assert c.evidence[-1].endswith(
        "fdatasync(4</run/powercut/mnt/log>) = 0 [--delay-sync held it 200 ms]"
    )


def pointer(synced: bool = False, via_rename: bool = True, named: bool = True) -> T:
    """A LevelDB-style open: a new MANIFEST written, then CURRENT made to name it -- written under
    CURRENT.tmp, fsynced and renamed into place (``via_rename``), or written in place and fsynced --
    with the MANIFEST fsynced first (``synced``: the fix) or never (the bug); ``named``: CURRENT's
    bytes name the MANIFEST (else another file)."""
    t = T().open("MANIFEST-000002", "O_WRONLY|O_CREAT", fd=5).fsync_dir().mark("begin:1")
    t.write("MANIFEST-000002", 120, fd=5)
    if synced:
        t.fsync("MANIFEST-000002", fd=5)
    name = "CURRENT.tmp" if via_rename else "CURRENT"
    text = "MANIFEST-000002" if named else "MANIFEST-000001"
    t.open(name, "O_WRONLY|O_CREAT|O_TRUNC", fd=6).call(
        f'write(6<{MNT}/{name}>, "{text}\\n", 16) = 16'
    )
    t.fsync(name, fd=6)
    if via_rename:
        t.call('rename("CURRENT.tmp", "CURRENT") = 0')
    return t.fsync_dir().mark("ack:1")


def test_pointer_before_data_is_the_cause_of_a_current_naming_an_unsynced_manifest():
    t = pointer()
    c = t.explain(cut=t.log[-1][0])  # the cut in the open's window, before its ack
    assert c.rule == causes.POINTER and c.subject == "/MANIFEST-000002"
    assert "made /CURRENT durable -- renamed it into place" in c.sentence and "ack:1" in c.sentence
    assert "fsync /MANIFEST-000002 before publishing the name that points to it" in c.sentence
    assert any('"MANIFEST-000002\\n"' in e for e in c.evidence) and "rename(" in c.evidence[-1]
    in_place = pointer(via_rename=False)
    c2 = in_place.explain(cut=in_place.log[-1][0])
    assert (
        c2.rule == causes.POINTER
        and "made /CURRENT durable -- its fsync (trace line" in c2.sentence
    )
    fixed, other = pointer(synced=True), pointer(named=False)
    assert fixed.explain(cut=fixed.log[-1][0]).rule != causes.POINTER
    assert other.explain(cut=other.log[-1][0]).rule != causes.POINTER


def test_an_unproven_cause_heads_with_what_it_says_not_as_a_cause():
    c = causes.Cause("no-fsync", "ack:1 was given after changing /wal (1 call) with no fsync", ())
    assert (
        c.head() == "cause (no-fsync): ack:1 was given after changing /wal (1 call) with no fsync"
    )
    u = causes.Cause(
        "no-fsync", f"{causes.NOT_PROVEN}; the trace shows: ack:1 was given after changing /wal", ()
    )
    assert (
        u.head()
        == "cause not proven; the trace shows: ack:1 was given after changing /wal [no-fsync, not proven]"
    )
    assert u.lines()[0] == u.head()

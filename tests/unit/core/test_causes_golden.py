"""core/cause/causes.py, pinned: every rule's cause, sentence, evidence and subject over small synthetic
traces, compared whole with what the code produced when this test was written (causes_golden.json).

A change of wording shows here as a diff of one case.  To record the outputs again after a change
that is meant (review the diff of the JSON file): ``python -m tests.unit.core.test_causes_golden``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from powercut.core.cause import causes
from powercut.core.cause.counterfactual import Kill
from powercut.core.cause.rules import registry
from powercut.core.cause.rules.outcomes import RecoveryFails
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Op
from tests.unit.core.test_causes import MNT, T, kv, pointer, race

GOLDEN = Path(__file__).with_name("causes_golden.json")


def explained(t: T, cut: int | None = None, **kw: Any) -> dict[str, Any]:
    c = t.explain(cut=cut, **kw)
    return {"cause": c.to_json(), "lines": c.lines()}


def walked(t: T) -> list[dict[str, Any]]:
    """Every commit of the trace with its violations, in order (the rank order of one ack's rules)."""
    return [
        {
            "key": c.key,
            "since": c.since,
            "entry": c.entry,
            "violations": [v.to_json() for v in c.violations],
        }
        for c in causes.commits(t.trace(), MNT, sc.align(t.trace(), t.log))
    ]


def _no_fsync(flags: str = "O_WRONLY|O_CREAT", writes: int = 2, n: int = 100) -> T:
    t = T().open("wal", flags).fsync_dir().mark("begin:1")
    for _ in range(writes):
        t.write("wal", n)
    return t.mark("ack:1")


def _many_rules_at_one_ack() -> T:
    """One ack after a failed write, an unsynced rename, an unsynced file and a new name."""
    t = T().open("db", "O_WRONLY|O_CREAT").open("tmp", fd=6).fsync_dir().mark("begin:1")
    t.call(f'write(5<{MNT}/db>, "x"..., 100) = -1 ENOSPC (No space left on device)')
    t.write("tmp", 300, fd=6).call('rename("tmp", "cur") = 0')
    t.open("sub/new", fd=7).write("sub/new", 5, fd=7).fsync("sub/new", fd=7)
    t.call(f"ftruncate(5<{MNT}/db>, 4096) = 0").call(f"fallocate(5<{MNT}/db>, 0, 0, 8192) = 0")
    return t.mark("ack:1")


def _race_with(resumed_after: float, call: str = "fsync", pid: int = 2) -> T:
    """An ack given while a split sync ran, the sync's return stamped ``resumed_after`` seconds after
    its start (0: a zero duration; below 0: a clock that went back)."""
    t = (
        T()
        .open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4)
        .fsync_dir()
        .mark("begin:0")
        .write("log", 64, fd=4)
    )
    head = "sync(" if call == "sync" else f"{call}(4</run/powercut/mnt/log>"
    t.call(f"{head} <unfinished ...>")
    began = t.t
    t.mark("ack:0", pid=pid)
    t.t = began + resumed_after - 0.01
    return t.call(f"<... {call} resumed>) = 0")


def _unordered(barrier: str = "fsync", acked: bool = True, writes: int = 2) -> T:
    t = T().open("wal", "O_WRONLY|O_CREAT").fsync_dir()
    t.mark("begin:1").write("wal", 1024).fsync("wal").mark("ack:1").mark("begin:2")
    for i in range(writes):
        t.write("wal", 1024 + i)
    t.call("sync() = 0") if barrier == "sync" else t.fsync("wal")
    return t.mark("ack:2") if acked else t.mark("end")


def _alike(n: int) -> T:
    t = T().open("f", "O_WRONLY|O_CREAT").fsync_dir()
    for i in range(n):
        t.mark(f"begin:{i}").write("f").mark(f"ack:{i}")
    return t


def _blamed(cause: causes.Cause, culprits: list[dict[str, Any]]) -> dict[str, Any]:
    return causes.with_blame(cause, culprits, MNT).to_json()


def _lies() -> list[dict[str, Any]]:
    out = []
    for model in (
        "lost-write",
        "misdirected-write",
        "corrupt-sector",
        "unreadable-sector",
        "flush-ignored",
        "other",
    ):
        for verdict in ("silent-corruption", "lost-ack", "corrupt-data", ""):
            out.append(
                causes.lie_cause(
                    model,
                    12,
                    34,
                    dest=56 if model == "misdirected-write" else -1,
                    bits=2,
                    dropped=range(3, 3 + (9 if verdict == "lost-ack" else 4)),
                    verdict=verdict,
                    reasons=["r1", "r2", "r3", "r4"],
                ).to_json()
            )
    out.append(causes.lie_cause("misdirected-write", 1, 2).to_json())
    return out


def _fail_then_named_later() -> T:
    t = T().open("db", "O_WRONLY|O_CREAT").fsync_dir().mark("begin:1").write("db")
    t.fsync("db", ret="-1 EIO (Input/output error)").fsync("db").mark("ack:1")
    return t.mark("begin:2").write("db").fsync("db").mark("ack:2")


def _mapped(name: str, addr: str, fd: int) -> Callable[[T], T]:
    def go(t: T) -> T:
        return t.open(name, "O_RDWR|O_CREAT", fd=fd).call(
            f"mmap(NULL, 65536, PROT_READ|PROT_WRITE, MAP_SHARED, {fd}<{MNT}/{name}>, 0) = {addr}"
        )

    return go


def _stores_through_mappings(msync_mem: bool) -> T:
    """A store with two shared mappings: its value log msynced before each ack, its memtable log
    (00001.mem) msynced only when ``msync_mem`` (a Go key-value store's bug, issue 52)."""
    t = _mapped("00001.vlog", "0x7f0000000000", 5)(_mapped("00001.mem", "0x7f1000000000", 6)(T()))
    t.fsync_dir()
    for i in range(2):
        t.mark(f"begin:{i}").call("msync(0x7f0000000000, 65536, MS_SYNC) = 0")
        if msync_mem:
            t.call("msync(0x7f1000000000, 65536, MS_SYNC) = 0")
        t.mark(f"ack:{i}")
    return t


def _held(called_before_ack: bool) -> Any:
    """--delay-sync: the log's fdatasync held 200 ms, called (by thread 1) before or after thread
    2's ack; placed where the program called it (core/recording/races.with_holds)."""
    from powercut.core.recording.races import with_holds
    from powercut.core.recording.syncdelay import holds

    t = (
        T()
        .open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4)
        .fsync_dir()
        .mark("begin:1")
        .write("log", fd=4)
    )
    called = t.t + (0.001 if called_before_ack else 0.011)
    t.mark("ack:1", pid=2)
    t.t += 0.2
    t.fsync("log", fd=4, call="fdatasync")
    trace = with_holds(t.trace(), holds(f"fdatasync\t200000000\t1\t{called:.6f}\t{MNT}/log\n"))
    c = causes.explain(trace, t.log, t.log[-1][0] + 1, MNT)
    return {"cause": c.to_json(), "lines": c.lines()}


def _replaced(how: str) -> T:
    """A store of a data file and an index rewritten at each commit: ``away`` renames the old index to
    idx.bak and writes a new one, fsyncing the data file first (the bug); ``tmp`` writes idx.tmp,
    fsyncs it and renames it over (no rule broken); ``trunc`` truncates the index in place."""
    t = T().open("dat", "O_WRONLY|O_CREAT|O_APPEND", fd=5).fsync_dir()
    t.mark("begin:1").write("dat", fd=5).open("idx", "O_WRONLY|O_CREAT", fd=6).write("idx", fd=6)
    t.fsync("dat", fd=5).fsync("idx", fd=6).fsync_dir().mark("ack:1").mark("begin:2").write(
        "dat", fd=5
    )
    if how == "away":
        t.call('rename("idx", "idx.bak") = 0').open("idx", "O_WRONLY|O_CREAT", fd=7).write(
            "idx", fd=7
        )
        t.fsync("dat", fd=5).fsync("idx", fd=7)
    elif how == "trunc":
        t.open("idx", "O_WRONLY|O_TRUNC", fd=7).write("idx", fd=7).fsync("dat", fd=5).fsync(
            "idx", fd=7
        )
    else:
        t.open("idx.tmp", "O_WRONLY|O_CREAT", fd=7).write("idx.tmp", fd=7).fsync("idx.tmp", fd=7)
        t.fsync("dat", fd=5).call('rename("idx.tmp", "idx") = 0')
    return t.fsync_dir().mark("ack:2")


CASES: dict[str, Callable[[], Any]] = {
    # acked-after-error
    "error/fsync": lambda: explained(
        T()
        .open("db", "O_WRONLY|O_CREAT")
        .fsync_dir()
        .mark("begin:1")
        .write("db")
        .fsync("db", ret="-1 EIO (Input/output error)")
        .mark("ack:1")
    ),
    "error/fdatasync": lambda: explained(
        T()
        .open("db", "O_WRONLY|O_CREAT")
        .fsync_dir()
        .mark("begin:1")
        .write("db")
        .fsync("db", call="fdatasync", ret="-1 EIO (Input/output error)")
        .mark("ack:1")
    ),
    "error/before-the-named-ack": lambda: explained(
        _fail_then_named_later(), reasons=["lost ack:2"]
    ),
    "error/walk": lambda: walked(_fail_then_named_later()),
    # rename-before-fsync
    "rename/kv": lambda: explained(kv(durable=False), reasons=["acknowledged key k1 is lost"]),
    "rename/kv-3": lambda: explained(kv(durable=False, n=3)),
    "rename/link": lambda: explained(
        T()
        .open("a.tmp")
        .fsync_dir()
        .mark("begin:1")
        .write("a.tmp")
        .call('link("a.tmp", "a") = 0')
        .mark("ack:1")
    ),
    "rename/walk": lambda: walked(kv(durable=False)),
    # ack-before-sync-returned
    "early/another-thread": lambda: explained(
        race(ack_inside=True), reasons=["acknowledged record 1 is lost"]
    ),
    "early/same-thread": lambda: explained(_race_with(0.02, pid=1)),
    "early/fdatasync": lambda: explained(_race_with(0.03, call="fdatasync")),
    "early/sync": lambda: explained(_race_with(0.02, call="sync")),
    "early/walk": lambda: walked(race(ack_inside=True)),
    "early/zero-duration": lambda: explained(_race_with(0.0)),
    "early/clock-went-back": lambda: explained(_race_with(-0.005)),
    # no-fsync
    "no-fsync/two-writes": lambda: explained(_no_fsync()),
    "no-fsync/one-write": lambda: explained(_no_fsync(writes=1)),
    "no-fsync/empty-writes": lambda: explained(_no_fsync(writes=1, n=0)),
    "no-fsync/six-writes": lambda: explained(_no_fsync(writes=6)),
    "no-fsync/o-direct": lambda: explained(_no_fsync("O_WRONLY|O_CREAT|O_DIRECT")),
    "no-fsync/o-trunc": lambda: explained(
        T()
        .open("f", "O_WRONLY|O_CREAT")
        .fsync_dir()
        .mark("begin:1")
        .open("f", "O_WRONLY|O_TRUNC")
        .mark("ack:1")
    ),
    "no-fsync/range-and-direct": lambda: explained(
        T()
        .open("f", "O_WRONLY|O_CREAT|O_DIRECT")
        .fsync_dir()
        .mark("begin:1")
        .write("f")
        .call(f"sync_file_range(5<{MNT}/f>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0")
        .mark("ack:1")
    ),
    "no-fsync/named": lambda: explained(
        T()
        .open("a", "O_WRONLY|O_CREAT")
        .open("b", "O_WRONLY|O_CREAT", fd=6)
        .fsync_dir()
        .mark("begin:1")
        .write("a")
        .fsync("a")
        .mark("ack:1")
        .mark("begin:2")
        .write("b", fd=6)
        .mark("ack:2"),
        reasons=["lost ack:2"],
    ),
    "no-fsync/alike-1": lambda: explained(_alike(2)),
    "no-fsync/alike-3": lambda: explained(_alike(4)),
    "early/held-sync-called-before-the-ack": lambda: _held(True),
    "early/held-sync-called-after-the-ack": lambda: _held(False),
    # no-msync
    "no-msync/one-mapping-never-synced": lambda: explained(_stores_through_mappings(False)),
    "no-msync/both-msynced": lambda: explained(_stores_through_mappings(True), reasons=["lost"]),
    "no-msync/walk": lambda: walked(_stores_through_mappings(False)),
    "no-msync/fsync-of-the-file-syncs-it": lambda: explained(
        _mapped("m", "0x7f0000000000", 5)(T()).fsync_dir().mark("begin:1").fsync("m").mark("ack:1"),
        reasons=["x"],
    ),
    # no-dir-fsync
    "no-dir-fsync/new-file": lambda: explained(
        T().mark("begin:1").open("sub/new").write("sub/new").fsync("sub/new").mark("ack:1")
    ),
    "no-dir-fsync/unlink": lambda: explained(
        T()
        .open("f")
        .write("f")
        .fsync("f")
        .fsync_dir()
        .mark("begin:1")
        .call('unlink("f") = 0')
        .mark("ack:1")
    ),
    # several rules at one ack: their rank order, the others
    "many/explain": lambda: explained(_many_rules_at_one_ack()),
    "many/walk": lambda: walked(_many_rules_at_one_ack()),
    # replaced-in-place (the cut in commit 2, before its ack)
    "replaced/rename-away": lambda: explained(_replaced("away"), cut=_replaced("away").log[-1][0]),
    "replaced/truncated": lambda: explained(_replaced("trunc"), cut=_replaced("trunc").log[-1][0]),
    "replaced/tmp-then-rename": lambda: explained(
        _replaced("tmp"), cut=_replaced("tmp").log[-1][0]
    ),
    # unordered-writes
    "unordered/fsync": lambda: explained(
        _unordered(), cut=_unordered().log[-2][0] + 1, verdict="corrupt-data"
    ),
    "unordered/sync": lambda: explained(_unordered("sync"), cut=_unordered("sync").log[-2][0] + 1),
    "unordered/no-ack-after": lambda: explained(
        _unordered(acked=False), cut=_unordered(acked=False).log[-2][0] + 1
    ),
    "unordered/six-writes": lambda: explained(
        _unordered(writes=6), cut=_unordered(writes=6).log[-2][0] + 1
    ),
    # unchecked-tear
    "torn/one-entry": lambda: explained(
        _unordered(writes=1), cut=_unordered(writes=1).log[-2][0] + 1, torn=[177]
    ),
    "torn/entries": lambda: explained(
        _unordered(writes=1), cut=_unordered(writes=1).log[-2][0] + 1, torn=[177, 178]
    ),
    "torn/no-writes-no-ack": lambda: explained(
        T().open("f").mark("begin:1"), cut=T().open("f").mark("begin:1").log[-1][0] + 1, torn=[5]
    ),
    # pointer-before-data (the cut in the open's window, before its ack)
    "pointer/renamed-into-place": lambda: explained(pointer(), cut=pointer().log[-1][0]),
    "pointer/fsynced-in-place": lambda: explained(
        pointer(via_rename=False), cut=pointer(via_rename=False).log[-1][0]
    ),
    # recovery-bug (debug/verify.py gives it, from the kill-equivalent state's verdict)
    "recovery/at-a-mark": lambda: _outcome(
        RecoveryFails(
            "what-if@41/a31",
            "fail",
            "does not start: panic",
            Kill(31, 41, Op(7, 9, 1, 1.0, sc.MARK, text="ack:4")).words(),
        )
    ),
    "recovery/at-the-end": lambda: _outcome(
        RecoveryFails("what-if@9/a3", "lost-ack", "k1 missing", Kill(3, 9, None).words())
    ),
    # beyond-rules
    "beyond/rules-kept": lambda: explained(kv(durable=True), reasons=["lost"]),
    "beyond/no-ack": lambda: explained(
        T().open("f").mark("begin:1").write("f").mark("ack:1"), cut=101
    ),
    # disk-lied
    "lied": _lies,
    # the blame
    "blame/agrees": lambda: _blamed(
        kv(durable=False).explain(),
        [
            {
                "path": "/store.json",
                "what": "data block",
                "text": "lost: data block of /store.json",
            },
            {"path": "/x", "what": "data block", "text": "lost: /x"},
        ],
    ),
    "blame/directory": lambda: _blamed(
        T()
        .mark("begin:1")
        .open("sub/new")
        .write("sub/new")
        .fsync("sub/new")
        .mark("ack:1")
        .explain(),
        [{"path": "/sub", "what": "directory block", "text": "lost: a directory block of /sub"}],
    ),
    "blame/other": lambda: _blamed(
        kv(durable=False).explain(),
        [{"path": "", "what": "superblock/group descriptors", "text": "durable: superblock"}],
    ),
    "blame/beyond": lambda: _blamed(
        kv(durable=True).explain(), [{"text": "a"}, {"text": "b"}, {"text": "c"}]
    ),
    "blame/none": lambda: _blamed(kv(durable=False).explain(), []),
}


def _outcome(f: Any) -> dict[str, Any]:
    return {"rule": f.rule, "sentence": registry.sentence(f)}


def record() -> dict[str, Any]:
    return {name: case() for name, case in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_causes_are_those_recorded(name: str) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert json.loads(json.dumps(CASES[name]())) == golden[name]


def test_every_rule_has_a_recorded_cause() -> None:
    text = GOLDEN.read_text()
    assert set(json.loads(text)) == set(CASES)
    assert all(f'"rule": "{rule}"' in text for rule in causes.RULES)


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
    sys.exit(0)

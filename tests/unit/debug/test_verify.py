"""debug/verify.py with a stand-in judge: each rule the failing state broke gets its what-if state;
the first that passes is the cause (verified, or replacing the first rule when a later one is the
one that passes); none passing makes the cause ``unproven``; no file map or a cluster says why the
cause is not proven."""

from __future__ import annotations

import dataclasses
import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from powercut.core.cause import causes
from powercut.core.cause.rules import no_fsync
from powercut.core.cause.rules.base import Plan
from powercut.core.judging.recoveryread import ReadFile
from powercut.core.judging.verdict import Verdict
from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import space
from powercut.core.trace.syscalls import Op
from powercut.debug import cause, verify
from powercut.debug.triage import Group
from tests.unit.core.test_causes import MNT, T
from tests.unit.logops import build_log

# the log: 0 mkfs | 1 begin:1 | 2 idx 3 meta 4 flush | 5 ack:1 | 6 begin:2 | 7 wal 8 idx2 9 meta 10 flush | 11 ack:2
OPS = [
    ("m", "mkfs"),
    ("m", "begin:1"),
    ("w", 200, 1, 0, 1),
    ("w", 10, 1, 0, 2),
    ("f",),
    ("m", "ack:1"),
    ("m", "begin:2"),
    ("w", 100, 1, 0, 3),
    ("w", 208, 1, 0, 4),
    ("w", 11, 1, 0, 5),
    ("f",),
    ("m", "ack:2"),
]
FILES = {"wal": [[100, 8]], "idx": [[200, 16]]}
KILL = (
    "what-if@12/a6"  # the kill-equivalent of a state cut at 6: the whole log, the keys of the cut
)


@dataclass
class Rec:
    trace_path: Path
    file_map: Path | None
    workload: dict[str, Any] = field(default_factory=dict)
    delay_log: Path | None = None


def trace(idx_synced: bool, removed: str = "") -> T:
    """wal (and idx unless ``idx_synced``) changed in commit 1 and acked unsynced; both fsynced in commit 2
    (``removed``: a file written unsynced before begin:1 and unlinked after both syncs, before ack:2)."""
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).open("idx", "O_WRONLY|O_CREAT", fd=6).fsync_dir()
    if removed:  # written, never synced
        t.open(removed, "O_WRONLY|O_CREAT", fd=9).write(removed, fd=9)
    t.mark("begin:1").write("wal", fd=5).write("idx", fd=6)
    if idx_synced:
        t.fsync("idx", fd=6)
    t.mark("ack:1").mark("begin:2").fsync("wal", fd=5).fsync("idx", fd=6)
    if removed:
        t.call(f'unlink("{MNT}/{removed}") = 0')
    return t.mark("ack:2")


@pytest.fixture
def setup(tmp_path: Path) -> Callable[..., tuple[Rec, Any, Group]]:
    index = build_log(tmp_path / "log.bin", OPS)

    def make(
        idx_synced: bool = True,
        file_map: bool = True,
        files: dict[str, Any] | None = None,
        culprits: tuple[dict[str, Any], ...] = (),
        removed: str = "",
    ) -> tuple[Rec, Any, Group]:
        t = trace(idx_synced, removed)
        path = tmp_path / f"syscalls-{idx_synced}.txt.gz"
        with gzip.open(path, "wt") as f:
            f.write("\n".join(t.lines) + "\n")
        fm = tmp_path / "files.json"
        fm.write_text(json.dumps({"files": FILES if files is None else files, "sector_bytes": 512}))
        st = space(index).make_state("flush", 6)  # after ack:1, before commit 2's writes
        v = Verdict(st.id, "flush", st.cut, "lost-ack", ("acked key 1 is lost",), 1, 1, 0.0)
        g = Group(
            "lost-ack",
            "acked key # is lost",
            [v],
            diagnosis={"minimized": st.id, "culprits": list(culprits)},
        )
        return Rec(path, fm if file_map else None), index, g

    return make


def judged(
    passes: Callable[[CrashState], bool],
) -> Callable[[list[CrashState]], dict[str, Verdict]]:
    def judge(states: list[CrashState]) -> dict[str, Verdict]:
        return {
            s.id: Verdict(
                s.id,
                s.model,
                s.cut,
                "pass" if passes(s) else "lost-ack",
                () if passes(s) else ("acked key 1 is lost",),
                1,
                1,
                0.0,
            )
            for s in states
        }

    return judge


def kept(s: CrashState, entry: int) -> bool:
    return entry < s.cut and entry not in s.dropped


def run(
    rec: Rec,
    index: Any,
    g: Group,
    judge: Callable[[list[CrashState]], dict[str, Verdict]],
    read: tuple[ReadFile, ...] = (),
) -> verify.Verification:
    """verify's phases as the campaign runs them: the group's state judged traced (what recovery read:
    ``read``), the counterfactuals planned, judged, and the cause rewritten."""
    ver = verify.prepare(rec, [index], [g])  # type: ignore[arg-type]
    verify.plan(ver, rec, [index], [g])  # type: ignore[arg-type]
    first = judge(ver.states)  # one batch: the group's state traced, its counterfactuals
    ver.traced(
        {sid: dataclasses.replace(judge([st])[sid], read=read) for sid, st in ver.targets.items()}
    )
    ver.record(first, 0.5)
    verify.plan(ver, rec, [index], [g])  # type: ignore[arg-type]  # what the reads add
    ver.record(judge(ver.states), 0.0)
    cause.explain_groups(rec, index, [g])  # type: ignore[arg-type]
    ver.apply(rec, index, [g])  # type: ignore[arg-type]
    return ver


def test_the_rule_whose_counterfactual_passes_is_verified(setup) -> None:
    rec, index, g = setup()
    ver = run(rec, index, g, judged(lambda s: kept(s, 7)))  # wal's write (entry 7) makes it pass
    # wal's data + metadata, not idx's second write; and the kill-equivalent: the whole log (ack:2 is the first
    # mark at or after the cut where the program had synced everything it wrote)
    assert [s.id for s in ver.counterfactuals] == [
        "what-if@11/a6/d8",
        KILL,
    ] and not ver.states  # all judged
    assert g.why["rule"] == causes.NO_FSYNC and g.why["subject"] == "/wal"
    assert g.why["proof"].startswith(
        "verified: with /wal's data and the filesystem's metadata as logged up to its next fsync"
    ) and g.why["proof"].endswith("this state passes")
    assert ver.stats.to_json() | {"seconds": 0} == {
        "groups": 1,
        "states": 2,
        "seconds": 0,
        "verified": 1,
        "replaced": 0,
        "recovery": 0,
        "unproven": 0,
        "untried": 0,
    }
    assert g.why["proven"] is True and not any("process kill" in o for o in g.why["others"])
    assert any(
        line.startswith("  proof: verified")
        for line in cause.group_lines("group 1", g.to_json() | {"why": g.why})
    )


def test_a_true_rule_that_is_not_why_gives_way_to_the_next(setup) -> None:
    rec, index, g = setup(idx_synced=False)
    ver = run(
        rec, index, g, judged(lambda s: kept(s, 8))
    )  # only idx's write (entry 8) makes it pass
    first = causes.candidates(trace(False).trace(), index.marks(), 6, MNT)
    assert [(f.rule, f.subject) for f in first] == [
        (causes.NO_FSYNC, "/wal"),
        (causes.NO_FSYNC, "/idx"),
    ]
    assert g.why["subject"] == "/idx" and g.why["proof"].startswith("verified: with /idx's data")
    assert g.why["refuted"] and g.why["refuted"][0].startswith("no-fsync (/wal): with /wal's data")
    assert "still fails (lost-ack: acked key 1 is lost)" in g.why["refuted"][0]
    assert ver.stats.replaced == 1 and ver.stats.verified == 0


def test_no_counterfactual_passing_says_not_proven_first(setup) -> None:
    rec, index, g = setup(idx_synced=False)
    ver = run(
        rec, index, g, judged(lambda s: s.id == KILL)
    )  # only the kill-equivalent state passes
    assert (
        g.why["rule"] == causes.NO_FSYNC and g.why["subject"] == "/wal" and not g.why.get("refuted")
    )
    assert g.why["proof"].startswith("not proven: no-fsync (/wal): with /wal's data")
    assert (
        "; no-fsync (/idx): with /idx's data" in g.why["proof"] and "still fails" in g.why["proof"]
    )
    assert "a process kill passes (every write durable at mark ack:2 (trace line" in g.why["proof"]
    assert g.why["proven"] is False
    assert g.why["sentence"].startswith(
        "cause not proven; candidates: no-fsync (/wal), no-fsync (/idx); the trace "
        "shows: ack:1 was given after changing /wal"
    )
    head = cause.group_lines("group 1", g.to_json() | {"why": g.why})[0]
    assert head.startswith("group 1: lost-ack x 1: cause not proven; candidates: no-fsync (/wal)")
    assert head.endswith("[no-fsync, not proven]")
    assert ver.stats.unproven == 1 and ver.stats.recovery == 0


def test_a_kill_equivalent_state_that_fails_too_is_a_recovery_bug(setup) -> None:
    rec, index, g = setup(idx_synced=False)
    ver = run(rec, index, g, judged(lambda s: False))  # the kill-equivalent state fails as well
    assert g.why["rule"] == causes.RECOVERY and g.why["subject"] == "" and g.why["proven"] is True
    assert g.why["sentence"].startswith(
        "the program's recovery fails on a state it made itself: with every write "
        "durable at mark ack:2 (trace line"
    )
    assert (
        f"({KILL}) -- what a process kill there leaves -- it fails too (lost-ack: acked key 1 is lost)"
        in g.why["sentence"]
    )
    assert g.why["proof"].startswith(
        "verified: a process kill fails too (every write durable at mark ack:2"
    )
    assert [r.split(":")[0] for r in g.why["refuted"]] == ["no-fsync (/wal)", "no-fsync (/idx)"]
    assert g.why["others"][0].startswith(
        "no-fsync: ack:1 was given after changing /wal"
    )  # what the trace showed
    assert ver.stats.recovery == 1 and ver.stats.unproven == 0


def test_a_verified_rule_keeps_its_place_and_a_failing_kill_is_said_after_it(setup) -> None:
    rec, index, g = setup()
    run(rec, index, g, judged(lambda s: s.id != KILL and kept(s, 7)))
    assert g.why["rule"] == causes.NO_FSYNC and g.why["proof"].startswith(
        "verified: with /wal's data"
    )
    assert g.why["others"][0].startswith(
        "a process kill fails too (every write durable at mark ack:2"
    )
    assert g.why["others"][0].endswith(
        "the program's recovery also fails on a state it made itself"
    )


def test_a_counterfactual_not_judged_leaves_the_cause_not_proven(setup) -> None:
    rec, index, g = setup()
    ver = verify.prepare(rec, [index], [g])  # type: ignore[arg-type]
    verify.plan(ver, rec, [index], [g])  # type: ignore[arg-type]
    ver.record({}, 0.0)
    cause.explain_groups(rec, index, [g])  # type: ignore[arg-type]
    ver.apply(rec, index, [g])  # type: ignore[arg-type]
    assert g.why["rule"] == causes.NO_FSYNC and g.why["proof"].startswith(
        "not proven: no-fsync (/wal): its"
    )
    assert g.why["proof"].endswith(f"the kill-equivalent state {KILL} was not judged")
    assert g.why["sentence"].startswith(
        "cause not proven; candidates: no-fsync (/wal); the trace shows: ack:1"
    )


def test_without_a_file_map_or_on_a_cluster_the_proof_says_why_not(setup) -> None:
    rec, index, g = setup(file_map=False)
    ver = run(rec, index, g, judged(lambda s: True))
    assert [s.id for s in ver.counterfactuals] == [
        KILL
    ]  # no rule's writes can be told apart: the kill state alone
    assert g.why["proof"].startswith("not proven: the recording has no file map")
    assert g.why["proof"].endswith(
        f"; a process kill passes (every write durable at mark ack:2 (trace line 13, "
        f"log entry #11), the first point at or after the cut where the program had synced "
        f"everything it wrote: {KILL})"
    )
    assert g.why["sentence"].startswith("cause not proven; the trace shows: ack:1")
    rec2, _, g2 = setup()
    ver2 = verify.prepare(rec2, [index, index], [g2])  # type: ignore[arg-type]
    assert not ver2.counterfactuals and "a cluster's causes" in ver2.skipped[g2.first.state]


def test_a_file_no_log_write_is_of_is_not_provable_not_refuted(setup) -> None:
    """The map has no blocks of /wal (the program truncated or removed it: a mapping's stores dropped
    that way never reach the disk): its what-if still failing proves nothing, and the next rule's
    passing counterfactual is the cause with /wal's listed as not tried, not as "not why"."""
    rec, index, g = setup(idx_synced=False, files={"idx": [[200, 16]]})
    ver = run(rec, index, g, judged(lambda s: s.id == KILL))
    assert g.why["subject"] == "/wal" and ver.stats.unproven == 1
    assert g.why["proof"].startswith(
        "not proven: no-fsync (/wal): not provable from this recording: no write in "
        "the log is /wal's (the file map at the end has no blocks of it"
    )
    assert (
        "; no-fsync (/idx): with /idx's data" in g.why["proof"] and "still fails" in g.why["proof"]
    )
    rec, index, g = setup(idx_synced=False, files={"idx": [[200, 16]]})
    run(rec, index, g, judged(lambda s: kept(s, 8)))  # idx's write makes it pass
    assert g.why["subject"] == "/idx" and g.why["proof"].startswith("verified: with /idx's data")
    assert (
        not g.why["refuted"]
        and "no-fsync (/wal) could not be tried: not provable" in g.why["proof"]
    )


def test_what_recovery_read_ranks_the_rules_and_is_said(setup) -> None:
    """Recovery read idx alone (empty): the rule about idx is tried first, the one about wal is
    said to be about a file recovery never read, and the cause says what recovery read."""
    rec, index, g = setup(idx_synced=False)
    ver = run(rec, index, g, judged(lambda s: kept(s, 8)), read=(ReadFile("idx", 0, 0),))
    assert [t.label for t in ver.tried[g.first.state]] == [
        "no-fsync (/idx)",
        "no-fsync (/wal, which recovery never read)",
    ]
    assert g.why["subject"] == "/idx" and g.why["proof"].startswith("verified: with /idx's data")
    assert g.why["read"] == "recovery read idx (0 of 100 bytes present), then stopped"
    assert "no-fsync (/wal, which recovery never read)" in g.why["others"]
    assert "  recovery read idx (0 of 100 bytes present), then stopped" in cause.group_lines(
        "group 1", g.to_json() | {"why": g.why}
    )


def test_unproven_the_trace_speaks_of_the_rule_recovery_read_first(setup) -> None:
    """No what-if state passes: the cause stays not proven, and what the trace shows is said of
    the rule ranked first by what recovery read (idx), not of the one the trace alone put first
    (wal); a file recovery only wrote (a lock it truncated, not a byte read) ranks after it."""
    rec, index, g = setup(idx_synced=False)
    read = (ReadFile("wal", 0, 0, write=True), ReadFile("idx", 0, 0))
    ver = run(rec, index, g, judged(lambda s: s.id == KILL), read=read)  # only the kill passes
    assert [t.label for t in ver.tried[g.first.state]] == ["no-fsync (/idx)", "no-fsync (/wal)"]
    assert g.why["proven"] is False and g.why["subject"] == "/idx"
    assert g.why["sentence"].startswith(
        "cause not proven; candidates: no-fsync (/idx), no-fsync (/wal); the trace shows: "
        "ack:1 was given after changing /idx"
    )
    assert ver.stats.unproven == 1


def test_every_rule_about_a_file_recovery_read_is_tried_then_the_others_to_the_limit() -> None:
    def f(subject: str) -> Any:
        return no_fsync.Unsynced(subject, Op(0, 1, 1, 1.0, "mark", text="ack:1"), ())

    found = [f("/a"), f("/"), f("/b"), f("/c"), f("/d"), f("/e, /f")]
    assert [x.subject for x in verify.ranked(found, (), 4)] == [
        "/a",
        "/",
        "/b",
        "/c",
    ]  # not traced: as found
    assert [x.subject for x in verify.ranked(found, ("d", "b"), 4)] == ["/d", "/b", "/", "/e, /f"]
    many = ("a", "b", "c", "d", "x")
    assert [x.subject for x in verify.ranked(found, many, 2)] == [
        "/a",
        "/b",
        "/c",
        "/d",
    ]  # all read ones, still


def test_rules_planned_late_are_tried_in_the_candidates_order() -> None:
    """A pointer recovery was seen to follow (found once the reads are known, planned in the second
    batch) is tried where its rule ranks among the candidates, not after the rules planned first."""

    @dataclass(frozen=True)
    class Found:
        rule: str
        subject: str

    def f(rule: str, subject: str) -> Any:
        return verify.Tried(Found(rule, subject), None, None)  # type: ignore[arg-type]

    planned = [
        f("unordered-writes", "/a, /b"),
        f("unchecked-tear", "/a, /b"),
        f("pointer-before-data", "/b"),
        f("no-fsync", "/z"),
    ]
    order = [
        ("pointer-before-data", "/b"),
        ("unordered-writes", "/a, /b"),
        ("unchecked-tear", "/a, /b"),
    ]
    assert [t.finding.rule for t in verify.in_order(planned, order)] == [
        "pointer-before-data",
        "unordered-writes",
        "unchecked-tear",
        "no-fsync",
    ]


def test_a_rule_planned_later_whose_what_if_was_judged_before_shares_its_verdict(
    tmp_path: Path,
) -> None:
    """Two rules, one what-if state (a pointer's file is all the commit in flight lost): the rule
    planned once the reads are known is not judged again, and gets the verdict judged before."""
    st = space(build_log(tmp_path / "log.bin", OPS)).make_state("flush", 6)
    v = Verdict(st.id, "flush", st.cut, "pass", (), 1, 1, 0.0)
    found = no_fsync.Unsynced("/wal", Op(0, 1, 1, 1.0, "mark", text="ack:1"), ())
    plan = Plan(causes.NO_FSYNC, "/wal", frozenset({"wal"}), 12)
    ver = verify.Verification()
    ver.tried["s"] = [verify.Tried(found, plan, st)]
    ver.record({st.id: v, "the-target": v}, 0.5)
    ver.tried["s"].append(verify.Tried(found, plan, st))
    assert ver.states == []
    ver.record({}, 0.0)
    assert (
        ver.tried["s"][1].verdict is v
        and ver.tried["s"][1].outcome() == "pass"
        and ver.stats.states == 1
    )


def test_a_pass_of_a_plan_to_the_end_that_also_renamed_a_file_recovery_read_proves_nothing(
    tmp_path: Path,
) -> None:
    st = space(build_log(tmp_path / "log.bin", OPS)).make_state("flush", 6)
    found = no_fsync.Unsynced("/LOG", Op(0, 1, 1, 1.0, "mark", text="ack:1"), ())
    t = verify.Tried(
        found,
        Plan(causes.NO_FSYNC, "/LOG", frozenset({"LOG"}), 12),
        st,
        Verdict(st.id, "flush", st.cut, "pass", (), 1, 1, 0.0),
        mixed=frozenset({"CURRENT"}),
    )
    assert t.outcome() == "untried"
    assert (
        "not proof of this rule alone: the metadata to the end of the recording also removed, truncated or "
        "renamed /CURRENT (after the cut" in t.words()
    )
    assert verify.Tried(found, t.plan, st, t.verdict).outcome() == "pass"


def test_a_write_blame_mapped_at_the_cut_belongs_to_its_file_though_the_end_map_lost_it(
    setup,
) -> None:
    """/wal is gone from the file map at the end (deleted later), so its write (entry 7) would count as
    metadata and make /idx's counterfactual pass; blame mapped it at the cut as /wal's: /idx's
    counterfactual leaves it out and fails, /wal's keeps it and is the cause."""
    blamed = ({"entry": 7, "what": "data block", "path": "/wal"},)
    first = (ReadFile("idx", 0, 0),)  # recovery read idx: its rule is tried first
    rec, index, g = setup(idx_synced=False, files={"idx": [[200, 16]]})
    run(rec, index, g, judged(lambda s: kept(s, 7)), read=first)
    assert g.why["subject"] == "/idx"  # without blame: a pass on wal's write
    rec, index, g = setup(idx_synced=False, files={"idx": [[200, 16]]}, culprits=blamed)
    run(rec, index, g, judged(lambda s: kept(s, 7)), read=first)
    assert g.why["subject"] == "/wal" and g.why["proof"].startswith("verified: with /wal's data")
    assert g.why["refuted"][0].startswith("no-fsync (/idx): with /idx's data")


def test_a_pass_that_may_have_made_a_file_removed_after_the_cut_durable_proves_nothing(
    setup,
) -> None:
    """/old was unlinked after the cut and after wal's sync that bounds its what-if: the file map at
    the end has no blocks of it, so its writes count as metadata and /wal's what-if may have made
    them durable while /old still exists there.  Recovery read /old: the pass
    is not proof; recovery never read it: the pass is; what recovery read unknown: not proof."""
    passes = judged(lambda s: kept(s, 7))
    rec, index, g = setup(removed="old")
    ver = run(rec, index, g, passes, read=(ReadFile("old", 10, 10), ReadFile("wal", 0, 0)))
    assert g.why["proven"] is False and ver.stats.unproven == 1
    assert (
        "with /wal's data and the filesystem's metadata as logged up to its next fsync"
        in g.why["proof"]
    )
    assert (
        "this state passes, but that is not proof of this rule alone: /old (removed or truncated after that "
        "sync" in g.why["proof"]
    )
    rec, index, g = setup(removed="old")
    run(rec, index, g, passes, read=(ReadFile("wal", 0, 0),))
    assert g.why["proven"] is True and g.why["proof"].startswith("verified: with /wal's data")
    rec, index, g = setup(removed="old")
    run(
        rec, index, g, passes, read=(ReadFile("wal", 0, -1),)
    )  # Python's audit events: not known in whole
    assert g.why["proven"] is False and "not proof of this rule alone: /old" in g.why["proof"]


def test_an_acked_after_error_group_is_proven_by_the_judges_own_counterfactual(
    tmp_path: Path,
) -> None:
    """The judge gave acked-after-error: the state passed with only the acks before the I/O error --
    the rule's proof; no kill-equivalent is judged after a failed call (the disk lacks its data)."""
    index = build_log(tmp_path / "log.bin", OPS)
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).fsync_dir().mark("begin:1").write("wal", fd=5)
    t.fsync("wal", fd=5, ret="-1 EIO (Input/output error)").mark("ack:1").mark("begin:2").mark(
        "ack:2"
    )
    path = tmp_path / "syscalls.txt.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(t.lines) + "\n")
    fm = tmp_path / "files.json"
    fm.write_text(json.dumps({"files": FILES, "sector_bytes": 512}))
    st = space(index).make_state("flush", 6)
    v = Verdict(
        st.id,
        "flush",
        st.cut,
        "acked-after-error",
        ("commit 1 was acked after the device failed",),
        1,
        1,
        0.0,
    )
    g = Group(
        "acked-after-error",
        "commit # was acked after",
        [v],
        diagnosis={"minimized": st.id, "culprits": []},
    )
    ver = run(Rec(path, fm), index, g, judged(lambda s: False))
    assert not ver.kills and g.why["rule"] == causes.ERROR and g.why["proven"] is True
    assert g.why["proof"] == (
        "verified: with only the acks given before the I/O error, this state passes (the "
        "judge's own counterfactual: every ack after the error left out)"
    )


def test_reads_seen_through_pythons_audit_events_rank_nothing_and_say_so(setup) -> None:
    """An in-process checker's reads (bytes unknown) miss a C library's opens: no file is said never
    read, the rules keep the trace's order, and what recovery read says how it was seen."""
    rec, index, g = setup(idx_synced=False)
    ver = run(rec, index, g, judged(lambda s: kept(s, 8)), read=(ReadFile("idx", 0, -1),))
    assert [t.label for t in ver.tried[g.first.state]] == ["no-fsync (/wal)", "no-fsync (/idx)"]
    assert g.why["read"].endswith(
        "then stopped (as Python's audit events show it: a C library's own opens are not seen)"
    )


def test_a_group_that_timed_out_or_panicked_is_not_judged_again(setup) -> None:
    rec, index, g = setup()
    g.verdict = "timeout"
    ver = verify.prepare(rec, [index], [g])  # type: ignore[arg-type]
    assert not ver.targets and "timeout is not judged again" in ver.skipped[g.first.state]

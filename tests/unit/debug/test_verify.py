"""debug/verify.py with a stand-in judge: each rule the failing state broke gets its what-if state;
the first that passes is the cause (verified, or replacing the first rule when a later one is the
one that passes); none passing makes the cause ``unproven``; no file map or a cluster says why the
cause is not proven."""
from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from powercut.core import causes
from powercut.core.crashstate import CrashState
from powercut.core.models import space
from powercut.core.verdict import Verdict
from powercut.debug import cause, verify
from powercut.debug.triage import Group
from tests.unit.core.test_causes import MNT, T
from tests.unit.logops import build_log

# the log: 0 mkfs | 1 begin:1 | 2 idx 3 meta 4 flush | 5 ack:1 | 6 begin:2 | 7 wal 8 idx2 9 meta 10 flush | 11 ack:2
OPS = [("m", "mkfs"), ("m", "begin:1"), ("w", 200, 1, 0, 1), ("w", 10, 1, 0, 2), ("f",), ("m", "ack:1"),
       ("m", "begin:2"), ("w", 100, 1, 0, 3), ("w", 208, 1, 0, 4), ("w", 11, 1, 0, 5), ("f",), ("m", "ack:2")]
FILES = {"wal": [[100, 8]], "idx": [[200, 16]]}


@dataclass
class Rec:
    trace_path: Path
    file_map: Path | None
    workload: dict[str, Any] = field(default_factory=dict)
    delay_log: Path | None = None


def trace(idx_synced: bool) -> T:
    """wal (and idx unless ``idx_synced``) changed in commit 1 and acked unsynced; both fsynced in commit 2."""
    t = T().open("wal", "O_WRONLY|O_CREAT", fd=5).open("idx", "O_WRONLY|O_CREAT", fd=6).fsync_dir()
    t.mark("begin:1").write("wal", fd=5).write("idx", fd=6)
    if idx_synced:
        t.fsync("idx", fd=6)
    t.mark("ack:1").mark("begin:2").fsync("wal", fd=5).fsync("idx", fd=6)
    return t.mark("ack:2")


@pytest.fixture
def setup(tmp_path: Path) -> Callable[..., tuple[Rec, Any, Group]]:
    index = build_log(tmp_path / "log.bin", OPS)

    def make(idx_synced: bool = True, file_map: bool = True) -> tuple[Rec, Any, Group]:
        t = trace(idx_synced)
        path = tmp_path / f"syscalls-{idx_synced}.txt.gz"
        with gzip.open(path, "wt") as f:
            f.write("\n".join(t.lines) + "\n")
        fm = tmp_path / "files.json"
        fm.write_text(json.dumps({"files": FILES, "sector_bytes": 512}))
        st = space(index).make_state("flush", 6)          # after ack:1, before commit 2's writes
        v = Verdict(st.id, "flush", st.cut, "lost-ack", ("acked key 1 is lost",), 1, 1, 0.0)
        g = Group("lost-ack", "acked key # is lost", [v], diagnosis={"minimized": st.id, "culprits": []})
        return Rec(path, fm if file_map else None), index, g
    return make


def judged(passes: Callable[[CrashState], bool]) -> Callable[[list[CrashState]], dict[str, Verdict]]:
    def judge(states: list[CrashState]) -> dict[str, Verdict]:
        return {s.id: Verdict(s.id, s.model, s.cut, "pass" if passes(s) else "lost-ack",
                              () if passes(s) else ("acked key 1 is lost",), 1, 1, 0.0) for s in states}
    return judge


def kept(s: CrashState, entry: int) -> bool:
    return entry < s.cut and entry not in s.dropped


def run(rec: Rec, index: Any, g: Group, judge: Callable[[list[CrashState]], dict[str, Verdict]]) -> verify.Verification:
    ver = verify.prepare(rec, [index], [g])   # type: ignore[arg-type]
    ver.record(judge(ver.states), 0.5)
    cause.explain_groups(rec, index, [g])      # type: ignore[arg-type]
    ver.apply(rec, index, [g])                 # type: ignore[arg-type]
    return ver


def test_the_rule_whose_counterfactual_passes_is_verified(setup) -> None:
    rec, index, g = setup()
    ver = run(rec, index, g, judged(lambda s: kept(s, 7)))        # wal's write (entry 7) makes it pass
    assert [s.id for s in ver.states] == ["what-if@11/a6/d8"]     # wal's data + metadata, not idx's second write
    assert g.why["rule"] == causes.NO_FSYNC and g.why["subject"] == "/wal"
    assert g.why["proof"].startswith("verified: with /wal's data and the filesystem's metadata as logged up to its "
                                     "next fsync") and g.why["proof"].endswith("this state passes")
    assert ver.stats.to_json() | {"seconds": 0} == {"groups": 1, "states": 1, "seconds": 0, "verified": 1,
                                                   "replaced": 0, "unproven": 0, "untried": 0}
    assert any(line.startswith("  proof: verified") for line in cause.group_lines("group 1", g.to_json() | {"why": g.why}))


def test_a_true_rule_that_is_not_why_gives_way_to_the_next(setup) -> None:
    rec, index, g = setup(idx_synced=False)
    ver = run(rec, index, g, judged(lambda s: kept(s, 8)))        # only idx's write (entry 8) makes it pass
    first = causes.candidates(trace(False).trace(), index.marks(), 6, MNT)
    assert [(f.rule, f.subject) for f in first] == [(causes.NO_FSYNC, "/wal"), (causes.NO_FSYNC, "/idx")]
    assert g.why["subject"] == "/idx" and g.why["proof"].startswith("verified: with /idx's data")
    assert g.why["refuted"] and g.why["refuted"][0].startswith("no-fsync (/wal): with /wal's data")
    assert "still fails (lost-ack: acked key 1 is lost)" in g.why["refuted"][0]
    assert ver.stats.replaced == 1 and ver.stats.verified == 0


def test_no_counterfactual_passing_keeps_the_first_rule_not_proven(setup) -> None:
    rec, index, g = setup(idx_synced=False)
    ver = run(rec, index, g, judged(lambda s: False))
    assert g.why["rule"] == causes.NO_FSYNC and g.why["subject"] == "/wal" and not g.why.get("refuted")
    assert g.why["proof"].startswith("not proven: no-fsync (/wal): with /wal's data")
    assert "; no-fsync (/idx): with /idx's data" in g.why["proof"] and "still fails" in g.why["proof"]
    assert ver.stats.unproven == 1


def test_a_counterfactual_not_judged_leaves_the_cause_not_proven(setup) -> None:
    rec, index, g = setup()
    ver = verify.prepare(rec, [index], [g])   # type: ignore[arg-type]
    ver.record({}, 0.0)
    cause.explain_groups(rec, index, [g])      # type: ignore[arg-type]
    ver.apply(rec, index, [g])                 # type: ignore[arg-type]
    assert g.why["rule"] == causes.NO_FSYNC and g.why["proof"].startswith("not proven: no-fsync (/wal): its")


def test_without_a_file_map_or_on_a_cluster_the_proof_says_why_not(setup) -> None:
    rec, index, g = setup(file_map=False)
    ver = run(rec, index, g, judged(lambda s: True))
    assert not ver.states and g.why["proof"].startswith("not proven: the recording has no file map")
    rec2, _, g2 = setup()
    ver2 = verify.prepare(rec2, [index, index], [g2])   # type: ignore[arg-type]
    assert not ver2.states and "a cluster's causes" in ver2.skipped[g2.first.state]

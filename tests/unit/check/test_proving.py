"""The read-set rule in host mode (check/proving.py, check/host.check_host(prove=True)): a proven
state's verdict is the one its own judge gives, every proof names a state judged for real, and a
checker that is not a function of what it reads is caught by confirmation, which turns the rule off
and judges every state it had proven.

The recording is tests/unit/synthrec's real ext4 (no VM), each commit also writing a block of a file
the checker never reads (nor does fsck: file data): write-cache states that differ there only are
proven.  Root: loop devices, mount, tracefs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from powercut.check import proving
from powercut.check.context import LogSource, context_for, with_faults
from powercut.check.host import check_host
from powercut.check.proving import CONFIRM_EVERY, Proving
from powercut.core.judging.readset import ReadSet
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import open_log
from powercut.core.states.selection import SelectionSpec, select
from powercut.linux import blockreads
from powercut.record import recording
from tests.unit.synthrec import CHECKER, ext4_recording

needs_root = pytest.mark.skipif(
    os.geteuid() != 0
    or not os.path.exists("/dev/loop-control")
    or not shutil.which("mkfs.ext4")
    or bool(blockreads.available()),
    reason="needs root, /dev/loop-control, mkfs.ext4 and a block-read trace (tracefs)",
)

# answers by the state's id, not by what it reads: a checker the rule's premise does not hold for
BY_ID = """python3 -c '
import json, sys
d = json.load(sys.stdin)
odd = sum(d["state"].encode()) % 2
print(json.dumps({"verdict": "lost-ack" if odd else "pass", "reasons": ["by id"]}))'"""


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> recording.Recording:
    return recording.load(
        ext4_recording(tmp_path_factory.mktemp("synthetic"), commits=4, unread=True)
    )


def judged(rec, checker: str, work: Path, prove: bool) -> tuple[dict[str, Verdict], object]:
    src = LogSource.of(rec)
    with open_log(src.path) as index:
        ctx = with_faults(context_for(rec, checker), index)
        spec = SelectionSpec(models=("flush", "write-cache", "torn-4k"), bound=3, samples=4)
        states = list(select(index, spec).states)
        got: list[Verdict] = []
        found = check_host(ctx, src, [index], states, got.append, work, jobs=1, prove=prove)
    assert sorted(v.state for v in got) == sorted(s.id for s in states)  # each state once
    return {v.state: v for v in got}, found


@needs_root
def test_a_proven_state_has_the_verdict_its_own_judge_gives(rec, tmp_path: Path) -> None:
    every, _ = judged(rec, CHECKER, tmp_path / "all", prove=False)
    some, report = judged(rec, CHECKER, tmp_path / "some", prove=True)
    assert report is not None and report.mismatch is None
    proven = [v for v in some.values() if v.proof]
    assert proven, "the rule proved nothing on states that differ where no judge reads"
    assert len(proven) < len(some)
    for v in proven:
        assert not some[v.proof].proof  # a proof names a state judged for real
        assert v.verdict == every[v.state].verdict, v.state
        assert v.verdict == some[v.proof].verdict
    assert (
        len({v.verdict for v in every.values()}) > 1
    )  # passes and findings: not a vacuous comparison


@needs_root
def test_a_checker_that_is_not_a_function_of_its_reads_turns_the_rule_off(
    rec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proving, "CONFIRM_EVERY", 1)  # every proof judged for real too
    got, report = judged(rec, BY_ID, tmp_path / "w", prove=True)
    mismatch = report.mismatch
    assert mismatch is not None
    assert got[mismatch.state].verdict == mismatch.judged != mismatch.proven
    assert not [v for v in got.values() if v.proof]  # every proven state was judged after all
    for v in got.values():  # each its own judge's (fsck's finding over the checker's)
        assert v.verdict in ("lost-ack" if sum(v.state.encode()) % 2 else "pass", "fsck-error")


# -- Proving without a kernel -------------------------------------------------------------------------
class _Log:
    def __init__(self, entries, sectorsize=4096):
        self.entries = entries
        self.sectorsize = sectorsize


def test_the_first_proof_and_one_in_confirm_every_are_judged_anyway() -> None:
    from powercut.core.log.dmlog import Entry
    from powercut.core.states.crashstate import CrashState

    es = [Entry(0, 0, 0, 1, 0), Entry(1, 0, 1, 1, 0), Entry(2, 0, 2, 1, 0)]
    states = [CrashState("write-cache", 3, (1,), (), ("a",), (), f"s{k}", 0) for k in range(40)]
    p = Proving(_Log(es), states)  # type: ignore[arg-type]
    j = Verdict("s0", "write-cache", 3, "lost-ack", ("r",), 1, 0, 1.0, read=())
    p.judged_state(states[0], j, ReadSet([(0, 8)]), None)
    asks = [p.proof(s) for s in states[1:]]
    assert all(found == "s0" for found, _ in asks)
    confirm = [k for k, (_, c) in enumerate(asks) if c]
    assert confirm == list(range(0, 39, CONFIRM_EVERY))
    p.prove(states[2], "s0")
    (v,) = p.proven
    assert (v.state, v.verdict, v.reasons, v.proof, v.seconds) == (
        "s2",
        "lost-ack",
        ("r",),
        "s0",
        0.0,
    )
    assert Verdict.from_json(v.to_json()) == v


def test_a_confirmation_with_another_verdict_disproves_the_rule() -> None:
    from powercut.core.log.dmlog import Entry
    from powercut.core.states.crashstate import CrashState

    es = [Entry(0, 0, 0, 1, 0), Entry(1, 0, 1, 1, 0)]
    a, b = (CrashState("write-cache", 2, (1,), (), (), (), sid, 0) for sid in ("a", "b"))
    p = Proving(_Log(es), [a, b])  # type: ignore[arg-type]
    p.judged_state(
        a, Verdict("a", "write-cache", 2, "pass", (), 0, 0, 1.0), ReadSet([(0, 8)]), None
    )
    found, confirm = p.proof(b)
    assert (found, confirm) == ("a", True)
    p.judged_state(b, Verdict("b", "write-cache", 2, "fail", (), 0, 0, 1.0), ReadSet([(0, 8)]), "a")
    assert p.mismatch is not None and (p.mismatch.state, p.mismatch.equal_to) == ("b", "a")
    assert p.proof(b) == (None, False)


def test_tracing_stops_when_it_costs_more_than_the_proofs_save() -> None:
    from powercut.core.log.dmlog import Entry
    from powercut.core.states.crashstate import CrashState

    es = [Entry(0, 0, 0, 1, 0), Entry(1, 0, 1, 1, 0)]

    def run(proofs_between: int) -> Proving:
        states = [
            CrashState("write-cache", 2, (1,), (), (str(k),), (), f"s{k}", 0)
            for k in range(proving.WINDOW)
        ]
        p = Proving(_Log(es), states)  # type: ignore[arg-type]
        for s in states:
            p.proofs += proofs_between  # as if that many states had been proven meanwhile
            v = Verdict(s.id, s.model, 2, "pass", (), 1, 0, 0.010)
            p.judged_state(s, v, ReadSet([(0, 8)]), None, trace_s=0.002)
        return p

    paying = run(proofs_between=1)  # half the states proven: saves 10 ms each, costs 2 ms
    assert paying.tracing and not paying.report().stopped
    losing = run(proofs_between=0)  # nothing proven: 2 ms a state for nothing
    assert not losing.tracing
    assert "stopped tracing after 48 states: 0 % proven" in losing.report().stopped

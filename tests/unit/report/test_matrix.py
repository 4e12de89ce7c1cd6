"""The verdict matrix: the data file itself (every row runnable, the required shape), loading errors,
choosing rows, and comparing a campaign's summary with a row's expectations."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut import workload as workloads
from powercut.cli import main
from powercut.core.judging.verdict import Verdict
from powercut.errors import UsageError
from powercut.report import matrix
from powercut.report.summary import summarize

ROW = """
[[row]]
workload = "append-fsync"
variant = "correct"
fs = "ext4"
expect = { flush = "pass", write-cache = "lost-ack" }
why = "test"
"""


def test_every_row_of_the_builtin_matrix_can_run() -> None:
    rows = matrix.load()
    assert len(rows) >= 10
    for r in rows:
        workloads.get(r.workload).params(r.params)  # registered, parameters valid (else UsageError)
        assert r.models and r.why
        if r.variant == "correct":
            assert set(r.expect.values()) == {"pass"}, (
                f"{r.id}: a correct variant passes every model"
            )


def test_the_matrix_has_the_shape_the_product_promises() -> None:
    rows = matrix.load()
    shape = matrix.shape(rows)
    assert shape.get("only:write-cache"), "a variant caught only by the write-cache model"
    assert shape.get("only:torn-4k"), "a variant caught only by the torn model"
    assert shape.get("all"), "a variant caught by every model"
    # CI's part: ext4 data=ordered in host mode, plus a sample in checker VMs
    ci = matrix.choose(rows, ci=True)
    assert {r.ci for r in ci} == {"host", "vm"}
    assert all(r.fs == "ext4" and not r.mount_opts for r in ci if r.ci == "host")
    # ci/matrix.sh's part covers every filesystem and ext4 journal mode
    assert {r.fs for r in rows} >= {"ext4", "xfs", "btrfs"}
    assert {r.mount_opts for r in rows if r.fs == "ext4"} >= {"", "data=journal", "data=writeback"}


@pytest.mark.parametrize(
    "text, message",
    [
        (ROW.replace('why = "test"', 'why = "test"\ncolour = 1'), "unknown key"),
        (ROW.replace("write-cache = ", "cache = "), "unknown model 'cache'"),
        (ROW.replace('"lost-ack"', '"lost"'), "expect.write-cache = 'lost'"),
        (ROW.replace('why = "test"', ""), "needs 'why'"),
        (ROW + ROW, "the same configuration twice"),
        (ROW.replace('fs = "ext4"', 'fs = "ext4"\nci = "cloud"'), "ci must be"),
        ("[[row]\n", "not a valid verdict matrix"),
        (
            ROW.replace('why = "test"', 'why = "test"\ncause = "forgot-fsync"'),
            "cause forgot-fsync is not a rule",
        ),
        (
            ROW.replace('why = "test"', 'why = "test"\ncause = { torn-4k = "no-fsync" }'),
            "cause for models without",
        ),
        (
            ROW.replace('why = "test"', 'why = "test"\nnodes = 9'),
            "nodes = 9: a whole number from 1",
        ),
        (ROW.replace('why = "test"', 'why = "test"\nnodes = "3"'), "nodes = '3'"),
        (
            ROW.replace('why = "test"', 'why = "test"\nnodes = 2\ndisk_latency = "2=hdd"'),
            "node 2 named, and the recording has nodes 0..1",
        ),
        (
            ROW.replace('why = "test"', 'why = "test"\ndisk_latency = "1=hdd"'),
            "node 1 named, and the recording has node 0 only",
        ),
        (
            ROW.replace('why = "test"', 'why = "test"\nnodes = 3\nfault = "eio-writes"'),
            "fault = eio-writes: .*node",
        ),
        (ROW.replace('why = "test"', 'why = "test"\nfault = "melt-writes"'), "fault = melt-writes"),
    ],
)
def test_a_bad_matrix_file_is_one_clear_line(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "m.toml"
    p.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        matrix.load(p)


def test_a_list_of_filesystems_is_one_row_each_and_rows_are_chosen_by_glob(tmp_path: Path) -> None:
    p = tmp_path / "m.toml"
    p.write_text(ROW.replace('fs = "ext4"', 'fs = ["ext4", "xfs"]\nmount = ""'))
    rows = matrix.load(p)
    assert [r.id for r in rows] == ["append-fsync/correct/ext4", "append-fsync/correct/xfs"]
    assert [r.id for r in matrix.choose(rows, ["*/xfs"])] == ["append-fsync/correct/xfs"]
    with pytest.raises(UsageError, match="no row"):
        matrix.choose(rows, ["wal/*"])
    with pytest.raises(UsageError, match="CI part"):
        matrix.choose(rows, ci=True)


def _v(state: str, model: str, verdict: str, cut: int) -> Verdict:
    return Verdict(
        state, model, cut, verdict, (f"{verdict} at {cut}",), 1, 0, 0.1, confirmed=verdict != "pass"
    )


def test_cells_compare_what_was_seen_with_what_was_expected(tmp_path: Path) -> None:
    p = tmp_path / "m.toml"
    p.write_text(
        ROW.replace('write-cache = "lost-ack" }', 'write-cache = "lost-ack", torn-4k = "fail" }')
    )
    (row,) = matrix.load(p)
    verdicts = [
        _v("flush@3", "flush", "pass", 3),
        _v("write-cache@9/d4", "write-cache", "lost-ack", 9),
        _v("write-cache@5/d2", "write-cache", "lost-ack", 5),
        _v("write-cache@7", "write-cache", "pass", 7),
        _v("torn-4k@4/s0", "torn-4k", "pass", 4),
    ]
    s = summarize(
        verdicts, recording="r", fstype="ext4", workload="w", check_in="host", seconds=1.0
    )
    flush, wc, torn = matrix.cells(row, s)
    assert flush.ok and flush.seen == "pass" and flush.judged == 1
    assert wc.ok and wc.failing == {"lost-ack": 2} and wc.first == "write-cache@5/d2"
    assert not torn.ok and torn.seen == "pass"  # expected a failure, saw none: a surprise
    md = matrix.markdown([row], [flush, wc, torn])
    assert "**SURPRISE**" in md and "write-cache@5/d2" in md
    # the wrong kind of failure is a surprise too; so is a flaky state or a campaign that stopped
    s2 = summarize(
        [_v("write-cache@5", "write-cache", "corrupt-data", 5), _v("flush@3", "flush", "flaky", 3)],
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
    )
    flush2, wc2, torn2 = matrix.cells(row, s2)
    assert not wc2.ok and wc2.seen == "corrupt-data"
    assert not flush2.ok and flush2.seen == "flaky"
    assert not torn2.ok and torn2.judged == 0  # nothing judged is never as expected
    assert all(not c.ok and c.seen == "error" for c in matrix.failed_cells(row, "recording failed"))
    # a torn failure that fails the same way without its tear is the write-cache model's, not torn's
    s3 = summarize(
        [_v("torn-4k@9/t5:s0/d4", "torn-4k", "corrupt-data", 9)],
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
    )
    torn3 = matrix.cells(row, s3, {"torn-4k@9/t5:s0/d4": "write-cache@9/d4"})[2]
    assert (
        torn3.seen == "pass (untorn)"
        and torn3.tear_free == 1
        and "without their tear" in torn3.describe()
    )
    assert torn3.ok  # expected "fail": the torn model did flag it, with or without the tear
    assert matrix.cells(row, s3, {"torn-4k@9/t5:s0/d4": ""})[2].seen == "corrupt-data"
    passing = matrix.Cell(
        row.id, "torn-4k", "pass", 3, {"corrupt-data": 2}, "torn-4k@9/t5:s0/d4", tear_free=2
    )
    assert (
        passing.ok
        and not matrix.Cell(row.id, "torn-4k", "pass", 3, {"corrupt-data": 2}, tear_free=1).ok
    )


def test_matrix_cli_lists_rows_and_refuses_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["matrix", "--list", "--ci"]) == 0
    out = capsys.readouterr().out
    assert "append-fsync/correct/ext4" in out and "[CI: host]" in out
    assert main(["matrix", "--list", "--file", str(tmp_path / "none.toml")]) == 1
    assert "cannot read the verdict matrix" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["matrix", "--check-in", "cloud"])
    assert e.value.code == 2


def test_a_model_whose_states_are_all_aliases_is_judged_through_them() -> None:
    """no-cache before flush: every flush state has a no-cache state's image, so flush owns none;
    its cell counts the verdicts of its aliases (judged, failing, first failing state by its own id)."""
    from powercut.core.judging.verdict import Verdict
    from powercut.report.summary import summarize

    row = matrix.Row("osync", "v", {}, "ext4", {"no-cache": "pass", "flush": "lost-ack"}, "why")
    vs = [
        Verdict("no-cache@5", "no-cache", 5, "pass", (), 1, 0, 0.1, aliases=("flush@5",)),
        Verdict("no-cache@6", "no-cache", 6, "pass", (), 1, 0, 0.1),
        Verdict(
            "no-cache@9",
            "no-cache",
            9,
            "lost-ack",
            ("ack 2 missing",),
            2,
            0,
            0.1,
            aliases=("flush@9",),
            confirmed=True,
        ),
    ]
    s = summarize(vs, recording="r", fstype="ext4", workload="osync", check_in="host", seconds=1.0)
    assert s.by_model == {"no-cache": {"pass": 2, "lost-ack": 1}}
    assert s.covered == {
        "no-cache": {"pass": 2, "lost-ack": 1},
        "flush": {"pass": 1, "lost-ack": 1},
    }
    nc, fl = matrix.cells(row, s)
    assert (nc.judged, nc.failing, nc.ok) == (3, {"lost-ack": 1}, False)
    assert (fl.judged, fl.failing, fl.first, fl.ok) == (2, {"lost-ack": 1}, "flush@9", True)


# -- the torn-cell rule (issue #37): a torn failure is the write-cache model's only when its twin
# without the tear fails with the same verdict AND the same reason kinds (debug.diagnose) ----------


@pytest.mark.parametrize(
    "a, b, same",
    [
        (
            "record 3: checksum mismatch",
            "record 12: checksum mismatch",
            True,
        ),  # numbers differ, one kind
        ("record 3: checksum mismatch", "lost ack:7", False),
        ("lost ack:7", "lost ack:k19", True),  # a mark's key is an instance
        (
            "acked txn(s) 3, 4 lost: recovery keeps 2 transaction(s) and stops at txn 5 at byte 300: its length 99 "
            "runs past the end of the file (4000 bytes)",
            "acked txn(s) 3 lost: recovery keeps 1 transaction(s) and stops at byte 200: an incomplete transaction "
            "header (0 of 23 bytes)",
            True,
        ),  # where recovery stopped: detail
        (
            "the database cannot open: wal.ctl says txns through 5 are committed (LSN 9) but the log yields txns only "
            "through 4: PAGE record at segment 0 offset 200 (LSN 200) fails its CRC",
            "the database cannot open: wal.ctl says txns through 5 are committed (LSN 9) but the log yields txns only "
            "through 4: zeros at segment 0 offset 200 (LSN 200) (end of the log)",
            True,
        ),
        (
            "/tmp/pc-1/check/mnt-2/Data.fs is missing but txn(s) 1, 2 were acked",
            "/tmp/pc-1/untorn/mnt/Data.fs is missing but txn(s) 1 were acked",
            True,
        ),  # the mount point differs
        (
            "no schema (tables: ['a']) but txn(s) 1 were acked",
            "no schema (tables: ['a', 'b']) but txn(s) 2 were acked",
            True,
        ),  # no split inside brackets
        ("txn 5 has status b'c' (committed)", "txn 2 has status b'\\x00' (committed)", True),
        (
            "page 3 holds txn 5's image except bytes 100..2047, which hold zeros",
            "page 1 holds unknown bytes",
            False,
        ),
        (
            "acked write 3 at offset 4096: byte 0x00, written 0xab",
            "acked write 3 lost at offset 4096: zeros",
            False,
        ),
    ],
)
def test_a_reason_kind_drops_the_instance_and_keeps_the_kind_of_failure(
    a: str, b: str, same: bool
) -> None:
    from powercut.debug.diagnose import reason_kind

    assert (reason_kind(a) == reason_kind(b)) is same, (reason_kind(a), reason_kind(b))


def test_fails_alike_needs_the_verdict_and_the_same_set_of_reason_kinds() -> None:
    from powercut.checker import CheckResult
    from powercut.debug.diagnose import fails_alike

    torn = Verdict(
        "torn-4k@9/t5:s0/d4", "torn-4k", 9, "lost-ack", ("record 3: checksum mismatch",), 1, 0, 0.1
    )
    assert not fails_alike(
        CheckResult("lost-ack", ("lost ack:7",)), torn
    )  # same verdict, other kind
    assert fails_alike(CheckResult("lost-ack", ("record 3: checksum mismatch",)), torn)
    assert fails_alike(CheckResult("lost-ack", ("record 8: checksum mismatch",)), torn)
    assert not fails_alike(CheckResult("corrupt-data", ("record 3: checksum mismatch",)), torn)
    # a kind the tear adds is the tear's; so is one it takes away
    assert not fails_alike(
        CheckResult("lost-ack", ("record 3: checksum mismatch", "lost ack:7")), torn
    )
    two = Verdict(
        torn.state, "torn-4k", 9, "lost-ack", ("lost ack:7", "record 3: bad CRC"), 1, 0, 0.1
    )
    assert not fails_alike(CheckResult("lost-ack", ("lost ack:7",)), two)
    assert not fails_alike(
        CheckResult("pass", ()), Verdict("s", "torn-4k", 9, "pass", (), 1, 0, 0.1)
    )


@pytest.mark.parametrize(
    "twins, excused",
    [
        # the torn write kept whole, then lost whole: the first that fails alike is its twin
        (
            {"keep": ("pass", ()), "lose": ("lost-ack", ("lost ack:7",))},
            "",
        ),  # the case: not excused
        (
            {
                "keep": ("lost-ack", ("lost ack:7",)),
                "lose": ("lost-ack", ("record 12: checksum mismatch",)),
            },
            "lose",
        ),
        ({"keep": ("lost-ack", ("record 3: checksum mismatch",)), "lose": ("pass", ())}, "keep"),
        (
            {"keep": ("corrupt-data", ("record 3: checksum mismatch",)), "lose": ("pass", ())},
            "",
        ),  # other verdict
    ],
)
def test_a_torn_failure_is_excused_only_by_a_twin_that_fails_alike(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, twins: dict, excused: str
) -> None:
    """debug.diagnose.without_tear (what the matrix's _untorn asks where the check ran) with the twins'
    verdicts given, then the torn-4k cell: a failure the tear is needed for is the torn model's."""
    from types import SimpleNamespace

    from powercut.checker import CheckResult
    from powercut.debug import diagnose

    ids = {(4,): "write-cache@9/d4", (4, 5): "write-cache@9/d4,5"}
    names = {"keep": ids[(4,)], "lose": ids[(4, 5)]}
    outcome = {names[k]: CheckResult(v, r) for k, (v, r) in twins.items()}
    sp = SimpleNamespace(
        make_state=lambda model, cut, dropped: SimpleNamespace(id=ids[tuple(dropped)], model=model)
    )
    disks = SimpleNamespace(nodes=(sp,), make=lambda model, states: states[0])
    ws = SimpleNamespace(disks=disks, workdir=tmp_path)
    monkeypatch.setattr(diagnose, "judge_state", lambda ctx, ws_, cand: outcome[cand.id])
    state = SimpleNamespace(id="torn-4k@9/t5:s0/d4", cut=9, dropped=(4,), torn=((5, (0,)),))
    first = Verdict(
        state.id,
        "torn-4k",
        9,
        "lost-ack",
        ("record 3: checksum mismatch",),
        1,
        0,
        0.1,
        confirmed=True,
    )
    twin = diagnose.without_tear(None, ws, state, first)  # type: ignore[arg-type]
    assert twin == (names[excused] if excused else "")

    p = tmp_path / "m.toml"
    p.write_text(
        ROW.replace('write-cache = "lost-ack" }', 'write-cache = "lost-ack", torn-4k = "pass" }')
    )
    (row,) = matrix.load(p)
    s = summarize([first], recording="r", fstype="ext4", workload="w", check_in="host", seconds=1.0)
    cell = matrix.cells(row, s, {first.state: twin})[2]
    assert cell.ok is bool(excused)  # expected pass: only a failure that needs no tear is excused
    assert cell.seen == ("pass (untorn)" if excused else "lost-ack")


def test_a_pass_on_a_space_short_of_exhaustive_says_so_and_can_be_a_surprise(
    tmp_path: Path,
) -> None:
    """#37: a cell expecting pass whose states were capped says 'capped' in its description, is marked
    'ok?' (not silently ok), and with --require-exhaustive is a surprise; a failure found needs no proof."""
    from powercut.core.states.coverage import Coverage, ModelCoverage

    p = tmp_path / "m.toml"
    p.write_text(ROW)
    (row,) = matrix.load(p)
    verdicts = [
        _v("flush@3", "flush", "pass", 3),
        _v("write-cache@9/d4", "write-cache", "lost-ack", 9),
    ]
    cov = Coverage(
        (ModelCoverage("flush", 5, 1), ModelCoverage("write-cache", 9, 1, 4, 2, 30, 1024))
    )
    s = summarize(
        verdicts,
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
        coverage=cov,
    )
    flush, wc = matrix.cells(row, s)
    assert flush.ok and not flush.proven and flush.mark == "ok?" and flush.covered == "capped"
    assert "capped: 1 of 5 distinct states judged" in flush.describe()
    assert (
        wc.ok and wc.proven and wc.mark == "ok"
    )  # lost-ack expected and found: no coverage needed
    strict = matrix.cells(row, s, require_exhaustive=True)
    assert not strict[0].ok and strict[0].mark == "SURPRISE" and strict[1].ok
    assert matrix.Cell.from_json(flush.to_json()) == flush
    assert "| ok? |" in matrix.markdown([row], [flush, wc])
    exhaustive = Coverage((ModelCoverage("flush", 1, 1), ModelCoverage("write-cache", 1, 1)))
    s2 = summarize(
        verdicts,
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
        coverage=exhaustive,
    )
    assert [c.mark for c in matrix.cells(row, s2, require_exhaustive=True)] == ["ok", "ok"]


def test_a_rows_expected_cause_is_compared_with_its_failures_cause(tmp_path: Path) -> None:
    p = tmp_path / "m.toml"
    p.write_text(ROW.replace('why = "test"', 'why = "test"\ncause = "no-fsync"'))
    (row,) = matrix.load(p)
    assert row.cause == {"write-cache": "no-fsync"}  # a plain rule: every model expected to fail
    groups = [
        {
            "verdict": "lost-ack",
            "reason_class": "lost-ack at #",
            "first": "write-cache@5/d2",
            "states": [],
            "why": {"rule": "rename-before-fsync", "sentence": "x was renamed over y before ..."},
        }
    ]
    s = summarize(
        [_v("flush@3", "flush", "pass", 3), _v("write-cache@5/d2", "write-cache", "lost-ack", 5)],
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
        groups=groups,
    )
    flush, wc = matrix.cells(row, s)
    assert (wc.cause, wc.expected_cause) == ("rename-before-fsync", "no-fsync")
    assert (
        not wc.cause_ok and not wc.ok
    )  # the verdict is as expected, its explanation is not: a surprise
    assert wc.failing == {"lost-ack": 1} and wc.seen == "lost-ack"
    assert "cause rename-before-fsync, expected no-fsync" in wc.describe()
    untraced = matrix.cells(
        row,
        summarize(
            [_v("write-cache@5/d2", "write-cache", "lost-ack", 5)],
            recording="r",
            fstype="ext4",
            workload="w",
            check_in="host",
            seconds=1.0,
        ),
    )[1]
    assert (
        untraced.ok
        and untraced.cause == ""
        and "cause unknown (no system-call trace)" in untraced.describe()
    )
    assert flush.cause_ok and flush.cause == ""  # no failure, nothing to explain
    assert matrix.Cell.from_json(wc.to_json()) == wc
    good = matrix.cells(
        row,
        summarize(
            [_v("write-cache@5/d2", "write-cache", "lost-ack", 5)],
            recording="r",
            fstype="ext4",
            workload="w",
            check_in="host",
            seconds=1.0,
            groups=[dict(groups[0], why={"rule": "no-fsync", "sentence": "s"})],
        ),
    )[1]
    assert good.cause_ok and good.cause_text == "s"


def test_a_cluster_row_names_its_nodes_and_the_builtin_matrix_has_cluster_rows(
    tmp_path: Path,
) -> None:
    p = tmp_path / "m.toml"
    p.write_text(ROW.replace('why = "test"', 'why = "test"\nnodes = 3'))
    (row,) = matrix.load(p)
    assert row.nodes == 3
    (one,) = matrix.load(_write(tmp_path / "one.toml", ROW))
    assert one.nodes == 1
    clusters = [r for r in matrix.load() if r.nodes > 1]
    assert {r.workload for r in clusters} >= {"replog"}
    assert {v for r in clusters for v in r.expect.values()} >= {"pass", "lost-ack"}


def test_a_cluster_states_cells_read_its_cluster_model_and_aliases(tmp_path: Path) -> None:
    """A cluster state's model is its id's MODEL~ part; its aliases (MODEL~...) speak for their models."""
    lost = Verdict(
        "flush~flush@9+flush@9",
        "flush",
        1,
        "lost-ack",
        ("acked record 0 lost",),
        1,
        1,
        0.1,
        aliases=("write-cache~flush@9+flush@9",),
    )
    ok = Verdict("write-cache~write-cache@12/d1+flush@9", "write-cache", 1, "pass", (), 1, 1, 0.1)
    summary = summarize(
        [lost, ok], recording="r", fstype="ext4", workload="replog", check_in="host", seconds=1
    )
    row = matrix.Row(
        "replog", "x", {}, "ext4", {"flush": "lost-ack", "write-cache": "lost-ack"}, "why", nodes=2
    )
    cells = {c.model: c for c in matrix.cells(row, summary)}
    assert cells["flush"].ok and cells["write-cache"].ok
    assert cells["write-cache"].first == "write-cache~flush@9+flush@9"
    assert cells["write-cache"].judged == 2


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def test_a_pass_whose_commit_windows_are_exhaustive_reads_ok(tmp_path: Path) -> None:
    """#52: a durable row whose commit windows were all judged, with only its set-up windows (before
    the first key mark) sampled and weakened, reads ``ok`` -- and meets --require-exhaustive, not
    --require-exhaustive=all; its description leads with the commits."""
    from powercut.core.states.coverage import Coverage, ModelCoverage, Part

    p = tmp_path / "m.toml"
    p.write_text(ROW.replace('write-cache = "lost-ack"', 'write-cache = "pass"'))
    (row,) = matrix.load(p)
    note = "writes logged after 2 flushes ... in flight: not generated; affects begin:0"
    setup = Part("write-cache", 30, 30, 3, 3, 330, 2**62, (note,))
    commits = Part("write-cache", 100, 100, 20)
    wc = ModelCoverage("write-cache", 130, 130, 23, 3, 330, 2**62, 0, (note,), setup, commits)
    cov = Coverage(
        (ModelCoverage("flush", 9, 9, setup=Part("flush", 2, 2), commits=Part("flush", 7, 7)), wc)
    )
    verdicts = [_v("flush@3", "flush", "pass", 3), _v("write-cache@9/d4", "write-cache", "pass", 9)]
    s = summarize(
        verdicts,
        recording="r",
        fstype="ext4",
        workload="w",
        check_in="host",
        seconds=1.0,
        coverage=cov,
    )
    flush, cell = matrix.cells(row, s)
    assert cell.covered == "weakened" and cell.commits == "exhaustive"
    assert cell.proven and cell.mark == "ok" and cell.describe().startswith("pass")
    assert (
        cell.short_coverage == "commits exhaustive, set-up weakened" and flush.short_coverage == ""
    )
    assert (
        "every commit window exhaustive (100 distinct states); set-up windows sampled"
        in cell.coverage
    )
    assert matrix.Cell.from_json(cell.to_json()) == cell
    assert flush.mark == "ok" and [
        c.mark for c in matrix.cells(row, s, require_exhaustive="commits")
    ] == ["ok", "ok"]
    strict = matrix.cells(row, s, require_exhaustive="all")[1]
    assert not strict.proven and strict.mark == "SURPRISE"
    assert (
        s.ok
        and s.coverage is not None
        and s.coverage.meets("commits")
        and not s.coverage.meets("all")
    )
    assert (
        summarize(
            verdicts,
            recording="r",
            fstype="ext4",
            workload="w",
            check_in="host",
            seconds=1.0,
            coverage=cov,
            require_exhaustive="all",
        ).ok
        is False
    )
    assert (
        summarize(
            verdicts,
            recording="r",
            fstype="ext4",
            workload="w",
            check_in="host",
            seconds=1.0,
            coverage=cov,
            require_exhaustive=True,
        ).ok
        is True
    )

"""The verdict matrix: the data file itself (every row runnable, the required shape), loading errors,
choosing rows, and comparing a campaign's summary with a row's expectations."""
from __future__ import annotations

from pathlib import Path

import pytest

from powercut.report import matrix
from powercut import workload as workloads
from powercut.cli import main
from powercut.errors import UsageError
from powercut.report.summary import summarize
from powercut.core.verdict import Verdict

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
            assert set(r.expect.values()) == {"pass"}, f"{r.id}: a correct variant passes every model"


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


@pytest.mark.parametrize("text, message", [
    (ROW.replace('why = "test"', 'why = "test"\ncolour = 1'), "unknown key"),
    (ROW.replace("write-cache = ", "cache = "), "unknown model 'cache'"),
    (ROW.replace('"lost-ack"', '"lost"'), "expect.write-cache = 'lost'"),
    (ROW.replace('why = "test"', ""), "needs 'why'"),
    (ROW + ROW, "the same configuration twice"),
    (ROW.replace('fs = "ext4"', 'fs = "ext4"\nci = "cloud"'), "ci must be"),
    ("[[row]\n", "not a valid verdict matrix"),
])
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
    return Verdict(state, model, cut, verdict, (f"{verdict} at {cut}",), 1, 0, 0.1, confirmed=verdict != "pass")


def test_cells_compare_what_was_seen_with_what_was_expected(tmp_path: Path) -> None:
    p = tmp_path / "m.toml"
    p.write_text(ROW.replace('write-cache = "lost-ack" }', 'write-cache = "lost-ack", torn-4k = "fail" }'))
    (row,) = matrix.load(p)
    verdicts = [_v("flush@3", "flush", "pass", 3), _v("write-cache@9/d4", "write-cache", "lost-ack", 9),
                _v("write-cache@5/d2", "write-cache", "lost-ack", 5), _v("write-cache@7", "write-cache", "pass", 7),
                _v("torn-4k@4/s0", "torn-4k", "pass", 4)]
    s = summarize(verdicts, recording="r", fstype="ext4", workload="w", check_in="host", seconds=1.0)
    flush, wc, torn = matrix.cells(row, s)
    assert flush.ok and flush.seen == "pass" and flush.judged == 1
    assert wc.ok and wc.failing == {"lost-ack": 2} and wc.first == "write-cache@5/d2"
    assert not torn.ok and torn.seen == "pass"  # expected a failure, saw none: a surprise
    md = matrix.markdown([row], [flush, wc, torn])
    assert "**SURPRISE**" in md and "write-cache@5/d2" in md
    # the wrong kind of failure is a surprise too; so is a flaky state or a campaign that stopped
    s2 = summarize([_v("write-cache@5", "write-cache", "corrupt-data", 5), _v("flush@3", "flush", "flaky", 3)],
                   recording="r", fstype="ext4", workload="w", check_in="host", seconds=1.0)
    flush2, wc2, torn2 = matrix.cells(row, s2)
    assert not wc2.ok and wc2.seen == "corrupt-data"
    assert not flush2.ok and flush2.seen == "flaky"
    assert not torn2.ok and torn2.judged == 0  # nothing judged is never as expected
    assert all(not c.ok and c.seen == "error" for c in matrix.failed_cells(row, "recording failed"))
    # a torn failure that fails the same way without its tear is the write-cache model's, not torn's
    s3 = summarize([_v("torn-4k@9/t5:s0/d4", "torn-4k", "corrupt-data", 9)], recording="r", fstype="ext4",
                   workload="w", check_in="host", seconds=1.0)
    torn3 = matrix.cells(row, s3, {"torn-4k@9/t5:s0/d4": "write-cache@9/d4"})[2]
    assert torn3.seen == "pass (untorn)" and torn3.tear_free == 1 and "without their tear" in torn3.describe()
    assert torn3.ok  # expected "fail": the torn model did flag it, with or without the tear
    assert matrix.cells(row, s3, {"torn-4k@9/t5:s0/d4": ""})[2].seen == "corrupt-data"
    passing = matrix.Cell(row.id, "torn-4k", "pass", 3, {"corrupt-data": 2}, "torn-4k@9/t5:s0/d4", tear_free=2)
    assert passing.ok and not matrix.Cell(row.id, "torn-4k", "pass", 3, {"corrupt-data": 2}, tear_free=1).ok


def test_matrix_cli_lists_rows_and_refuses_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
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
    from powercut.core.verdict import Verdict
    from powercut.report.summary import summarize
    row = matrix.Row("osync", "v", {}, "ext4", {"no-cache": "pass", "flush": "lost-ack"}, "why")
    vs = [Verdict("no-cache@5", "no-cache", 5, "pass", (), 1, 0, 0.1, aliases=("flush@5",)),
          Verdict("no-cache@6", "no-cache", 6, "pass", (), 1, 0, 0.1),
          Verdict("no-cache@9", "no-cache", 9, "lost-ack", ("ack 2 missing",), 2, 0, 0.1, aliases=("flush@9",),
                  confirmed=True)]
    s = summarize(vs, recording="r", fstype="ext4", workload="osync", check_in="host", seconds=1.0)
    assert s.by_model == {"no-cache": {"pass": 2, "lost-ack": 1}}
    assert s.covered == {"no-cache": {"pass": 2, "lost-ack": 1}, "flush": {"pass": 1, "lost-ack": 1}}
    nc, fl = matrix.cells(row, s)
    assert (nc.judged, nc.failing, nc.ok) == (3, {"lost-ack": 1}, False)
    assert (fl.judged, fl.failing, fl.first, fl.ok) == (2, {"lost-ack": 1}, "flush@9", True)

"""A cluster check's output read as the one Summary every reader takes (report/cluster.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut.core.verdict import Verdict
from powercut.errors import UsageError
from powercut.report import cluster

A = Verdict("flush~flush@9+flush@9+flush@9", "flush", 1, "lost-ack", ("acked record 0 lost",), 1, 1, 0.1,
            aliases=("write-cache~flush@9+flush@9+flush@9",))
B = Verdict("write-cache~write-cache@12/d1+flush@9+flush@10", "write-cache", 1, "pass", (), 1, 1, 0.1)


def _out(tmp_path: Path, lines: list[str], **doc: object) -> Path:
    (tmp_path / "journal.jsonl").write_text("".join(line + "\n" for line in lines))
    (tmp_path / "summary.json").write_text(json.dumps({"recording": "rec", "nodes": 3, "workload": "replog",
                                                       "fstype": "ext4", "check_in": "host", "acks": 4,
                                                       "judge_s": 2.5, **doc}))
    return tmp_path


def test_a_cluster_output_is_a_summary_with_its_verdicts_models_and_figures(tmp_path: Path) -> None:
    out = _out(tmp_path, [json.dumps(A.to_json()), json.dumps(B.to_json())])
    assert cluster.is_cluster_output(out)
    s = cluster.load(out)
    assert (s.fstype, s.workload, s.check_in, s.acks, s.total) == ("ext4", "replog", "host", 4, 2)
    assert [f.state for f in s.failures] == [A.state] and s.verdict == "lost-ack"
    assert s.covered == {"flush": {"lost-ack": 1}, "write-cache": {"lost-ack": 1, "pass": 1}}
    assert s.seconds == 2.5 and s.status == "complete" and not s.ok


def test_a_later_verdict_of_a_state_replaces_the_earlier_and_a_torn_last_line_is_dropped(tmp_path: Path) -> None:
    again = Verdict(A.state, "flush", 1, "lost-ack", A.reasons, 1, 1, 0.1, A.aliases, True)
    out = _out(tmp_path, [json.dumps(A.to_json()), json.dumps(again.to_json()), '{"state": "flu'])
    (v,) = cluster.verdicts(out)
    assert v.confirmed


def test_a_broken_output_is_one_clear_line(tmp_path: Path) -> None:
    assert not cluster.is_cluster_output(tmp_path)
    with pytest.raises(UsageError, match="no cluster check summary"):
        cluster.load(tmp_path)
    out = _out(tmp_path, ["not json", json.dumps(B.to_json())])
    with pytest.raises(UsageError, match="line 1 is not a verdict"):
        cluster.load(out)
    (tmp_path / "summary.json").write_text("[1")
    with pytest.raises(UsageError, match="not JSON"):
        cluster.load(out)


def test_report_html_of_a_cluster_check_has_a_band_and_a_column_per_node(tmp_path: Path) -> None:
    from tests.unit.logops import build_log
    logs = []
    for n in range(3):
        ops = [("m", "mkfs"), ("w", 8, 1, 0, n), ("f",), ("m", "begin:0"), ("w", 16, 1, 0, n), ("f",), ("m", "ack:0")]
        logs.append(tmp_path / f"log-n{n}.bin")
        build_log(logs[-1], ops)
    state = "flush~flush@3+flush@3+flush@3"
    v = Verdict(state, "flush", 1, "lost-ack", ("acked record 0 is intact on 0 of 3 nodes",), 1, 1, 0.1)
    out = _out(tmp_path / "check", [json.dumps(v.to_json())]) if (tmp_path / "check").mkdir() is None else None
    page = cluster.write_html(out, logs).read_text()
    assert "3 nodes, one power cut of every node" in page
    assert page.count('class="cut"') == 1 and "node 2" in page
    assert "<th>node 0</th><th>node 1</th><th>node 2</th>" in page
    assert page.count("<code>flush@3</code>") == 3
    broken = cluster.write_html(out, [tmp_path / "missing.bin"] * 3).read_text()   # no picture, still a report
    assert "lost-ack" in broken and 'class="cut"' not in broken

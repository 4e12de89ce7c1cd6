"""Journal, state selection, external checkers and reports -- no VM, no root."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from powercut.check import CheckerSpec, Journal, Verdict, select_states, worst
from powercut.checker import CheckInput
from powercut.errors import UsageError
from powercut.log import open_log
from powercut.logwrite import LogWriter
from powercut.report import summarize, write_outputs


def v(state: str, verdict: str = "pass", model: str = "flush", cut: int = 1) -> Verdict:
    return Verdict(state, model, cut, verdict, (f"reason for {state}",), 1, 0, 0.01)


def test_journal_resume_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(path, resume=False)
    j.add(v("flush@1"))
    j.add(v("flush@2", "lost-ack"))
    j.close()
    with open(path, "ab") as f:
        f.write(b'{"state":"flush@3","mod')  # kill -9 in the middle of a write
    with pytest.raises(UsageError, match="--resume"):
        Journal(path, resume=False)
    j = Journal(path, resume=True)
    assert set(j.done) == {"flush@1", "flush@2"} and j.done["flush@2"].verdict == "lost-ack"
    j.add(v("flush@3"))
    j.close()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["state"] for x in lines] == ["flush@1", "flush@2", "flush@3"]


def test_select_states_skips_everything_before_mkfs(tmp_path: Path) -> None:
    path = tmp_path / "log.bin"
    with LogWriter(path) as w:
        w.write(0, b"m" * 1024)   # mkfs's writes
        w.flush()
        w.write(8, b"n" * 512)    # still mkfs, in the cache
        w.mark("mkfs")
        w.write(16, b"a" * 512)
        w.flush()
        w.mark("ack:0")
    with open_log(path) as index:
        mkfs = index.find_mark("mkfs")
        states = select_states(index, ["flush", "write-cache", "no-cache"])
    assert states and all(s.cut > mkfs for s in states)
    assert all(all(d > mkfs for d in s.dropped) for s in states)
    assert len({s.id for s in states}) == len(states)


def test_external_checker_command(tmp_path: Path) -> None:
    inp = CheckInput(str(tmp_path), ("1", "2"), ("3",), {"n": 3}, "flush@9")
    ok = CheckerSpec(command="python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d[\"acked\"]), d[\"state\"])'")
    r = ok.run(inp)
    assert r.verdict == "pass" and r.reasons == ("2 flush@9",)
    assert CheckerSpec(command="echo 'record 2 lost'; exit 1").run(inp).verdict == "lost-ack"
    assert CheckerSpec(command="echo 'bad crc'; exit 1").run(inp).verdict == "corrupt-data"
    crashed = CheckerSpec(command="echo boom >&2; exit 7").run(inp)
    assert crashed.verdict == "checker-crashed" and "boom" in crashed.reasons[0]
    assert CheckerSpec(command="sleep 5", timeout_s=0.2).run(inp).verdict == "checker-crashed"
    assert CheckerSpec().run(inp).verdict == "pass"  # no checker: mount + fsck only


def test_worst_verdict_order() -> None:
    assert worst(["pass", "fsck-error", "lost-ack"]) == "lost-ack"
    assert worst(["corrupt-data", "kernel-panic", "timeout"]) == "kernel-panic"
    assert worst([]) == "pass"


def test_summary_json_and_junit(tmp_path: Path) -> None:
    verdicts = [v("flush@1"), v("flush@2", "lost-ack", cut=2), v("write-cache@3/d4", "pass", "write-cache", 3)]
    s = summarize(verdicts, recording="/r", fstype="ext4", workload="append-fsync", check_in="host", seconds=1.5)
    assert s.by_model == {"flush": {"pass": 1, "lost-ack": 1}, "write-cache": {"pass": 1}}
    assert not s.ok and [f.state for f in s.failures] == ["flush@2"]
    paths = write_outputs(s, verdicts, tmp_path)
    summary = json.loads(paths["summary"].read_text())
    assert summary["verdict"] == "lost-ack" and summary["total"] == 3
    assert summary["failures"][0]["repro"].startswith("powercut replay /r --state flush@2")
    root = ET.parse(paths["junit"]).getroot()
    assert root.get("tests") == "3" and root.get("failures") == "1"
    cases = root.findall(".//testcase")
    assert len(cases) == 3
    failing = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failing] == ["flush@2"]
    assert failing[0].find("failure").get("type") == "lost-ack"

"""A cluster recording end to end (docs/clusters.md): three nodes' disks in one recording VM, every
mark in every node's log, then every consistent crash instant judged on the host with the replog
checker -- the durable replicas pass, replicas that answer before their fsync lose acked records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(os.geteuid() != 0, reason="host-mode checks need root"),
]


def powercut(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900
    )


@pytest.mark.parametrize(
    ("fsync", "rc", "verdict"), [("true", 0, "pass"), ("false", 3, "lost-ack")]
)
def test_a_three_node_recording_is_judged_at_every_consistent_instant(
    tmp_path: Path, fsync: str, rc: int, verdict: str
) -> None:
    rec = tmp_path / "rec"
    out = powercut(
        "record",
        "--nodes",
        "3",
        "--workload",
        "replog",
        "--param",
        "n=4",
        "--param",
        f"fsync={fsync}",
        "--size",
        "32",
        "-o",
        str(rec),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = (rec / "manifest.toml").read_text()
    assert "[cluster]" not in text and text.count("[[node]]") == 3  # one table per node
    chk = powercut(
        "check", str(rec), "--check-in", "host", "--model", "flush", "-o", str(tmp_path / "out")
    )
    assert chk.returncode == rc, chk.stdout + chk.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["nodes"] == 3 and summary["total"] > 0
    seen = {
        v["verdict"]
        for v in map(json.loads, (tmp_path / "out" / "journal.jsonl").read_text().splitlines())
        if "verdict" in v
    }
    assert verdict in seen, seen
    if verdict == "pass":
        assert seen == {"pass"}

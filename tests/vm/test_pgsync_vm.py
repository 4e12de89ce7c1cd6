"""PostgreSQL primary + synchronous standby as a cluster recording end to end (docs/clusters.md):
both nodes' disks in one recording VM, the standby synchronous before the first begin, then cluster
crash states judged on the host -- the primary recovered alone, the standby promoted alone.
synchronous_commit=on passes on both; off loses acked commits (asynchronous commit)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.workloads import postgres as pgw

pytestmark = [pytest.mark.vm, pytest.mark.skipif(os.geteuid() != 0, reason="host-mode checks need root")]


def powercut(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize(("sync", "states", "rc", "verdict"), [
    ("on", "20", 0, "pass"),
    # nightly: ~60 s; a cluster's lost ack is caught in the fast suite by test_cluster_vm (replog)
    pytest.param("off", "100", 3, "lost-ack", marks=pytest.mark.nightly)])
def test_a_primary_and_its_synchronous_standby_are_judged_each_alone(tmp_path: Path, sync: str, states: str, rc: int,
                                                                      verdict: str) -> None:
    if pgw.bindir() is None:
        pytest.fail(pgw.MISSING)  # ci/setup.sh installs it: a missing one is a setup failure, not a skip
    assert pgw.prepare_main([]) == 0  # the prepared cluster, once per machine (no initdb under emulation)
    rec = tmp_path / "rec"
    out = powercut("record", "--nodes", "2", "--workload", "pgsync", "--param", "n=10", "--param",
                   f"synchronous_commit={sync}", "--size", "64", "-o", str(rec))
    assert out.returncode == 0, out.stdout + out.stderr
    err = (rec / "job" / "workload.err").read_text()
    assert "streaming, sync_state = sync" in err and f"synchronous_commit = {sync}" in err, err[-2000:]
    chk = powercut("check", str(rec), "--check-in", "host", "--model", "flush", "--max-states", states,
                   "--shrink", "0", "-o", str(tmp_path / "out"))   # verdicts; triage: test_cluster_debug_vm.py
    assert chk.returncode == rc, chk.stdout + chk.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["nodes"] == 2 and summary["judged"] == int(states)
    judged = [v for v in map(json.loads, (tmp_path / "out" / "journal.jsonl").read_text().splitlines())
              if "verdict" in v]
    seen = {v["verdict"] for v in judged}
    assert verdict in seen, seen
    if verdict == "pass":
        assert seen == {"pass"}
        served = [v for v in judged if any(r.startswith("node 1 (standby, promoted): 10 acked txn(s) intact")
                                           for r in v["reasons"])]
        assert served, [v["reasons"] for v in judged]  # the promoted standby served every acked txn
    else:
        lost = [r for v in judged if v["verdict"] == "lost-ack" for r in v["reasons"] if "lost" in r]
        assert any(r.startswith("node 0 (primary): acked txn(s)") for r in lost), lost

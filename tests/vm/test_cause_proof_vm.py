"""Causes proven by counterfactual, end to end (debug/verify.py): a recording of idxstore with its
index renamed away and rewritten (the data file's fsync first) is checked in a checker VM; the
failure's cause is replaced-in-place, proven by its what-if state judged in that VM (the index's
data made durable: it passes); the correct store has nothing to prove.  The rules are in
tests/unit/core, the choice between them in tests/unit/debug/test_verify.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm


@pytest.mark.parametrize("replace, rc", [("rename-away", 3), ("tmp-rename", 0)])
def test_a_replaced_index_is_the_proven_cause(tmp_path: Path, replace: str, rc: int) -> None:
    rec = tmp_path / "rec"
    record(RecordSpec(fs=FsSpec(fstype="ext4"), workload=WorkloadSpec(
        name="idxstore", params={"n": 4, "replace": replace})), rec)
    out = tmp_path / "check"
    p = subprocess.run([sys.executable, "-m", "powercut.cli", "check", str(rec), "--model", "flush", "-o", str(out)],
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == rc, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    if rc == 0:
        assert summary["cause_proofs"] == {} and not summary["groups"]
        return
    why = summary["groups"][0]["why"]
    assert why["rule"] == "replaced-in-place" and why["subject"] == "/store.idx"
    assert why["proof"].startswith("verified: with /store.idx's data") and "what-if@" in why["proof"]
    assert summary["cause_proofs"]["verified"] + summary["cause_proofs"]["replaced"] >= 1
    assert "proof: verified" in p.stdout

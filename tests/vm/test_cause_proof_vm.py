"""Causes proven by counterfactual, end to end (debug/verify.py): a recording of idxstore whose
CURRENT names a new index before the index is synced (LevelDB's pointer before data) is checked in
a checker VM; the failure's cause is pointer-before-data, proven by its what-if state judged in
that VM (the index's data made durable: it passes), and the state's kill-equivalent passes (no
recovery bug); the store that syncs the index first has nothing to prove.  The rules are in
tests/unit/core (replaced-in-place end to end: the nightly matrix's idxstore rows), the choice
between them in tests/unit/debug/test_verify.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm


@pytest.mark.parametrize("replace, rc", [("current-first", 3), ("current", 0)])
def test_a_pointer_before_its_data_is_the_proven_cause(
    tmp_path: Path, replace: str, rc: int
) -> None:
    rec = tmp_path / "rec"
    record(
        RecordSpec(
            fs=FsSpec(fstype="ext4"),
            workload=WorkloadSpec(name="idxstore", params={"n": 2, "replace": replace}),
        ),
        rec,
    )
    out = tmp_path / "check"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "check",
            str(rec),
            "--model",
            "flush",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert p.returncode == rc, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    if rc == 0:
        assert summary["cause_proofs"] == {} and not summary["groups"]
        return
    why = summary["groups"][0]["why"]
    assert why["rule"] == "pointer-before-data" and why["subject"].startswith("/index-")
    assert (
        "made /CURRENT durable -- renamed it into place" in why["sentence"]
        and why["proven"] is True
    )
    assert (
        why["proof"].startswith(f"verified: with {why['subject']}'s data")
        and "what-if@" in why["proof"]
    )
    assert not any("process kill fails" in o for o in why["others"])  # its kill-equivalent passes
    proofs = summary["cause_proofs"]
    assert (
        proofs["verified"] + proofs["replaced"] >= 1
        and proofs["recovery"] == 0
        and proofs["unproven"] == 0
    )
    assert "proof: verified" in p.stdout

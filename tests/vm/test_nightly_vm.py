"""ci/nightly.sh end to end, the workflow's steps on one machine: record each row in a VM, check it
in 2 shards (host mode here, to keep the suite short; the shards' VM mode is check's own), merge.
A durable row merges to a pass, a broken one (acks before fsync) to confirmed failures (exit 3), and
the merged summary equals an unsharded check of the same recording."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vm, pytest.mark.nightly]  # the nightly script, run by the nightly suite
ROOT = Path(__file__).resolve().parents[2]


def test_nightly_script_records_shards_and_merges(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("host-mode shards need root")
    env = dict(
        os.environ,
        OUT=str(tmp_path),
        SHARDS="2",
        CHECK_IN="host",
        SETUP="0",
        PYTHON=sys.executable,
        SEED="7",
        ROWS="append-fsync:ext4:n=3 append-fsync:ext4:n=3,ack_early=true",
    )
    res = subprocess.run(
        ["bash", str(ROOT / "ci" / "nightly.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(res.stdout[-3000:], res.stderr[-3000:])
    assert res.returncode == 3, "the broken row's confirmed failures make the whole run exit 3"
    good = json.loads((tmp_path / "append-fsync_ext4_n_3" / "merged" / "summary.json").read_text())
    bad = json.loads(
        (tmp_path / "append-fsync_ext4_n_3_ack_early_true" / "merged" / "summary.json").read_text()
    )
    assert good["verdict"] == "pass" and good["ok"] and not good["missing_shards"]
    assert bad["verdict"] == "lost-ack" and bad["confirmed_failures"] > 0
    # the merge equals an unsharded check of the same recording, verdict for verdict
    rec = tmp_path / "append-fsync_ext4_n_3_ack_early_true" / "rec"
    whole = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "check",
            str(rec),
            "--check-in",
            "host",
            "--seed",
            "7",
            "-o",
            str(tmp_path / "whole"),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert whole.returncode == 3, whole.stderr

    def verdicts(d: Path) -> dict[str, str]:
        return {
            o["state"]: o["verdict"]
            for o in map(json.loads, (d / "journal.jsonl").read_text().splitlines())
        }

    assert verdicts(tmp_path / "whole") == verdicts(rec.parent / "merged")
    assert "merge" in res.stderr and "shard 2/2" in res.stderr

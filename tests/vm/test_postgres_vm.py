"""End to end: PostgreSQL (default, durable settings) recorded in a VM from the prepared cluster,
then a handful of its crash states judged on the host -- the server's own recovery, every acked
row, pg_amcheck -- all passing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record
from powercut.workloads import postgres as pgw

pytestmark = pytest.mark.vm
N = 4


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if pgw.bindir() is None:
        pytest.fail(
            pgw.MISSING
        )  # ci/setup.sh installs it: a missing one is a setup failure, not a skip
    assert (
        pgw.prepare_main([]) == 0
    )  # the prepared cluster, once per machine (a few seconds on the host)
    out = tmp_path_factory.mktemp("pg") / "rec"
    record(RecordSpec(fs=FsSpec(), workload=WorkloadSpec(name="postgres", params={"n": N})), out)
    return out


def test_durable_postgres_passes_its_crash_states(rec: Path, tmp_path: Path) -> None:
    err = (rec / "job" / "workload.err").read_text()
    assert "prepared cluster /var/cache/powercut/postgres/" in err  # no initdb under emulation
    assert (
        "checkpoint complete" in err
    )  # the CHECKPOINT after ack 3 and the shutdown checkpoint ran
    spec = CampaignSpec.of(
        models=("flush", "torn-4k"), check_in="host", jobs=1, max_states=8, shrink=0
    )
    summary, _ = run_campaign(rec, spec, tmp_path / "check")
    assert summary.ok, summary.failures[:3]
    judged = [
        json.loads(line) for line in (tmp_path / "check" / "journal.jsonl").read_text().splitlines()
    ]
    assert {v["model"] for v in judged} == {"flush", "torn-4k"}
    served = [v for v in judged if "pg_amcheck clean" in v["reasons"][0]]
    assert served, [
        v["reasons"] for v in judged
    ]  # some states ran the server's recovery, not only setup ones
    assert any(f"{N} acked txn(s) intact" in v["reasons"][0] for v in served), [
        v["reasons"] for v in served
    ]

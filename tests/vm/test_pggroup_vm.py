"""A real group-commit program under ``--delay-sync`` (issue 50): PostgreSQL with several sessions
committing at once (workloads/pggroup.py), its WAL segment's flushes held.  The server runs as the
``postgres`` user, a child that drops root: the hold must reach it (it holds the WAL flushes of the
server's backends and walwriter, nothing else), and with synchronous_commit=on every acked commit of
every session survives every crash state judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Schedule, run_one
from powercut.config import WorkloadSpec
from powercut.core.recording.latency import NodesLatency
from powercut.record import recording
from powercut.record.vm import RecordSpec

pytestmark = pytest.mark.vm

WAL = "pgdata/pg_wal/*"


def test_postgres_group_commit_with_its_wal_flushes_held_keeps_every_ack(tmp_path: Path) -> None:
    rspec = RecordSpec(
        workload=WorkloadSpec(
            name="pggroup", params={"sessions": 3, "n": 2}, delay_sync=(f"{WAL}=100ms",)
        )
    )
    cspec = CampaignSpec.of(
        models=("flush",), check_in="host", jobs=2, max_states=30, shrink=0, confirm=False
    )
    o = run_one(Schedule(NodesLatency.parse("none")), rspec, cspec, tmp_path)
    assert o.verdict == "pass" and o.states.get("pass", 0) == o.total > 0, o
    ds = recording.load(o.dir).manifest["result"]["delay_sync"]
    wal = {p: f for p, f in ds["files"].items() if p.startswith("pgdata/pg_wal/")}
    assert wal and all(f["held"] == f["calls"] > 0 for f in wal.values()), (
        ds
    )  # the server's flushes, every one
    assert sum(f["held"] for f in wal.values()) == ds["held"], ds  # and nothing else

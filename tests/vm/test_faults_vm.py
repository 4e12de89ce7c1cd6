"""Injected I/O errors end to end (core/log/faultwindows.py, powercut.faults): the wal workload meets an EIO on
its segment's sectors before a commit's fsync.  Retrying the fsync and acking (fsyncgate) is caught
as acked-after-error -- in a checker VM and on the host alike, verdict for verdict; stopping without
the ack (PostgreSQL's PANIC) passes, and its non-zero exit after the fault is recorded, not refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record import recording
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm


def _record(tmp_path: Path, on_error: str) -> recording.Recording:
    rec = record(
        RecordSpec(
            fs=FsSpec(fstype="ext4", size_mb=256),
            workload=WorkloadSpec(name="wal", params={"n": 4, "fault_at": 2, "on_error": on_error}),
            accel="auto",
            timeout_s=600,
        ),
        tmp_path / on_error,
    )
    assert rec.ok
    return rec


def _verdicts(out: Path) -> dict[str, str]:
    return {
        d["state"]: d["verdict"]
        for d in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
    }


def test_fsync_retry_after_eio_is_caught_in_vm_and_host_alike(tmp_path):
    rec = _record(tmp_path, "retry")
    faults = rec.manifest["faults"]["node"][0]  # one disk's is node 0's, as a cluster's
    assert faults["acked_after_error"] == ["2"] and rec.manifest["faults"]["workload_rc"] == 0
    assert len(faults["windows"]) == 1 and faults["windows"][0].startswith("eio-range on sectors ")
    how = dict(models=("flush",), shrink=0, confirm=False)
    vm, _ = run_campaign(
        rec.dir, CampaignSpec.of(check_in="vm", jobs=1, accel="auto", **how), tmp_path / "vm"
    )
    host, _ = run_campaign(
        rec.dir, CampaignSpec.of(check_in="host", jobs=1, **how), tmp_path / "host"
    )
    assert _verdicts(tmp_path / "vm") == _verdicts(tmp_path / "host")
    failing = [f for f in host.failures if f.verdict == "acked-after-error"]
    assert failing and all(
        "commit 2 was acked after the device failed I/O" in f.reasons[0] for f in failing
    )
    assert {f.verdict for f in host.failures} == {"acked-after-error"}


def test_stopping_at_the_first_eio_passes_and_its_exit_is_recorded(tmp_path):
    rec = _record(tmp_path, "stop")
    assert (
        rec.manifest["faults"]["workload_rc"] == 3
        and rec.manifest["faults"]["node"][0]["acked_after_error"] == []
    )
    assert "stopping without acking" in (rec.dir / "job" / "workload.err").read_text()
    summary, _ = run_campaign(
        rec.dir,
        CampaignSpec.of(
            models=("flush", "write-cache"), check_in="host", jobs=1, max_states=200, shrink=0
        ),
        tmp_path / "check",
    )
    assert summary.total > 0 and not summary.failures


def test_sqlite_rolls_back_a_commit_whose_database_sync_failed(tmp_path):
    """SQLite's claim (an I/O error during COMMIT rolls the transaction back), checked in the guest:
    the database's sectors fail during txn 2's COMMIT; COMMIT raises; reopened after the device came
    back the database holds txn 1 and passes integrity_check; the recording's crash states pass."""
    rec = record(
        RecordSpec(
            fs=FsSpec(fstype="ext4", size_mb=256),
            workload=WorkloadSpec(
                name="sqlite", params={"journal_mode": "TRUNCATE", "n": 3, "fault_at": 2}
            ),
            accel="auto",
            timeout_s=600,
        ),
        tmp_path / "sqlite",
    )
    said = (rec.dir / "job" / "workload.err").read_text()
    assert (
        "COMMIT of txn 2 failed" in said
        and "reopened after the device came back: rolled back" in said
    )
    assert "integrity_check: ok" in said and rec.manifest["faults"]["workload_rc"] == 3
    summary, _ = run_campaign(
        rec.dir,
        CampaignSpec.of(models=("flush",), check_in="host", jobs=1, shrink=0),
        tmp_path / "check",
    )
    assert summary.total > 0 and not summary.failures

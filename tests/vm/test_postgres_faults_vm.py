"""End to end: PostgreSQL's checkpoint meets an fsync EIO (issue #22: data_sync_retry).  The data files
of ``rows`` and ``summary`` fail (eio-range) during the 2nd CHECKPOINT of the script (n=10, one after
every 3rd ack; row_bytes=1200 puts six rows on a heap page, so rows 4-6 sit on the page the 1st
CHECKPOINT already wrote, and rows 7-10 go to the next page), then the device comes back.

* data_sync_retry=off (the default since PostgreSQL 11): the checkpointer PANICs, the server
  crash-restarts and recovers from the WAL (its end-of-recovery checkpoint PANICs again until the
  fault is off), psql loses its connection, the workload exits 3 -- and every crash state passes.
* data_sync_retry=on: the CHECKPOINT fails with ERROR, the retries succeed once Linux has reported
  each file's writeback error once (the 1st retry meets the other file's error), the redo point moves
  past page writes that never reached the disk, and txns 4-6 (acked before the fault) are gone from
  every crash state after the successful retry: the documentation's warning holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record import recording
from powercut.record.vm import RecordSpec, record
from powercut.workloads import postgres as pgw

# nightly: ~95 s; an fsync error acked after is caught in the fast suite by test_faults_vm and test_fault_plan_vm
pytestmark = [pytest.mark.vm, pytest.mark.nightly]
PARAMS = {"fault_at": 2, "row_bytes": 1200}  # n=10, checkpoint_every=3: the defaults
CHECK = dict(models=("flush", "write-cache"), check_in="host", jobs=2, max_states=120, shrink=0)


@pytest.fixture(scope="module")
def prepared() -> None:
    if pgw.bindir() is None:
        pytest.fail(
            pgw.MISSING
        )  # ci/setup.sh installs it: a missing one is a setup failure, not a skip
    assert pgw.prepare_main([]) == 0


def _record(out: Path, retry: bool) -> tuple[recording.Recording, str]:
    rec = record(
        RecordSpec(
            fs=FsSpec(fstype="ext4"),
            workload=WorkloadSpec(name="postgres", params={**PARAMS, "data_sync_retry": retry}),
        ),
        out,
    )
    assert rec.ok
    err = (rec.dir / "job" / "workload.err").read_text()
    assert (
        "postgres: CHECKPOINT 2 of 3 runs with base/5/" in err
        and f"data_sync_retry = {'on' if retry else 'off'}" in err
    )
    return rec, err


def _judged(out: Path) -> dict[str, dict]:
    return {
        d["state"]: d for d in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
    }  # last wins


def test_data_sync_retry_off_panics_recovers_from_wal_and_keeps_every_ack(
    prepared: None, tmp_path: Path
) -> None:
    rec, err = _record(tmp_path / "rec", retry=False)
    faults = {
        **rec.manifest["faults"]["node"][0],
        "workload_rc": rec.manifest["faults"]["workload_rc"],
    }
    assert faults["workload_rc"] == pgw.STOPPED_AFTER_FAULT and faults["acked_after_error"] == []
    assert len(faults["windows"]) == 1 and not faults["left_on"]
    panic = err.index('PANIC:  could not fsync file "base/5/')
    assert err[panic:].split("\n", 1)[0].endswith("Input/output error")
    assert "ERROR:  could not fsync" not in err  # never an ERROR that lets a retry go on
    after = err[panic:]
    assert "checkpointer process" in after and "was terminated by signal 6: Aborted" in after
    assert "all server processes terminated; reinitializing" in after
    assert "automatic recovery in progress" in after and "redo done at" in after
    eor = after.rindex("checkpoint starting: end-of-recovery")
    assert (
        "LOG:  checkpoint complete" in after[eor:]
        and "database system is ready to accept connections" in after[eor:]
    )
    assert "connection to server was lost" in after
    last = err.rstrip().splitlines()[-1]
    assert last.startswith(
        "postgres: psql stopped in a run whose CHECKPOINT 2 ran under an injected EIO (exit 2:"
    )
    assert "the fault switched off, the server accepts connections again" in last

    summary, _ = run_campaign(rec.dir, CampaignSpec.of(**CHECK), tmp_path / "check")
    assert summary.total > 0 and not summary.failures and summary.ok, summary.failures[:3]
    judged = _judged(tmp_path / "check")
    assert {v["model"] for v in judged.values()} == {"flush", "write-cache"}
    # states after the PANIC went through the server's own recovery and kept txns 1..6
    assert any(v["reasons"][0].startswith("6 acked txn(s) intact") for v in judged.values()), (
        sorted({v["reasons"][0] for v in judged.values()})
    )


def test_data_sync_retry_on_retries_the_checkpoint_and_loses_acked_rows(
    prepared: None, tmp_path: Path
) -> None:
    rec, err = _record(tmp_path / "rec", retry=True)
    faults = {
        **rec.manifest["faults"]["node"][0],
        "workload_rc": rec.manifest["faults"]["workload_rc"],
    }
    assert faults["workload_rc"] == 0 and faults["acked_after_error"] == [
        "7"
    ]  # txn 7 spans the fault window
    assert "PANIC" not in err
    errors = [ln for ln in err.splitlines() if 'ERROR:  could not fsync file "base/5/' in ln]
    assert len(errors) == 2 and all(ln.endswith("Input/output error") for ln in errors), errors
    assert (
        len({ln.split('"')[1] for ln in errors}) == 2
    )  # each file's error reported once, one per attempt
    assert (
        err.count("psql:<stdin>:") == 2 and err.count("ERROR:  checkpoint request failed") == 4
    )  # server + psql
    assert "LOG:  checkpoint complete" in err[err.index(errors[-1]) :]  # the next retry succeeded

    summary, _ = run_campaign(rec.dir, CampaignSpec.of(**CHECK), tmp_path / "check")
    assert summary.failures and not summary.flaky
    verdicts = {f.verdict for f in summary.failures}
    assert "corrupt-data" in verdicts and verdicts <= {"corrupt-data", "lost-ack"}, verdicts
    # rows 4-6 were acked before the fault: dropping txn 7's ack (acked after the error) changes nothing
    assert all(
        "row(s) 4, 5, 6 are missing" in f.reasons[0]
        or f.reasons[0].startswith("acked txn(s) 4, 5, 6 lost")
        for f in summary.failures
    ), [f.reasons for f in summary.failures[:5]]
    assert any(
        "the summary counts txns 1..10 but row(s) 4, 5, 6 are missing" in f.reasons[0]
        for f in summary.failures
    )  # still so after the shutdown checkpoint: the loss is for good
    judged = _judged(tmp_path / "check")
    assert any(v["verdict"] == "pass" for v in judged.values())  # the states before the fault

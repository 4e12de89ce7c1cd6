"""A verdict is a function of the state alone: the same states of ext4, xfs and btrfs recordings
judged at -j 1 and -j 2, in host mode and in VM mode, give identical journals (same verdict per
state id).  Clones of one filesystem share its UUID/fsid: xfs needs ``nouuid`` to mount two at
once, btrfs (Debian 12's 6.1 guest kernel) must never mount two in one kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm
SIZES = {"ext4": 64, "xfs": 300, "btrfs": 128}


# ext4 is nightly: xfs (nouuid) and btrfs (mounts serialized) are the filesystems whose clones need care to
# be judged side by side, and ext4's -j 2 runs in many fast tests (test_cluster_checkvm, test_interrupt_vm)
@pytest.fixture(
    scope="module", params=[pytest.param("ext4", marks=pytest.mark.nightly), "xfs", "btrfs"]
)
def rec(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    fs = request.param
    out = tmp_path_factory.mktemp(fs) / "rec"
    record(
        RecordSpec(
            fs=FsSpec(fstype=fs, size_mb=SIZES[fs]),
            workload=WorkloadSpec(name="append-fsync", params={"n": 3}),
        ),
        out,
    )
    return out


def journal(path: Path) -> dict[str, str]:
    return {
        o["state"]: o["verdict"]
        for o in map(json.loads, (path / "journal.jsonl").read_text().splitlines())
    }


def test_verdicts_do_not_depend_on_parallelism(rec: Path, tmp_path: Path) -> None:
    common = dict(models=("flush", "write-cache"), bound=2, samples=2, max_states=24, shrink=0)
    runs = {}
    for mode in ("host", "vm"):
        for jobs in (1, 2):
            s, _ = run_campaign(
                rec, CampaignSpec.of(check_in=mode, jobs=jobs, **common), tmp_path / f"{mode}{jobs}"
            )
            runs[(mode, jobs)] = journal(tmp_path / f"{mode}{jobs}")
            assert s.total >= 20
            print(
                f"{rec.parent.name} {mode} -j {jobs}: {s.total} states in {s.seconds:.1f} s, "
                f"{s.by_model}, flaky {len(s.flaky)}"
            )
    reference = runs[("host", 1)]
    for key, got in runs.items():
        diff = {
            k: (reference.get(k), got.get(k))
            for k in set(reference) | set(got)
            if reference.get(k) != got.get(k)
        }
        assert not diff, f"{key} differs from host -j 1: {dict(list(diff.items())[:5])}"
    assert set(reference.values()) == {"pass"}, reference

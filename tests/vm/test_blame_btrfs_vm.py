"""Blame on btrfs, end to end (issue #52 item 5): append-fsync without fsync recorded on btrfs in a
VM, checked and minimized in a checker VM.  The minimized state misses only writes after its cut
(the writeback at unmount, after every ack): its blame says so in one line, naming the data of
/append.log (the chunk tree's mapping, the fs tree's file extents, on the image up to the commit
after them) and the flush the crash came before -- with no ack after that flush, none is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.config import FsSpec, WorkloadSpec
from powercut.record.vm import RecordSpec, record

pytestmark = pytest.mark.vm


def test_btrfs_blame_names_the_file_and_the_page_cache(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    record(
        RecordSpec(
            fs=FsSpec(fstype="btrfs"),
            workload=WorkloadSpec(name="append-fsync", params={"n": 6, "fsync": False}),
        ),
        rec,
    )
    spec = CampaignSpec.of(models=("flush",), check_in="vm", jobs=1, shrink=1, shrink_budget=20)
    summary, _ = run_campaign(rec, spec, tmp_path / "check")
    assert summary.failures and summary.groups
    g = summary.groups[0]
    late = [c for c in g["culprits"] if "never reached the disk before the cut" in c]
    assert len(late) == 1 and "data block of /append.log" in late[0], g["culprits"]
    assert "the crash came before the flush at #" in late[0] and "(before ack:" not in late[0], late
    assert not any(c.startswith("not yet durable at the cut") for c in g["culprits"]), g["culprits"]

"""A cluster check's settings (campaign/cluster.ClusterCheck): what a cluster check cannot do yet is
refused in one line before anything runs; the lying-disk models are taken (one lying node per state:
core/selection.py), --lie-file is not (a cluster recording has no file map of its nodes)."""
from __future__ import annotations

import pytest

from powercut.campaign.cluster import ClusterCheck
from powercut.core.selection import SelectionSpec
from powercut.errors import UsageError


@pytest.mark.parametrize("models", [("corrupt-sector",), ("flush", "lost-write")])
def test_lying_disk_models_are_taken_for_a_cluster(models: tuple[str, ...]) -> None:
    assert ClusterCheck(selection=SelectionSpec(models=models)).selection.models == models


def test_a_lie_file_is_refused_for_a_cluster() -> None:
    with pytest.raises(UsageError, match="--lie-file db: a cluster recording has no file map"):
        ClusterCheck(selection=SelectionSpec(models=("lost-write",), lie_file="db"))


def test_the_power_loss_models_are_taken() -> None:
    assert ClusterCheck(selection=SelectionSpec(models=("flush", "write-cache", "torn-4k"))).check_in == "vm"

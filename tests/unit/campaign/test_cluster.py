"""A cluster check's settings (campaign/cluster.ClusterCheck): what a cluster check cannot do yet is
refused in one line before anything runs."""
from __future__ import annotations

import pytest

from powercut.campaign.cluster import ClusterCheck
from powercut.core.selection import SelectionSpec
from powercut.errors import UsageError


@pytest.mark.parametrize("models", [("corrupt-sector",), ("flush", "lost-write")])
def test_lying_disk_models_are_refused_for_a_cluster(models: tuple[str, ...]) -> None:
    with pytest.raises(UsageError, match="lying-disk models judge one disk"):
        ClusterCheck(selection=SelectionSpec(models=models))


def test_the_power_loss_models_are_taken() -> None:
    assert ClusterCheck(selection=SelectionSpec(models=("flush", "write-cache", "torn-4k"))).check_in == "vm"

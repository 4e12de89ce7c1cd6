"""config.py: value types validate on construction and round-trip through TOML."""

from __future__ import annotations

import pytest

from powercut.config import (
    DiskSpec,
    FsSpec,
    ShareSpec,
    VmSpec,
    WorkloadSpec,
    dumps_toml,
    from_dict,
    loads_toml,
    to_dict,
)
from powercut.errors import UsageError


def test_vmspec_round_trips_through_toml() -> None:
    spec = VmSpec(
        kernel="/k",
        initrd="/i",
        memory_mb=512,
        disks=(DiskSpec("/d.img", "pcdata", bus="ahci"),),
        shares=(ShareSpec("job", "/j", readonly=False),),
        cmdline=("a=b",),
        modules=("xfs",),
    )
    back = from_dict(VmSpec, loads_toml(dumps_toml({"vm": spec}))["vm"])
    assert back == spec and isinstance(back.disks[0], DiskSpec) and back.resolved_machine() == "q35"
    assert "ahci" in back.module_groups() and "pci" in back.module_groups()


def test_microvm_unless_ahci() -> None:
    spec = VmSpec(kernel="/k", initrd="/i", disks=(DiskSpec("/d", "s"),), modules=("ext4",))
    assert spec.resolved_machine() == "microvm" and "pci" not in spec.module_groups()
    assert VmSpec(kernel="/k", initrd="/i").module_groups() == ()  # no groups: load everything


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(memory_mb=64), "at least 128"),
        (dict(cpus=0), "cpus"),
        (dict(transport="nfs"), "transport"),
        (dict(accel="hvf"), "accel"),
        (dict(timeout_s=0), "timeout"),
    ],
)
def test_vmspec_rejects(kwargs: dict, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        VmSpec(kernel="/k", initrd="/i", **kwargs)


def test_diskspec_rejects() -> None:
    with pytest.raises(UsageError, match="bus"):
        DiskSpec("/d", "s", bus="scsi")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="cache"):
        DiskSpec("/d", "s", cache="fast")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="serial"):
        DiskSpec("/d", "bad serial!")


def test_workload_and_fs_specs() -> None:
    with pytest.raises(UsageError, match="exactly one"):
        WorkloadSpec()
    with pytest.raises(UsageError, match="exactly one"):
        WorkloadSpec(name="a", cmd="b")
    assert WorkloadSpec(cmd="true").label == "cmd"
    fs = FsSpec("btrfs", ("-n", "16k"), "compress=zstd")
    assert from_dict(FsSpec, to_dict(fs)) == fs
    with pytest.raises(UsageError, match="unknown keys bogus"):
        from_dict(FsSpec, {"fstype": "ext4", "bogus": 1})


def test_bad_toml_is_one_line() -> None:
    with pytest.raises(UsageError, match="x.toml: not valid TOML"):
        loads_toml("[a", "x.toml")

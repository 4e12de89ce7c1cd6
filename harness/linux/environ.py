"""Every ``POWERCUT_*`` environment variable, named and read in this one module (host and guest).

Two kinds: *knobs* a user may set on the host (cache directory, probe and boot timeouts, how
checker VMs start, the remote hosts' work directory), and the *recording's* variables, which the
recording job sets for the workload in the guest and the marking code (Python and the C
``powercut-mark``, vm-images/powercut_mark.c) reads.  ``VARIABLES`` is the table docs/settings.md
lists (tests/unit/linux/test_environ.py keeps the two, and every ``POWERCUT_`` name in the source,
in step).  A knob with a bad value is one UsageError line naming the variable."""

from __future__ import annotations

import os
from dataclasses import dataclass

from powercut.errors import UsageError

__all__ = ["VARIABLES", "Variable", "number", "text"]

CACHE = "POWERCUT_CACHE"
KVM_PROBE_TIMEOUT = "POWERCUT_KVM_PROBE_TIMEOUT"
BOOT_TIMEOUT = "POWERCUT_BOOT_TIMEOUT"
VM_START = "POWERCUT_VM_START"
REMOTE_ROOT = "POWERCUT_REMOTE_ROOT"
DM_NAME = "POWERCUT_DM_NAME"
ORDER_DEV = "POWERCUT_ORDER_DEV"
DEVICE = "POWERCUT_DEVICE"
MOUNT = "POWERCUT_MOUNT"
FSTYPE = "POWERCUT_FSTYPE"
PARAMS = "POWERCUT_PARAMS"
TIMING = "POWERCUT_TIMING"
FAULT_DEV = "POWERCUT_FAULT_DEV"
FAULT_PLAN = "POWERCUT_FAULT_PLAN"
FAULT_STATE = "POWERCUT_FAULT_STATE"
FAULT_MARKS = "POWERCUT_FAULT_MARKS"
FAULT_NODES = "POWERCUT_FAULT_NODES"
NODES = "POWERCUT_NODES"
MOUNTS = "POWERCUT_MOUNTS"
RUN_DIR = "POWERCUT_RUN_DIR"


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    kind: str  # "knob" (a user sets it on the host) or "recording" (the job sets it in the guest)
    default: str  # what applies when it is unset ("" : none)
    meaning: str


VARIABLES = (
    Variable(
        CACHE,
        "knob",
        "$XDG_CACHE_HOME/powercut or ~/.cache/powercut",
        "where guest images, checker-VM templates and the KVM verdict are cached",
    ),
    Variable(
        KVM_PROBE_TIMEOUT, "knob", "15", "seconds the KVM probe VM may take before TCG is used"
    ),
    Variable(
        BOOT_TIMEOUT,
        "knob",
        "60 (KVM), 300 (TCG)",
        "libvirt backend: seconds to the guest's first powercut line",
    ),
    Variable(
        VM_START,
        "knob",
        "snapshot",
        "checker VMs: 'snapshot' restores them from a saved template VM, 'boot' boots each one",
    ),
    Variable(
        REMOTE_ROOT,
        "knob",
        "/var/tmp/powercut-remote",
        "--check-uri hosts: the work directory there",
    ),
    Variable(
        RUN_DIR,
        "knob",
        "/run/powercut",
        "host-wide state of live runs: output-directory locks, the write-through loop devices they hold",
    ),
    Variable(DM_NAME, "recording", "", "the dm-log-writes target the workload's marks go to"),
    Variable(
        ORDER_DEV,
        "recording",
        "",
        "the order device: marks are ordered after every completed write",
    ),
    Variable(DEVICE, "recording", "", "the block device the filesystem under test is on"),
    Variable(
        MOUNT, "recording", "", "where the filesystem under test is mounted (the workload's cwd)"
    ),
    Variable(FSTYPE, "recording", "", "the filesystem under test (ext4, xfs, btrfs)"),
    Variable(PARAMS, "recording", "{}", "the workload's parameters, as a JSON object"),
    Variable(
        TIMING, "recording", "", "bench timing mode: marks are timestamps appended to this file"
    ),
    Variable(
        FAULT_DEV,
        "recording",
        "",
        "the fault layer (dm name:lower device:sectors) powercut.fault switches",
    ),
    Variable(FAULT_PLAN, "recording", "", "the recording's --fault plan"),
    Variable(FAULT_STATE, "recording", "", "the fault plan's state file (JSON, under an flock)"),
    Variable(
        FAULT_MARKS, "recording", "", "the mark globs that may move the fault plan, one per line"
    ),
    Variable(
        FAULT_NODES,
        "recording",
        "",
        "a cluster recording: each node's fault layer (as POWERCUT_FAULT_DEV), "
        "comma separated in node order; its plan per node in POWERCUT_FAULT_PLAN",
    ),
    Variable(
        NODES,
        "recording",
        "",
        "a cluster recording's nodes (dm name=order device, comma separated): "
        "every mark goes to every node's log, under one lock",
    ),
    Variable(
        MOUNTS,
        "recording",
        "",
        "a cluster recording: each node's mounted filesystem, colon separated",
    ),
)
_NAMES = frozenset(v.name for v in VARIABLES)


def text(name: str, default: str = "") -> str:
    """The variable's value, or ``default`` when it is unset or empty."""
    assert name in _NAMES, name
    return os.environ.get(name) or default


def number(name: str, default: float) -> float:
    """A knob that is a number of seconds (> 0); a bad value is one UsageError line."""
    raw = text(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"{name} must be a number of seconds, not {raw!r} (more than 0)")
    return value

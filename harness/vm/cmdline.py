"""The guest kernel's command line (host): the base parameters every powercut VM gets, the TSC
frequency to pin, and the host paths under /tmp or /run the guest must keep visible."""

from __future__ import annotations

import logging
import os

import powercut
from powercut.config import VmSpec

log = logging.getLogger(__name__)


BASE_CMDLINE = (
    "console=ttyS0",
    "panic=-1",
    "oops=panic",
    "loglevel=4",
    "rdinit=/init",
    "reboot=t",
    "i8042.noaux",
    "i8042.nomux",
    "i8042.nopnp",
    "i8042.dumbkbd",
    "tsc=reliable",
    "no_timer_check",
    "cryptomgr.notests",
    "rcupdate.rcu_expedited=1",
    "mitigations=off",
    "random.trust_cpu=on",
)


def host_tsc_khz() -> int | None:
    """The host's TSC frequency.  Under TCG the guest's TSC ticks at the host's rate, and a guest on
    microvm (no HPET, no ACPI PM timer) that fails to calibrate it against the PIT under load marks
    the TSC unstable and hangs; telling it the frequency (tsc_early_khz) removes that race."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return int(float(line.split(":")[1]) * 1000)
    except (OSError, ValueError):
        pass
    return None


def kernel_cmdline(spec: VmSpec) -> str:
    khz = host_tsc_khz()
    tsc = (f"tsc_early_khz={khz}",) if khz else ()
    groups = spec.module_groups()
    load = (f"powercut.load={','.join(groups)}",) if groups else ()
    keep = host_paths_to_keep()
    keep_arg = (f"powercut.keep={','.join(keep)}",) if keep else ()
    return " ".join(
        BASE_CMDLINE
        + tsc
        + (f"powercut.transport={spec.transport}",)
        + load
        + keep_arg
        + spec.cmdline
    )


_extra_keep: set[str] = set()  # more host paths this process's guests must see (keep_visible)


def keep_visible(paths: tuple[str, ...] | list[str]) -> None:
    """Host paths the guests of this process must see although they lie under /tmp (a user's test
    project and its sys.path, for the pytest plugin's workload and checker functions)."""
    _extra_keep.update(os.path.realpath(p) for p in paths if p)


def host_paths_to_keep() -> tuple[str, ...]:
    """The guest runs this very powercut and Python from the shared host root, but mounts its own
    tmpfs on /tmp: a checkout or virtualenv under /tmp (CI clones often live there) must be bound
    back in, or the guest cannot import powercut; so must the paths given to keep_visible.  A path
    inside another kept one is not repeated (the kernel command line is short)."""
    import sys

    here = os.path.dirname(os.path.dirname(os.path.realpath(powercut.__file__)))
    wanted = [here, os.path.realpath(sys.prefix), *sorted(_extra_keep)]
    out: list[str] = []
    for p in sorted(dict.fromkeys(wanted), key=len):
        if (
            p.startswith("/tmp/")
            and " " not in p
            and "," not in p
            and os.path.isdir(p)
            and not any(p == k or p.startswith(k + "/") for k in out)
        ):
            out.append(p)
    return tuple(sorted(out))

"""The checker VM's template agent (guest side): the agent started ahead of any job, to be saved
as a VM snapshot and restored for each checker VM (host side: vmstart/template.py).

It runs from a root of its own (the initramfs' /pcroot: the Python interpreter, its libraries and
exactly the modules the agent imports, copied there by the host, images/runtime.py), because QEMU
refuses to save a VM that has a 9p share mounted.  So until it is restored it mounts no share:

1. imports what a checker job imports (guestjob.TEMPLATE_PRELOAD), so none of that is read over 9p later;
2. forgets every block device's cached blocks (BLKFLSBUF, then drop_caches): the restored VM gets
   other disk files of the same size, and a block cached here would be read there as if it were
   on them -- a stale scratch block would be a false verdict;
3. says ``powercut-template-ready`` on the console (the host then saves the VM) and polls the
   control disk (serial ``pcctl``) with O_DIRECT reads until it holds a go block;
4. restored, with a go block from the host: sets the clock to the host's (as of the go block's
   writing, just before QEMU started: the guest's clock is behind by the restore's duration, never
   ahead), mixes the host's random bytes into the pool (every restored VM starts from the same
   pool), mounts what the image's mount table lists as init.sh would have (vm-images/mounts.txt,
   read before step 3 from where init.sh copied it), chroots into the host root, says
   ``powercut-restored``, takes the environment and ``sys.path`` the job's boot would have given
   it (``start.json`` in the job share), and runs the agent's serve loop (guest/__main__)."""

from __future__ import annotations

import fcntl
import importlib
import json
import mmap
import os
import sys
import time

from powercut.linux.blockdev import find_disk
from powercut.linux.mounts import GuestMount, MountError, guest_mounts, mount
from powercut.vm.guestjob import (
    CONTROL_SERIAL,
    GO_BLOCK,
    TEMPLATE_PRELOAD,
    TEMPLATE_READY,
    TEMPLATE_RESTORED,
    parse_go,
)

BLKFLSBUF = 0x1261
HOST = "/.powercut/host"  # where the host root is mounted (inside this root), then chrooted into
TABLE = (
    "/.powercut/mounts"  # the image's mount table (vm-images/mounts.txt), copied here by init.sh
)


def say(line: str) -> None:
    print(line, flush=True)


def block_devices() -> list[str]:
    return sorted(d for d in os.listdir("/sys/block") if not d.startswith(("loop", "ram", "dm-")))


def forget_blocks() -> None:
    """Every disk's page cache dropped (the restored VM's disks are other files)."""
    os.sync()
    for dev in block_devices():
        fd = os.open(f"/dev/{dev}", os.O_RDONLY)
        try:
            fcntl.ioctl(fd, BLKFLSBUF)
        finally:
            os.close(fd)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def wait_go(device: str, poll_s: float = 0.003) -> dict:
    """The go block, read past every cache (O_DIRECT into a page-aligned buffer)."""
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, GO_BLOCK)
    try:
        while True:
            os.preadv(fd, [buf], 0)
            go = parse_go(bytes(buf))
            if go is not None:
                return go
            time.sleep(poll_s)
    finally:
        os.close(fd)
        buf.close()


def cmdline() -> dict[str, str]:
    with open("/proc/cmdline") as f:
        words = f.read().split()
    return dict(w.split("=", 1) for w in words if w.startswith("powercut.") and "=" in w)


def mount_plan() -> list[GuestMount]:
    """The mounts to make once restored: the image's mount table, which init.sh copied into this
    root, for this kernel command line (a restored VM keeps it).  Read before the template is saved,
    so an image without a table fails the template (checker VMs then boot)."""
    with open(TABLE) as f:
        return guest_mounts(f.read(), HOST, cmdline())


def mount_host(plan: list[GuestMount]) -> None:
    """What init.sh's mount_table does before it chroots into the host root, with the host root at HOST."""
    for m in plan:
        if m.optional:
            if os.path.isdir(m.target):
                try:
                    mount(m.source, m.target, m.fstype, m.options)
                except MountError:
                    pass
            continue
        if not m.fstype:
            os.makedirs(m.target, exist_ok=True)
            continue
        try:
            os.makedirs(m.target, exist_ok=True)
        except OSError:
            pass  # on a read-only parent: the mount says what is wrong
        mount(m.source, m.target, m.fstype, m.options)


def restored(go: dict, plan: list[GuestMount]) -> int:
    """The restored VM, from its go block to the agent's serve loop."""
    time.clock_settime(time.CLOCK_REALTIME, go["time"])
    with open("/dev/urandom", "wb") as f:
        f.write(bytes.fromhex(go["seed"]))
    mount_host(plan)
    os.chroot(HOST)
    os.chdir("/")
    say(
        TEMPLATE_RESTORED
    )  # from here on, what fails is the job's (before: the host boots a VM instead)
    job = "/run/powercut/job"
    with open(f"{job}/start.json") as f:
        start = json.load(f)
    os.environ.clear()
    os.environ.update(start["env"])
    if start["full_site"]:
        import site

        site.main()
    else:
        sys.path.extend(p for p in start["site_paths"] if p not in sys.path)
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    # imported here, not at the top: the agent's modules resolve only on the sys.path set just above
    # (the restored VM's, from start.json), not on the template's
    from powercut.guest.__main__ import main as agent

    return agent([f"{job}/job.json"])


def main() -> int:
    for name in TEMPLATE_PRELOAD:
        importlib.import_module(name)
    plan = mount_plan()
    control = find_disk(CONTROL_SERIAL)
    forget_blocks()
    say(TEMPLATE_READY)
    return restored(wait_go(control), plan)


if __name__ == "__main__":
    sys.exit(main())

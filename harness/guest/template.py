"""The checker VM's template agent (guest side): the agent started ahead of any job, to be saved
as a VM snapshot and restored for each checker VM (host side: check/template.py).

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
   pool), mounts the shares as init.sh would have, chroots into the host root, says
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
from powercut.linux.mounts import mount
from powercut.vm.guestjob import CONTROL_SERIAL, GO_BLOCK, TEMPLATE_PRELOAD, TEMPLATE_READY, TEMPLATE_RESTORED, parse_go

BLKFLSBUF = 0x1261
HOST = "/.powercut/host"           # where the host root is mounted (inside this root), then chrooted into
NINEP = "trans=virtio,version=9p2000.L,msize=262144"


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


def ninep(tag: str, target: str, *, ro: bool, cache: str = "") -> None:
    os.makedirs(target, exist_ok=True)
    mount(tag, target, "9p", NINEP + (",cache=" + cache if cache else ""), readonly=ro)


def mount_host(args: dict[str, str]) -> None:
    """What init.sh does before it chroots into the host root, with the host root at HOST."""
    root = HOST
    ninep("hostroot", root, ro=True, cache="loose")
    mount("proc", f"{root}/proc", "proc")
    mount("sysfs", f"{root}/sys", "sysfs")
    mount("devtmpfs", f"{root}/dev", "devtmpfs")
    mount("tmpfs", f"{root}/run", "tmpfs", "mode=755")
    keep = [p for p in args.get("powercut.keep", "").split(",") if p.startswith("/tmp/")]
    if keep:
        os.makedirs(f"{root}/run/powercut/hosttmp")
        mount(f"{root}/tmp", f"{root}/run/powercut/hosttmp", "none", "bind")
    mount("tmpfs", f"{root}/tmp", "tmpfs", "mode=1777")
    for path in keep:
        os.makedirs(root + path, exist_ok=True)
        mount(f"{root}/run/powercut/hosttmp{path[4:]}", root + path, "none", "bind")
    os.makedirs(f"{root}/run/powercut/mnt")
    ninep("job", f"{root}/run/powercut/job", ro=False)
    for tag in filter(None, args.get("powercut.mount", "").split(",")):
        ninep(tag, f"{root}/run/powercut/{tag}", ro=True)
    if os.path.isdir(f"{root}/sys/kernel/config"):
        try:
            mount("configfs", f"{root}/sys/kernel/config", "configfs")
        except OSError:
            pass


def restored(go: dict) -> int:
    """The restored VM, from its go block to the agent's serve loop."""
    time.clock_settime(time.CLOCK_REALTIME, go["time"])
    with open("/dev/urandom", "wb") as f:
        f.write(bytes.fromhex(go["seed"]))
    mount_host(cmdline())
    os.chroot(HOST)
    os.chdir("/")
    say(TEMPLATE_RESTORED)   # from here on, what fails is the job's (before: the host boots a VM instead)
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
    from powercut.guest.__main__ import main as agent
    return agent([f"{job}/job.json"])


def main() -> int:
    for name in TEMPLATE_PRELOAD:
        importlib.import_module(name)
    control = find_disk(CONTROL_SERIAL)
    forget_blocks()
    say(TEMPLATE_READY)
    return restored(wait_go(control))


if __name__ == "__main__":
    sys.exit(main())

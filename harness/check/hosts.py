"""Where a checker VM boots (host side): QEMU on this machine (the default), a libvirt daemon on this
machine, or a remote libvirt host (``--check-uri qemu+ssh://...``, repeated to spread the states of
a run over several hosts).

A remote host shares no filesystem with this one.  Before its first VM, :meth:`CheckHost.stage`
checks that the host runs the same powercut code under the same Python (the guest agent runs the
remote host's, through its root share) and that a checker function's files are there, then ships
the guest image and the recording by content hash (found there when an earlier run shipped them).
Each boot gets a run directory there (job files, scratch disk, console), its console and progress
mirrored here while it runs, removed when it ends; every domain is transient and AUTODESTROY."""

from __future__ import annotations

import os
import secrets
import shlex
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from powercut.check.context import LogSource
from powercut.config import VmSpec
from powercut.errors import EnvironmentNotReady, UsageError
from powercut.linux import process
from powercut.vm.guestjob import SCRATCH_MKFS
from powercut.vm.libvirt import is_local_uri, run_vm_libvirt
from powercut.vm.qemu import run_vm
from powercut.vm.remote import Mirror, Shipper, SshTarget, code_digest, remote_root, sha256_file
from powercut.vmstart import template

Watchdog = Callable[[], "str | None"]
MIRRORED = (
    "console.log",
    "job/progress.jsonl",
    "accel-probe-console.log",
)  # appended while the VM runs
FETCHED = ("job/result.json", "job/agent.log")  # read whole at the end


@dataclass(frozen=True, slots=True)
class Staged:
    """The paths a checker VM's spec uses, on the host that boots it."""

    kernel: str
    initrd: str
    tools_dir: str
    rec_dir: str  # the directory shared as the recording ("rec")


def validate_uri(uri: str) -> None:
    """A usable --check-uri, or one line saying why not."""
    if "://" not in uri or not uri.split("://", 1)[0].startswith("qemu"):
        raise UsageError(
            f"--check-uri {uri!r}: a libvirt QEMU URI, e.g. qemu:///system or qemu+ssh://host/system"
        )
    if not is_local_uri(uri):
        SshTarget.from_uri(uri)


class CheckHost:
    """One place checker VMs boot, shared by the VMs of a run that go there (staging happens once)."""

    def __init__(self, uri: str = "", root: str = "") -> None:
        if uri:
            validate_uri(uri)
        self.uri, self.root = uri, root or remote_root()
        self.remote = bool(uri) and not is_local_uri(uri)
        self._staged: Staged | None = None
        self._lock = threading.Lock()
        self.shipper = Shipper(SshTarget.from_uri(uri), self.root) if self.remote else None

    def __str__(self) -> str:
        return self.uri or "QEMU on this machine"

    def stage(
        self,
        src: LogSource,
        kernel: str,
        initrd: str,
        tools_dir: str,
        checker_paths: tuple[str, ...],
    ) -> Staged:
        with self._lock:
            if self._staged is None:
                if self.shipper is None:
                    self._staged = Staged(kernel, initrd, tools_dir, str(src.path.parent))
                else:
                    self._staged = self._ship(src, kernel, initrd, tools_dir, checker_paths)
            return self._staged

    def _ship(
        self,
        src: LogSource,
        kernel: str,
        initrd: str,
        tools_dir: str,
        checker_paths: tuple[str, ...],
    ) -> Staged:
        assert self.shipper is not None
        target = self.shipper.target
        if src.initial is not None:
            raise UsageError(
                f"--check-uri {self.uri}: this log starts from an image; judge it on this machine"
            )
        py = shlex.quote(sys.executable)
        theirs = target.text(
            f"test -x {py} || {{ echo 'no-python'; exit 0; }}; "
            f"{py} -c 'from powercut.vm.remote import code_digest; print(code_digest())' "
            "2>/dev/null || echo no-powercut"
        ).strip()
        if theirs != code_digest():
            what = {
                "no-python": f"has no {sys.executable}",
                "no-powercut": f"has no powercut under {sys.executable}",
            }
            raise EnvironmentNotReady(
                f"{target.host} {what.get(theirs, f'runs other powercut code ({theirs})')}: "
                f"install the same powercut there at the same path (this one: {code_digest()}) "
                "-- its checker VMs run that host's Python"
            )
        missing = [
            p
            for p in checker_paths
            if target.run(f"test -e {shlex.quote(p)}", check=False).returncode != 0
        ]
        if missing:
            raise UsageError(
                f"{target.host} has no {missing[0]}: a checker function's files must be at the same "
                "path on every --check-uri host"
            )
        image_dir = Path(kernel).parent
        if Path(initrd).parent != image_dir or (tools_dir and Path(tools_dir).parent != image_dir):
            raise UsageError(
                f"--check-uri {self.uri}: the kernel, initramfs and tools must come from one image "
                "directory to be shipped"
            )
        remote_img = self.shipper.ship_tree(image_dir, image_dir.name)
        remote_rec = self.shipper.ship_files(
            src.logs, [sha256_file(p) for p in src.logs]
        )  # every disk's log
        return Staged(
            f"{remote_img}/{Path(kernel).name}",
            f"{remote_img}/{Path(initrd).name}",
            f"{remote_img}/{Path(tools_dir).name}" if tools_dir else "",
            remote_rec,
        )

    def boot(
        self, make_vm: Callable[[str], VmSpec], run: Path, scratch_bytes: int, watchdog: Watchdog
    ) -> None:
        """One VM: ``make_vm(dir)`` builds its spec with its job directory, scratch disk and console
        under ``dir`` (``run`` here; a fresh run directory on a remote host, whose files are mirrored
        back into ``run``).  The job files must already be in ``run``/job."""
        if not self.remote:
            vm = make_vm(str(run))
            tmpl_ok = not self.uri and template.eligible(vm)
            if tmpl_ok:  # a template's disks have sizes of a few kinds (vmstart/template.py)
                scratch_bytes = template.scratch_bytes(scratch_bytes)
            with open(run / "scratch.img", "wb") as f:
                f.truncate(scratch_bytes)
            process.run(
                [*SCRATCH_MKFS, str(run / "scratch.img")], timeout=300
            )  # the job says scratch_ready
            if self.uri:
                run_vm_libvirt(vm, uri=self.uri, rundir=run, watchdog=watchdog)
                return
            start = lambda spec: run_vm(spec, rundir=run, watchdog=watchdog)  # noqa: E731
            if tmpl_ok:
                template.run_restored(vm, run, start)
            else:
                start(vm)
            return
        assert self.shipper is not None
        files = {
            f"job/{p.name}": p.read_bytes() for p in sorted((run / "job").iterdir()) if p.is_file()
        }
        remote = self.shipper.new_run(
            f"{os.getpid()}-{run.parent.name}-{run.name}-{secrets.token_hex(3)}",
            {**files, "console.log": b""},
            {"scratch.img": scratch_bytes},
        )
        try:
            mirror = Mirror(self.shipper.target, remote, run, MIRRORED, FETCHED)
            run_vm_libvirt(
                make_vm(remote), uri=self.uri, rundir=run, watchdog=watchdog, mirror=mirror
            )
        finally:
            self.shipper.remove(remote)

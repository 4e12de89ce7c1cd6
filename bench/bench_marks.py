#!/usr/bin/env python3
"""Cost per mark inside the guest, on a real log-writes target: powercut.mark() (DM_TARGET_MSG ioctl,
no fork) and the powercut-mark command (C, and the Python entry point), each unordered (one mark:
the behaviour before ordered marks) and ordered (order marks, a flush, a suspend/resume, the mark).

Prints both per-mark costs and their ratio, plus where it ran (KVM or TCG): absolute figures under
TCG are 10-50x slower than native, the ratio is what carries over."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from powercut.config import FsSpec
from powercut.images.build import build_image, tools_dir
from powercut.record.vm import RecordSpec, disk_files, run_job, vm_disks, vm_spec
from powercut.vm import guestjob


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--marks", type=int, default=500, help="ioctl marks to time (the command: a tenth)"
    )
    ap.add_argument("--accel", default="auto", choices=("auto", "kvm", "tcg"))
    args = ap.parse_args()
    spec = RecordSpec(fs=FsSpec(size_mb=64), accel=args.accel, timeout_s=600)
    image = build_image()
    with tempfile.TemporaryDirectory(prefix="powercut-bench-marks-") as tmp:
        out = Path(tmp)
        for name in disk_files(0, 1):
            with open(out / name, "wb") as f:
                f.truncate(64 << 20)
        job = out / "job"
        disks, roles = vm_disks(spec, out, 1)
        guestjob.write(
            job,
            guestjob.MarkBenchJob(
                dm_name="powercut-bench", n=args.marks, tools_dir=tools_dir(image), disks=roles
            ),
        )
        vm = run_job(vm_spec(spec, image, out, job, disks), "qemu", "", out, None)
        res = guestjob.read_result(job)
    if not res.ok:
        print(f"bench_marks: the guest job failed: {res.error}", file=sys.stderr)
        return 1
    result = res.data
    print(
        f"where: guest under {vm.accel.upper()} (QEMU), kernel log-writes target, {result['ioctl_marks']} marks"
    )
    base = result["ioctl_us"]
    print(f"powercut.mark() ioctl          : {base:10.1f} us/mark (unordered: the old behaviour)")
    o = result["ioctl_ordered_us"]
    print(
        f"powercut.mark() ioctl, ordered : {o:10.1f} us/mark  ({o / base:.1f}x: + flush, suspend, resume)"
    )
    for kind in ("c", "python"):
        us = result.get(f"cmd_{kind}_us")
        if us is None:
            print(f"powercut-mark ({kind:6})        : not built (no C compiler)")
            continue
        uo = result[f"cmd_{kind}_ordered_us"]
        print(
            f"powercut-mark ({kind:6})        : {us:10.1f} us/mark unordered, {uo:10.1f} ordered "
            f"({uo / us:.2f}x; {result['cmd_marks']} runs each)"
        )
    print(f"target write cache             : {result.get('target_write_cache')}")
    print(f"log entries written   : {result['logged_entries']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

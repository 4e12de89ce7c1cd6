"""``powercut setup`` and ``powercut doctor`` (host): make this machine ready for crash tests, and
say whether it is (campaign/doctor.py does the work; this prints)."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_setup(args: argparse.Namespace) -> int:
    from powercut.campaign import doctor

    doctor.setup(dev=args.dev, image=not args.no_image, dry_run=args.dry_run, say=print)
    if not args.dry_run:
        print(
            "ready: 'powercut doctor' says what is there"
            if args.no_image
            else "ready: run 'powercut doctor' to see every check"
        )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from powercut.campaign import doctor

    found = doctor.checks()
    ok = doctor.ready(found)
    if args.json:
        json.dump({"ready": ok, "checks": [c.to_json() for c in found]}, sys.stdout, indent=1)
        print()
    else:
        for c in found:
            print(c.line())
        lacking = [c.what for c in found if c.status == doctor.MISSING]
        warned = [c.what for c in found if c.status == doctor.WARN]
        print(
            (
                "ready: a crash test can run here"
                + (
                    f" ({len(warned)} warning{'s' * (len(warned) != 1)}: {', '.join(warned)})"
                    if warned
                    else ""
                )
            )
            if ok
            else f"not ready: missing {', '.join(lacking)} (powercut setup installs and builds what is missing)"
        )
    return 0 if ok else 1

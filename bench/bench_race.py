#!/usr/bin/env python3
"""How often a disk latency catches a race (issue #43): append-fsync with ``ack_on_issue=true`` (a
second thread acks as soon as the fsync is issued) recorded ``--rounds`` times under each setting
(none, nvme, sata-ssd, hdd), each recording judged (host mode, the flush model: one lost ack is
enough); prints per setting the catch rate (recordings whose campaign verdict is lost-ack), the
mean recording time, and -- with ``--probe`` -- the guest's own fsync and O_DIRECT write time under
the setting (the least of 5 each).  The recordings go through campaign/schedules.py, as
``powercut run --disk-latency ... --repeat N`` does.

    python bench/bench_race.py                     # 10 rounds x 4 settings (~10 min under TCG)
    python bench/bench_race.py --rounds 3 --settings none,hdd --probe

Needs what `powercut record` needs (root, QEMU, the guest image) and a host that can mount loop
devices (host-mode checks).  Absolute times on a TCG guest say little about real machines."""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from pathlib import Path

from powercut.campaign.run import CampaignSpec
from powercut.campaign.schedules import Outcome, plan, run_schedules
from powercut.config import FsSpec, WorkloadSpec
from powercut.core.recording.latency import parse_schedules
from powercut.record.vm import RecordSpec, record

SETTINGS = "none,nvme,sata-ssd,hdd"
PROBE = Path(__file__).resolve().parents[1] / "tests" / "vm" / "test_latency_vm.py"


def catch_rates(outcomes: list[Outcome]) -> dict[str, tuple[int, int, float]]:
    """setting -> (recordings caught as lost-ack, recordings, mean recording s), in the order run."""
    out: dict[str, tuple[int, int, float]] = {}
    for o in outcomes:
        caught, n, total = out.get(o.schedule.setting, (0, 0, 0.0))
        out[o.schedule.setting] = (caught + (o.verdict == "lost-ack"), n + 1, total + o.record_s)
    return {s: (c, n, t / n) for s, (c, n, t) in out.items()}


def probe_script() -> str:
    """The fsync/O_DIRECT probe of tests/vm/test_latency_vm.py (one copy of it)."""
    text = PROBE.read_text()
    return text.split('PROBE = r"""', 1)[1].split('"""', 1)[0]


def probe(setting: str, tmp: Path) -> dict[str, float]:
    rec = record(
        RecordSpec(
            fs=FsSpec(fstype="ext4", size_mb=256),
            latency=parse_schedules(setting)[0],
            workload=WorkloadSpec(cmd=f"python3 -c {shlex.quote(probe_script())}", trace=False),
        ),
        tmp / f"probe-{setting}",
        force=True,
    )
    return dict(json.loads((rec.dir / "job" / "workload.out").read_text().strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--settings", default=SETTINGS)
    ap.add_argument("--n", type=int, default=8, help="records per recording (default 8)")
    ap.add_argument(
        "--probe", action="store_true", help="also time fsync and an O_DIRECT write in the guest"
    )
    args = ap.parse_args()
    latencies = parse_schedules(args.settings)
    rspec = RecordSpec(
        fs=FsSpec(fstype="ext4", size_mb=256),
        workload=WorkloadSpec(name="append-fsync", params={"n": args.n, "ack_on_issue": True}),
    )
    cspec = CampaignSpec.of(models=("flush",), check_in="host", jobs=1, shrink=0, confirm=False)
    with tempfile.TemporaryDirectory(prefix="bench-race-") as tmp:
        probes = {str(lat): probe(str(lat), Path(tmp)) for lat in latencies} if args.probe else {}
        outcomes, _ = run_schedules(
            plan(latencies, args.rounds, 0),
            rspec,
            cspec,
            Path(tmp) / "runs",
            lambda o: print(
                f"  {o.schedule.setting} #{o.schedule.repeat + 1}: {o.verdict}"
                f" ({o.record_s:.1f} s){' ' + o.error if o.error else ''}",
                flush=True,
            ),
        )
    print(
        f"\n{'disk latency':<14} {'caught (lost-ack)':>18} {'catch rate':>11} {'mean recording s':>17}"
        + (f" {'fsync ms':>9} {'write ms':>9}" if probes else "")
    )
    for setting, (caught, n, mean) in catch_rates(outcomes).items():
        p = probes.get(setting, {})
        print(
            f"{setting:<14} {f'{caught} of {n}':>18} {caught / n:>10.0%} {mean:>17.1f}"
            + (f" {p.get('fsync_ms', 0):>9.2f} {p.get('write_ms', 0):>9.2f}" if probes else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

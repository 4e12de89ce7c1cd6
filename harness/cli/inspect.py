"""The commands that look inside a recording (host): ``log stats|show``, ``states``, ``replay`` and
``workloads``."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from powercut.errors import UsageError

log = logging.getLogger("powercut")


def _open(path: str):
    from powercut.core.log.dmlog import open_log
    from powercut.record.recording import load

    p = Path(path)
    if p.is_dir():
        return open_log(load(p).log_path)
    if not p.exists():
        raise UsageError(f"{path}: no such file or directory")
    return open_log(p)


def print_stats(path: str, as_json: bool = False) -> None:
    from powercut.core.log.dmlog import stats

    with _open(path) as index:
        s = stats(index)
    if as_json:
        print(json.dumps(s.to_dict()))
        return
    print(
        f"  log: {s.entries} entries: {s.writes} writes ({s.bytes_written / 1e6:.1f} MB), {s.flushes} flushes, "
        f"{s.fuas} FUAs, {s.discards} discards, {s.marks} marks ({s.acks} acks)"
    )
    if not index.clean or s.stale_super:
        print(
            f"  scan: {s.stop_reason}"
            + (f"; super says {s.super_nr_entries} entries" if s.stale_super else "")
        )


def cmd_log(args: argparse.Namespace) -> int:
    if args.log_command == "stats":
        print_stats(args.path, args.json)
        return 0
    if args.log_command == "show":
        with _open(args.path) as index:
            for e in index.entries:
                if args.marks_only and not (e.is_mark or e.is_flush or e.is_fua):
                    continue
                if args.json:
                    print(
                        json.dumps(
                            {
                                "index": e.index,
                                "flags": e.flags,
                                "sector": e.sector,
                                "nr_sectors": e.nr_sectors,
                                "mark": e.mark,
                                "data_offset": e.data_offset,
                            }
                        )
                    )
                else:
                    print(e.describe())
        return 0
    raise UsageError("powercut log: give an action: stats or show")


def cmd_states(args: argparse.Namespace) -> int:
    from powercut.cli.parser import selection_from
    from powercut.core.states.crashstate import state_to_json
    from powercut.core.states.models import CrashSpace, describe

    with _open(args.path) as index:  # streamed: a log of 10^6 entries has millions of states
        how = selection_from(args, "check").with_(models=(args.model,)).resolved()
        if how.seed != args.seed:
            print(f"seed {how.seed}", file=sys.stderr)
        states = CrashSpace(index).iter_states(
            args.model,
            seed=how.seed,
            exhaustive_bound=how.bound,
            samples=how.samples,
            torn_samples=how.torn_samples,
            setup_samples=how.setup_samples,
        )
        if args.json:
            for s in states:
                print(json.dumps(state_to_json(s)))
            return 0
        d = describe(states)
    print(json.dumps(d, indent=1) if args.verbose else _describe_text(args.model, d))
    return 0


def _describe_text(model: str, d: dict[str, Any]) -> str:
    lines = [
        f"{model}: {d.get('total')} crash states at {d.get('cuts')} cuts ({d.get('sampled', 0)} sampled)",
        f"  {'epoch':>5} {'cuts':>11} {'states':>7} {'sampled':>7} {'max dropped':>11}",
    ]
    for e in d.get("epochs", []):
        lines.append(
            f"  {e['epoch']:>5} {str(e['first_cut']) + '..' + str(e['last_cut']):>11} {e['states']:>7} "
            f"{e['sampled']:>7} {e['max_dropped']:>11}"
        )
    return "\n".join(lines)


def cmd_replay(args: argparse.Namespace) -> int:
    from powercut.record.recording import MANIFEST, load, verify_logs
    from powercut.replay.materialize import replay_state

    src = Path(args.path)
    if (src / MANIFEST).exists():
        rec = load(src)
        verify_logs(rec)
        files = [src / MANIFEST, *(f for n in rec.nodes for f in (n.log, n.final))]
        own = {p.resolve() for p in files if p.exists()}
        if Path(args.out).resolve() in own:
            raise UsageError(f"{args.out} is the recording's own file: give another --out")
    out = replay_state(args.path, args.state, args.out, size=args.size or None)
    print(f"state {args.state} -> {out}")
    return 0


def cmd_workloads(args: argparse.Namespace) -> int:
    from powercut.workload import get, names

    for name in names():
        w = get(name)
        print(
            f"{name:16} {w.description}\n{'':16} params: "
            + ", ".join(f"{k}={v}" for k, v in w.defaults.items())
        )
    return 0

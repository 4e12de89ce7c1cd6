"""How the verdict matrix splits over N CI runners (issue #19 item 4), from one measured run.

    python bench/matrix_runners.py runs/matrix                   # after ci/matrix.sh (or powercut matrix -o DIR)
    python bench/matrix_runners.py DIR --job-overhead 90 --json out.json
    python bench/matrix_runners.py DIR1 DIR2                        # one matrix run in two parts (by rows)

Reads, for every row directory of a matrix output (``DIR/<row>/``): the recording's VM wall time
(``manifest.toml``), the check's wall time and judged states (``check/summary.json``), the seconds
each state took in its checker VM (``check/journal.jsonl``) and the tear checks the matrix ran
(``matrix.json``, when the run finished; with their wall time in newer runs).  Nothing is re-run: the figures are those of the machine
that ran the matrix (say which, with --where; under TCG a state costs 10-50x what it costs with KVM).

**The model** is the nightly workflow's (.github/workflows/nightly.yml): a ``record`` job per row,
then a ``check`` job per (row, shard), then a ``merge`` job per row; each stage starts when the
whole previous one has ended (``needs:`` waits for every instance of a matrix job).  A stage's jobs
go to the first free of N runners in the workflow's order (list scheduling, as the queue does).
Each job pays ``--job-overhead`` seconds (runner start, checkout, packages, the cached guest image).

* record job of row r:  overhead + its recording's wall time;
* check job (r, shard): overhead + the row's fixed check cost + its states' VM time / (jobs x shards),
  ``jobs`` the checker VMs a runner runs (``--runner-jobs``, default 2: a runner like this machine);
  the fixed cost is what the measured check spent beyond its states (checker VMs' boots, selection,
  report, and the confirmation of failures, which each shard does for its own): ``check wall -
  state seconds / jobs``, at least one checker VM boot (``--boot``); the matrix's tear checks are
  one more pass (measured, or a boot plus their states at the row's cost per state), split over
  the shards;
* merge job: overhead + ``--merge`` seconds.

Printed: the rows by cost, the one-machine wall time (measured), and the table runners -> wall time
for each shard count, with the best.  Figures, never assertions.


A row whose check ran in several invocations (``--resume``) has in its summary the last invocation's
seconds only; it is told by its span (``campaign.json`` written at the start, ``summary.json`` at
the end) being far longer.  Such a row takes its figures from ``--earlier`` (an earlier --json output
of the run that judged it, when plausible), else an estimate (its states' seconds / -j + one boot),
and the script says how many of each.  A row found in several directories is the later one's."""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import tomllib
from dataclasses import asdict, dataclass, replace
from pathlib import Path

SHARD_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16)
RUNNERS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True, slots=True)
class RowCost:
    row: str
    record_s: float  # the recording's VM wall time
    check_s: float  # the check's wall time (all its states, -j jobs checker VMs)
    states: int  # distinct states judged
    state_s: float  # the states' seconds in their checker VMs, summed
    tear_states: int  # failing torn states judged again without their tear
    tear_s: float = 0.0  # their measured wall time (matrix.json of newer runs; 0: estimated)
    jobs: int = 2  # checker VMs the measured check ran (-j)

    def fixed_s(self, boot: float) -> float:
        """What the measured check spent beyond its states' share of its -j checker VMs."""
        return max(boot, self.check_s - self.state_s / self.jobs)

    resumed: bool = False  # its check ran in several invocations: check_s is only the last one's

    def plausible(self) -> bool:
        """Its check time covers at least its states' share of its checker VMs."""
        return self.check_s >= self.state_s / self.jobs

    @property
    def per_state(self) -> float:
        return self.state_s / self.states if self.states else 0.0


def read_rows(matrix_dir: Path, jobs: int = 2) -> list[RowCost]:
    """Every row directory of a matrix output that has a recording and a finished check (checked
    with ``jobs`` checker VMs)."""
    tear: dict[str, tuple[int, float]] = {}
    mj = matrix_dir / "matrix.json"
    if mj.is_file():
        for info in json.loads(mj.read_text()).get("rows", []) or []:
            if isinstance(info, dict) and info.get("recording"):
                t = info.get("tear_checks") or {}
                tear[Path(info["recording"]).name] = (
                    int(t.get("checked", 0)),
                    float(t.get("seconds") or 0.0),
                )

    out = []
    for d in sorted(p for p in matrix_dir.iterdir() if p.is_dir()):
        summary, manifest, journal = (
            d / "check" / "summary.json",
            d / "manifest.toml",
            d / "check" / "journal.jsonl",
        )
        if not (summary.is_file() and manifest.is_file() and journal.is_file()):
            continue
        try:
            s = json.loads(summary.read_text())
            rec = tomllib.loads(manifest.read_text()).get("recording", {})
            seconds = {}
            for line in journal.read_text().splitlines():
                if line.strip():
                    v = json.loads(line)
                    seconds[v["state"]] = float(
                        v.get("seconds") or 0.0
                    )  # the later line wins, as on resume
        except (OSError, ValueError, KeyError) as e:
            print(f"matrix_runners: skipping {d.name}: {e}", file=sys.stderr)
            continue
        if s.get("status") != "complete":
            print(
                f"matrix_runners: skipping {d.name}: its check is {s.get('status')}",
                file=sys.stderr,
            )
            continue
        # a resumed check's summary counts the last invocation only: its span (campaign.json written
        # at the start, summary.json at the end) is then much longer than its seconds
        campaign = d / "check" / "campaign.json"
        span = (
            summary.stat().st_mtime - campaign.stat().st_mtime
            if campaign.is_file()
            else float(s["seconds"])
        )
        out.append(
            RowCost(
                d.name,
                float(rec.get("vm_wall_s") or rec.get("wall_s") or 0.0),
                float(s["seconds"]),
                int(s.get("total") or len(seconds)),
                sum(seconds.values()),
                *tear.get(d.name, (0, 0.0)),
                jobs,
                resumed=span - float(s["seconds"]) > 60,
            )
        )
    return out


def makespan(durations: list[float], runners: int) -> float:
    """List scheduling in the given order: each job to the runner that is free first."""
    if not durations:
        return 0.0
    free = [0.0] * max(1, min(runners, len(durations)))
    for d in durations:
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def stage_jobs(
    rows: list[RowCost], shards: int, *, jobs: int, overhead: float, boot: float, merge: float
) -> tuple[list[float], list[float], list[float]]:
    """The durations of the record, check and merge jobs, in the workflow's order."""
    record = [overhead + r.record_s for r in rows]
    check = []
    for r in rows:  # the workflow's matrix: row-major, shards within a row
        tear_s = r.tear_s or ((boot + r.tear_states * r.per_state / jobs) if r.tear_states else 0.0)
        each = overhead + r.fixed_s(boot) + r.state_s / (jobs * shards) + tear_s / shards
        check += [each] * shards
    return record, check, [overhead + merge] * len(rows)


def wall(rows: list[RowCost], runners: int, shards: int, **kw: float) -> float:
    return sum(makespan(stage, runners) for stage in stage_jobs(rows, shards, **kw))  # type: ignore[arg-type]


def table(
    rows: list[RowCost],
    runners: tuple[int, ...] = RUNNERS,
    shard_counts: tuple[int, ...] = SHARD_COUNTS,
    **kw: float,
) -> list[dict[str, object]]:
    out = []
    for n in runners:
        by = {s: wall(rows, n, s, **kw) for s in shard_counts}
        best = min(by, key=lambda s: (by[s], s))
        out.append({"runners": n, "wall_s": by, "best_shards": best, "best_s": by[best]})
    return out


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "matrix",
        nargs="+",
        help="matrix output directories (powercut matrix -o DIR; several: one "
        "run split by rows), each DIR or DIR:J, J the -j it was checked with (default --jobs)",
    )
    ap.add_argument(
        "--jobs", type=int, default=2, help="checker VMs the measured runs used (-j; default 2)"
    )
    ap.add_argument(
        "--runner-jobs", type=int, default=2, help="checker VMs a CI runner runs (default 2)"
    )
    ap.add_argument(
        "--job-overhead",
        type=float,
        default=60.0,
        help="seconds each CI job spends before its work (default 60: an assumption, not measured here)",
    )
    ap.add_argument(
        "--boot",
        type=float,
        default=5.1,
        help="a checker VM's ready time, s (default 5.1: TCG here)",
    )
    ap.add_argument(
        "--merge", type=float, default=5.0, help="seconds a merge job works (default 5)"
    )
    ap.add_argument(
        "--wall", type=float, default=0.0, help="the measured run's wall time, s, to print beside"
    )
    ap.add_argument(
        "--where", default="this machine", help="where the figures were taken (printed)"
    )
    ap.add_argument("--json", type=Path, help="also write the rows and the table here")
    ap.add_argument(
        "--earlier",
        type=Path,
        help="an earlier --json output: rows whose check the measured run only "
        "resumed (their summary's seconds are the resume's) take their figures from it",
    )
    a = ap.parse_args(argv)
    dirs: list[tuple[Path, int]] = []
    for item in a.matrix:
        path, _, j = item.rpartition(":")
        d, jobs = (
            (Path(path), int(j))
            if path and j.isdigit() and not Path(item).is_dir()
            else (Path(item), a.jobs)
        )
        if not d.is_dir():
            print(f"matrix_runners: {d}: not a directory", file=sys.stderr)
            return 2
        dirs.append((d, jobs))
    if min(a.jobs, a.runner_jobs, *(j for _, j in dirs)) < 1:
        print("matrix_runners: --jobs, --runner-jobs and DIR:J must be at least 1", file=sys.stderr)
        return 2
    by_name: dict[str, RowCost] = {}
    for d, j in dirs:  # a row in several directories: the later directory's (a re-run of it)
        for r in read_rows(d, j):
            if r.row in by_name:
                print(f"({r.row}: taken from {d}, the later directory)")
            by_name[r.row] = r
    rows = list(by_name.values())
    if not rows:
        print(
            f"matrix_runners: {' '.join(a.matrix)}: no row with a recording and a complete check",
            file=sys.stderr,
        )
        return 2
    earlier: dict[str, RowCost] = {}
    if a.earlier:
        try:
            earlier = {r["row"]: RowCost(**r) for r in json.loads(a.earlier.read_text())["rows"]}
            earlier = {k: replace(r, resumed=not r.plausible()) for k, r in earlier.items()}
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(
                f"matrix_runners: --earlier {a.earlier}: not an earlier --json output ({e})",
                file=sys.stderr,
            )
            return 2
    taken, estimated = 0, 0
    for i, r in enumerate(rows):
        if not r.resumed:
            continue
        e = earlier.get(r.row)
        if e is not None and not e.resumed and e.plausible() and e.states == r.states:
            rows[i], taken = e, taken + 1
        else:  # its states' share of its VMs, plus one boot
            rows[i], estimated = replace(r, check_s=r.state_s / r.jobs + a.boot), estimated + 1
    if taken or estimated:
        print(
            f"({taken} resumed row(s) take their check time from {a.earlier}; {estimated} resumed row(s) have it "
            "estimated: their states' seconds / -j + one boot)"
        )
    kw = {"jobs": a.runner_jobs, "overhead": a.job_overhead, "boot": a.boot, "merge": a.merge}
    states, state_s = sum(r.states for r in rows), sum(r.state_s for r in rows)
    serial = sum(r.record_s + r.check_s for r in rows)
    print(
        f"{len(rows)} rows, {states:,} states judged, measured on {a.where} "
        f"(-j {'/'.join(sorted({str(r.jobs) for r in rows}))} checker VMs; a runner here runs {a.runner_jobs})"
    )
    print(
        f"  recording {sum(r.record_s for r in rows):,.0f} s, checks {sum(r.check_s for r in rows):,.0f} s "
        f"(states {state_s:,.0f} s in VMs, {state_s / max(states, 1):.3f} s per state), "
        f"record + check one row after the other: {_hms(serial)}"
        + (f"; the run's wall time: {_hms(a.wall)}" if a.wall else "")
    )
    print(
        "\n  costliest rows                                          record s  check s  states  s/state"
    )
    for r in sorted(rows, key=lambda r: -(r.record_s + r.check_s))[:8]:
        print(
            f"  {r.row[:54]:54} {r.record_s:8.1f} {r.check_s:8.1f} {r.states:7,} {r.per_state:8.3f}"
        )
    t = table(rows, **kw)
    print(
        f"\n  runners -> wall time (h:mm:ss), record + check + merge stages, {a.job_overhead:.0f} s per job overhead"
    )
    print(
        "  "
        + f"{'runners':>7} "
        + " ".join(f"{f'{s} shards':>10}" for s in SHARD_COUNTS)
        + "   best"
    )
    for line in t:
        by = line["wall_s"]
        print(
            "  "
            + f"{line['runners']:>7} "
            + " ".join(f"{_hms(by[s]):>10}" for s in SHARD_COUNTS)  # type: ignore[index]
            + f"   {_hms(line['best_s'])} ({line['best_shards']} shards)"
        )  # type: ignore[arg-type]
    if a.json:
        a.json.write_text(
            json.dumps(
                {
                    "rows": [asdict(r) for r in rows],
                    "model": kw,
                    "where": a.where,
                    "measured_wall_s": a.wall,
                    "table": t,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # the table piped into head: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)

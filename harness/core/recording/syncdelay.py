"""``--delay-sync GLOB=TIME`` (pure; host and guest): hold every fsync, fdatasync, sync_file_range,
msync and syncfs of the workload on a file whose path matches GLOB for TIME before it enters the
kernel (issue 50).

Why per file: a disk-wide latency (core/recording/latency.py) slows every flush alike, so a program whose
acking thread waits on another file's sync (its engine's periodic commit) still acks after its log
is durable; only slowing the one file's sync opens the window in which a reply can race it.  The
recording guest's supervisor (vm-images/powercut_holdsync.c) does the holding below libc: a seccomp
filter hands each of those five system calls to it (user notification), it reads the file the call
names and lets the call run at once or when the hold ends -- so a static Go binary, a program that
drops root and every thread and child are held alike (issue 60).  Its log says every sync call it
saw (``held_summary``).  Under strace (plain ptrace, guest/tracing.py) each held call shows in the
trace where the program made it, the hold inside its duration.

A glob is matched with fnmatch (``*`` crosses ``/``) against the file's absolute path in the guest
and its path relative to the recorded filesystem (``app.db``, ``n1/replog.log`` on a cluster).  The
first rule that matches a file wins."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from powercut.errors import UsageError

MAX_DELAY_S = 60.0
# run --explore-races (campaign/explore.py): written here, which the CLI imports anyway (config
# does), rather than in core/recording/races.py, whose trace parser would cost every command's start-up
EXPLORE_DELAY = (
    "auto"  # how long an exploration holds a file's syncs: auto -- long against one commit:
)
EXPLORE_FLOOR = (
    "200ms"  # at least this, and at least EXPLORE_COMMITS times the base recording's median
)
EXPLORE_COMMITS = 2  # commit (begin to ack), rounded up to 10 ms, at most EXPLORE_CEILING
EXPLORE_CEILING = "5s"
EXPLORE_BUDGET = 8  # recordings after the base one
MAX_RULES = 32  # the supervisor's table
MAX_GLOB_BYTES = 255
_TIME = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(us|ms|s)\s*")
_UNIT_NS = {"us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
SUPERVISOR = "powercut-holdsync"  # in the image's tools directory
LISTENING = "# powercut-holdsync listening"  # its log's first line: the filter is in place


@dataclass(frozen=True, slots=True)
class SyncDelay:
    glob: str
    ns: int  # the hold, in nanoseconds (exact through the canonical text)

    @staticmethod
    def parse(text: str) -> SyncDelay:
        """``GLOB=TIME`` (TIME with its unit: ``200ms``, ``0.5s``, ``800us``); UsageError, one line."""
        glob, sep, when = str(text).rpartition("=")
        where = f"--delay-sync {text}"
        if not sep or not glob.strip():
            raise UsageError(f"{where}: expected GLOB=TIME, e.g. '*.wal=200ms' or 'db/log.*=1s'")
        if any(c in glob for c in "\t\n\0") or len(glob.encode()) > MAX_GLOB_BYTES:
            raise UsageError(
                f"{where}: a glob is one line of at most {MAX_GLOB_BYTES} bytes, without tabs"
            )
        m = _TIME.fullmatch(when)
        if m is None:
            raise UsageError(
                f"{where}: TIME is a number with its unit (us, ms or s), e.g. 200ms, not {when!r}"
            )
        ns = round(float(m.group(1)) * _UNIT_NS[m.group(2)])
        if not 0 < ns <= MAX_DELAY_S * 1e9:
            raise UsageError(f"{where}: TIME must be more than 0 and at most {MAX_DELAY_S:g} s")
        return SyncDelay(glob.strip(), ns)

    @property
    def seconds(self) -> float:
        return self.ns / 1e9

    @property
    def when(self) -> str:
        """The hold as a rule writes it (``200ms``, ``1.5s``, ``800us``)."""
        if self.ns % 1_000_000_000 == 0 or self.ns >= 1_000_000_000:
            return f"{self.ns / 1e9:.9g}s"
        if self.ns % 1_000_000 == 0 or self.ns >= 1_000_000:
            return f"{self.ns / 1e6:.9g}ms"
        return f"{self.ns / 1e3:.9g}us"

    def __str__(self) -> str:
        return f"{self.glob}={self.when}"


def parse_all(texts: Iterable[str]) -> tuple[SyncDelay, ...]:
    """Every rule of a setting (each ``GLOB=TIME``); a glob given twice or too many rules: UsageError."""
    rules = tuple(SyncDelay.parse(t) for t in texts)
    seen: set[str] = set()
    for r in rules:
        if r.glob in seen:
            raise UsageError(f"--delay-sync: {r.glob} is given twice; give each glob one time")
        seen.add(r.glob)
    if len(rules) > MAX_RULES:
        raise UsageError(f"--delay-sync: at most {MAX_RULES} rules, not {len(rules)}")
    return rules


def canonical(texts: Iterable[str]) -> tuple[str, ...]:
    """The setting as the manifest and the guest job carry it (each rule's canonical text)."""
    return tuple(str(r) for r in parse_all(texts))


def supervisor_argv(supervisor: str, rules: Iterable[SyncDelay], mount: str, log: str) -> list[str]:
    """The supervisor's command line up to ``--``: its log, the recorded filesystem's mount (globs
    match a path relative to it too) and each rule as ``NANOSECONDS:GLOB``, in the rules' order."""
    argv = [supervisor, "-l", log, "-m", mount]
    for r in rules:
        argv += ["-r", f"{r.ns}:{r.glob}"]
    return [*argv, "--"]


@dataclass(frozen=True, slots=True)
class Hold:
    """One sync call the supervisor saw (a line of its log): ``ns`` held (0: not), by thread ``tid``,
    called at ``called`` (CLOCK_REALTIME seconds, strace -ttt's clock; -1 in a log of the first
    LD_PRELOAD shim, which did not say when), on ``path`` (absolute, as the program's descriptor or
    mapping names it).  Recordings made before issue 60 have the shim's log: the same lines."""

    call: str
    ns: int
    tid: int
    called: float
    path: str


def holds(log_text: str) -> list[Hold]:
    """The supervisor's log, line by line (``CALL NS TID CALLED PATH``, tab-separated; the first
    shim's ``CALL NS PATH`` too); lines that are neither (its ``#`` line) are skipped."""
    out: list[Hold] = []
    for line in log_text.splitlines():
        parts = line.split("\t", 4)
        if len(parts) == 5 and parts[1].isdigit() and parts[2].isdigit():
            try:
                called = float(parts[3])
            except ValueError:
                continue
            out.append(Hold(parts[0], int(parts[1]), int(parts[2]), called, parts[4]))
        else:
            parts = line.split("\t", 2)
            if len(parts) == 3 and parts[1].isdigit():
                out.append(Hold(parts[0], int(parts[1]), 0, -1.0, parts[2]))
    return out


def held_summary(log_text: str, mount: str = "", ignore: Collection[str] = ()) -> dict[str, Any]:
    """What the supervisor's log says: every sync call it saw and those it held, per file (relative to
    ``mount`` where under it), for the manifest's [result] and the console; ``ignore``: paths that
    are not the program's (the marks' order devices)."""
    files: dict[str, dict[str, int]] = {}
    calls = held = 0
    for h in holds(log_text):
        path = h.path
        if path in ignore:
            continue
        if mount and path == mount.rstrip("/"):
            path = "."
        elif mount and path.startswith(mount.rstrip("/") + "/"):
            path = path[len(mount.rstrip("/")) + 1 :]
        f = files.setdefault(path, {"calls": 0, "held": 0})
        f["calls"] += 1
        calls += 1
        if h.ns > 0:
            f["held"] += 1
            held += 1
    return {"calls": calls, "held": held, "files": files}


def held_phrase(result: dict[str, Any] | None) -> str:
    """A recording's --delay-sync as the console and the report say it (its manifest's [result]
    ``delay_sync``): the rules, then what was held of the sync calls the program made; "none"
    without rules."""
    if not isinstance(result, dict) or not result.get("rules"):
        return "none"
    held = {f: n["held"] for f, n in result.get("files", {}).items() if n.get("held")}
    per_file = f" ({', '.join(f'{f} {n}' for f, n in sorted(held.items()))})" if held else ""
    return (
        f"{', '.join(result['rules'])}: held {result.get('held', 0)} of the {result.get('calls', 0)} sync calls "
        f"the program made{per_file}"
    )


def held_note(rules: Iterable[str], subject: str) -> str:
    """What a cause from the trace cannot see in a recording made with the LD_PRELOAD shim (before
    issue 60) whose syncs of ``subject`` (a cause's files, comma-separated, as the trace names them
    under the mount) were held: there a sync called before the ack entered the kernel, and the
    trace, only after the hold.  "" when no rule holds any of those files."""
    held = [SyncDelay.parse(r) for r in rules]
    files = [f.strip().lstrip("/") for f in subject.split(",") if f.strip()]
    hit = [
        r
        for r in held
        if any(
            fnmatch.fnmatchcase(f, r.glob) or fnmatch.fnmatchcase("/" + f, r.glob) for f in files
        )
    ]
    if not hit:
        return ""
    return (
        f"a sync the program called before the ack, held by --delay-sync {', '.join(map(str, hit))} in this "
        "recording, enters the kernel (and the trace) only after the hold: 'no fsync in between' may mean "
        "its sync was still held -- the reply did not wait for it"
    )


def unused_note(rules: Iterable[SyncDelay], summary: dict[str, Any]) -> str:
    """Why a recording whose rules held no sync tested nothing new: what the program did sync."""
    synced = sorted(summary.get("files", {}), key=lambda p: -summary["files"][p]["calls"])
    which = ", ".join(str(r) for r in rules)
    if not synced:
        return (
            f"--delay-sync {which} held no sync call: the program made none (no fsync, fdatasync, "
            "sync_file_range, msync or syncfs; io_uring's syncs, sync() and O_SYNC writes cannot be held)"
        )
    return (
        f"--delay-sync {which} held no sync call: the program synced {', '.join(synced[:6])}"
        f"{', ...' if len(synced) > 6 else ''} ({summary['calls']} calls); match one of those"
    )

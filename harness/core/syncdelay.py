"""``--delay-sync GLOB=TIME`` (pure; host and guest): hold every fsync, fdatasync, sync_file_range,
msync and syncfs of the workload on a file whose path matches GLOB for TIME before it enters the
kernel (issue 50).

Why per file: a disk-wide latency (core/latency.py) slows every flush alike, so a program whose
acking thread waits on another file's sync (its engine's periodic commit) still acks after its log
is durable; only slowing the one file's sync opens the window in which a reply can race it.  The
recording guest's shim (vm-images/powercut_delaysync.c, LD_PRELOAD) does the holding; a program
that syncs without libc (Go, a static binary) is not seen by it, and the recording says so
(``held_summary``: what the shim saw, against what the program synced).

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
# does), rather than in core/races.py, whose trace parser would cost every command's start-up
EXPLORE_DELAY = "auto"    # how long an exploration holds a file's syncs: auto -- long against one commit:
EXPLORE_FLOOR = "200ms"   # at least this, and at least EXPLORE_COMMITS times the base recording's median
EXPLORE_COMMITS = 2       # commit (begin to ack), rounded up to 10 ms, at most EXPLORE_CEILING
EXPLORE_CEILING = "5s"
EXPLORE_BUDGET = 8        # recordings after the base one
MAX_RULES = 32          # the shim's table
MAX_GLOB_BYTES = 255
_TIME = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(us|ms|s)\s*")
_UNIT_NS = {"us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
SHIM = "libpowercut-delaysync.so"      # in the image's tools directory


@dataclass(frozen=True, slots=True)
class SyncDelay:
    glob: str
    ns: int          # the hold, in nanoseconds (what the shim sleeps; exact through the canonical text)

    @staticmethod
    def parse(text: str) -> SyncDelay:
        """``GLOB=TIME`` (TIME with its unit: ``200ms``, ``0.5s``, ``800us``); UsageError, one line."""
        glob, sep, when = str(text).rpartition("=")
        where = f"--delay-sync {text}"
        if not sep or not glob.strip():
            raise UsageError(f"{where}: expected GLOB=TIME, e.g. '*.wal=200ms' or 'db/log.*=1s'")
        if any(c in glob for c in "\t\n\0") or len(glob.encode()) > MAX_GLOB_BYTES:
            raise UsageError(f"{where}: a glob is one line of at most {MAX_GLOB_BYTES} bytes, without tabs")
        m = _TIME.fullmatch(when)
        if m is None:
            raise UsageError(f"{where}: TIME is a number with its unit (us, ms or s), e.g. 200ms, not {when!r}")
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


def env_text(rules: Iterable[SyncDelay]) -> str:
    """$POWERCUT_DELAY_SYNC: ``NANOSECONDS<TAB>GLOB`` a line, in the rules' order."""
    return "".join(f"{r.ns}\t{r.glob}\n" for r in rules)


@dataclass(frozen=True, slots=True)
class Hold:
    """One sync call the shim saw (a line of its log): ``ns`` held (0: not), by thread ``tid``,
    called at ``called`` (CLOCK_REALTIME seconds, strace -ttt's clock; -1 in a log written before
    the shim said when), on ``path`` (absolute, as the program's descriptor or mapping names it)."""

    call: str
    ns: int
    tid: int
    called: float
    path: str


def holds(log_text: str) -> list[Hold]:
    """The shim's log, line by line (``CALL NS TID CALLED PATH``, tab-separated; the first shim's
    ``CALL NS PATH`` too); lines that are neither are skipped."""
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
    """What the shim's log says: every sync call it saw and those it held, per file (relative to
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
            path = path[len(mount.rstrip("/")) + 1:]
        f = files.setdefault(path, {"calls": 0, "held": 0})
        f["calls"] += 1
        calls += 1
        if h.ns > 0:
            f["held"] += 1
            held += 1
    return {"calls": calls, "held": held, "files": files}


def held_phrase(result: dict[str, Any] | None) -> str:
    """A recording's --delay-sync as the console and the report say it (its manifest's [result]
    ``delay_sync``): the rules, then what the shim held of what it saw; "none" without rules."""
    if not isinstance(result, dict) or not result.get("rules"):
        return "none"
    held = {f: n["held"] for f, n in result.get("files", {}).items() if n.get("held")}
    per_file = f" ({', '.join(f'{f} {n}' for f, n in sorted(held.items()))})" if held else ""
    return (f"{', '.join(result['rules'])}: held {result.get('held', 0)} of the {result.get('calls', 0)} sync calls "
            f"the shim saw{per_file}")


def held_note(rules: Iterable[str], subject: str) -> str:
    """What a cause from the trace cannot see in a recording whose syncs of ``subject`` (a cause's
    files, comma-separated, as the trace names them under the mount) were held: a sync called
    before the ack enters the kernel, and the trace, only after the hold.  "" when no rule holds
    any of those files."""
    held = [SyncDelay.parse(r) for r in rules]
    files = [f.strip().lstrip("/") for f in subject.split(",") if f.strip()]
    hit = [r for r in held if any(fnmatch.fnmatchcase(f, r.glob) or fnmatch.fnmatchcase("/" + f, r.glob)
                                  for f in files)]
    if not hit:
        return ""
    return (f"a sync the program called before the ack, held by --delay-sync {', '.join(map(str, hit))} in this "
            "recording, enters the kernel (and the trace) only after the hold: 'no fsync in between' may mean "
            "its sync was still held -- the reply did not wait for it")


def unused_note(rules: Iterable[SyncDelay], summary: dict[str, Any]) -> str:
    """Why a recording whose rules held no sync tested nothing new: what the program did sync."""
    synced = sorted(summary.get("files", {}), key=lambda p: -summary["files"][p]["calls"])
    which = ", ".join(str(r) for r in rules)
    if not synced:
        return (f"--delay-sync {which} held no sync call, and the shim saw none at all: the program syncs "
                "without libc (Go, a static binary) or not at all; see the syscall trace")
    return (f"--delay-sync {which} held no sync call: the program synced {', '.join(synced[:6])}"
            f"{', ...' if len(synced) > 6 else ''} ({summary['calls']} calls); match one of those")

"""The corpus of published durability bugs (host): its data file ``workloads/corpus/corpus.toml``
-- one entry per bug: the release that has it, the release that fixed it, how it is recorded and
judged, what the buggy release is expected to give --, what a run of one release found
(``Release``), whether the entry's expectation held (``judge``), and the table docs/corpus.md
shows (``markdown``).  ``powercut corpus`` and the tests read it; nothing here runs or prints.

An entry is *reproduced* when its buggy release fails with the expected verdict (and, when the
entry names one, with the recovery message the published issue reports in a failing state's
reasons) and its fixed release passes every state judged.  A fixed release that still fails for
another, published reason (``fixed_expect``: its verdict; ``why`` names that bug) cannot show a
pass: the entry is at best *told apart* -- the buggy release's message, never the fixed one's --
and does not count as reproduced.  Else an entry is *not reproduced*; a fixed release that fails
when it is expected to pass is a *false alarm*.  Every entry says which of these it gives
(``outcome``, with ``why`` unless reproduced); any other outcome is a surprise, as is a run that
did not complete."""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from powercut.core.cause.causes import RULES
from powercut.core.judging.verdict import FINDINGS
from powercut.core.states.nodes import MAX_NODES
from powercut.core.states.stateid import MODELS
from powercut.errors import UsageError

# the kinds of bug the corpus covers (issue 63's list); an entry has one or more
KINDS = {
    "lost-fsync": "a write the program acknowledged was never synced",
    "cross-file-order": "one file made durable before another it depends on",
    "in-file-order": "pages of one file overwritten before the commit that frees them is durable",
    "dir-fsync": "a created or renamed file's directory entry never synced",
    "rename-before-fsync": "a rebuilt file renamed over the old one before its data was synced",
    "torn-record": "a record written in part, not detected or not skipped by recovery",
    "reply-race": "a reply sent before the sync it depends on has finished",
    "two-crashes": "a repair by recovery that is not durable: a second crash undoes it",
    "recovery": "the program's recovery fails on a state a crash can leave",
    "replicated": "a replicated system whose members disagree after a crash",
}
EXPECT = ("fail", *sorted(FINDINGS))
OUTCOMES = ("reproduced", "told apart", "not reproduced")
NAME = re.compile(r"[a-z0-9][a-z0-9-]*$")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+_-]*$")
CHECK_IN = ("host", "vm")
KNOWN = {
    "name",
    "program",
    "title",
    "bug",
    "fix",
    "kinds",
    "buggy",
    "fixed",
    "fs",
    "nodes",
    "params",
    "models",
    "max_states",
    "check_in",
    "expect",
    "message",
    "outcome",
    "cause",
    "fixed_expect",
    "why",
    "delay_sync",
    "trace",
    "second",
}
SECOND_KEYS = {"model", "params"}


@dataclass(frozen=True, slots=True)
class Second:
    """Crash, recover, crash again: the buggy and the fixed release are each recorded a second time
    from a crash state of their first recording (``record --from``): the last state of ``model``
    (its latest cut: the most the first run wrote), with the workload's ``params`` for the second run."""

    model: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # the entry's id: lower case, digits, dashes
    program: str  # its driver's folder, workloads/corpus/<program>/
    title: str  # the bug in a line
    bug: str  # where it was reported (a URL)
    fix: str  # the fix (a URL)
    kinds: tuple[str, ...]
    buggy: str  # the release that has the bug
    fixed: str  # the release that fixed it
    expect: str  # what the buggy release gives: "fail" (any finding) or one verdict
    fs: str = "ext4"
    nodes: int = 1
    params: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, ...] = ("flush",)
    max_states: int = 0  # 0: every distinct state
    check_in: str = "host"
    message: str = ""  # the recovery message the published issue reports (a failing reason has it)
    outcome: str = "reproduced"  # what the entry gives (OUTCOMES): the corpus records it
    cause: str = ""  # the rule the buggy release's first failure group names, proven ("": unsaid)
    fixed_expect: str = "pass"  # a verdict: the fixed release fails for another published reason
    why: str = ""  # why it is not reproduced (or only told apart), or what reproducing it needed
    delay_sync: tuple[str, ...] = ()  # GLOB=TIME: those files' syncs held (a reply race)
    trace: bool = True  # False: recorded without the system-call trace (--no-trace)
    second: Second | None = None

    def releases(self) -> tuple[tuple[str, str], ...]:
        """(role, version) of the two releases, the buggy first."""
        return (("buggy", self.buggy), ("fixed", self.fixed))


def default_path() -> Path:
    return Path(str(resources.files("powercut.workloads.corpus") / "corpus.toml"))


def program_dir(program: str) -> Path:
    """The folder of a program's driver (its build.sh and sources)."""
    return Path(str(resources.files("powercut.workloads.corpus") / program))


def load(path: str | Path | None = None) -> list[Entry]:
    """Every entry of the corpus file, checked; one UsageError line for the first mistake."""
    p = Path(path) if path else default_path()
    try:
        doc = tomllib.loads(p.read_text())
    except OSError as e:
        raise UsageError(f"{p}: cannot read the corpus: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{p}: not a valid corpus file: {e}") from None
    entries = [entry_of(d, f"{p}: entry {n}") for n, d in enumerate(doc.get("entry", []), 1)]
    names = [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UsageError(f"{p}: the same entry name twice: {', '.join(dup)}")
    return entries


def entry_of(d: dict[str, Any], where: str) -> Entry:
    if isinstance(d.get("name"), str):
        where = f"{where} ({d['name']})"
    unknown = set(d) - KNOWN
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN))}"
        )
    for key in ("name", "program", "title", "bug", "fix", "kinds", "buggy", "fixed", "expect"):
        if key not in d:
            raise UsageError(f"{where}: `{key}` is missing")
    name = d["name"]
    if not isinstance(name, str) or not NAME.match(name):
        raise UsageError(f"{where}: name: lower-case letters, digits and dashes")
    if not isinstance(d["program"], str) or not NAME.match(d["program"]):
        raise UsageError(f"{where}: program: a folder name of lower-case letters, digits, dashes")
    for key in ("buggy", "fixed"):
        if not isinstance(d[key], str) or not VERSION.match(d[key]):
            raise UsageError(f"{where}: {key}: a release version, not {d[key]!r}")
    if d["buggy"] == d["fixed"]:
        raise UsageError(f"{where}: the buggy and the fixed release are the same ({d['buggy']})")
    kinds = d["kinds"]
    if not isinstance(kinds, list) or not kinds or any(k not in KINDS for k in kinds):
        raise UsageError(f"{where}: kinds: a list of {', '.join(KINDS)}")
    if d["expect"] not in EXPECT:
        raise UsageError(f"{where}: expect: one of {', '.join(EXPECT)}, not {d['expect']!r}")
    models = d.get("models", ["flush"])
    if not isinstance(models, list) or not models or any(m not in MODELS for m in models):
        raise UsageError(f"{where}: models: a list of {', '.join(MODELS)}")
    nodes = d.get("nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise UsageError(f"{where}: nodes: 1..{MAX_NODES}")
    max_states = d.get("max_states", 0)
    if isinstance(max_states, bool) or not isinstance(max_states, int) or max_states < 0:
        raise UsageError(f"{where}: max_states: 0 (every state) or more")
    if d.get("check_in", "host") not in CHECK_IN:
        raise UsageError(f"{where}: check_in: one of {', '.join(CHECK_IN)}")
    params = d.get("params", {})
    if not isinstance(params, dict):
        raise UsageError(f"{where}: params: a table of the driver's parameters")
    outcome = d.get("outcome", "reproduced")
    if outcome not in OUTCOMES:
        raise UsageError(f"{where}: outcome: one of {', '.join(OUTCOMES)}")
    if outcome != "reproduced" and not d.get("why"):
        raise UsageError(f"{where}: an entry {outcome} says why (`why`)")
    cause = d.get("cause", "")
    if cause and cause not in RULES:
        raise UsageError(f"{where}: cause: a rule of {', '.join(sorted(RULES))}, not {cause!r}")
    fixed_expect = d.get("fixed_expect", "pass")
    if fixed_expect not in ("pass", *EXPECT):
        raise UsageError(f"{where}: fixed_expect: pass or one of {', '.join(EXPECT)}")
    if fixed_expect != "pass" and (outcome == "reproduced" or not d.get("message")):
        raise UsageError(
            f"{where}: a fixed release that fails too tells the bug apart by its message only: "
            "give `message`, and an outcome other than reproduced"
        )
    return Entry(
        name=name,
        program=d["program"],
        title=str(d["title"]),
        bug=str(d["bug"]),
        fix=str(d["fix"]),
        kinds=tuple(kinds),
        buggy=d["buggy"],
        fixed=d["fixed"],
        expect=d["expect"],
        fs=str(d.get("fs", "ext4")),
        nodes=nodes,
        params=dict(params),
        models=tuple(models),
        max_states=max_states,
        check_in=d.get("check_in", "host"),
        message=str(d.get("message", "")),
        outcome=outcome,
        cause=cause,
        fixed_expect=fixed_expect,
        why=str(d.get("why", "")),
        delay_sync=tuple(d.get("delay_sync", ())),
        trace=bool(d.get("trace", True)),
        second=second_of(d.get("second"), where),
    )


def second_of(d: Any, where: str) -> Second | None:
    if d is None:
        return None
    if not isinstance(d, dict) or set(d) - SECOND_KEYS or "model" not in d:
        raise UsageError(f"{where}: second: a table with `model` (and `params`)")
    if d["model"] not in MODELS:
        raise UsageError(f"{where}: second.model: one of {', '.join(MODELS)}")
    return Second(d["model"], dict(d.get("params", {})))


def choose(entries: list[Entry], names: list[str]) -> list[Entry]:
    """The entries named (all when none is); an unknown name is one UsageError line."""
    if not names:
        return entries
    known = {e.name for e in entries} | {e.program for e in entries}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(
            f"no corpus entry {', '.join(unknown)}; entries: {', '.join(e.name for e in entries)}"
        )
    return [e for e in entries if e.name in names or e.program in names]


@dataclass(frozen=True, slots=True)
class Release:
    """What one release's run found: its verdict over the states judged, the verdicts among the
    failures, whether the entry's message was among their reasons, the first failing reason, the
    cause the first failure group names (a rule, and whether it was proven), the time."""

    version: str
    verdict: str  # the run's: pass, a finding, no-acks, or error
    judged: int = 0
    failing: int = 0
    verdicts: tuple[str, ...] = ()
    coverage: str = ""
    message_seen: bool = False
    first_reason: str = ""
    cause: str = ""  # the first group's rule (core/cause/causes.py)
    proof: str = ""  # "proven", "not proven" or "" (none tried)
    seconds: float = 0.0
    error: str = ""  # a build, recording or check that did not complete
    states: str = ""  # the second run: which first-run state it started from

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Release:
        known = set(Release.__slots__)
        d = {k: v for k, v in d.items() if k in known}
        return Release(**{**d, "verdicts": tuple(d.get("verdicts", ()))})

    def caught(self, expect: str, message: str) -> bool:
        """It failed as the buggy release is expected to: a finding (of ``expect``'s verdict), with
        ``message`` among the failing reasons when there is one."""
        if self.error or not self.failing:
            return False
        if expect != "fail" and expect not in self.verdicts:
            return False
        return self.message_seen or not message

    @property
    def passed(self) -> bool:
        return not self.error and self.verdict == "pass" and self.judged > 0 and not self.failing

    def as_fixed(self, expect: str, message: str) -> bool:
        """It gave what the fixed release is expected to: a pass; or, when it fails for another
        reason too (``expect`` a verdict), that verdict and never the entry's ``message``."""
        if expect == "pass":
            return self.passed
        if self.error or self.message_seen or not self.failing:
            return False
        return expect == "fail" or expect in self.verdicts


def message_in(message: str, reasons: list[str]) -> bool:
    return bool(message) and any(message in r for r in reasons)


@dataclass(frozen=True, slots=True)
class Result:
    """An entry's outcome: its two releases (and the second runs, crash after recovery) and what
    that says."""

    entry: Entry
    buggy: Release
    fixed: Release
    buggy_second: Release | None = None
    fixed_second: Release | None = None

    @property
    def caught(self) -> bool:
        e = self.entry
        if e.second is not None:
            return self.buggy_second is not None and self.buggy_second.caught(e.expect, e.message)
        return self.buggy.caught(e.expect, e.message)

    @property
    def fixed_as_expected(self) -> bool:
        e = self.entry
        fixed = self.fixed if e.second is None else self.fixed_second
        return fixed is not None and fixed.as_fixed(e.fixed_expect, e.message)

    @property
    def status(self) -> str:
        """reproduced | told apart | not reproduced | false alarm | error"""
        runs = [self.buggy, self.fixed, self.buggy_second, self.fixed_second]
        if any(r is not None and r.error for r in runs):
            return "error"
        if not self.fixed_as_expected:
            return "false alarm" if self.entry.fixed_expect == "pass" else "not reproduced"
        if not self.caught:
            return "not reproduced"
        return "reproduced" if self.entry.fixed_expect == "pass" else "told apart"

    @property
    def cause_as_recorded(self) -> bool:
        """The buggy release's cause is the proven rule the entry records (when it records one)."""
        e = self.entry
        buggy = self.buggy_second or self.buggy
        return not e.cause or (buggy.cause == e.cause and buggy.proof == "proven")

    @property
    def as_recorded(self) -> bool:
        """Whether the outcome (and the cause, where recorded) is the one the corpus file records."""
        return self.status == self.entry.outcome and self.cause_as_recorded

    def line(self) -> str:
        """One console line: the status, then each release's verdict."""
        mark = "ok" if self.as_recorded else "FAIL"
        parts = [f"{mark:4} {self.entry.name}: {self.status}"]
        for role, r in self.runs():
            parts.append(f"{role} {r.version}: {describe(r)}")
        if self.status != self.entry.outcome:
            parts.append(f"the corpus records it as {self.entry.outcome}")
        if not self.cause_as_recorded:
            parts.append(f"the corpus records its cause as {self.entry.cause} (proven)")
        return "; ".join(parts)

    def runs(self) -> list[tuple[str, Release]]:
        out = [("buggy", self.buggy), ("fixed", self.fixed)]
        if self.buggy_second is not None:
            out.append(("buggy, second crash", self.buggy_second))
        if self.fixed_second is not None:
            out.append(("fixed, second crash", self.fixed_second))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry.name,
            "status": self.status,
            "as_recorded": self.as_recorded,
            **{role.replace(", ", "_").replace(" ", "_"): r.to_json() for role, r in self.runs()},
        }


def describe(r: Release) -> str:
    """A release's run in a line: its verdicts, the cause, the first failing reason."""
    if r.error or not r.failing:
        return verdict_words(r)
    cause = f", cause {r.cause} ({r.proof or 'untried'})" if r.cause else ""
    return verdict_words(r) + cause + (f": {r.first_reason}" if r.first_reason else "")


def verdict_words(r: Release) -> str:
    """What a release's run gave: the failing states' verdicts out of those judged, or its pass
    with what it covered."""
    if r.error:
        return f"error: {r.error}"
    if r.failing:
        return f"{'/'.join(r.verdicts)} in {r.failing} of {r.judged} states"
    if not r.coverage:
        return r.verdict
    return f"{r.verdict}, {r.judged} states ({r.coverage.split('; ')[0]})"


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


def markdown(results: list[Result]) -> str:
    """The corpus table (docs/corpus.md's): bug (link), kind, buggy -> fixed, verdicts, cause, time."""
    head = "| Bug | Kind | Buggy → fixed | Buggy release | Fixed release | Cause | Time |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for res in results:
        e = res.entry
        buggy = res.buggy_second or res.buggy
        fixed = res.fixed_second or res.fixed
        cause = f"{buggy.cause} ({buggy.proof or 'untried'})" if buggy.cause else "—"
        spent = sum(r.seconds for _, r in res.runs())
        cells = [
            f"[{e.name}]({e.bug}): {e.title}",
            ", ".join(e.kinds),
            f"{e.buggy} → {e.fixed}",
            _cell(buggy, res.status),
            _cell(fixed, ""),
            cause,
            minutes(spent),
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _cell(r: Release, status: str) -> str:
    said = verdict_words(r)
    if status in ("not reproduced", "told apart"):
        return f"{status}: {said}"
    return said


def count_line(results: list[Result]) -> str:
    n = sum(r.status == "reproduced" for r in results)
    return f"reproduces {n} of {len(results)} published bugs"

"""One crash test, as the pytest plugin runs it (host side): record a workload (a shell command or
a Python function) in a VM, judge its crash states with a checker (a Python function or a
command), and say what was found in the words a person acts on.

``CrashTest`` is the frozen description (what runs, on which filesystem, under which models, where
it is judged, what is expected); ``missing(test)`` lists the prerequisites this machine lacks;
``run(test, out)`` records into ``out/recording`` and checks into ``out/check``; its ``Outcome``
says whether the expectation held (``expect``: ``pass``, ``fail`` for any finding, or one verdict)
and, when it did not, ``explain()`` gives the verdict, the failing states out of the judged ones,
the first failing state, each failure group with its minimized state, its blame and the
``powercut repro`` command, and where the artifacts are."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.campaign.run import CampaignSpec, run_campaign, split_settings
from powercut.check.host import require_root
from powercut.check.place import Place
from powercut.checker import DEFAULT_TIMEOUT_S
from powercut.config import (
    DEFAULT_DISK_LATENCY,
    DEFAULT_SHRINK,
    FsSpec,
    WorkloadSpec,
    disk_latency_for,
    fault_for,
)
from powercut.core.judging.verdict import FINDINGS, Verdict
from powercut.core.recording import syncdelay
from powercut.core.states.coverage import requirement
from powercut.core.states.nodes import MAX_NODES
from powercut.core.states.selection import SelectionSpec
from powercut.debug.cause import group_lines
from powercut.errors import PowercutError, UsageError
from powercut.images.build import ImageSpec, build_image
from powercut.linux import filesystems, process
from powercut.record.vm import RecordSpec, Start, record
from powercut.replay.materialize import replay_state
from powercut.report.summary import Summary
from powercut.vm.cmdline import keep_visible
from powercut.vm.qemu import QEMU

EXPECT = ("pass", "fail", *sorted(FINDINGS))
PARAM_TYPES = (str, int, float, bool)


@dataclass(frozen=True, slots=True)
class CrashTest:
    name: str  # the test's id, for labels
    workload_cmd: str  # the shell command the guest runs (_pycall.workload_command for a function)
    checker_cmd: str = ""  # a checker command, or
    checker_function: str = ""  # a Python checker, FILE::NAME
    path: tuple[str, ...] = ()  # sys.path entries the functions' imports need
    params: dict[str, Any] = field(default_factory=dict)
    fs: str = "ext4"
    size_mb: int = 0  # 0: the filesystem's default size
    mkfs_opts: tuple[str, ...] = ()
    mount_opts: str = ""
    selection: SelectionSpec = SelectionSpec()
    place: Place = Place()
    shrink: int = DEFAULT_SHRINK  # minimize + blame the first K failure groups
    expect: str = "pass"
    allow_no_acks: bool = False
    require_exhaustive: str | bool = (
        False  # True/"commits": a pass whose commit windows are short of exhaustive
    )
    #                                         does not meet expect="pass"; "all": nor one short anywhere
    workload_timeout_s: float = 600.0
    checker_timeout_s: float = DEFAULT_TIMEOUT_S
    fault: str = ""  # the recording's fault plan (--fault; per node: core/recording/nodefaults.py)
    disk_latency: str = str(
        DEFAULT_DISK_LATENCY
    )  # the data disk's latency while recording (core/recording/latency.py)
    nodes: int = 1  # > 1: a cluster (docs/clusters.md): the workload sees mounts n0, n1, ...
    delay_sync: tuple[
        str, ...
    ] = ()  # GLOB=TIME rules: those files' syncs held (core/recording/syncdelay.py)
    start: tuple[Path, str] | None = None  # (recording, state id): record from that crash state
    trace: bool = True  # trace the workload's system calls (False: --no-trace)

    @classmethod
    def of(cls, name: str, workload_cmd: str, **settings: Any) -> CrashTest:
        """A crash test from the pytest marker's flat settings (``models=``, ``seed=``, ``check_in=``,
        ...): the selection and place words go into their values, the rest are fields."""
        sel, where, rest = split_settings(settings)
        try:
            selection = SelectionSpec().with_(**sel)
            place = Place(**where)
        except UsageError as e:
            raise UsageError(f"{name}: {e}") from None
        return cls(name=name, workload_cmd=workload_cmd, selection=selection, place=place, **rest)

    def __post_init__(self) -> None:
        if not self.workload_cmd:
            raise UsageError(
                f"{self.name}: the crash test needs a workload (a function or a shell command)"
            )
        filesystems.get(self.fs)
        if self.expect not in EXPECT:
            raise UsageError(f"{self.name}: expect={self.expect!r}: one of {', '.join(EXPECT)}")
        for key, value in self.params.items():
            if not key.isidentifier() or not isinstance(value, PARAM_TYPES):
                raise UsageError(
                    f"{self.name}: workload parameter {key}={value!r}: names are identifiers, values "
                    "str, int, float or bool (they travel as JSON into the guest)"
                )
        if self.size_mb and self.size_mb < 16:
            raise UsageError(
                f"{self.name}: size_mb={self.size_mb}: 0 (the filesystem's default) or at least 16 MiB"
            )
        self.campaign()  # validates timeouts, shrink
        if (
            isinstance(self.nodes, bool)
            or not isinstance(self.nodes, int)
            or not 1 <= self.nodes <= MAX_NODES
        ):
            raise UsageError(
                f"{self.name}: nodes={self.nodes!r}: a whole number from 1 (one disk) to {MAX_NODES}"
            )
        disk_latency_for(self.disk_latency, self.nodes, f"{self.name}: disk_latency")
        fault_for(self.fault, self.nodes, f"{self.name}: fault=")
        rules = (self.delay_sync,) if isinstance(self.delay_sync, str) else self.delay_sync
        try:
            object.__setattr__(self, "delay_sync", syncdelay.canonical(rules))
        except (UsageError, TypeError) as e:
            why = (
                e.one_line() if isinstance(e, UsageError) else "a GLOB=TIME rule or a list of them"
            )
            raise UsageError(f"{self.name}: delay_sync={self.delay_sync!r}: {why}") from None

    @property
    def models(self) -> tuple[str, ...]:
        return self.selection.models

    def functions(self) -> list[str]:
        """The Python functions (FILE::NAME) the test runs: its checker, and its workload's when the
        workload is ``python -m powercut._pycall FILE::NAME``."""
        out = [self.checker_function] if self.checker_function else []
        words = self.workload_cmd.split()
        if "powercut._pycall" in words and words[-1] != "powercut._pycall":
            out.append(shlex.split(self.workload_cmd)[-1])
        return out

    def recording(self) -> RecordSpec:
        return RecordSpec(
            fs=FsSpec(
                fstype=self.fs,
                mkfs_opts=self.mkfs_opts,
                mount_opts=self.mount_opts,
                size_mb=self.size_mb,
            ),
            workload=WorkloadSpec(
                name="",
                cmd=self.workload_cmd,
                params=dict(self.params),
                timeout_s=self.workload_timeout_s,
                fault=self.fault,
                delay_sync=self.delay_sync,
                trace=self.trace,
            ),
            accel=self.place.accel,
            latency=disk_latency_for(self.disk_latency, self.nodes),
            start=Start(*self.start) if self.start else None,
        )

    def campaign(self) -> CampaignSpec:
        return CampaignSpec(
            selection=self.selection,
            place=self.place,
            checker_command=self.checker_cmd,
            checker_function=self.checker_function,
            checker_path=self.path,
            checker_timeout_s=self.checker_timeout_s,
            shrink=self.shrink,
            allow_no_acks=self.allow_no_acks,
            force=True,
            label=self.name,
        )


def missing(test: CrashTest) -> list[str]:
    """What this machine lacks to run ``test``, each with how to get it (empty: ready)."""
    out = []
    try:
        process.require(QEMU, "qemu-system-x86")
    except PowercutError as e:
        out.append(e.one_line())
    fs = filesystems.get(test.fs)
    for tool in {fs.mkfs[0]: 0, fs.fsck[0]: 0}:
        try:
            process.require(
                tool, {"ext4": "e2fsprogs", "xfs": "xfsprogs", "btrfs": "btrfs-progs"}.get(test.fs)
            )
        except PowercutError as e:
            out.append(e.one_line())
    if test.place.on_host:
        try:
            require_root("--powercut-check-in host")
        except PowercutError as e:
            out.append(e.one_line())
    if not out:
        try:
            build_image(
                ImageSpec()
            )  # the guest kernel and initramfs: built once, then found in the cache
        except PowercutError as e:
            out.append(f"no guest image: {e.one_line()} (powercut setup builds it)")
    return out


@dataclass(frozen=True, slots=True)
class Outcome:
    test: CrashTest
    summary: Summary
    paths: dict[str, Path]
    out: Path

    @property
    def findings(self) -> list[Verdict]:
        return self.summary.failures

    @property
    def as_expected(self) -> bool:
        s, want = self.summary, self.test.expect
        if s.status != "complete" or s.flaky or s.no_acks:
            return False  # never an expectation met by a run that proves nothing
        if want == "pass":
            return not s.failures and (
                s.coverage is not None
                and s.coverage.meets(requirement(self.test.require_exhaustive))
                or not self.test.require_exhaustive
            )
        if want == "fail":
            return bool(s.failures)
        return any(f.verdict == want for f in s.failures)

    def headline(self) -> str:
        s, n = self.summary, len(self.summary.failures)
        where = f"{s.fstype}; {', '.join(self.test.models)}; judged in {s.check_in}"
        if s.status != "complete" or s.no_acks:
            return f"powercut: {s.verdict}: {s.notes()[0] if s.notes() else s.status} ({where})"
        if n:
            said = (
                f", {s.confirmed} confirmed alone"
                + (f", {s.by_group} by their group's sample" if s.by_group else "")
                if s.rejudged
                else ""
            )
            return (
                f"powercut: {s.verdict}: {n} of {s.total} distinct crash states fail ({where}){said}; "
                f"{s.coverage_phrase()}"
            )
        if s.flaky:
            return (
                f"powercut: flaky: {len(s.flaky)} of {s.total} distinct crash states gave two verdicts, a harness "
                f"problem ({where})"
            )
        if not s.exhaustive:
            return f"powercut: pass ({s.coverage_phrase()}): all {s.total} judged crash states pass ({where})"
        return f"powercut: pass (exhaustive): all {s.total} distinct crash states pass ({where})"

    def explain(self) -> str:
        """The failure as a person acts on it (also the JUnit failure text)."""
        s = self.summary
        lines = [self.headline()]
        if self.test.expect != "pass" and not s.failures and s.status == "complete":
            lines.append(
                f"expected {self.test.expect}: the crash test was expected to find "
                f"{'a failure' if self.test.expect == 'fail' else self.test.expect}, and found none"
            )
        elif (
            self.test.expect == "pass"
            and not s.failures
            and self.test.require_exhaustive
            and not (
                s.coverage is not None
                and s.coverage.meets(requirement(self.test.require_exhaustive))
            )
        ):
            lines.append(f"require_exhaustive: the pass is not exhaustive ({s.coverage_phrase()})")
        elif self.test.expect not in ("pass", "fail") and s.failures:
            seen = sorted({f.verdict for f in s.failures})
            lines.append(f"expected {self.test.expect}, found {', '.join(seen)}")
        if s.failures and s.trace_note:
            lines.append(f"note: {s.trace_note}")
        if s.failures and not s.groups:
            first = min(s.failures, key=lambda v: (v.cut, v.state))
            lines.append(
                f"first failing state: {first.state}: {first.verdict}: "
                f"{first.reasons[0] if first.reasons else ''}"
            )
        for k, g in enumerate(
            s.groups[:5], 1
        ):  # the causes lead, each with its minimized state and repro
            lines.extend(group_lines(f"group {k}", g))  # the cause in the program's terms leads
            if "confirmed_alone" in g:
                by = (
                    f", {g['confirmed_by_group']} by the group's sample"
                    if g["confirmed_by_group"]
                    else ""
                )
                esc = (
                    "; its sample disagreed: confirmed state by state" if g.get("escalated") else ""
                )
                lines.append(f"  confirmed: {g['confirmed_alone']} alone{by}{esc}")
            if g.get("minimized"):
                calls = g["shrink_calls"]
                lines.append(
                    f"  minimized: {g['first']} -> {g['minimized']} ({calls} check{'' if calls == 1 else 's'})"
                )
            else:
                first_v = next((f for f in s.failures if f.state == g["first"]), None)
                lines.append(
                    f"  first state: {g['first']}"
                    + (f": {first_v.reasons[0]}" if first_v and first_v.reasons else "")
                )
            lines.extend(f"  blame: {_short(c)}" for c in g.get("culprits", [])[:4])
            if g.get("bundle"):
                lines.append(f"  repro: powercut repro {shlex.quote(g['bundle'])}")
        if len(s.groups) > 5:
            lines.append(f"... {len(s.groups) - 5} more groups in {self.paths['summary']}")
        for f in s.flaky[:3]:
            lines.append(f"flaky {f.state}: {f.reasons[0] if f.reasons else ''}")
        lines.extend(f"note: {n}" for n in s.notes()[1:])
        lines.append(
            f"artifacts: {self.out} (journal {self.paths['summary'].parent / 'journal.jsonl'})"
        )
        if self.paths.get("html"):
            lines.append(f"report: {self.paths['html']}")
        return "\n".join(lines)

    def properties(self) -> list[tuple[str, str]]:
        """For JUnit (pytest's record_property): what a CI page shows beside the test."""
        s = self.summary
        props = [
            ("powercut_verdict", s.verdict),
            ("powercut_coverage", s.coverage_phrase()),
            ("powercut_states", str(s.total)),
            ("powercut_failed", str(len(s.failures))),
            ("powercut_flaky", str(len(s.flaky))),
            ("powercut_artifacts", str(self.out)),
        ]
        if self.paths.get("html"):
            props.append(("powercut_report", str(self.paths["html"])))
        if s.groups and s.groups[0].get("bundle"):
            props.append(("powercut_repro", f"powercut repro {shlex.quote(s.groups[0]['bundle'])}"))
        return props


def _short(text: str, limit: int = 220) -> str:
    return text if len(text) <= limit else text[: limit - 5] + " [...]"


def run(test: CrashTest, out: Path, on_verdict: Callable[[Verdict], None] | None = None) -> Outcome:
    """Record, then check; ``out`` is replaced if it holds an earlier run of this test."""
    out = Path(out).absolute()
    if out.exists():
        if not (out / "crashtest.json").exists() and any(out.iterdir()):
            raise UsageError(
                f"{out} exists and is not a powercut crash test's output: refusing to replace it"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "crashtest.json").write_text(
        json.dumps(
            {
                "test": test.name,
                "workload": test.workload_cmd,
                "checker": test.checker_function or test.checker_cmd,
                "params": test.params,
                "pid": os.getpid(),
            },
            indent=1,
        )
        + "\n"
    )
    # the guests import the test's functions from its files and sys.path: keep those visible there
    keep_visible([*test.path, *(os.path.dirname(f.split("::")[0]) for f in test.functions())])
    rec = record(test.recording(), out / "recording", nodes=test.nodes, replayer=replay_state)
    summary, paths = run_campaign(rec.dir, test.campaign(), out / "check", on_verdict=on_verdict)
    return Outcome(test, summary, paths, out)

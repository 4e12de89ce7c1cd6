"""A check campaign over one recording of one disk or of N (host side): select the distinct states
(core/states/selection.py: each distinct disk image -- or set of N images -- is judged once; the journal
lists the others as its aliases), judge them where the place says, then group, minimize, confirm,
explain and bundle the failures (campaign/phases.py), journal, summarize.  ``powercut check`` and
``powercut run`` call ``run_campaign``, for a one-disk recording and a cluster recording alike."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.campaign import ledger
from powercut.campaign.journal import Journal, pin_settings, pinned_settings
from powercut.campaign.latecleared import cleared_by_trace
from powercut.campaign.outdir import check_outdir, prepare_out
from powercut.campaign.phases import CampaignRun
from powercut.check.context import CheckContext, context_for, with_node_faults
from powercut.check.place import Place
from powercut.checker import DEFAULT_TIMEOUT_S
from powercut.config import DEFAULT_CONFIRM_MODE, DEFAULT_SHRINK, DEFAULT_SHRINK_BUDGET
from powercut.core.crashmodels.target import NO_TARGET, LieTarget
from powercut.core.judging import confirm as confirming
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex, open_log
from powercut.core.log.markorder import unordered_acks
from powercut.core.states.coverage import Coverage, judged_only
from powercut.core.states.imagekey import key_name, state_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import DEFAULT_NODE_BOUND, Nodes
from powercut.core.states.selection import (
    SEED_AUTO,
    NodesSelection,
    Selection,
    SelectionSpec,
    select,
    select_nodes,
)
from powercut.core.states.shard import Shard
from powercut.core.states.stateid import LIE_MODELS
from powercut.debug import cause
from powercut.errors import BadLog, BadRecording, UsageError
from powercut.linux import runlock
from powercut.record import recording
from powercut.report import html
from powercut.report.summary import Summary, summarize, write_outputs

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CampaignSpec:
    """One check campaign: which states (``selection``, config.SelectionSpec), where they are judged
    (``place``, check/place.Place), by which checker, and how failures are confirmed and minimized.
    Every default is the embedded values' or written once below."""

    selection: SelectionSpec = SelectionSpec()
    place: Place = Place()
    checker_command: str = ""  # empty: the workload's registered checker (or fsck only for --cmd)
    checker_timeout_s: float = DEFAULT_TIMEOUT_S  # per state
    resume: bool = False
    confirm: bool = True  # judge failures a second time, alone
    prove: bool = True  # the read-set rule proves states, host and checker VMs (check/proving.py)
    confirm_mode: str = DEFAULT_CONFIRM_MODE  # group: by failure group (a sample of a large group); all: every failure
    confirm_sample: int = confirming.DEFAULT_SAMPLE  # states judged alone per large group
    shrink: int = (
        DEFAULT_SHRINK  # minimize + blame the first state of the first K failure groups (0: off)
    )
    shrink_budget: int = DEFAULT_SHRINK_BUDGET  # checks per minimization
    allow_no_acks: bool = False  # a recording without an ack mark is not a pass unless this is set
    require_exhaustive: str | bool = (
        ""  # "commits" (or True): a pass whose commit windows are short of exhaustive
    )
    #                                       (sampled, capped, weakened) is not ok; "all": nor one short anywhere
    ledger: str = (
        ""  # --ledger FILE: skip states that passed in earlier runs of the log, add this run's
    )
    force: bool = False  # replace an earlier check in the output directory
    shard: Shard = Shard()  # judge only this shard of the distinct states (--shard i/n)
    checker_function: str = (
        ""  # a Python checker, FILE::NAME (the pytest plugin's; powercut._pycall)
    )
    checker_path: tuple[str, ...] = ()  # sys.path entries its imports need
    label: str = (
        ""  # what the outputs call the workload (a crash test's id); default the recording's
    )
    node_bound: int = (
        DEFAULT_NODE_BOUND  # N > 1 disks: every combination of an instant up to this many
    )

    def settings(self, rec: recording.Recording) -> dict[str, Any]:
        """What a resumed campaign must share with the journal's: the logs and how states are made
        and judged (not where or how fast)."""
        logs: dict[str, Any] = {"logs_sha256": [str(n.pin.get("sha256", "")) for n in rec.nodes]}
        if len(rec.nodes) > 1:  # how far instants combine: no meaning for one disk
            logs["node_bound"] = self.node_bound
        return {
            **logs,
            **self.selection.to_json(),
            "checker": self.checker_command or self.checker_function,
            "checker_timeout_s": self.checker_timeout_s,
            **({} if self.shard.whole else {"shard": str(self.shard)}),
        }

    def __post_init__(self) -> None:
        if self.shrink < 0 or self.shrink_budget < 1:
            raise UsageError(
                f"--shrink must be 0 (off) or more and its budget at least 1, not {self.shrink}, "
                f"{self.shrink_budget}"
            )
        if self.checker_timeout_s <= 0:
            raise UsageError(
                f"the checker timeout must be more than 0 s, not {self.checker_timeout_s:g}"
            )
        if self.selection.seed == SEED_AUTO and not self.shard.whole:
            raise UsageError(
                f"--seed auto with --shard {self.shard}: every shard must sample the same states; "
                "give every shard one --seed N (e.g. the CI run's number)"
            )
        if self.confirm_mode not in confirming.MODES:
            raise UsageError(
                f"--confirm must be one of {', '.join(confirming.MODES)}, not {self.confirm_mode!r}"
            )
        if not isinstance(self.node_bound, int) or self.node_bound < 1:
            raise UsageError(f"--node-bound must be at least 1, not {self.node_bound!r}")
        if self.confirm_sample < confirming.MIN_SAMPLE:
            raise UsageError(
                f"--confirm-sample must be at least {confirming.MIN_SAMPLE} (a group's first and last "
                f"state), not {self.confirm_sample}"
            )

    @classmethod
    def of(cls, **settings: Any) -> CampaignSpec:
        """A campaign from flat words (``models=``, ``seed=``, ``check_in=``, ``jobs=``, ... and the
        fields): the selection's and the place's words go into those values, with their defaults."""
        sel, where, rest = split_settings(settings)
        return cls(selection=SelectionSpec().with_(**sel), place=Place(**where), **rest)

    @property
    def models(self) -> tuple[str, ...]:
        return self.selection.models

    def workers(self) -> int:
        return self.place.workers()


SELECTION_WORDS = (
    "models",
    "seed",
    "bound",
    "samples",
    "torn_samples",
    "max_states",
    "lie_file",  # -> SelectionSpec
    "setup_samples",
)
PLACE_WORDS = {
    "check_in": "check_in",
    "accel": "accel",
    "jobs": "jobs",
    "memory_mb": "memory_mb",
    "state_timeout_s": "state_timeout_s",
    "check_uris": "uris",
}  # word -> Place field


def split_settings(flat: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Flat settings (the pytest marker's, a script's) -> (SelectionSpec fields, Place fields, the rest)."""
    sel = {k: v for k, v in flat.items() if k in SELECTION_WORDS}
    where = {
        PLACE_WORDS[k]: (tuple(v) if k == "check_uris" else v)
        for k, v in flat.items()
        if k in PLACE_WORDS
    }
    rest = {k: v for k, v in flat.items() if k not in SELECTION_WORDS and k not in PLACE_WORDS}
    return sel, where, rest


def _seeded(spec: CampaignSpec, outdir: Path) -> SelectionSpec:
    """The selection with ``--seed auto`` resolved: a resumed campaign's pinned seed, else a new one."""
    sel = spec.selection
    if sel.seed != SEED_AUTO:
        return sel
    if spec.resume:
        pinned = pinned_settings(outdir).get("seed")
        if isinstance(pinned, int) and pinned >= 0:
            return dataclasses.replace(sel, seed=pinned)
    return sel.resolved()


NO_CHECKER = (
    "no checker, recovery mount and fsck only: the program's data was never looked at (give --checker, "
    "or register one for the workload)"
)


def _anatomy(rec: Any, index: LogIndex) -> dict[str, Any]:
    """The recording's commit anatomy (debug/cause.py); empty when it cannot be made."""
    try:
        return cause.anatomy_of(rec, index)
    except Exception as e:  # noqa: BLE001 -- a price tag, never a reason for a check to fail
        log.warning("no commit anatomy: %s", e)
        return {}


def coverage_of(
    sel: Selection | NodesSelection, verdicts: list[Verdict], ctx: CheckContext
) -> Coverage:
    """What this run covered: the selection's coverage with what was really judged per model (a
    shard, or a run stopped early, judged less) and the checker's note."""
    cov = judged_only(sel.coverage, Counter(v.model for v in verdicts))
    c = ctx.checker
    if not (c.name or c.command or c.function):
        cov = cov.with_note(NO_CHECKER)
    return cov


def lie_target_of(
    rec: recording.Recording, sectorsize: int, lie_file: str = "", disk: int = 0
) -> LieTarget:
    """Where the lying-disk models aim on data disk ``disk`` (core/crashmodels/target.LieTarget): the
    program's own blocks first where the recording mapped that disk's files; with ``lie_file`` that
    file's blocks only (a cluster's: on every node, each node's own file).  An unreadable map only
    loses the preference (no target); a ``lie_file`` the map cannot give is a usage error.
    ``sectorsize``: the log's sector size."""
    path = rec.file_maps[disk]
    node = f" (node {disk})" if len(rec.nodes) > 1 else ""
    if path is None:
        if lie_file:
            raise UsageError(
                f"--lie-file {lie_file}: {rec.dir} has no file map{node} (a recording made before it, "
                "or on btrfs, whose extents are not the device's sectors): record again"
            )
        return NO_TARGET
    try:
        doc = json.loads(path.read_text())
        files = doc["files"]
        chosen = files.get(lie_file.strip("/")) if lie_file else None
        if lie_file and chosen is None:
            near = sorted(files, key=lambda f: (lie_file.rsplit("/", 1)[-1] not in f, f))[:5]
            raise UsageError(
                f"--lie-file {lie_file}: not a file of the program at the end of the recording{node} "
                f"(its files include {', '.join(near) or 'none'})"
            )
        chosen_files = [chosen] if chosen is not None else list(files.values())
        extents = [(int(a), int(n)) for ext in chosen_files for a, n in ext]
        return LieTarget.of(
            extents, sectorsize, int(doc.get("sector_bytes", 512)), only=bool(lie_file)
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        if lie_file:
            raise UsageError(
                f"--lie-file {lie_file}: the recording's file map{node} {path} cannot be read ({e})"
            ) from None
        log.warning(
            "%s: the file map cannot be read (%s): lying-disk models order targets by the log alone",
            path,
            e,
        )
        return NO_TARGET


def disk_latency_of(manifest: dict[str, Any]) -> str:
    """The recording's data-disk latency setting (core/recording/latency.py); ``none`` for recordings made before it."""
    return str(manifest.get("latency", {}).get("setting", "none"))


def run_campaign(
    rec_dir: str | os.PathLike[str],
    spec: CampaignSpec,
    out: str | os.PathLike[str] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
) -> tuple[Summary, dict[str, Path]]:
    """Check a recording of one disk or of N: (summary, the output files by kind)."""
    rec = recording.load(rec_dir).require_ok()
    outdir = check_outdir(rec.dir, spec.shard, out)
    with (
        _open_verified(rec) as logs,
        runlock.hold(outdir, "--out"),
    ):  # no other run works in it meanwhile
        return _campaign(rec, logs, spec, outdir, on_start, on_verdict)


@contextlib.contextmanager
def _open_verified(rec: recording.Recording) -> Iterator[list[LogIndex]]:
    """Every disk's log, scanned once for the whole campaign and verified against its manifest."""
    if any(not n.log.is_file() for n in rec.nodes):
        recording.verify_logs(rec)  # names the missing log
    with contextlib.ExitStack() as stack:
        try:
            logs = [stack.enter_context(open_log(p, quiet=True)) for p in rec.node_logs]
        except BadLog as e:
            raise BadRecording(f"{rec.dir}: the log is not usable: {e.one_line()}") from None
        recording.verify_logs(rec, logs)
        yield logs


def ledger_id(rec: recording.Recording) -> str:
    """What a ledger (campaign/ledger.py) files a recording's passes under: its logs' sha256, joined
    by ``+`` in disk order (one disk's is its own)."""
    return "+".join(str(n.pin.get("sha256", "")) for n in rec.nodes)


def _select(
    rec: recording.Recording, logs: list[LogIndex], spec: CampaignSpec, earlier: frozenset[str]
) -> tuple[CrashSpace | Nodes, Selection | NodesSelection]:
    """The space of the recording's disks (one disk: its CrashSpace; N: Nodes of theirs), each disk's
    aimed by its lying-disk target and told which late flushes its trace cleared, and the states
    chosen in it."""
    cleared = cleared_by_trace(rec, logs)
    spaces = [
        CrashSpace(
            log,
            lie_target=lie_target_of(rec, log.sectorsize, spec.selection.lie_file, i),
            cleared=cleared[i],
        )
        for i, log in enumerate(logs)
    ]
    if len(logs) == 1:
        return spaces[0], select(spaces[0], spec.selection, earlier=earlier)
    cs = Nodes(spaces)
    return cs, select_nodes(cs, spec.selection, node_bound=spec.node_bound, earlier=earlier)


def _ledger_key(space: CrashSpace | Nodes, state_id: str) -> str:
    if isinstance(space, Nodes):
        return key_name(space.key(space.state_from_id(state_id)))
    return state_key(space, space.state_from_id(state_id))


def _campaign(
    rec: recording.Recording,
    logs: list[LogIndex],
    spec: CampaignSpec,
    outdir: Path,
    on_start: Callable[[int, int], None] | None,
    on_verdict: Callable[[Verdict], None] | None,
) -> tuple[Summary, dict[str, Path]]:
    ctx = context_for(
        rec, spec.checker_command, spec.checker_timeout_s, spec.checker_function, spec.checker_path
    )
    spec.place.require()
    prepare_out(outdir, spec.resume, spec.force)
    spec = dataclasses.replace(spec, selection=_seeded(spec, outdir))
    pin_settings(outdir, spec.settings(rec), spec.resume)
    t0 = time.monotonic()
    status = "complete"
    ctx = with_node_faults(
        ctx, logs
    )  # each disk's fault windows (several: acked-after-error names the node)
    logs_id = ledger_id(rec)
    earlier = ledger.load(spec.ledger, logs_id) if spec.ledger else frozenset()
    space, sel = _select(rec, logs, spec, earlier)
    if not sel.states:  # nothing judged is not a pass
        raise UsageError(
            f"{rec.dir}: no crash state to judge under {', '.join(spec.models)}: the log holds "
            "no write after the mkfs mark"
        )
    everything = len(sel.states)
    sel = dataclasses.replace(sel, states=spec.shard.take(sel.states))  # type: ignore[arg-type]
    if not sel.states:
        raise UsageError(
            f"shard {spec.shard} is empty: the campaign has {everything} distinct states for "
            f"{spec.shard.total} shards; use fewer shards"
        )
    journal = Journal(outdir / "journal.jsonl", resume=spec.resume)
    run = CampaignRun(spec, rec, ctx, outdir, logs, space, sel, journal, on_verdict)
    try:
        if on_start:
            on_start(len(sel.states), sum(1 for s in sel.states if s.id in journal.done))
        todo = [s for s in sel.states if s.id not in journal.done]
        run.judge(todo, run.sink, outdir / "work", spec.workers(), prove=spec.prove)
        run.triage()  # groups, diagnoses, confirmation by group, bundles
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except BaseException:
        status = "error"
        raise
    finally:
        run.place.close_warm(force=status != "complete")
        journal.close()
        wanted = {s.id for s in sel.states}
        verdicts = [v for sid, v in journal.done.items() if sid in wanted]
        cov = coverage_of(sel, verdicts, ctx)
        if spec.selection.lie_file:  # a pass there speaks for that file's blocks only
            cov = cov.with_note(
                f"lies only about {spec.selection.lie_file} (--lie-file)", LIE_MODELS
            )
        if spec.ledger and verdicts:  # passes only: a failing state is judged again next time
            ledger.add(
                spec.ledger,
                logs_id,
                (_ledger_key(space, v.state) for v in verdicts if not v.failed),
            )
        acks = (
            len(logs[0].acks())
            if isinstance(space, CrashSpace)
            else sum(1 for ev in space.events if ev[0])
        )
        summary = summarize(
            verdicts,
            recording=str(rec.dir),
            fstype=rec.fstype,
            workload=spec.label or rec.workload_label,
            check_in=spec.place.check_in,
            seconds=time.monotonic() - t0,
            selection=sel,
            status=status,
            confirm_s=run.confirm_s,
            rejudged=run.confirmed,
            confirm_mode=(spec.confirm_mode if spec.confirm else "off"),
            confirm_sample=spec.confirm_sample,
            escalated=len(run.escalated),
            groups=[g.to_json() for g in run.groups],
            triage_s=run.triage_s,
            acks=acks,
            allow_no_acks=spec.allow_no_acks,
            shard="" if spec.shard.whole else str(spec.shard),
            coverage=cov,
            require_exhaustive=spec.require_exhaustive,
            anatomy=_anatomy(rec, logs[0]) if len(logs) == 1 else {},
            trace_note=cause.trace_note(rec),
            disk_latency=disk_latency_of(rec.manifest),
            nodes=len(logs),
            delay_sync=tuple(rec.workload.get("delay_sync") or ()),
            start=rec.start,
            proofs=run.proofs.stats.to_json() if run.proofs.checked else {},
            doubts=unordered_acks(logs[0]) if len(logs) == 1 else (),
            readset_mismatch=run.rule.mismatch.line() if run.rule and run.rule.mismatch else "",
            readset_stopped=run.rule.stopped if run.rule else "",
        )
        paths = write_outputs(summary, verdicts, outdir)
        paths["html"] = html.write(summary, outdir, verdicts, logs)
    return summary, paths

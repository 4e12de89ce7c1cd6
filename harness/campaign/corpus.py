"""Running the corpus of published durability bugs (host): build each entry's pinned releases once
into a cache, record and judge each release as a crash test (campaign/crashtest.py) through the
entry's driver (``driver run`` as the workload, ``driver check`` as the checker), and say what each
release gave (report/corpus.py's ``Release``).

The build is the only step that needs the network (the Go module proxy, crates.io, Maven Central):
``build`` runs the program folder's ``build.sh VERSION OUT`` into
``/var/cache/powercut/corpus/<program>-<VERSION>`` and stamps the folder's digest there, so a
second run (or a nightly one) builds nothing until the driver's sources change; the recording VM
runs the host's root read-only, so it and the checks use the cached build.

Crash, recover, crash again (an entry's ``second``): each release is recorded a second time from
the last crash state of the entry's model in its first recording (``record --from``: the state's
image, recovered by the kernel and the program at the second run's start), and judged again; the
second run's verdict is the one the entry is judged by."""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from powercut.campaign import crashtest
from powercut.check.place import Place
from powercut.core.judging.verdict import Verdict
from powercut.core.states.selection import SelectionSpec
from powercut.errors import PowercutError
from powercut.linux import process
from powercut.linux.jsonlines import read_lines
from powercut.report.corpus import Entry, Release, Result, message_in, program_dir

log = logging.getLogger(__name__)

CACHE = Path("/var/cache/powercut/corpus")
COMMON = (
    "common"  # workloads/corpus/common: what several drivers compile in (no program of its own)
)
STAMP = ".powercut-source"  # in a build's folder: the digest of the sources it was built from
BUILD_TIMEOUT_S = 3600.0
BUILD_LOG = "build.log"
JOURNAL = "journal.jsonl"  # a check's verdicts (campaign/journal.py)


class BuildError(PowercutError):
    """A corpus release cannot be built here: one line naming the step and its last output."""


def source_digest(folder: Path) -> str:
    """The digest of a program folder's files and of the drivers' shared ``common`` folder beside
    it (names and bytes): what a build is stamped with."""
    h = hashlib.sha256()
    for top in (folder, folder.parent / COMMON):
        for p in sorted(top.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(p.relative_to(top.parent).as_posix().encode() + b"\0")
                h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def built(program: str, version: str, cache: Path = CACHE) -> Path:
    """Where a release's build lies (its ``driver`` inside)."""
    return cache / f"{program}-{version}"


def is_built(program: str, version: str, cache: Path = CACHE) -> bool:
    out = built(program, version, cache)
    try:
        stamp = (out / STAMP).read_text().strip()
    except OSError:
        return False
    fresh = stamp == source_digest(program_dir(program))
    return fresh and os.access(out / "driver", os.X_OK)


def build(
    program: str, version: str, cache: Path = CACHE, timeout: float = BUILD_TIMEOUT_S
) -> Path:
    """Build ``program`` at ``version`` (nothing when its build is there and fresh); BuildError."""
    out = built(program, version, cache)
    if is_built(program, version, cache):
        return out
    folder = program_dir(program)
    script = folder / "build.sh"
    if not script.is_file():
        raise BuildError(f"cannot build {program} {version}: no {script}")
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP).unlink(missing_ok=True)
    log.info("corpus: building %s %s into %s", program, version, out)
    try:
        r = process.run(
            ["bash", str(script), version, str(out)], cwd=str(folder), timeout=timeout, check=False
        )
    except PowercutError as e:
        raise BuildError(f"cannot build {program} {version}: {e}") from None
    (out / BUILD_LOG).write_text(r.stdout + r.stderr)
    if not r.ok:
        said = f"exited {r.returncode}" if r.returncode is not None else f"ran over {timeout:g} s"
        tail = _last_line(out / BUILD_LOG)
        raise BuildError(
            f"cannot build {program} {version}: build.sh {said}: {tail} "
            f"(all of it: {out / BUILD_LOG})"
        )
    if not os.access(out / "driver", os.X_OK):
        raise BuildError(
            f"cannot build {program} {version}: build.sh left no executable {out}/driver"
        )
    (out / STAMP).write_text(source_digest(folder) + "\n")
    return out


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return lines[-1][:300] if lines else "(no output)"


def test_of(
    entry: Entry,
    version: str,
    *,
    cache: Path = CACHE,
    place: Place | None = None,
    params: dict[str, Any] | None = None,
    start: tuple[Path, str] | None = None,
) -> crashtest.CrashTest:
    """The crash test of one release: the entry's driver, filesystem, models and cap; ``start``:
    (a first recording, one of its states) to record from (crash, recover, crash again)."""
    d = built(entry.program, version, cache)
    where = place or Place()
    return crashtest.CrashTest(
        name=f"{entry.name}@{version}",
        workload_cmd=f"{d}/driver run",
        checker_cmd=f"{d}/driver check",
        params=dict(entry.params if params is None else params),
        fs=entry.fs,
        selection=SelectionSpec(models=entry.models, max_states=entry.max_states),
        place=Place(
            entry.check_in, where.accel, jobs=where.jobs, state_timeout_s=where.state_timeout_s
        ),
        expect="pass",
        nodes=entry.nodes,
        delay_sync=entry.delay_sync,
        trace=entry.trace,
        start=start,
    )


def release_of(version: str, outcome: crashtest.Outcome, message: str, seconds: float) -> Release:
    """What a release's crash test found, in the corpus's terms."""
    s = outcome.summary
    reasons = [r for f in s.failures for r in f.reasons]
    first = min(s.failures, key=lambda v: (v.cut, v.state)) if s.failures else None
    group = the_group(s, message)
    why = group.get("why") or {}
    proof = ""
    if why.get("proven") is True:
        proof = "proven"
    elif why.get("proven") is False:
        proof = "not proven"
    error = ""
    if s.status != "complete":
        error = f"the check did not complete ({s.status})"
    elif s.no_acks:
        error = "the recording acknowledged nothing"
    return Release(
        version=version,
        verdict=s.verdict,
        judged=s.total,
        failing=len(s.failures),
        verdicts=tuple(sorted({f.verdict for f in s.failures})),
        coverage=s.coverage_phrase(),
        message_seen=message_in(message, reasons),
        first_reason=next(
            (r for r in reasons if message and message in r),
            first.reasons[0] if first and first.reasons else "",
        )[:300],
        cause=str(why.get("rule", "")),
        proof=proof,
        seconds=round(seconds, 1),
        error=error,
    )


def the_group(s: Any, message: str) -> dict[str, Any]:
    """The failure group the entry's bug is: the first whose first state's reasons hold the
    entry's message (another bug of the same release may fail first), else the first group."""
    said = {v.state: v.reasons for v in s.failures}
    for g in s.groups:
        if message and any(message in r for r in said.get(g.get("first", ""), ())):
            return dict(g)
    return dict(s.groups[0]) if s.groups else {}


def run_release(
    entry: Entry,
    version: str,
    out: Path,
    *,
    cache: Path = CACHE,
    place: Place | None = None,
    params: dict[str, Any] | None = None,
    start: tuple[Path, str] | None = None,
) -> tuple[Release, crashtest.Outcome | None]:
    """Record and judge one release into ``out``; a failure to do so is the Release's ``error``."""
    t0 = time.monotonic()
    try:
        test = test_of(entry, version, cache=cache, place=place, params=params, start=start)
        outcome = crashtest.run(test, out)
    except (PowercutError, OSError) as e:
        text = str(e).splitlines()[0] if str(e) else type(e).__name__
        return Release(version, "error", error=text, seconds=round(time.monotonic() - t0, 1)), None
    return release_of(version, outcome, entry.message, time.monotonic() - t0), outcome


def last_state(journal: Path, model: str) -> str:
    """The passing state of ``model`` with the latest cut among those a first run judged ("" if
    none): the most that run wrote which its recovery got through."""
    best: tuple[int, str] = (-1, "")
    for obj in read_lines(journal)[0]:
        v = Verdict.from_json(obj)
        if v.model == model and v.verdict == "pass" and v.cut > best[0]:
            best = (v.cut, v.state)
    return best[1]


def run_entry(
    entry: Entry,
    out: Path,
    *,
    cache: Path = CACHE,
    place: Place | None = None,
    on_release: Callable[[str, Release], None] | None = None,
) -> Result:
    """Build both releases, record and judge each (and, with ``second``, again from a crash state of
    its first recording); ``out/<entry>/<role>``."""
    said = on_release or (lambda role, r: None)
    runs: dict[str, Release] = {}
    for role, version in entry.releases():
        t0 = time.monotonic()
        try:
            build(entry.program, version, cache)
        except BuildError as e:
            runs[role] = Release(version, "error", error=str(e), seconds=time.monotonic() - t0)
            said(role, runs[role])
            continue
        first, outcome = run_release(
            entry, version, out / entry.name / role, cache=cache, place=place
        )
        runs[role] = first
        said(role, first)
        if entry.second is None or outcome is None:
            continue
        state = last_state(outcome.paths["summary"].parent / JOURNAL, entry.second.model)
        second_role = f"{role}_second"
        if not state:
            runs[second_role] = Release(
                version, "error", error=f"the first run judged no {entry.second.model} state"
            )
        else:
            rec = outcome.out / "recording"
            again, _ = run_release(
                entry,
                version,
                out / entry.name / second_role,
                cache=cache,
                place=place,
                params={**entry.params, **entry.second.params},
                start=(rec, state),
            )
            runs[second_role] = Release(**{**_fields(again), "states": state})
        said(second_role, runs[second_role])
    return Result(
        entry,
        runs["buggy"],
        runs["fixed"],
        runs.get("buggy_second"),
        runs.get("fixed_second"),
    )


def _fields(r: Release) -> dict[str, Any]:
    return {k: getattr(r, k) for k in Release.__slots__}

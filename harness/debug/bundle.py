"""Repro bundles (host): a failing state of N >= 1 disks saved as a directory that travels alone --
``bundle.json`` (the state and its minimized form, the verdict and reasons, the cause and the blame,
the filesystem, mount options, checker and workload parameters, where it came from) and the log of
each disk, cut right after the last entry the state needs (so the state ids keep their meaning),
each with its SHA-256.  ``powercut repro BUNDLE`` rebuilds the state from it and judges it again
(debug/repro.py); a missing or altered log is one clear error, never a wrong verdict.

One layout for every N (format 2): the logs ``log0.bin``, ``log1.bin``, ... (one disk's too), and
bundle.json with ``nodes`` (how many disks), ``logs`` (one pin per disk, node 0 first: its file,
sha256 and entries), ``instant`` (the verdict's cut: one disk's cut, a cluster's instant),
``minimized_reasons``, ``cause`` (the cause line; with several disks it names the nodes) and
``blame`` (per disk the texts of its blamed writes).  Several disks' logs are each cut just after
the key mark that ends the state's instant (core/judging/nodesshrink.bundle_cuts: every cut log
keeps the same key marks, so the logs still make one cluster and the node ids keep their meaning).
A state of a recording made from another's crash state (``record --from``) starts from that
state's image, not zeros: the bundle carries it, ``initial.img`` (sparse), pinned by its sha256 in
``initial``, and names the first cut in ``from``.

Bundles written before (format 1) had two layouts -- one disk's ``log.bin`` with bundle.json's
``log`` pin and none of ``nodes``/``logs``/``instant``/``minimized_reasons``/``cause``/``blame``, and
several disks' with ``kind: "cluster"`` -- and still load: ``load`` turns their bundle.json into the
format-2 form in memory (``_upgrade``, the one place that knows the old layouts), so what reads a
``Bundle`` sees one form.  tests/unit/debug/bundles/ holds one bundle of each old layout."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.checker import CheckerSpec
from powercut.checker import get as get_checker
from powercut.core.log.dmlog_writer import trim_log
from powercut.core.states.stateid import parse_id
from powercut.debug.diagnosis import culprits_of
from powercut.errors import UsageError
from powercut.linux.imageio import sparse_copy

FORMAT = 2
READS = (1, FORMAT)  # the formats load reads (1: through _upgrade)
MANIFEST = "bundle.json"
TRACE = (
    "syscalls.txt.gz"  # the recording's system-call trace (core/trace/syscalls.py), when it has one
)
INITIAL = "initial.img"  # node 0's image before its log (a recording made from a crash state)
DAMAGED = "the bundle is damaged: write it again with powercut check"


def log_name(node: int) -> str:
    """The file of disk ``node``'s log in a bundle."""
    return f"log{node}.bin"


@dataclass(frozen=True, slots=True)
class Bundle:
    dir: Path
    doc: dict[str, Any]  # bundle.json in the format-2 form (load upgrades an older one)

    @property
    def nodes(self) -> int:
        """How many disks the state has (1: one disk; a cluster's nodes)."""
        return int(self.doc["nodes"])

    @property
    def pins(self) -> list[dict[str, Any]]:
        """Each disk's log as bundle.json pins it (file, sha256, entries), node 0 first."""
        return list(self.doc["logs"])

    @property
    def logs(self) -> tuple[Path, ...]:
        return tuple(self.dir / str(p["file"]) for p in self.pins)

    @property
    def log_path(self) -> Path:
        """Node 0's log (one disk's only one)."""
        return self.logs[0]

    @property
    def initial(self) -> Path | None:
        """Node 0's image before its log (a recording made from a crash state); None: zeros."""
        pin = self.doc.get("initial")
        return self.dir / str(pin["file"]) if isinstance(pin, dict) else None

    @property
    def state(self) -> str:
        """The state to judge: the minimized one when there is one."""
        return str(self.doc.get("minimized") or self.doc["state"])

    @property
    def cause(self) -> str:
        """The cause line ("" without a diagnosis); with several disks it names the nodes."""
        return str(self.doc.get("cause") or "")

    @property
    def checker(self) -> CheckerSpec:
        c = self.doc.get("checker", {})
        return CheckerSpec(
            name=str(c.get("name", "")),
            command=str(c.get("command", "")),
            timeout_s=float(c.get("timeout_s", 120.0)),
            function=str(c.get("function", "")),
            path=tuple(str(p) for p in c.get("path", ())),
        )


def write(
    dest: Path,
    *,
    recording: str,
    data_size: int,
    fstype: str,
    mount_opts: str,
    checker: CheckerSpec,
    params: dict[str, Any],
    workload: dict[str, Any],
    verdict: Any,
    logs: Sequence[Path],
    cuts: Sequence[int],
    diagnosis: Any = None,
    trace: Path | None = None,
    why: dict[str, Any] | None = None,
    initial: Path | None = None,
    start: dict[str, Any] | None = None,
) -> Path:
    """Write a bundle for ``verdict`` (and its ``diagnosis``, debug/diagnosis.Diagnosis) into the new
    directory ``dest``.  ``logs``: every disk's log, node 0 first (one for one disk), ``cuts``: per
    disk how many entries it keeps (0: all).  ``trace``: the recording's system-call trace, copied
    in; ``why``: the group's cause in the program's terms."""
    if len(logs) != len(cuts) or len(logs) < 1:
        raise UsageError(f"a bundle has one log cut per disk: {len(logs)} logs, {len(cuts)} cuts")
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        pins = []
        for i, (src, c) in enumerate(zip(logs, cuts)):
            name = log_name(i)
            entries = trim_log(src, tmp / name, c)
            pins.append({"file": name, "sha256": sha256(tmp / name), "entries": entries})
        doc = _manifest(
            pins,
            recording=recording,
            data_size=data_size,
            fstype=fstype,
            mount_opts=mount_opts,
            checker=checker,
            params=params,
            workload=workload,
            verdict=verdict,
            diagnosis=diagnosis,
        )
        if why:
            doc["why"] = why
        if initial is not None:
            sparse_copy(initial, tmp / INITIAL)
            doc["initial"] = {"file": INITIAL, "sha256": sha256(tmp / INITIAL)}
        if start:
            doc["from"] = start
        if trace is not None and trace.is_file():
            shutil.copyfile(trace, tmp / TRACE)
            doc["trace"] = TRACE
        (tmp / MANIFEST).write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _manifest(
    pins: list[dict[str, Any]],
    *,
    recording: str,
    data_size: int,
    fstype: str,
    mount_opts: str,
    checker: CheckerSpec,
    params: dict[str, Any],
    workload: dict[str, Any],
    verdict: Any,
    diagnosis: Any,
) -> dict[str, Any]:
    """bundle.json's keys, in their order (``why`` and ``trace`` follow when there are)."""
    n, d = len(pins), diagnosis
    return {
        "format": FORMAT,
        "nodes": n,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "recording": recording,
        "logs": pins,
        "data_size": data_size,
        "fstype": fstype,
        "mount_opts": mount_opts,
        "checker": {
            "name": checker.name,
            "command": checker.command,
            "timeout_s": checker.timeout_s,
            **(
                {"function": checker.function, "path": list(checker.path)}
                if checker.function
                else {}
            ),
        },
        "params": params,
        "workload": workload,
        "state": verdict.state,
        "instant": verdict.cut,
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "minimized": d.minimized if d is not None else "",
        "minimized_reasons": list(d.minimized_reasons) if d is not None else [],
        "cause": d.cause if d is not None else "",
        "blame": [
            [c.get("text", "") for c in d.culprits(i)] if d is not None else [] for i in range(n)
        ],
        "diagnosis": d.to_json() if d is not None else None,
    }


def _upgrade(doc: dict[str, Any], where: str) -> dict[str, Any]:
    """A format-1 bundle.json of either old layout in the format-2 form (a new dict; ``format`` still
    says 1): one disk's ``log`` pin becomes ``logs`` (its file ``log.bin``) with ``nodes`` 1, and the
    keys it did not have are taken from its diagnosis and state id as the writer takes them (empty
    without a diagnosis); several disks' loses ``kind`` (and a ``blame`` of no diagnosis, ``[]``,
    becomes one empty list per node).  UsageError naming ``log`` if one disk's pin is damaged."""
    new = {k: v for k, v in doc.items() if k not in ("kind", "log")}
    if doc.get("kind") != "cluster":  # one disk's layout
        pin = doc.get("log")
        if not isinstance(pin, dict) or not isinstance(pin.get("sha256"), str):
            raise UsageError(
                f"{where}: log is {pin!r}, not an object with the log's sha256; {DAMAGED}"
            )
        diag = doc.get("diagnosis")
        if not isinstance(diag, dict):
            diag = {}  # written without a diagnosis
        reasons = diag.get("minimized_reasons")
        cause = diag.get("cause")
        new.update(
            nodes=1,
            logs=[{**pin, "file": "log.bin"}],
            instant=_cut_of(doc.get("state")),
            minimized_reasons=list(reasons) if isinstance(reasons, list) else [],
            cause=cause if isinstance(cause, str) else "",
            blame=[[c.get("text", "") for c in culprits_of(diag) if isinstance(c, dict)]],
        )
    logs = new.get("logs")
    for key, empty in (
        ("instant", None),
        ("minimized_reasons", []),
        ("cause", ""),
        ("blame", [[] for _ in logs] if isinstance(logs, list) else []),
    ):
        if new.get(key) in (None, []):
            new[key] = empty
    return new  # its diagnosis as written: debug/diagnosis.py reads either of its layouts


def _cut_of(state: object) -> int | None:
    """One disk's state id's cut (its verdict's cut), None if the id is malformed."""
    try:
        return parse_id(state).cut
    except UsageError:
        return None


def validate(doc: dict[str, Any], where: str) -> None:
    """The keys every bundle has (format-2 form), with their types: one UsageError naming the first
    that is wrong."""

    def bad(key: str, want: str) -> UsageError:
        return UsageError(f"{where}: {key} is {doc.get(key)!r}, not {want}; {DAMAGED}")

    nodes, logs = doc.get("nodes"), doc.get("logs")
    if (
        not isinstance(nodes, int)
        or isinstance(nodes, bool)
        or nodes < 1
        or not isinstance(logs, list)
        or len(logs) != nodes
        or not all(
            isinstance(x, dict)
            and isinstance(x.get("file"), str)
            and isinstance(x.get("sha256"), str)
            for x in logs
        )
    ):
        raise UsageError(
            f"{where}: nodes is {nodes!r} with {len(logs) if isinstance(logs, list) else 'no'} logs, "
            f"not one log (file and sha256) per node; {DAMAGED}"
        )
    if not isinstance(doc.get("fstype"), str) or not doc["fstype"]:
        raise bad("fstype", "a filesystem name")
    size = doc.get("data_size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0 or size % 512:
        raise bad("data_size", "a positive whole number of bytes (a multiple of 512)")
    for key, kind in (("state", str), ("cause", str), ("params", dict), ("checker", dict)):
        if key in doc and not isinstance(doc[key], kind):
            raise bad(key, f"a JSON {'string' if kind is str else 'object'}")
    checker = doc.get("checker") or {}
    if checker.get("name"):
        get_checker(str(checker["name"]))  # an unknown checker name is one UsageError line


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path: str | Path) -> Bundle:
    """Read and verify a bundle (format 2, or 1 through ``_upgrade``): one clear UsageError if
    anything is missing or altered."""
    d = Path(path)
    if not d.is_dir():
        raise UsageError(f"{path}: not a repro bundle directory")
    try:
        doc = json.loads((d / MANIFEST).read_text())
    except OSError:
        raise UsageError(f"{path}: no {MANIFEST}: not a repro bundle") from None
    except ValueError as e:
        raise UsageError(f"{path}/{MANIFEST}: not valid JSON ({e})") from None
    where = f"{path}/{MANIFEST}"
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if type(fmt) is not int or fmt not in READS or "state" not in doc:
        raise UsageError(f"{where}: not a bundle of format {' or '.join(str(f) for f in READS)}")
    if fmt != FORMAT:
        doc = _upgrade(doc, where)
    validate(doc, where)
    b = Bundle(d, doc)
    several = b.nodes > 1
    for n, (p, pin) in enumerate(zip(b.logs, b.pins)):
        what = f"node {n}'s log {pin['file']}" if several else pin["file"]
        if p.parent != d or not p.is_file():
            raise UsageError(
                f"bundle {path}: {what} is missing (the bundle cannot rebuild its "
                f"{'cluster ' if several else ''}state without it)"
            )
        _verify(path, what, p, pin)
    start = doc.get("initial")
    if start is not None:
        if not isinstance(start, dict) or not isinstance(start.get("sha256"), str):
            raise UsageError(f"{where}: initial is {start!r}, not the image's file and sha256")
        image = d / str(start.get("file", INITIAL))
        if image.parent != d or not image.is_file():
            raise UsageError(
                f"bundle {path}: the initial image {image.name} is missing (the state starts "
                "from it, not from zeros)"
            )
        _verify(path, f"the initial image {image.name}", image, start)
    return b


def _verify(path: str | Path, what: str, p: Path, pin: dict[str, Any]) -> None:
    got = sha256(p)
    if got != pin["sha256"]:
        raise UsageError(
            f"bundle {path}: {what} was altered (sha256 {got[:12]}..., the bundle says "
            f"{pin['sha256'][:12]}...)"
        )

"""Repro bundles (host): a failing state of N >= 1 disks saved as a directory that travels alone --
``bundle.json`` (the state and its minimized form, the verdict and reasons, the blame, the
filesystem, mount options, checker and workload parameters, where it came from) and the log of
each disk, cut right after the last entry the state needs (so the state ids keep their meaning),
each with its SHA-256.  ``powercut repro BUNDLE`` rebuilds the state from it and judges it again
(debug/repro.py); a missing or altered log is one clear error, never a wrong verdict.

The number of disks is a value of the one format, which has two layouts: one disk (N = 1) writes
``log.bin`` and bundle.json's ``log`` (its file, sha256 and entries); several (a cluster's nodes)
write ``log0.bin``, ``log1.bin``, ..., bundle.json's ``kind: "cluster"``, ``nodes`` and ``logs``
(one pin per node, node 0 first), each node's log cut just after the key mark that ends the state's
instant (core/judging/disksshrink.bundle_cuts: every cut log keeps the same key marks, so the logs still
make one cluster and the node ids keep their meaning), with the instant, the cause naming the nodes
and the blame per node.  Both layouts are read by ``load``; tests/unit/debug/bundles/ holds one of
each as the writers before the one format wrote them."""

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
from powercut.errors import UsageError

FORMAT = 1
LOG = "log.bin"  # one disk's log
MANIFEST = "bundle.json"
KIND = "cluster"  # bundle.json's kind with several disks (one disk's has none)
TRACE = (
    "syscalls.txt.gz"  # the recording's system-call trace (core/trace/syscalls.py), when it has one
)


def log_name(node: int, nodes: int) -> str:
    """The file of disk ``node``'s log in a bundle of ``nodes`` disks."""
    return LOG if nodes == 1 else f"log{node}.bin"


@dataclass(frozen=True, slots=True)
class Bundle:
    dir: Path
    doc: dict[str, Any]

    @property
    def nodes(self) -> int:
        """How many disks the state has (1: one disk; a cluster's nodes)."""
        return int(self.doc["nodes"]) if is_cluster(self.doc) else 1

    @property
    def pins(self) -> list[dict[str, Any]]:
        """Each disk's log as bundle.json pins it (file, sha256, entries), node 0 first."""
        if is_cluster(self.doc):
            return list(self.doc["logs"])
        return [{**self.doc["log"], "file": LOG}]

    @property
    def logs(self) -> tuple[Path, ...]:
        return tuple(self.dir / str(p["file"]) for p in self.pins)

    @property
    def log_path(self) -> Path:
        """Node 0's log (one disk's only one)."""
        return self.logs[0]

    @property
    def state(self) -> str:
        """The state to judge: the minimized one when there is one."""
        return str(self.doc.get("minimized") or self.doc["state"])

    @property
    def cause(self) -> str:
        """The cause line naming the nodes (a cluster's; one disk's is in ``why``)."""
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


def is_cluster(doc: object) -> bool:
    """A bundle.json of several disks' layout."""
    return isinstance(doc, dict) and doc.get("kind") == KIND


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
    diagnosis: Any = None,
    logs: Sequence[Path] = (),
    cuts: Sequence[int] = (),
    log_path: Path | None = None,
    cut: int = 0,
    trace: Path | None = None,
    why: dict[str, Any] | None = None,
) -> Path:
    """Write a bundle for ``verdict`` (and its ``diagnosis``, debug/diagnosis.Diagnosis) into the new
    directory ``dest``.  ``logs``:
    every disk's log, node 0 first, ``cuts``: per disk how many entries it keeps (0: all);
    ``log_path`` and ``cut``: the same for one disk.  ``trace``: the recording's system-call trace,
    copied in; ``why``: the group's cause in the program's terms."""
    if log_path is not None:
        if logs:
            raise UsageError(
                "a bundle's logs are log_path (one disk) or logs (one per disk), not both"
            )
        logs, cuts = [log_path], [cut]
    if len(logs) != len(cuts) or len(logs) < 1:
        raise UsageError(f"a bundle has one log cut per disk: {len(logs)} logs, {len(cuts)} cuts")
    n = len(logs)
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        pins = []
        for i, (src, c) in enumerate(zip(logs, cuts)):
            name = log_name(i, n)
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
    """bundle.json's keys, in the order (and with the keys) of each layout."""
    n, d = len(pins), diagnosis
    several = n > 1
    return {
        "format": FORMAT,
        **({"kind": KIND, "nodes": n} if several else {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "recording": recording,
        **({"logs": pins} if several else {"log": pins[0]}),
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
        **({"instant": verdict.cut} if several else {}),
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "minimized": d.minimized if d is not None else "",
        **(
            {
                "minimized_reasons": list(d.minimized_reasons) if d is not None else [],
                "cause": d.cause if d is not None else "",
                "blame": [[c.get("text", "") for c in d.culprits(i)] for i in range(n)]
                if d is not None
                else [],
            }
            if several
            else {}
        ),
        "diagnosis": d.to_json() if d is not None else None,
    }


def validate(doc: dict[str, Any], where: str) -> None:
    """The keys every bundle has, with their types: one UsageError naming the first that is wrong."""

    def bad(key: str, want: str) -> UsageError:
        return UsageError(
            f"{where}: {key} is {doc.get(key)!r}, not {want}; the bundle is damaged: write it again "
            "with powercut check"
        )

    if not isinstance(doc.get("fstype"), str) or not doc["fstype"]:
        raise bad("fstype", "a filesystem name")
    size = doc.get("data_size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0 or size % 512:
        raise bad("data_size", "a positive whole number of bytes (a multiple of 512)")
    for key, kind in (("state", str), ("params", dict), ("checker", dict)):
        if key in doc and not isinstance(doc[key], kind):
            raise bad(key, f"a JSON {'string' if kind is str else 'object'}")
    checker = doc.get("checker") or {}
    if checker.get("name"):
        get_checker(str(checker["name"]))  # an unknown checker name is one UsageError line


def _validate_logs(doc: dict[str, Any], where: str) -> None:
    """The log pins of the bundle's layout: one UsageError if they are not what it needs."""
    if not is_cluster(doc):
        if not isinstance(doc.get("log"), dict) or not isinstance(doc["log"].get("sha256"), str):
            raise UsageError(
                f"{where}: log is {doc.get('log')!r}, not an object with the log's sha256; the bundle "
                "is damaged: write it again with powercut check"
            )
        return
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
            "not one log (file and sha256) per node; the bundle is damaged: write it again with "
            "powercut check"
        )


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path: str | Path) -> Bundle:
    """Read and verify a bundle of either layout: one clear UsageError if anything is missing or altered."""
    d = Path(path)
    if not d.is_dir():
        raise UsageError(f"{path}: not a repro bundle directory")
    try:
        doc = json.loads((d / MANIFEST).read_text())
    except OSError:
        raise UsageError(f"{path}: no {MANIFEST}: not a repro bundle") from None
    except ValueError as e:
        raise UsageError(f"{path}/{MANIFEST}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or "state" not in doc:
        raise UsageError(f"{path}/{MANIFEST}: not a bundle of format {FORMAT}")
    where = f"{path}/{MANIFEST}"
    _validate_logs(doc, where)
    validate(doc, where)
    b = Bundle(d, doc)
    several = is_cluster(doc)
    for n, (p, pin) in enumerate(zip(b.logs, b.pins)):
        what = f"node {n}'s log {pin['file']}" if several else LOG
        if p.parent != d or not p.is_file():
            raise UsageError(
                f"bundle {path}: {what} is missing (the bundle cannot rebuild its "
                f"{'cluster ' if several else ''}state without it)"
            )
        got = sha256(p)
        if got != pin["sha256"]:
            raise UsageError(
                f"bundle {path}: {what} was altered (sha256 {got[:12]}..., the bundle says "
                f"{pin['sha256'][:12]}...)"
            )
    return b

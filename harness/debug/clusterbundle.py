"""Repro bundles of a cluster failure (host): a directory that travels alone -- ``bundle.json`` (the
cluster state id and its minimized form, the nodes count, the verdict and reasons, the blame per
node, the filesystem, mount options, checker and workload parameters, where it came from) and one
log per node, ``log0.bin``, ``log1.bin``, ..., each the node's log cut just after the key mark that
ends the state's instant (core/clustershrink.bundle_cuts: every cut log keeps the same key marks,
so the logs still make one cluster and the node ids keep their meaning), each with its SHA-256.
``powercut repro BUNDLE --check-in host`` rebuilds the cluster state from it and judges it again
(debug/clusterrepro.py); a missing or altered node log is one clear error, never a wrong verdict."""
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.checker import CheckerSpec
from powercut.core.dmlog_writer import trim_log
from powercut.core.verdict import Verdict
from powercut.debug import bundle
from powercut.debug.clusterdebug import ClusterDiagnosis
from powercut.errors import UsageError

KIND = "cluster"


def log_name(node: int) -> str:
    return f"log{node}.bin"


@dataclass(frozen=True, slots=True)
class ClusterBundle:
    dir: Path
    doc: dict[str, Any]

    @property
    def nodes(self) -> int:
        return int(self.doc["nodes"])

    @property
    def logs(self) -> tuple[Path, ...]:
        return tuple(self.dir / str(x["file"]) for x in self.doc["logs"])

    @property
    def state(self) -> str:
        """The cluster state to judge: the minimized one when there is one."""
        return str(self.doc.get("minimized") or self.doc["state"])

    @property
    def checker(self) -> CheckerSpec:
        return bundle.Bundle(self.dir, self.doc).checker


def is_cluster(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def write(dest: Path, *, recording: str, logs: Sequence[Path], cuts: Sequence[int], data_size: int, fstype: str,
          mount_opts: str, checker: CheckerSpec, params: dict[str, Any], workload: dict[str, Any],
          verdict: Verdict, diagnosis: ClusterDiagnosis | None = None) -> Path:
    """Write a cluster bundle for ``verdict`` (and its ``diagnosis``) into the new directory
    ``dest``; ``cuts``: per node, how many log entries it keeps."""
    if len(logs) != len(cuts) or len(logs) < 1:
        raise UsageError(f"a cluster bundle has one log cut per node: {len(logs)} logs, {len(cuts)} cuts")
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        pinned = []
        for n, (src, cut) in enumerate(zip(logs, cuts)):
            entries = trim_log(src, tmp / log_name(n), cut)
            pinned.append({"file": log_name(n), "sha256": bundle.sha256(tmp / log_name(n)), "entries": entries})
        d = diagnosis
        doc = {"format": bundle.FORMAT, "kind": KIND, "nodes": len(logs),
               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "recording": recording,
               "logs": pinned, "data_size": data_size, "fstype": fstype, "mount_opts": mount_opts,
               "checker": {"name": checker.name, "command": checker.command, "timeout_s": checker.timeout_s,
                           **({"function": checker.function, "path": list(checker.path)} if checker.function else {})},
               "params": params, "workload": workload, "state": verdict.state, "instant": verdict.cut,
               "verdict": verdict.verdict, "reasons": list(verdict.reasons),
               "minimized": d.minimized if d is not None else "",
               "minimized_reasons": list(d.minimized_reasons) if d is not None else [],
               "cause": d.cause if d is not None else "",
               "blame": [[c.get("text", "") for c in d.culprits(n)] for n in range(len(logs))] if d is not None else [],
               "diagnosis": d.to_json() if d is not None else None}
        (tmp / bundle.MANIFEST).write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def load(path: str | Path) -> ClusterBundle:
    """Read and verify a cluster bundle: one clear UsageError if anything is missing or altered."""
    d = Path(path)
    try:
        doc = json.loads((d / bundle.MANIFEST).read_text())
    except OSError:
        raise UsageError(f"{path}: no {bundle.MANIFEST}: not a repro bundle") from None
    except ValueError as e:
        raise UsageError(f"{path}/{bundle.MANIFEST}: not valid JSON ({e})") from None
    where = f"{path}/{bundle.MANIFEST}"
    if not is_cluster(doc) or doc.get("format") != bundle.FORMAT or not isinstance(doc.get("state"), str):
        raise UsageError(f"{where}: not a cluster bundle of format {bundle.FORMAT}")
    nodes, logs = doc.get("nodes"), doc.get("logs")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1 or not isinstance(logs, list) \
            or len(logs) != nodes or not all(isinstance(x, dict) and isinstance(x.get("file"), str)
                                             and isinstance(x.get("sha256"), str) for x in logs):
        raise UsageError(f"{where}: nodes is {nodes!r} with {len(logs) if isinstance(logs, list) else 'no'} logs, "
                         "not one log (file and sha256) per node; the bundle is damaged: write it again with "
                         "powercut check")
    bundle.validate(doc, where)
    b = ClusterBundle(d, doc)
    for n, (p, pin) in enumerate(zip(b.logs, logs)):
        if p.parent != d or not p.is_file():
            raise UsageError(f"bundle {path}: node {n}'s log {pin['file']} is missing (the bundle cannot rebuild its "
                             "cluster state without it)")
        got = bundle.sha256(p)
        if got != pin["sha256"]:
            raise UsageError(f"bundle {path}: node {n}'s log {pin['file']} was altered (sha256 {got[:12]}..., the "
                             f"bundle says {pin['sha256'][:12]}...)")
    return b

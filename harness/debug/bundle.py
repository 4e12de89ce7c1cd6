"""Repro bundles (host): a failing state saved as a directory that travels alone -- ``bundle.json``
(the state and its minimized form, the verdict and reasons, the blame, the filesystem, mount
options, checker and workload parameters, where it came from) and ``log.bin``, the recording's
log cut right after the last entry the states need (so the state ids keep their meaning) with its
SHA-256.  ``powercut repro BUNDLE`` rebuilds the state from it and judges it again; a missing or
altered log is one clear error, never a wrong verdict."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.checker import CheckerSpec
from powercut.checker import get as get_checker
from powercut.core.dmlog_writer import trim_log
from powercut.errors import UsageError

FORMAT = 1
LOG = "log.bin"
MANIFEST = "bundle.json"


@dataclass(frozen=True, slots=True)
class Bundle:
    dir: Path
    doc: dict[str, Any]

    @property
    def log_path(self) -> Path:
        return self.dir / LOG

    @property
    def state(self) -> str:
        """The state to judge: the minimized one when there is one."""
        return str(self.doc.get("minimized") or self.doc["state"])

    @property
    def checker(self) -> CheckerSpec:
        c = self.doc.get("checker", {})
        return CheckerSpec(name=str(c.get("name", "")), command=str(c.get("command", "")),
                           timeout_s=float(c.get("timeout_s", 120.0)), function=str(c.get("function", "")),
                           path=tuple(str(p) for p in c.get("path", ())))


TRACE = "syscalls.txt.gz"   # the recording's system-call trace (core/syscalls.py), when it has one


def write(dest: Path, *, recording: str, log_path: Path, data_size: int, fstype: str, mount_opts: str,
          checker: CheckerSpec, params: dict[str, Any], workload: dict[str, Any], verdict: Any,
          diagnosis: Any = None, cut: int = 0, trace: Path | None = None,
          why: dict[str, Any] | None = None) -> Path:
    """Write a bundle for ``verdict`` (and its ``diagnosis``) into the new directory ``dest``;
    ``cut``: how many log entries it needs (0: all); ``trace``: the recording's system-call trace,
    copied in; ``why``: the group's cause in the program's terms."""
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        entries = trim_log(log_path, tmp / LOG, cut)
        doc = {"format": FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "recording": recording, "log": {"file": LOG, "sha256": sha256(tmp / LOG), "entries": entries},
               "data_size": data_size, "fstype": fstype, "mount_opts": mount_opts,
               "checker": {"name": checker.name, "command": checker.command, "timeout_s": checker.timeout_s,
                           **({"function": checker.function, "path": list(checker.path)} if checker.function else {})},
               "params": params, "workload": workload, "state": verdict.state, "verdict": verdict.verdict,
               "reasons": list(verdict.reasons),
               "minimized": diagnosis.minimized if diagnosis is not None else "",
               "diagnosis": diagnosis.to_json() if diagnosis is not None else None,
               **({"why": why} if why else {})}
        if trace is not None and trace.is_file():
            shutil.copyfile(trace, tmp / TRACE)
            doc["trace"] = TRACE
        (tmp / MANIFEST).write_text(json.dumps(doc, indent=1) + "\n")
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _validate(doc: dict[str, Any], where: str) -> None:
    """Every key a repro reads, with its type: one UsageError naming the first that is wrong."""
    if not isinstance(doc.get("log"), dict) or not isinstance(doc["log"].get("sha256"), str):
        raise UsageError(f"{where}: log is {doc.get('log')!r}, not an object with the log's sha256; the bundle is "
                         "damaged: write it again with powercut check")
    validate(doc, where)


def validate(doc: dict[str, Any], where: str) -> None:
    """The keys every bundle (one disk or a cluster, debug/clusterbundle.py) has, with their types:
    one UsageError naming the first that is wrong."""
    def bad(key: str, want: str) -> UsageError:
        return UsageError(f"{where}: {key} is {doc.get(key)!r}, not {want}; the bundle is damaged: write it again "
                          "with powercut check")

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
        get_checker(str(checker["name"]))   # an unknown checker name is one UsageError line


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path: str | Path) -> Bundle:
    """Read and verify a bundle: one clear UsageError if anything is missing or altered."""
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
    _validate(doc, f"{path}/{MANIFEST}")
    b = Bundle(d, doc)
    if not b.log_path.is_file():
        raise UsageError(f"bundle {path}: {LOG} is missing (the bundle cannot rebuild its state without it)")
    want = str(doc.get("log", {}).get("sha256", ""))
    got = sha256(b.log_path)
    if got != want:
        raise UsageError(f"bundle {path}: {LOG} was altered (sha256 {got[:12]}..., the bundle says {want[:12]}...)")
    return b

"""The ledger of states already judged to pass (host): ``--ledger FILE`` on check and run.

A nightly that checks the same recording night after night with ``--seed auto`` samples other
write-cache subsets and tears each night; the ledger lets it skip the states earlier nights already
judged to pass (keep all, drop all, drop each, keep each, and any sample drawn again), so its time
and its ``--max-states`` go to states never judged before: N nights judge about N times the
samples of one (bench/bench_ledger.py measures it).  A failing state is never recorded: it is
judged again, and fails again, every night.

One JSON file, small enough for a CI cache: per log (its sha256, so a new recording starts afresh)
the keys (core/states/imagekey.state_key, 16 hex digits) of the distinct states that passed, and how many
runs added to it; at most ``MAX_LOGS`` logs (the most recently used).  Written atomically (a temp
file, then rename): a run stopped midway loses only its own additions."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from powercut.errors import UsageError

FORMAT = 1
MAX_LOGS = 16

__all__ = ["add", "load"]


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"format": FORMAT, "logs": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(
            f"--ledger {path}: not a powercut ledger ({e}); give a new file or remove it"
        ) from None
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("logs"), dict)
    ):
        raise UsageError(
            f"--ledger {path}: not a powercut ledger (format {FORMAT}); give a new file or remove it"
        )
    return data


def load(path: str | os.PathLike[str], log_sha256: str) -> frozenset[str]:
    """The keys of the states of this log that passed in earlier runs (empty for a new file or log)."""
    entry = _read(Path(path))["logs"].get(log_sha256) or {}
    return frozenset(str(k) for k in entry.get("passed", ()))


def add(path: str | os.PathLike[str], log_sha256: str, keys: Iterable[str]) -> int:
    """Record ``keys`` as passed for this log; the number of keys the ledger now holds for it."""
    p = Path(path)
    data = _read(p)
    logs: dict[str, Any] = data["logs"]
    entry = logs.pop(log_sha256, None) or {"passed": [], "runs": 0}
    passed = sorted(set(entry["passed"]) | set(keys))
    logs[log_sha256] = {
        "passed": passed,
        "runs": int(entry.get("runs", 0)) + 1,
    }  # last: most recently used
    for old in list(logs)[:-MAX_LOGS]:
        del logs[old]
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    os.replace(tmp, p)
    return len(passed)

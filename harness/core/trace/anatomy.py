"""Commit anatomy: what each acknowledged commit cost, from the block log (and the system-call trace
when the recording has one) -- the block writes, FLUSHes and FUAs between its ``begin:`` (else the
previous ack) and its ``ack:``, and the calls the program made there.  A commit's flush count is a
deterministic, machine-independent price of its guarantee ("wal correct: 2 flushes per commit;
commit-before-data: 1").

The marking code's own ordering flushes (core/log/markorder.py) are not the program's and are not
counted; the writes they log are (they completed before the mark).  Pure: no I/O."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.log.dmlog import Entry
from powercut.core.log.markorder import ordering_flushes
from powercut.core.trace import syscalls as sc
from powercut.core.trace.syscalls import Trace


@dataclass(frozen=True, slots=True)
class CommitCost:
    key: str
    writes: int  # block writes (and discards) logged in the commit's window
    write_bytes: int
    flushes: int  # the program's FLUSH requests (ordering flushes excluded)
    fuas: int
    calls: dict[str, int] | None = (
        None  # traced calls by kind (writes, fsync, ...), None without a trace
    )
    program_bytes: int | None = None  # bytes the program's write calls passed

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "key": self.key,
            "writes": self.writes,
            "write_bytes": self.write_bytes,
            "flushes": self.flushes,
            "fuas": self.fuas,
        }
        if self.calls is not None:
            d.update(calls=self.calls, program_bytes=self.program_bytes)
        return d


def commit_costs(
    entries: Sequence[Entry], sectorsize: int = 512, trace: Trace | None = None, root: str = ""
) -> list[CommitCost]:
    """One CommitCost per ack in the log, in log order."""
    ordering, _, _ = ordering_flushes(entries)
    by_key: dict[str, dict[str, Any]] = {}
    if trace is not None:
        by_key = _trace_windows(trace, root)
    out = []
    start = -1
    begun: dict[str, int] = {}
    for e in entries:
        if not e.is_mark:
            continue
        if e.begin_key is not None:
            begun[e.begin_key] = e.index
        elif e.ack_key is not None:
            lo = begun.pop(e.ack_key, start)
            window = entries[lo + 1 : e.index]
            writes = [w for w in window if w.changes_device]
            flushes = sum(1 for w in window if w.is_flush and w.index not in ordering)
            fuas = sum(1 for w in window if w.is_fua and w.changes_device)
            t = by_key.get(e.ack_key)
            out.append(
                CommitCost(
                    e.ack_key,
                    len(writes),
                    sum(w.length(sectorsize) for w in writes),
                    flushes,
                    fuas,
                    t["calls"] if t else None,
                    t["bytes"] if t else None,
                )
            )
            start = e.index
    return out


def _trace_windows(trace: Trace, root: str) -> dict[str, dict[str, Any]]:
    """ack key -> the calls under ``root`` between its begin (else the previous ack) and its ack."""
    prefix = root.rstrip("/") + "/"
    out: dict[str, dict[str, Any]] = {}
    begun: dict[str, int] = {}
    last = -1
    for o in trace.marks():
        if o.text.startswith("begin:"):
            begun[o.text[6:]] = o.seq
        elif o.text.startswith("ack:"):
            lo = begun.pop(o.text[4:], last)
            calls: dict[str, int] = {}
            nbytes = 0
            for x in trace.ops[lo + 1 : o.seq]:
                if x.kind in (sc.MARK, sc.CHDIR) or not (
                    x.path.startswith(prefix) or x.kind in (sc.SYNC,)
                ):
                    continue
                calls[x.kind] = calls.get(x.kind, 0) + 1
                if x.kind == sc.WRITE:
                    nbytes += x.nbytes
            out[o.text[4:]] = {"calls": calls, "bytes": nbytes}
            last = o.seq
    return out


@dataclass(frozen=True, slots=True)
class Anatomy:
    """The medians over a recording's commits."""

    commits: int
    writes: float
    write_bytes: float
    flushes: float
    fuas: float
    program_bytes: float | None
    calls: dict[str, float] | None
    sample: tuple[CommitCost, ...] = ()

    def phrase(self) -> str:
        """'2 flushes, 3 writes (12 KiB) per commit of 100 bytes' (medians)."""
        if not self.commits:
            return "no acked commits"
        s = (
            f"{_n(self.flushes)} flush{'es' if self.flushes != 1 else ''}, {_n(self.fuas)} FUA, "
            f"{_n(self.writes)} block write{'s' if self.writes != 1 else ''} ({_size(self.write_bytes)}) per commit"
        )
        if self.program_bytes is not None:
            s += f" of {_size(self.program_bytes)} written by the program"
            if self.calls:
                syncs = sum(
                    v
                    for k, v in self.calls.items()
                    if k in (sc.FSYNC, sc.FDATASYNC, sc.SYNC, sc.SYNCFS, sc.MSYNC)
                )
                s += f", {_n(syncs)} sync call{'s' if syncs != 1 else ''}"
        return s + " (medians)"

    def to_json(self) -> dict[str, Any]:
        return {
            "commits": self.commits,
            "writes": self.writes,
            "write_bytes": self.write_bytes,
            "flushes": self.flushes,
            "fuas": self.fuas,
            "program_bytes": self.program_bytes,
            "calls": self.calls,
            "phrase": self.phrase(),
            "first_commits": [c.to_json() for c in self.sample],
        }


def summarize(costs: Sequence[CommitCost], sample: int = 5) -> Anatomy:
    if not costs:
        return Anatomy(0, 0, 0, 0, 0, None, None)

    def med(xs: list[float]) -> float:
        return float(statistics.median(xs))

    traced = [c for c in costs if c.calls is not None]
    calls = None
    if traced:
        kinds = sorted({k for c in traced for k in (c.calls or {})})
        calls = {k: med([float((c.calls or {}).get(k, 0)) for c in traced]) for k in kinds}
    return Anatomy(
        len(costs),
        med([c.writes for c in costs]),
        med([c.write_bytes for c in costs]),
        med([c.flushes for c in costs]),
        med([c.fuas for c in costs]),
        med([float(c.program_bytes or 0) for c in traced]) if traced else None,
        calls,
        tuple(costs[:sample]),
    )


def short(a: dict[str, Any]) -> str:
    """'2 flushes, 3 writes (12 KiB)' per commit (medians), "" when unknown."""
    if not a.get("commits"):
        return ""
    f, w = a.get("flushes", 0), a.get("writes", 0)
    kib = float(a.get("write_bytes", 0)) / 1024
    out = f"{f:g} flush{'es' if f != 1 else ''}, {w:g} write{'s' if w != 1 else ''} ({kib:.0f} KiB)"
    if a.get("program_bytes") is not None:
        out += f" for {float(a['program_bytes']):g} B"
    return out


def _n(x: float) -> str:
    return f"{x:g}"


def _size(b: float) -> str:
    if b < 1024:
        return f"{b:g} B"
    if b < 1 << 20:
        return f"{b / 1024:.1f} KiB".replace(".0 KiB", " KiB")
    return f"{b / (1 << 20):.1f} MiB"

"""Injected I/O errors as the log records them (pure): fault windows and the commits acked after one.

A recording with fault injection (``powercut.fault``, the recording's ``--fault`` plan) swaps the
table of the filesystem's device-mapper layer, which sits *above* dm-log-writes: a write or flush
that fails there never reaches the log, so every crash state built from the log is still one the
disk could hold.  Each switch is recorded as an ordered mark (every write completed before it is
logged before it):

* ``powercut-fault:on:<kind>[:<start>+<sectors>,...]`` -- from here the device fails I/O: ``kind``
  ``eio-writes`` (every write and flush fails with EIO, reads work: dm-flakey ``error_writes``) or
  ``eio-range`` (I/O to the listed 512-byte sector ranges fails: dm ``error`` segments in a linear
  table; flushes and other sectors work);
* ``powercut-fault:off`` -- the device works again (a transient error is over).

A window not closed by the end of the log lasts to its end.

**Acked after an error.**  A commit whose span -- from the previous ``ack:`` (or its own ``begin:``)
to its ``ack:`` -- overlaps a fault window was acknowledged after the device refused I/O while it
was being made durable: the program saw an EIO from write or fsync (or should have) and acked
anyway, e.g. by retrying fsync, which then reports success for pages the kernel already dropped
(PostgreSQL's "fsyncgate").  :meth:`Faults.trusted` says which acks of a state a program that stops
at its first I/O error could have made: the acks before the first such commit.  The judge uses it
(check/judge.py): a state that fails with every ack but passes with only the trusted ones fails
*because* of the acks after an error -- verdict ``acked-after-error``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FAULT_ON = "powercut-fault:on:"
FAULT_OFF = "powercut-fault:off"
KINDS = ("eio-writes", "eio-range")
ACK_PREFIX, BEGIN_PREFIX = "ack:", "begin:"


@dataclass(frozen=True, slots=True)
class Window:
    """Entries ``on`` .. ``off`` of the log (``off`` None: to the end) during which ``kind`` failed."""
    on: int
    off: int | None
    kind: str
    ranges: tuple[tuple[int, int], ...] = ()     # (start sector, sectors) for eio-range

    def covers(self, first: int, last: int) -> bool:
        """Does the span of entries first..last (inclusive) overlap this window?"""
        return first <= (self.off if self.off is not None else last) and last >= self.on

    def describe(self) -> str:
        where = (" on sectors " + ", ".join(f"{s}+{n}" for s, n in self.ranges)) if self.ranges else ""
        until = f"entry {self.off}" if self.off is not None else "the end of the log"
        return f"{self.kind}{where} from entry {self.on} to {until}"


def parse_on(text: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """``powercut-fault:on:<kind>[:<start>+<n>,...]`` -> (kind, ranges); ValueError if malformed."""
    if not text.startswith(FAULT_ON):
        raise ValueError(f"not a fault mark: {text!r}")
    kind, _, spec = text[len(FAULT_ON):].partition(":")
    if kind not in KINDS:
        raise ValueError(f"unknown fault kind {kind!r} (known: {', '.join(KINDS)})")
    ranges = []
    for part in filter(None, spec.split(",")):
        start, plus, n = part.partition("+")
        if not plus or not start.isdigit() or not n.isdigit() or int(n) == 0:
            raise ValueError(f"bad sector range {part!r} in {text!r} (START+SECTORS)")
        ranges.append((int(start), int(n)))
    if (kind == "eio-range") != bool(ranges):
        raise ValueError(f"{text!r}: eio-range needs sector ranges, and only eio-range takes them")
    return kind, tuple(ranges)


def on_mark(kind: str, ranges: tuple[tuple[int, int], ...] = ()) -> str:
    """The mark text that opens a window (validated by the parser)."""
    text = FAULT_ON + kind + (":" + ",".join(f"{s}+{n}" for s, n in ranges) if ranges else "")
    parse_on(text)
    return text


@dataclass(frozen=True, slots=True)
class Faults:
    windows: tuple[Window, ...] = ()
    after_error: tuple[str, ...] = ()            # keys acked after an error, in ack order
    why: dict[str, str] | None = None            # key -> the window its commit overlapped

    def __bool__(self) -> bool:
        return bool(self.windows)

    @staticmethod
    def from_marks(marks: list[tuple[int, str]]) -> "Faults":
        """From the log's marks ((entry, text) in log order).  A malformed fault mark is a ValueError."""
        windows: list[Window] = []
        open_: Window | None = None
        for entry, text in marks:
            if text.startswith(FAULT_ON):
                kind, ranges = parse_on(text)
                if open_ is not None:   # a switch to another fault closes the one before
                    windows.append(Window(open_.on, entry, open_.kind, open_.ranges))
                open_ = Window(entry, None, kind, ranges)
            elif text == FAULT_OFF and open_ is not None:
                windows.append(Window(open_.on, entry, open_.kind, open_.ranges))
                open_ = None
        if open_ is not None:
            windows.append(open_)
        if not windows:
            return Faults()
        after, why = [], {}
        begun = {t[len(BEGIN_PREFIX):]: e for e, t in marks if t.startswith(BEGIN_PREFIX)}
        prev_ack = -1
        for entry, text in marks:
            if not text.startswith(ACK_PREFIX):
                continue
            key = text[len(ACK_PREFIX):]
            first = min(begun.get(key, prev_ack + 1), prev_ack + 1)
            hit = next((w for w in windows if w.covers(first, entry)), None)
            if hit is not None and key not in why:
                after.append(key)
                why[key] = hit.describe()
            prev_ack = entry
        return Faults(tuple(windows), tuple(after), why)

    def trusted(self, acked: tuple[str, ...]) -> tuple[str, ...] | None:
        """The acks of a state (in ack order) before its first ack after an error, or None when it
        has no ack after an error (nothing to tell apart)."""
        bad = set(self.after_error)
        for i, key in enumerate(acked):
            if key in bad:
                return tuple(acked[:i])
        return None

    def to_json(self) -> dict[str, Any]:
        return {"windows": [{"on": w.on, "off": w.off, "kind": w.kind, "ranges": [list(r) for r in w.ranges]}
                            for w in self.windows],
                "after_error": list(self.after_error), "why": dict(self.why or {})}

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> "Faults":
        if not d:
            return Faults()
        return Faults(tuple(Window(int(w["on"]), None if w["off"] is None else int(w["off"]), str(w["kind"]),
                                   tuple((int(a), int(b)) for a, b in w.get("ranges", []))) for w in d["windows"]),
                      tuple(d.get("after_error", [])), dict(d.get("why") or {}))

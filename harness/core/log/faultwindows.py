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

from collections.abc import Sequence
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
    ranges: tuple[tuple[int, int], ...] = ()  # (start sector, sectors) for eio-range

    def covers(self, first: int, last: int) -> bool:
        """Does the span of entries first..last (inclusive) overlap this window?"""
        return first <= (self.off if self.off is not None else last) and last >= self.on

    def describe(self) -> str:
        where = (
            (" on sectors " + ", ".join(f"{s}+{n}" for s, n in self.ranges)) if self.ranges else ""
        )
        until = f"entry {self.off}" if self.off is not None else "the end of the log"
        return f"{self.kind}{where} from entry {self.on} to {until}"


def parse_on(text: str) -> tuple[str, tuple[tuple[int, int], ...]]:
    """``powercut-fault:on:<kind>[:<start>+<n>,...]`` -> (kind, ranges); ValueError if malformed."""
    if not text.startswith(FAULT_ON):
        raise ValueError(f"not a fault mark: {text!r}")
    kind, _, spec = text[len(FAULT_ON) :].partition(":")
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
    after_error: tuple[str, ...] = ()  # keys acked after an error, in ack order
    why: dict[str, str] | None = None  # key -> the window its commit overlapped

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
                if open_ is not None:  # a switch to another fault closes the one before
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
        begun = {t[len(BEGIN_PREFIX) :]: e for e, t in marks if t.startswith(BEGIN_PREFIX)}
        prev_ack = -1
        for entry, text in marks:
            if not text.startswith(ACK_PREFIX):
                continue
            key = text[len(ACK_PREFIX) :]
            first = min(begun.get(key, prev_ack + 1), prev_ack + 1)
            hit = next((w for w in windows if w.covers(first, entry)), None)
            if hit is not None and key not in why:
                after.append(key)
                why[key] = hit.describe()
            prev_ack = entry
        return Faults(tuple(windows), tuple(after), why)

    def trusted(self, acked: Sequence[str]) -> tuple[str, ...] | None:
        """The acks of a state (in ack order) before its first ack after an error, or None when it
        has no ack after an error (nothing to tell apart)."""
        bad = set(self.after_error)
        for i, key in enumerate(acked):
            if key in bad:
                return tuple(acked[:i])
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "windows": [
                {"on": w.on, "off": w.off, "kind": w.kind, "ranges": [list(r) for r in w.ranges]}
                for w in self.windows
            ],
            "after_error": list(self.after_error),
            "why": dict(self.why or {}),
        }

    @staticmethod
    def from_json(d: dict[str, Any] | None) -> "Faults":
        if not d:
            return Faults()
        return Faults(
            tuple(
                Window(
                    int(w["on"]),
                    None if w["off"] is None else int(w["off"]),
                    str(w["kind"]),
                    tuple((int(a), int(b)) for a, b in w.get("ranges", [])),
                )
                for w in d["windows"]
            ),
            tuple(d.get("after_error", [])),
            dict(d.get("why") or {}),
        )


# ---------------------------------------------------------------------------------------------
# The recording's fault plan: when to switch a fault on (and off) without touching the program.

PLAN_KEYS = ("file", "sectors", "mark", "nth", "p", "seed", "writes", "after", "until")


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """``--fault KIND[,key=value...]``: one fault the recording switches on by itself.

    What fails (``KIND``): ``eio-writes`` (every write and flush), or ``eio-range`` over ``file=PATH``
    (a file under the mount, relative to it; its sectors are read when the fault goes on, so it must
    be allocated then) or ``sectors=START+N[;START+N...]``.

    When it goes on (at most one trigger; none: before the workload starts):

    * ``mark=GLOB[,nth=N]`` -- just after the N-th mark (default 1st) matching GLOB (fnmatch) that
      the workload inserts with powercut.mark or powercut-mark, before that call returns;
    * ``p=P[,seed=S][,mark=GLOB]`` -- at each mark matching GLOB (default ``ack:*``) with probability
      P, drawn from a generator seeded with (S, the match's number): the same marks give the same
      choice on every run;
    * ``writes=N`` -- once the filesystem's device has completed N writes since the workload started
      (polled every 2 ms in the guest: the switch lands within a few writes of N; the log records
      exactly where);
    * ``after=S`` -- S seconds after the workload started.

    ``until=GLOB``: off again just after the first mark matching GLOB once on (a transient error);
    else it stays on to the end of the workload.  It fires once: one window per recording."""

    kind: str
    file: str = ""
    sectors: tuple[tuple[int, int], ...] = ()
    mark: str = ""
    nth: int = 0
    p: float = 0.0
    seed: int = 0
    writes: int = 0
    after: float = 0.0
    until: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r} (known: {', '.join(KINDS)})")
        if (self.kind == "eio-range") != bool(self.file or self.sectors):
            raise ValueError(
                "eio-range needs file=PATH or sectors=START+N, and only eio-range takes them"
            )
        if self.file and self.sectors:
            raise ValueError("give file= or sectors=, not both")
        if self.file.startswith("/") or ".." in self.file.split("/"):
            raise ValueError(
                f"file={self.file}: a path relative to the filesystem under test, inside it"
            )
        triggers = [
            k
            for k, v in (
                ("mark", self.mark and not self.p),
                ("p", self.p),
                ("writes", self.writes),
                ("after", self.after),
            )
            if v
        ]
        if len(triggers) > 1:
            raise ValueError(f"one trigger per fault, not {' and '.join(triggers)}")
        if self.nth and not (self.mark and not self.p):
            raise ValueError("nth= goes with mark=")
        if self.nth < 0 or self.writes < 0 or self.after < 0 or self.seed < 0:
            raise ValueError("nth, writes, after and seed are not negative")
        if self.p and not 0 < self.p <= 1:
            raise ValueError(f"p={self.p}: a probability in (0, 1]")
        if self.seed and not self.p:
            raise ValueError("seed= goes with p=")
        for glob in (self.mark, self.until):
            if glob and (
                any(c.isspace() or c == "," for c in glob) or glob.startswith("powercut-")
            ):
                raise ValueError(
                    f"mark glob {glob!r}: one word without commas, not a powercut- mark"
                )

    @property
    def trigger(self) -> str:
        """``start``, ``mark``, ``p``, ``writes`` or ``after``."""
        if self.p:
            return "p"
        if self.mark:
            return "mark"
        if self.writes:
            return "writes"
        elif self.after:
            return "after"
        else:
            return "start"

    @property
    def on_glob(self) -> str:
        """The marks that may switch the fault on (``""``: not a mark trigger)."""
        return self.mark or "ack:*" if self.trigger == "p" else self.mark

    @staticmethod
    def parse(text: str) -> "FaultPlan":
        """``KIND[,key=value...]``; ValueError naming what is wrong."""
        kind, *pairs = [p.strip() for p in text.strip().split(",")]
        kw: dict[str, Any] = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or key not in PLAN_KEYS or not value:
                raise ValueError(
                    f"{pair!r}: expected key=value with key one of {', '.join(PLAN_KEYS)}"
                )
            if key in kw:
                raise ValueError(f"{key}= given twice")
            try:
                if key in ("nth", "writes", "seed"):
                    kw[key] = int(value)
                elif key in ("p", "after"):
                    kw[key] = float(value)
                elif key == "sectors":
                    kw[key] = tuple(_sector_range(r) for r in value.split(";"))
                else:
                    kw[key] = value
            except ValueError:
                raise ValueError(f"{key}={value}: not a valid value") from None
        return FaultPlan(kind, **kw)

    def __str__(self) -> str:
        out = [self.kind]
        for key in PLAN_KEYS:
            value = getattr(self, key)
            if value:
                if key == "sectors":
                    text = ";".join(f"{s}+{n}" for s, n in value)
                elif isinstance(value, float):
                    text = f"{value:g}"
                else:
                    text = str(value)
                out.append(f"{key}=" + text)
        return ",".join(out)

    def step(self, state: "PlanState", text: str) -> tuple["PlanState", str]:
        """What a user mark ``text`` does: (the new state, ``"on"``, ``"off"`` or ``""``)."""
        import fnmatch
        import random

        if state.on and not state.off and self.until and fnmatch.fnmatchcase(text, self.until):
            return PlanState(state.matches, True, True, state.error), "off"
        glob = self.on_glob
        if state.on or not glob or not fnmatch.fnmatchcase(text, glob):
            return state, ""
        n = state.matches + 1
        if self.trigger == "p":
            fire = random.Random(f"{self.seed}:{n}").random() < self.p
        else:
            fire = n == (self.nth or 1)
        return PlanState(n, fire, False, state.error), "on" if fire else ""


@dataclass(frozen=True, slots=True)
class PlanState:
    matches: int = 0  # marks that matched the on glob so far
    on: bool = False  # the fault went on
    off: bool = False  # and off again (until=)
    error: str = ""  # a switch that could not be made

    def to_json(self) -> dict[str, Any]:
        return {"matches": self.matches, "on": self.on, "off": self.off, "error": self.error}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "PlanState":
        return PlanState(
            int(d.get("matches", 0)), bool(d.get("on")), bool(d.get("off")), str(d.get("error", ""))
        )


def _sector_range(text: str) -> tuple[int, int]:
    start, plus, n = text.partition("+")
    if not plus or not start.isdigit() or not n.isdigit() or int(n) == 0:
        raise ValueError(text)
    return int(start), int(n)

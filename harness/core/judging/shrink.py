"""Minimize a failing crash state (pure; host and guest): the fewest lost writes, the fewest lost
sectors of a torn write and the earliest cut that still fail *the same way* -- the same verdict and
the same class of first reason (``reason_class``: numbers, offsets and hex stripped, so "acked
record(s) [3] missing" and "acked record(s) [5, 7] missing" are one class).  The caller supplies
``judge``, which materializes and checks a candidate state; this module only chooses candidates.

* **Lost writes** (write-cache and torn states): Hypothesis-style adaptive chunked deletion over the
  dropped list -- at position i, try restoring (keeping) ``dropped[i:i+k]`` for k = 1, 2, 4, ...
  while that still fails, then bisect the largest such k (``find_integer``); restore it, or step
  on when even k = 1 does not fail.  A run of n irrelevant lost writes costs O(log n) checks.
* **Torn writes**: first try the tear removed (the write kept whole, then lost whole: a
  write-cache state), then the same chunked search over the write's lost sectors.
* **Cuts**: a prefix state (no-cache, flush) bisects over its model's cuts up to its own,
  assuming failures are monotone in the cut but always returning a cut that was judged failing.
  Write-cache and torn states gallop back from their cut (1, 2, 4, ... cuts earlier, then bisect),
  the lost writes past a candidate cut left out.  Rounds (cut, tear, lost writes, sectors) repeat
  until one changes nothing: then no single step of any move -- one lost write or sector restored,
  the tear removed, the cut one earlier -- fails the same way (1-minimal).

Every candidate is built and validated by ``CrashSpace.make_state`` (the models' own rules; one
it refuses is skipped, not judged), so the result has an explicit id that ``state_from_id``
rebuilds even when no model enumerates it.  Candidates are cached by ``imagekey.image_key``:
two states that replay the same image and tell the checker the same keys are judged once.  At
most ``budget`` calls of ``judge``; deterministic (no randomness, fixed order).  A lying-disk state
(core/crashmodels/lies.py) is one lie on an honest prefix: it is its own minimum.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from powercut.core.states.crashstate import CrashState, Torn
from powercut.core.states.imagekey import image_key
from powercut.core.states.models import CrashSpace
from powercut.core.states.stateid import LIE_MODELS, PREFIX_MODELS
from powercut.errors import UsageError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BUDGET",
    "Judged",
    "Outcome",
    "Shrunk",
    "Signature",
    "find_integer",
    "minimize",
    "reason_class",
    "signature",
]
DEFAULT_BUDGET = 200
Signature = tuple[str, str]  # (verdict, class of the first reason)
Build = Callable[[Sequence[int]], CrashState | None]


class Judged(Protocol):
    """What ``judge`` returns: a ``CheckResult``, a ``Verdict`` or an ``Outcome``."""

    @property
    def verdict(self) -> str: ...

    @property
    def reasons(self) -> Sequence[str]: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: str
    reasons: tuple[str, ...] = ()


_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{8,}\b")
_NUM = re.compile(r"[0-9]+")
_LIST = re.compile(r"#(?:\s*(?:,|-|\.\.)\s*#)+")


def reason_class(reason: str) -> str:
    """A reason with its particulars stripped: hex values and digit runs become ``#``, lists and
    ranges of them one ``#``, whitespace collapsed."""
    return " ".join(_LIST.sub("#", _NUM.sub("#", _HEX.sub("#", reason))).split())


def signature(outcome: Judged, classify: Callable[[str], str] = reason_class) -> Signature:
    """(verdict, class of the first reason or ""): two outcomes fail the same way iff equal."""
    return outcome.verdict, classify(outcome.reasons[0]) if outcome.reasons else ""


@dataclass(frozen=True, slots=True)
class Shrunk:
    """A minimization.  ``minimized`` fails like ``original`` (``signature``; ``reasons``: its own
    judgement).  ``calls``: calls of judge (the original's included when judged here);
    ``cache_hits``: candidates answered from the cache; ``exhausted``: the budget ran out (the
    result is the smallest failing state found so far); ``one_at_a_time``: a lower bound for the
    checks of a one-change-at-a-time shrinker reaching the same result (one per lost write and
    lost sector of the original, one per candidate cut walked back)."""

    original: CrashState
    minimized: CrashState
    signature: Signature
    reasons: tuple[str, ...]
    calls: int
    cache_hits: int
    exhausted: bool
    one_at_a_time: int

    def to_json(self) -> dict[str, object]:
        return {
            "original": self.original.id,
            "minimized": self.minimized.id,
            "verdict": self.signature[0],
            "reason_class": self.signature[1],
            "reasons": list(self.reasons),
            "dropped": list(self.minimized.dropped),
            "cut": self.minimized.cut,
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "exhausted": self.exhausted,
            "one_at_a_time": self.one_at_a_time,
        }


def find_integer(f: Callable[[int], bool]) -> int:
    """A k >= 0 with f(k) true (f(0) is assumed) and f(k + 1) false: probe 1, 2, 4, ... until f
    fails, then bisect.  O(log k) calls; the largest such k when f is monotone."""
    lo, hi = 0, 1
    while f(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if f(mid) else (lo, mid)
    return lo


class _OutOfBudget(Exception):
    pass


class _Search:
    """The judged candidates (by image), the budget, the target signature and ``best``: the last
    candidate that failed like the original (every move only tries reductions of the current
    state, so it is the smallest so far)."""

    def __init__(
        self,
        sp: CrashSpace,
        judge: Callable[[CrashState], Judged],
        classify: Callable[[str], str],
        budget: int,
        floor: int | None,
        original: CrashState,
    ) -> None:
        self.sp = sp
        self.judge = judge
        self.classify = classify
        self.budget = budget
        self.floor = -1 if floor is None else floor
        self.cache: dict[Hashable, tuple[Signature, tuple[str, ...]]] = {}
        self.calls = self.hits = 0
        self.target: Signature = ("", "")
        self.best = original

    def outcome(self, state: CrashState) -> tuple[Signature, tuple[str, ...]]:
        key = image_key(self.sp, state)
        got = self.cache.get(key)
        if got is not None:
            self.hits += 1
            return got
        if self.calls >= self.budget:
            raise _OutOfBudget
        self.calls += 1
        out = self.judge(state)
        got = self.cache[key] = (signature(out, self.classify), tuple(out.reasons))
        return got

    def fails(self, state: CrashState | None) -> bool:
        if state is None or self.outcome(state)[0] != self.target:
            return False
        self.best = state
        return True

    def build(
        self, model: str, cut: int, dropped: Sequence[int] = (), torn: Torn = ()
    ) -> CrashState | None:
        """The state, or None if the model cannot produce it or it reaches back to the floor."""
        if (
            cut <= self.floor
            or any(i <= self.floor for i in dropped)
            or any(t <= self.floor for t, _ in torn)
        ):
            return None
        try:
            return self.sp.make_state(model, cut, dropped, torn)
        except UsageError:
            return None

    # -- the moves -----------------------------------------------------------------------------------
    def restore(self, lost: Sequence[int], build: Build, state: CrashState) -> CrashState:
        """One pass of chunked restoring over ``lost`` (``build(still_lost)`` makes a candidate);
        the last failing state."""
        items, i = list(lost), 0
        while i < len(items):
            found: dict[int, CrashState] = {}

            def f(
                k: int, i: int = i, items: list[int] = items, found: dict[int, CrashState] = found
            ) -> bool:
                cand = build(items[:i] + items[i + k :]) if i + k <= len(items) else None
                if not self.fails(cand):
                    return False
                found[k] = cand  # type: ignore[assignment]
                return True

            k = find_integer(f)
            if k:
                items, state = items[:i] + items[i + k :], found[k]
            else:
                i += 1
        return state

    def gallop(
        self, cuts: Sequence[int], build: Callable[[int], CrashState | None], state: CrashState
    ) -> CrashState:
        """Walk back from ``state``'s cut (the last of ``cuts``): the earliest failing cut a
        galloping search finds."""
        found: dict[int, CrashState] = {}

        def f(k: int) -> bool:
            cand = build(cuts[-1 - k]) if k < len(cuts) else None
            if not self.fails(cand):
                return False
            found[k] = cand  # type: ignore[assignment]
            return True

        k = find_integer(f)
        return found[k] if k else state

    def bisect(
        self, cuts: Sequence[int], build: Callable[[int], CrashState | None], state: CrashState
    ) -> CrashState:
        """Binary search over ``cuts`` (the last one ``state``'s, failing) for the earliest failing
        cut, failures assumed monotone; the result was judged failing either way."""
        lo = -1
        hi = len(cuts) - 1
        best = state
        while hi - lo > 1:
            mid = (lo + hi) // 2
            cand = build(cuts[mid])
            if self.fails(cand):
                hi, best = mid, cand  # type: ignore[assignment]
            else:
                lo = mid
        return best

    # -- one round per kind of state -----------------------------------------------------------------
    def prefix(self, state: CrashState) -> CrashState:
        model = state.model
        cuts = [s.cut for s in self.sp.states(model) if self.floor < s.cut < state.cut] + [
            state.cut
        ]
        return self.bisect(cuts, lambda c: self.build(model, c), state)

    def round(self, s: CrashState) -> CrashState:
        """One round for a write-cache or torn state: cut, tear, lost writes, lost sectors."""
        model = s.model
        cut = s.cut
        dropped = s.dropped
        torn = s.torn
        lowest = torn[0][0] + 1 if torn else max(self.floor + 1, 1)
        s = self.gallop(
            range(lowest, cut + 1),
            lambda c: self.build(model, c, [d for d in dropped if d < c], torn),
            s,
        )
        if s.torn:
            ((t, _),) = s.torn
            for lost in (
                s.dropped,
                tuple(sorted((*s.dropped, t))),
            ):  # the write kept whole, lost whole
                cand = self.build("write-cache", s.cut, lost)
                if self.fails(cand):
                    s = cand  # type: ignore[assignment]
                    break
        model = s.model
        cut = s.cut
        torn = s.torn
        s = self.restore(s.dropped, lambda d: self.build(model, cut, d, torn), s)
        if s.torn:
            ((t, kept),) = s.torn
            m = self.sp.entries[t].nr_sectors
            dropped = s.dropped
            s = self.restore(
                [o for o in range(m) if o not in kept],
                lambda gone: self.build(
                    model, cut, dropped, ((t, tuple(o for o in range(m) if o not in gone)),)
                ),
                s,
            )
        return s


def _lost_sectors(sp: CrashSpace, state: CrashState) -> int:
    return sum(sp.entries[t].nr_sectors - len(kept) for t, kept in state.torn)


def minimize(
    sp: CrashSpace,
    state: CrashState,
    judge: Callable[[CrashState], Judged],
    *,
    budget: int = DEFAULT_BUDGET,
    classify: Callable[[str], str] = reason_class,
    expected: Judged | None = None,
    floor: int | None = None,
) -> Shrunk:
    """Minimize a failing ``state`` of ``sp``.  ``judge`` checks a candidate; ``expected``: the
    original's known outcome (None: judge it first, one call of the budget); ``floor``: an entry
    (the floor mark's, ``Selection.floor``) that candidates keep and cut after.  UsageError if the
    state does not fit the log, or passes."""
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise UsageError(f"the shrink budget must be a non-negative integer, got {budget!r}")
    if budget == 0 and expected is None:
        raise UsageError("a shrink budget of 0 leaves no check to judge the original state")
    if (
        state.lie is not None or state.model in LIE_MODELS
    ):  # one lie (core/crashmodels/lies.py): nothing to take away
        got = expected if expected is not None else judge(state)
        if got.verdict == "pass":
            raise UsageError(f"state {state.id} passes: nothing to minimize")
        return Shrunk(
            state,
            state,
            signature(got, classify),
            tuple(got.reasons),
            int(expected is None),
            0,
            False,
            0,
        )
    sp.make_state(
        state.model, state.cut, state.dropped, state.torn
    )  # UsageError if it does not fit
    search = _Search(sp, judge, classify, budget, floor, state)
    if search.build(state.model, state.cut, state.dropped, state.torn) is None:
        raise UsageError(
            f"state {state.id} cuts or loses entries at or before the floor entry {floor}"
        )
    if expected is not None:
        search.cache[image_key(sp, state)] = (
            signature(expected, classify),
            tuple(expected.reasons),
        )
    search.target = search.outcome(state)[0] if expected is None else signature(expected, classify)
    if search.target[0] == "pass":
        raise UsageError(f"state {state.id} passes: nothing to minimize")
    best, exhausted = state, False
    try:
        if state.model in PREFIX_MODELS:
            best = search.prefix(state)
        else:
            while (after := search.round(best)) != best:
                best = after
    except _OutOfBudget:
        best, exhausted = search.best, True
    prefix = state.model in PREFIX_MODELS
    walked = (
        sum(1 for s in sp.states(state.model) if best.cut <= s.cut < state.cut)
        if prefix
        else state.cut - best.cut
    )
    out = Shrunk(
        state,
        best,
        search.target,
        search.cache[image_key(sp, best)][1],
        search.calls,
        search.hits,
        exhausted,
        len(state.dropped) + _lost_sectors(sp, state) + max(walked, 0),
    )
    log.info(
        "shrink %s -> %s: %d checks (%d cache hits)%s",
        state.id,
        best.id,
        out.calls,
        out.cache_hits,
        ", budget exhausted" if exhausted else "",
    )
    return out

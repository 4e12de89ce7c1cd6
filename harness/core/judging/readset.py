"""The read-set rule (pure; host and guest): a state whose judge would read exactly what an earlier
judged state's judge read gets that state's verdict, as a proof, and is not judged itself.

A judge -- the recovery mount, the checker, the umount, the fsck -- is taken to be a function of
its input: the state's checker input (its model, acked and begun keys) and the blocks of the
device it reads.  Give it the same input and the same bytes at every block it asks for, and it
asks for the same next block and answers the same.  So a state S needs no judge of its own when a
judged state J had the same checker input and S's image equals J's on every sector J's judge read
(``ReadSet``, from the block layer's trace of J's device).

Two states of one log differ only where the entries one keeps and the other does not wrote
(replay applies a state's kept entries in log order to the same start image).  So "S equals J on
J's reads" holds when every entry that touches J's reads is kept alike by both -- whole, torn at
the same sectors, or not at all (``value``).  That is sufficient, not necessary (a difference
overwritten by a later entry both keep is still called a difference): the rule may judge a state
it could have proven, never the other way round.

The index (``ReadSetRule``) groups the walk's states by checker input; every state of a group lies
in one span of the log (``lo``: the first entry one of them may drop or tear; ``hi``: the last
cut): below it every state of the group keeps every entry, above it none does.  A judged state J
stands in its group as the entries of that span touching its reads (``touched``) and how J kept
each (``signature``): a candidate S is proven by J iff S's signature over J's touched entries equals
J's -- one dictionary lookup per distinct touched set (judges of one group mostly read the same
blocks), never a scan of the judged states.

Where it does not apply: a lying disk's state (its image differs from the log's by the lie), a
state whose judge's reads are unknown (no trace, a lost trace event, no read at all), and a judge
whose answer is not a function of what it read -- a timeout, a kernel panic, a flaky verdict.  A
checker that reads the clock or the state's id, or background kernel work whose result depends on
timing, break the premise: confirmation (check/host.py) judges a sample of proven states for real,
and one disagreement turns the rule off (``off``) for the rest of the run."""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from powercut.core.log.dmlog import Entry
from powercut.core.states.crashstate import CrashState

Span = tuple[int, int]  # [lo, hi) in 512-byte sectors of the device
SECTOR = 512

# verdicts that are not a function of the blocks read: never shared
UNSHARED = frozenset({"timeout", "kernel-panic", "flaky"})
CLASSES = 64  # distinct touched sets tried per group, newest first (bounds a lookup's cost)


class ReadSet:
    """The device sectors one judge read: sorted, merged spans."""

    def __init__(self, spans: Iterable[Span]) -> None:
        merged: list[list[int]] = []
        for lo, hi in sorted(s for s in spans if s[1] > s[0]):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.spans = tuple((lo, hi) for lo, hi in merged)
        self._los = [lo for lo, _ in self.spans]

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def sectors(self) -> int:
        return sum(hi - lo for lo, hi in self.spans)

    def touches(self, lo: int, hi: int) -> bool:
        """Whether [lo, hi) overlaps a sector read."""
        k = bisect.bisect_right(self._los, hi - 1) - 1  # the last span starting inside or before
        return k >= 0 and self.spans[k][1] > lo


def entry_span(entry: Entry, sectorsize: int) -> Span:
    """The device sectors (512-byte) ``entry`` writes."""
    per = sectorsize // SECTOR
    return entry.sector * per, (entry.sector + entry.nr_sectors) * per


def key(state: CrashState) -> Hashable:
    """What the checker is told besides the image: one group of the rule."""
    return state.model, tuple(state.acks), state.begun


def value(state: CrashState, i: int, dropped: frozenset[int], torn: dict[int, tuple[int, ...]]):
    """How ``state`` keeps entry ``i``: False (not at all), True (whole) or its torn sectors."""
    if i >= state.cut or i in dropped:
        return False
    return torn.get(i, True)


def eligible(state: object) -> bool:
    """A state the rule may prove or share: one disk's, no lie (its image is the log's)."""
    return isinstance(state, CrashState) and state.lie is None


@dataclass(slots=True)
class _Group:
    lo: int
    hi: int
    # touched entries -> {signature -> the judged state's id}; newest touched set last
    classes: dict[tuple[int, ...], dict[tuple[object, ...], str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A proof that a real judge disproved: the state, the state it was said to equal, both verdicts."""

    state: str
    equal_to: str
    proven: str
    judged: str

    def line(self) -> str:
        return (
            f"the read-set rule proved {self.state} equal to {self.equal_to} ({self.proven}), "
            f"but judged for real it gave {self.judged}: the rule is off for the rest of the run"
        )


class ReadSetRule:
    """The rule over one walk's states of one log (``entries``, the log's sector size
    ``sectorsize``): ``proof(state)`` the judged state it equals (or None), ``add`` a judged state
    with its reads and verdict.  ``off`` after a mismatch (``disprove``): nothing is proven then."""

    def __init__(self, entries: Sequence[Entry], sectorsize: int, states: Iterable[object]) -> None:
        self.entries = entries
        self.sectorsize = sectorsize
        self.groups: dict[Hashable, _Group] = {}
        for s in states:
            if not eligible(s):
                continue
            assert isinstance(s, CrashState)
            k = key(s)
            g = self.groups.get(k)
            if g is None:
                self.groups[k] = _Group(s.base, s.cut)
            else:
                g.lo = min(g.lo, s.base)
                g.hi = max(g.hi, s.cut)
        self.mismatch: Mismatch | None = None

    @property
    def off(self) -> bool:
        return self.mismatch is not None

    def proof(self, state: object) -> str | None:
        """The id of a judged state ``state`` equals on every sector that state's judge read, with
        the same checker input; None if there is none (or the rule is off)."""
        if self.off or not eligible(state):
            return None
        assert isinstance(state, CrashState)
        g = self.groups.get(key(state))
        if g is None or not g.classes:
            return None
        dropped, torn = frozenset(state.dropped), dict(state.torn)
        for touched in list(reversed(g.classes))[:CLASSES]:
            sig = tuple(value(state, i, dropped, torn) for i in touched)
            found = g.classes[touched].get(sig)
            if found is not None:
                return found
        return None

    def add(self, state: object, reads: ReadSet | None, verdict: str) -> bool:
        """Index a judged state by what its judge read (None: unknown); whether it was indexed."""
        if self.off or reads is None or not len(reads) or verdict in UNSHARED:
            return False
        if not eligible(state):
            return False
        assert isinstance(state, CrashState)
        g = self.groups.get(key(state))
        if g is None:
            return False
        touched = tuple(
            i
            for i in range(g.lo, g.hi)
            if self.entries[i].changes_device
            and reads.touches(*entry_span(self.entries[i], self.sectorsize))
        )
        dropped, torn = frozenset(state.dropped), dict(state.torn)
        sig = tuple(value(state, i, dropped, torn) for i in touched)
        sigs = g.classes.pop(touched, {})  # re-inserted: the newest touched set is tried first
        sigs.setdefault(sig, state.id)
        g.classes[touched] = sigs
        return True

    def disprove(self, mismatch: Mismatch) -> None:
        """A proof a real judge disproved: the rule is off from now on."""
        if self.mismatch is None:
            self.mismatch = mismatch

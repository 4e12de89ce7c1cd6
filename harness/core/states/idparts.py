"""The parts of a crash-state id (pure; host and guest): sector/entry ranges, the parsed id
(``StateId``, its ``Pick`` parts), the canonical explicit id of a state (``format_id``), what an id
names (``resolve``) and the seeded picks an ``r`` part stands for.  The grammar of ids and the list
of models: stateid.py; what an id means: the crash models (core/crashmodels/).  Nothing here names a
model, so the model modules use it without importing the model list (core/crashmodels/registry.py).

Seeded picks hash a text key with SHAKE-256, so an id's meaning does not depend on how many samples
were asked for or on the Python version.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from powercut.errors import UsageError


# -- ranges ------------------------------------------------------------------------------------------
def runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs ``[lo, hi)`` of consecutive values in a sorted sequence."""
    out: list[tuple[int, int]] = []
    if not values:
        return out
    lo = prev = values[0]
    for v in values[1:]:
        if v != prev + 1:
            out.append((lo, prev + 1))
            lo = v
        prev = v
    out.append((lo, prev + 1))
    return out


def format_ranges(values: Sequence[int]) -> str:
    return ",".join(str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi in runs(values))


def parse_ranges(text: str, limit: int, what: str) -> tuple[int, ...]:
    """Expand ``ranges`` (already syntax-checked); every value must be < limit, strictly increasing."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo_s, _, hi_s = part.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
        if hi < lo or (out and lo <= out[-1]):
            raise UsageError(f"{what} {text!r}: ranges must be strictly increasing")
        if hi >= limit:
            raise UsageError(f"{what} {text!r}: {hi} is out of range (must be < {limit})")
        out.extend(range(lo, hi + 1))
    return tuple(out)


# -- parsed ids ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Pick:
    """One ``subset`` or ``tear`` part: ``kind`` "d"/"k"/"s" with ``ranges`` text, or "r" with a seed."""

    kind: str
    ranges: str = ""
    seed: int = 0
    n: int = 0

    def text(self) -> str:
        return f"r{self.seed}.{self.n}" if self.kind == "r" else f"{self.kind}{self.ranges}"


@dataclass(frozen=True, slots=True)
class StateId:
    """A syntactically valid id.  ``entry`` is the torn entry of a combined torn id (None otherwise)."""

    model: str
    cut: int
    subset: Pick | None = None
    tear: Pick | None = None
    entry: int | None = None
    lie: str | None = None  # a lying-disk model's part, parsed by core/crashmodels/lies.py

    @property
    def seeded(self) -> bool:
        return any(p is not None and p.kind == "r" for p in (self.subset, self.tear))

    def text(self) -> str:
        if self.lie is not None:
            return f"{self.model}@{self.cut}/{self.lie}"
        if self.entry is not None and self.tear is not None:
            tail = f"/{self.subset.text()}" if self.subset is not None else ""
            return f"{self.model}@{self.cut}/t{self.entry}:{self.tear.text()}{tail}"
        part = self.subset or self.tear
        return f"{self.model}@{self.cut}" + (f"/{part.text()}" if part is not None else "")


def _subset_text(dropped: Sequence[int], droppable: Sequence[int]) -> str:
    """The shorter explicit subset part ("/d..." or "/k...") for ``dropped`` among ``droppable``;
    "" when nothing is dropped."""
    if not dropped:
        return ""
    if 2 * len(dropped) <= len(droppable):
        return "/d" + format_ranges(dropped)
    gone = set(dropped)
    return "/k" + format_ranges([i for i in droppable if i not in gone])


def format_id(
    model: str,
    cut: int,
    dropped: Sequence[int],
    torn: Sequence[tuple[int, Sequence[int]]],
    droppable: Sequence[int],
) -> str:
    """The canonical explicit id of a state: ``dropped`` and each torn write's sectors sorted,
    ``droppable`` the entries that may be lost at the cut (needed only when something is dropped)."""
    if not torn:
        return f"{model}@{cut}{_subset_text(dropped, droppable)}"
    ((t, sectors),) = torn
    if t == cut - 1 and not dropped:
        return f"{model}@{cut}/s{format_ranges(sectors)}"
    return f"{model}@{cut}/t{t}:s{format_ranges(sectors)}{_subset_text(dropped, [i for i in droppable if i != t])}"


def resolve(
    sid: StateId, droppable: Sequence[int], sectors: Callable[[int], int]
) -> tuple[tuple[int, ...], tuple[tuple[int, tuple[int, ...]], ...]]:
    """What an id names: (lost entries, torn writes), given the entries that may be lost at its cut
    (``droppable``, sorted; needed when the id has a subset part) and ``sectors(entry)``, the number
    of units (sectors, or 4 KiB units for torn-4k) of a write of several units before the cut (0 for
    any other entry); the torn part is in those units.  UsageError for a
    torn write that is none, out-of-range sectors, or lost entries that cannot be lost; whether the
    model can produce the result is the caller's to check."""
    whole = sid.text()
    torn: tuple[tuple[int, tuple[int, ...]], ...] = ()
    t = sid.cut - 1 if sid.entry is None else sid.entry
    pool = [i for i in droppable if i != t] if sid.tear is not None else list(droppable)
    if sid.tear is not None:
        m = sectors(t) if 0 <= t < sid.cut else 0
        if m < 2:
            raise UsageError(
                f"state id {whole!r}: entry {t} is not a multi-sector write before the cut"
            )
        tear = sid.tear
        torn = (
            (
                t,
                torn_sample(m, tear.seed, t + 1, tear.n)
                if tear.kind == "r"
                else parse_ranges(tear.ranges, m, f"state id {whole!r}:"),
            ),
        )
    sub = sid.subset
    if sub is None:
        return (), torn
    if sub.kind == "r":
        lost = (
            tw_sample(pool, sub.seed, sid.cut, t, sub.n)
            if torn
            else wc_sample(pool, sub.seed, sid.cut, sub.n)
        )
        return lost, torn
    listed = parse_ranges(
        sub.ranges, pool[-1] + 1 if pool else 0, f"state id {whole!r}: lost entries"
    )
    bad = set(listed) - set(pool)
    if bad:
        raise UsageError(
            f"state id {whole!r}: entries {format_ranges(sorted(bad))} cannot be lost at cut {sid.cut}"
        )
    return (
        listed if sub.kind == "d" else tuple(i for i in pool if i not in bad.union(listed))
    ), torn


# -- seeded picks (an ``r`` part names one of these) -----------------------------------------------------
def _shake_256(data: bytes) -> "Any":
    """SHAKE256 (FIPS 202: the same bits from any implementation).  Python's own ``_sha3`` first:
    ``hashlib`` loads OpenSSL, about 0.15 s of a checker VM's start under TCG."""
    try:
        from _sha3 import shake_256  # type: ignore[import-not-found]  # CPython-internal, no stub
    except ImportError:
        from hashlib import shake_256
    return shake_256(data)


def shake_bits(key: str, k: int) -> int:
    """k pseudo-random bits from a text key."""
    return int.from_bytes(_shake_256(key.encode()).digest((k + 7) // 8), "little") & ((1 << k) - 1)


def pick_bits(items: Sequence[int], bits: int) -> tuple[int, ...]:
    """The items whose bit (least significant = first item) is set."""
    return tuple(x for x, b in zip(items, format(bits, f"0{len(items)}b")[::-1]) if b == "1")


def wc_sample(droppable: Sequence[int], seed: int, cut: int, n: int) -> tuple[int, ...]:
    """``write-cache@cut/r{seed}.{n}``: the dropped entries."""
    return pick_bits(
        droppable, shake_bits(f"powercut/write-cache/{seed}/{cut}/{n}", len(droppable))
    )


def torn_sample(m: int, seed: int, after: int, n: int) -> tuple[int, ...]:
    """A proper non-empty subset of range(m): the persisted sectors of a write of m sectors whose
    entry is ``after - 1`` (``torn@{after}/r{seed}.{n}``; the tear of a combined id uses the same)."""
    full = (1 << m) - 1
    for attempt in range(64):
        bits = shake_bits(f"powercut/torn/{seed}/{after}/{n}/{attempt}", m)
        if 0 < bits < full:
            return pick_bits(range(m), bits)
    return (0,)


def tw_sample(others: Sequence[int], seed: int, cut: int, entry: int, n: int) -> tuple[int, ...]:
    """The subset part ``r{seed}.{n}`` of a combined torn id: the lost entries among ``others``."""
    return pick_bits(others, shake_bits(f"powercut/torn-wc/{seed}/{cut}/{entry}/{n}", len(others)))


def seeded_index(count: int, seed: int, cut: int, n: int) -> int:
    """Which of ``count`` tearable writes the n-th seeded combined torn state of a cut tears."""
    return shake_bits(f"powercut/torn-entry/{seed}/{cut}/{n}", 64) % count


# -- structured picks (explicit ids; the same on every run) ---------------------------------------------
def subset_picks(pool: Sequence[int]) -> list[tuple[int, ...]]:
    """Lost subsets tried when an epoch is too big for all of them: none, all, each one, all but one."""
    p = tuple(pool)
    return [(), p, *((d,) for d in p), *(p[:i] + p[i + 1 :] for i in range(len(p)))]


def tear_picks(m: int, extra: int) -> list[tuple[int, ...]]:
    """Persisted sectors tried for a write of m > 1 sectors: first half, second half, all but the
    last, only the first -- or every proper subset when there are no more than those plus ``extra``."""
    picks = dict.fromkeys(
        [tuple(range(m // 2)), tuple(range(m // 2, m)), tuple(range(m - 1)), (0,)]
    )
    if (1 << m) - 2 <= len(picks) + extra:
        return [pick_bits(range(m), x) for x in range(1, (1 << m) - 1)]
    return list(picks)


def not_under(
    lo: int, m: int, top: tuple[int, int], later: Sequence[tuple[int, int]]
) -> tuple[int, ...]:
    """Offsets of the write of sectors [lo, lo+m) that stay its own if the write ``top`` (sector,
    count) lands on it, except where a ``later`` write (sector, count) rewrote ``top``'s sectors
    anyway; () if ``top`` would win nowhere or everywhere."""
    shadow = set(range(max(lo, top[0]), min(lo + m, top[0] + top[1])))
    for sector, count in later:
        shadow.difference_update(range(sector, sector + count))
    keep = tuple(o for o in range(m) if lo + o not in shadow)
    return keep if shadow and len(keep) < m else ()

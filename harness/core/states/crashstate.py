"""What a crash state is and what it keeps (pure; host and guest).

``CrashState`` -- a cut, the data entries before it that did not persist (``dropped``) and those
that persisted only partly (``torn``), the acked and begun keys, and for a lying disk its ``Lie``
-- and the one rule for its durable data (``CrashState.base``, ``CrashState.kept``) that the crash
models (core/states/models), the replay (replay/materialize.plan) and the selection of distinct images
(core/states/imagekey.image_key) all use; ``describe``: a set of states counted per epoch, in one pass.
``KeyPrefix``: a state's acks as a view of the log's ack keys (shared by every state, so a log with
k acks costs O(k), not O(k^2)).  A torn write's atomic units (``unit_count``, ``unit_sectors``,
``sector_units``): what the torn models tear between."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from powercut.core.log.dmlog import Entry

Torn = tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class Lie:
    """What a lying disk did to a state's image besides losing ``dropped`` entries (core/crashmodels/lies.py):
    ``kind`` "misdirect" -- write ``entry``'s data also landed at device ``sector`` (the entry
    itself is dropped: its own target keeps the old data); "corrupt" -- device ``sector`` (last
    written by ``entry``) has the bit offsets ``bits`` flipped; "unreadable" -- device ``sector``
    fails reads with EIO at recovery (a check-time device-mapper layer; the image is unchanged).
    Sectors are in the log's sector size, ``sectorsize`` bytes."""

    kind: str
    entry: int
    sector: int
    bits: tuple[int, ...] = ()
    sectorsize: int = 512


@dataclass(frozen=True, slots=True)
class CrashState:
    model: str
    cut: int
    dropped: tuple[int, ...]
    torn: Torn
    acks: Sequence[str]  # a tuple, or a KeyPrefix (compares, hashes and pickles like one)
    begun: tuple[str, ...]
    id: str
    epoch: int  # number of barrier FLUSH entries before the cut (ordering flushes not counted)
    lie: Lie | None = None  # a lying-disk state's misdirected write, corrupt or unreadable sector

    # -- what the state keeps: the one rule models, replay and selection use ----------------------
    @property
    def base(self) -> int:
        """The first entry where the state differs from the plain prefix (its first dropped or torn
        entry, else the cut): entries before it are all kept whole."""
        return min(
            min(self.dropped, default=self.cut), min((i for i, _ in self.torn), default=self.cut)
        )

    def kept(
        self, changes_device: Sequence[bool] | DeviceChanges, start: int = 0
    ) -> tuple[tuple[int, tuple[int, ...] | None], ...]:
        """The data entries of [start, cut) that persist, in log order: (index, None) whole, or
        (index, sector offsets) torn.  ``changes_device[i]``: entry i writes the device (a write or a
        discard; marks and empty flushes never do)."""
        gone, torn = set(self.dropped), dict(self.torn)
        return tuple(
            (i, torn.get(i)) for i in range(start, self.cut) if changes_device[i] and i not in gone
        )


class KeyPrefix(Sequence[str]):
    """The first ``n`` keys of a shared list that is never changed: the acks of a state, without a
    tuple per state.  The acks before a cut are a prefix of the log's acks in ack order, so every
    state of a log shares one list (as tuples, a log with k acks would hold k tuples of up to k
    keys: O(k^2) time and memory).  Behaves as the tuple of its keys: equal to it (and to an equal
    KeyPrefix), same hash, slices are tuples, pickles and copies as the tuple."""

    __slots__ = ("_keys", "_n")

    def __init__(self, keys: list[str], n: int) -> None:
        if not 0 <= n <= len(keys):
            raise ValueError(f"prefix of {n} keys of a list of {len(keys)}")
        self._keys, self._n = keys, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str, ...]: ...
    def __getitem__(self, i: int | slice) -> str | tuple[str, ...]:
        if isinstance(i, slice):
            return tuple(self._keys[: self._n][i])
        return self._keys[range(self._n)[i]]

    def __iter__(self) -> Iterator[str]:
        return itertools.islice(self._keys, self._n)

    def __contains__(self, key: object) -> bool:
        try:
            self._keys.index(key, 0, self._n)  # type: ignore[arg-type]
        except ValueError:
            return False
        return True

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyPrefix):
            return self._n == other._n and (
                self._keys is other._keys or tuple(self) == tuple(other)
            )
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __add__(self, other: Any) -> tuple[str, ...]:
        return tuple(self) + other if isinstance(other, tuple) else NotImplemented

    def __radd__(self, other: Any) -> tuple[str, ...]:
        return other + tuple(self) if isinstance(other, tuple) else NotImplemented

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return tuple, (tuple(self),)


# -- torn writes: atomic units of ``per`` sectors (device-aligned) -> sector offsets and back ---------------
def unit_count(e: Entry, per: int) -> int:
    """How many atomic units of ``per`` sectors (device-aligned) write e touches."""
    if per <= 1:
        return e.nr_sectors
    return (e.sector + e.nr_sectors - 1) // per - e.sector // per + 1 if e.nr_sectors else 0


def unit_sectors(
    e: Entry, per: int, units: Sequence[int], offs: Sequence[int] | None = None
) -> tuple[int, ...]:
    """The sector offsets (in e) of the given unit indices (in e), made of ``offs``'s int objects
    (0, 1, ... at least e.nr_sectors of them; CrashSpace shares one table)."""
    offs = range(e.nr_sectors) if offs is None else offs
    if per <= 1:
        return (
            tuple(map(offs.__getitem__, units))
            if all(0 <= u < e.nr_sectors for u in units)
            else tuple(units)
        )
    lo, hi = e.sector // per, e.sector + e.nr_sectors  # the first unit, the write's end
    return tuple(
        itertools.chain.from_iterable(
            offs[max(e.sector, (lo + k) * per) - e.sector : min(hi, (lo + k + 1) * per) - e.sector]
            for k in units
        )
    )


def sector_units(e: Entry, per: int, sectors: Sequence[int]) -> tuple[int, ...] | None:
    """The unit indices whose sectors are exactly ``sectors``; None if they are not whole units."""
    if per <= 1:
        return tuple(sectors)
    first = e.sector // per
    units = tuple(sorted({(e.sector + o) // per - first for o in sectors}))
    return units if unit_sectors(e, per, units) == tuple(sorted(sectors)) else None


def state_to_json(state: CrashState) -> dict[str, object]:
    """A state as JSON (its id, parts, keys and lie)."""
    return {
        "id": state.id,
        "model": state.model,
        "cut": state.cut,
        "epoch": state.epoch,
        "dropped": list(state.dropped),
        "torn": [[i, list(s)] for i, s in state.torn],
        "acks": list(state.acks),
        "begun": list(state.begun),
        **(
            {
                "lie": {
                    "kind": state.lie.kind,
                    "entry": state.lie.entry,
                    "sector": state.lie.sector,
                    "bits": list(state.lie.bits),
                }
            }
            if state.lie is not None
            else {}
        ),
    }


class DeviceChanges:
    """``changes_device`` of a sequence of entries, indexable without building a list."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = entries

    def __getitem__(self, i: int) -> bool:
        return self.entries[i].changes_device


def describe(states: Iterable[CrashState]) -> dict[str, object]:
    """Total count and per-epoch breakdown (epoch = number of barrier FLUSH entries before the cut);
    one pass, so a stream (``CrashSpace.iter_states``) needs no list."""
    per: dict[int, list[int]] = {}  # epoch -> [states, first cut, last cut, max dropped, sampled]
    cuts: dict[int, set[int]] = {}
    models: Counter[str] = Counter()
    for s in states:
        sampled = "r" in s.id.partition("@")[2]  # an id with a seeded part
        e = per.get(s.epoch)
        if e is None:
            e = per[s.epoch] = [0, s.cut, s.cut, 0, 0]
            cuts[s.epoch] = set()
        e[0] += 1
        e[1] = min(e[1], s.cut)
        e[2] = max(e[2], s.cut)
        e[3] = max(e[3], len(s.dropped))
        e[4] += sampled
        cuts[s.epoch].add(s.cut)
        models[s.model] += 1
    epochs = [
        {
            "epoch": k,
            "states": e[0],
            "cuts": len(cuts[k]),
            "first_cut": e[1],
            "last_cut": e[2],
            "max_dropped": e[3],
            "sampled": e[4],
        }
        for k, e in sorted(per.items())
    ]
    return {
        "total": sum(e[0] for e in per.values()),
        "models": dict(models),
        "cuts": len(set().union(*cuts.values())),
        "sampled": sum(e[4] for e in per.values()),
        "epochs": epochs,
    }

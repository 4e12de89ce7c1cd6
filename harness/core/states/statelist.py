"""Chosen crash states kept as their ids (pure; host): how a selection of millions of states fits in
memory.  The states are rebuilt from their ids when asked for (an id names one state, equal to the
enumerated one: core/states/stateid, core/states/nodes)."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar, cast, overload

from powercut.core.states.crashstate import CrashState
from powercut.core.states.models import CrashSpace
from powercut.core.states.nodes import Nodes, NodesState

__all__ = ["StateList"]


S = TypeVar("S", CrashState, NodesState)


def _same_logs(a: object, b: object) -> bool:
    """Two spaces of the same log(s): the same object, or equal entries disk by disk."""
    if a is b:
        return True
    if isinstance(a, CrashSpace) and isinstance(b, CrashSpace):
        return a.entries == b.entries
    if isinstance(a, Nodes) and isinstance(b, Nodes):
        return len(a) == len(b) and all(x.entries == y.entries for x, y in zip(a.nodes, b.nodes))
    return False


class StateList(Sequence[S], Generic[S]):
    """Crash states kept as their ids -- one shared buffer of the ids' ASCII after ``MODEL@``, a
    prefix byte (the text before the first ``@``: the model, or for several disks ``MODEL~MODEL``)
    and a 4-byte end offset per state: ~20-25 bytes a state instead of ~300 bytes of objects --
    each rebuilt from its id when asked for (``CrashSpace.state_from_id`` for one disk's states,
    ``Nodes.state_from_id`` for states of the disks: an id names one state, equal to the enumerated
    one).  A log of 10^6 entries has millions of distinct states: this is how a selection of them
    fits in memory."""

    __slots__ = ("_sp", "_buf", "_ends", "_mi", "_models", "_model_at")
    WIDE = 1 << 32  # ids' bytes from which the end offsets take 8 bytes, not 4

    def __init__(self, sp: CrashSpace | Nodes, ids: Iterable[str] = ()) -> None:
        self._sp = sp
        self._buf = bytearray()
        self._ends = array("I")
        self._mi = array("B")
        self._models: list[str] = []
        self._model_at: dict[str, int] = {}
        for sid in ids:
            self.append_id(sid)

    def append_id(self, sid: str) -> None:
        model, at, rest = sid.partition("@")
        if not at:
            raise ValueError(f"not a state id: {sid!r}")
        m = self._model_at.get(model)
        if m is None:
            m = self._add_prefix(model)
        self._buf += rest.encode("ascii")
        self._mi.append(m)
        self._push_end(len(self._buf))

    def _add_prefix(self, prefix: str) -> int:
        if len(self._models) > 255:
            raise ValueError(f"more than 256 id prefixes in one StateList (at {prefix!r})")
        self._model_at[prefix] = len(self._models)
        self._models.append(prefix)
        return self._model_at[prefix]

    def over(self, sp: CrashSpace | Nodes) -> StateList[S]:
        """The same ids (buffers shared, not copied) rebuilt by another space of the same log(s): one
        disk's states chosen as states of the disks (``Nodes([sp])``) are ``sp``'s own ids."""
        out: StateList[S] = StateList(sp)
        out._buf = self._buf
        out._ends = self._ends
        out._mi = self._mi
        out._models, out._model_at = self._models, self._model_at
        return out

    def _push_end(self, end: int) -> None:
        if end >= self.WIDE and self._ends.typecode == "I":
            self._ends = array("Q", self._ends)
        self._ends.append(end)

    def extend(self, other: StateList[S]) -> None:
        """Append every id of ``other`` (of the same log), buffer to buffer."""
        remap = array("B")
        for m in other._models:
            if m not in self._model_at:
                self._add_prefix(m)
            remap.append(self._model_at[m])
        base = len(self._buf)
        self._buf += other._buf
        if base + len(other._buf) >= self.WIDE and self._ends.typecode == "I":
            self._ends = array("Q", self._ends)
        self._ends.extend(e + base for e in other._ends)
        self._mi.extend(remap[m] for m in other._mi)

    def id_at(self, i: int) -> str:
        i = range(len(self._ends))[i]
        rest = self._buf[self._ends[i - 1] if i else 0 : self._ends[i]].decode("ascii")
        return f"{self._models[self._mi[i]]}@{rest}"

    def ids(self) -> Iterator[str]:
        return map(self.id_at, range(len(self._ends)))

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, i: int) -> S: ...
    @overload
    def __getitem__(self, i: slice) -> list[S]: ...
    def __getitem__(self, i: int | slice) -> S | list[S]:
        if isinstance(i, slice):
            return [self._state(self.id_at(k)) for k in range(len(self._ends))[i]]
        return self._state(self.id_at(i))

    def __iter__(self) -> Iterator[S]:
        return map(self._state, self.ids())

    def _state(self, sid: str) -> S:
        return cast(S, self._sp.state_from_id(sid))  # S is what the space's ids name

    def __eq__(self, other: object) -> bool:
        """Equal to a StateList of the same log(s) with the same ids, or to a tuple/list of the same states."""
        if isinstance(other, StateList):
            if not _same_logs(self._sp, other._sp) or len(self) != len(other):
                return False
            if self._models == other._models:
                return (
                    self._mi == other._mi
                    and self._buf == other._buf
                    and list(self._ends) == list(other._ends)
                )
            return all(a == b for a, b in zip(self.ids(), other.ids()))
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StateList({len(self)} states)"

"""What a crash state is and what it keeps (pure; host and guest): ``CrashState`` -- a cut, the data
entries before it that did not persist (``dropped``) and those that persisted only partly (``torn``),
the acked and begun keys -- and the one rule for its durable data (``CrashState.base``,
``CrashState.kept``) that the crash models (core/models), the replay (replay/materialize.plan) and
the selection of distinct images (core/selection.image_key) all use."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from powercut.core.dmlog import Entry


Torn = tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class CrashState:
    model: str
    cut: int
    dropped: tuple[int, ...]
    torn: Torn
    acks: tuple[str, ...]
    begun: tuple[str, ...]
    id: str
    epoch: int  # number of barrier FLUSH entries before the cut (ordering flushes not counted)

    # -- what the state keeps: the one rule models, replay and selection use ----------------------
    @property
    def base(self) -> int:
        """The first entry where the state differs from the plain prefix (its first dropped or torn
        entry, else the cut): entries before it are all kept whole."""
        return min(min(self.dropped, default=self.cut), min((i for i, _ in self.torn), default=self.cut))

    def kept(self, changes_device: Sequence[bool], start: int = 0) -> tuple[tuple[int, tuple[int, ...] | None], ...]:
        """The data entries of [start, cut) that persist, in log order: (index, None) whole, or
        (index, sector offsets) torn.  ``changes_device[i]``: entry i writes the device (a write or a
        discard; marks and empty flushes never do)."""
        gone, torn = set(self.dropped), dict(self.torn)
        return tuple((i, torn.get(i)) for i in range(start, self.cut) if changes_device[i] and i not in gone)

def state_to_json(state: CrashState) -> dict[str, object]:
    return {"id": state.id, "model": state.model, "cut": state.cut, "epoch": state.epoch,
            "dropped": list(state.dropped), "torn": [[i, list(s)] for i, s in state.torn],
            "acks": list(state.acks), "begun": list(state.begun)}

class DeviceChanges:
    """``changes_device`` of a sequence of entries, indexable without building a list."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = entries

    def __getitem__(self, i: int) -> bool:
        return self.entries[i].changes_device

def is_key_mark(e: Entry) -> bool:
    """An ``ack:`` or ``begin:`` mark: it changes what the checker is told."""
    return e.ack_key is not None or e.begin_key is not None

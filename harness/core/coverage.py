"""What a check covered (pure; host): the words a verdict carries beside ``pass`` or a failure.

A check judges the states chosen from each model's space.  It is **exhaustive** only when every
distinct state of every model it was asked for was judged and nothing weakened the space.
Otherwise it is one or more of:

* ``sampled`` -- some windows of a model were too large to enumerate (a write-cache window above
  ``--bound``, a torn write with more tears than ``--torn-samples``, a torn write combined with its
  window's subsets): the states generated there are a seeded sample of the window's space.  Counted
  per model: the windows sampled, the states generated in them and the size of their spaces.
* ``capped`` -- ``--max-states`` left distinct states out (never judged).
* ``weakened`` -- the space itself is smaller than the model says, or the judging is: an ambiguous
  ordering window (a program flush inside a mark's ordering window, a marker that died there: its
  flushes counted as barriers, so write-cache losses across them are not generated), a state the
  log cannot tell (``notes`` name each, with the ack it affects), or no checker of the program's
  data (recovery mount and fsck only).

Enumeration fills a :class:`Tally` (one per model) as it generates; :func:`build` joins the
tallies with selection's counts and the campaign's notes into the frozen :class:`Coverage` that the
summary, JUnit, the HTML report, the plugin, merge and the matrix read.  ``Coverage.phrase`` is the
one wording every output uses, e.g. ``capped: 3 of 60 distinct states judged``."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["CAPPED", "EXHAUSTIVE", "SAMPLED", "WEAKENED", "WORDS", "Coverage", "ModelCoverage", "Tally", "build",
           "judged_only", "merge"]

EXHAUSTIVE, SAMPLED, CAPPED, WEAKENED = "exhaustive", "sampled", "capped", "weakened"
WORDS = (EXHAUSTIVE, SAMPLED, CAPPED, WEAKENED)   # worst last
SPACE_CAP = 2 ** 62   # a window's space is counted up to this (2^|window| overflows nothing, but JSON readers)


@dataclass(slots=True)
class Tally:
    """Filled while one model's states are generated (mutable; core/models.py).  A *window* is one
    unit the model enumerates on its own: a write-cache cut's droppable writes, a torn write's tears
    (alone, or combined with its window's subsets).  ``space`` counts the states a sampled window
    could hold (saturating at SPACE_CAP); ``generated`` the states generated there (before
    deduplication across windows)."""

    windows: int = 0
    sampled_windows: int = 0
    generated: int = 0
    space: int = 0

    def window(self, space: int, generated: int, *, sampled: bool) -> None:
        """One window enumerated: ``space`` states possible, ``generated`` of them made."""
        self.windows += 1
        if sampled:
            self.sampled_windows += 1
            self.generated += generated
            self.space = min(SPACE_CAP, self.space + max(space, generated))


@dataclass(frozen=True, slots=True)
class ModelCoverage:
    """One model's coverage.  ``distinct``: its distinct states after the floor that it represents;
    ``judged``: those judged (the rest ``left_out`` by --max-states or a shard of another runner);
    the sampled fields as in :class:`Tally`."""

    model: str
    distinct: int
    judged: int
    windows: int = 0
    sampled_windows: int = 0
    sampled_generated: int = 0
    sampled_space: int = 0
    earlier: int = 0    # distinct states a ledger says passed in earlier runs of the log (not judged again)
    notes: tuple[str, ...] = ()   # what weakens this model's space or its judging, one sentence each

    @property
    def left_out(self) -> int:
        return self.distinct - self.judged - self.earlier

    @property
    def words(self) -> tuple[str, ...]:
        w = tuple(x for x, on in ((SAMPLED, self.sampled_windows > 0), (CAPPED, self.left_out > 0),
                                  (WEAKENED, bool(self.notes))) if on)
        return w or (EXHAUSTIVE,)

    def phrase(self) -> str:
        """This model's coverage alone (a matrix cell's): '' when exhaustive."""
        return Coverage((self,)).phrase()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"coverage": list(self.words), "distinct": self.distinct, "judged": self.judged}
        if self.left_out:
            d["left_out"] = self.left_out
        if self.earlier:
            d["earlier"] = self.earlier
        if self.notes:
            d["notes"] = list(self.notes)
        if self.sampled_windows:
            d["sampled"] = {"windows": self.sampled_windows, "of_windows": self.windows,
                            "generated": self.sampled_generated, "space": self.sampled_space}
        return d

    @classmethod
    def from_json(cls, model: str, d: Mapping[str, Any]) -> ModelCoverage:
        s = d.get("sampled") or {}
        return cls(model, int(d["distinct"]), int(d["judged"]), int(s.get("of_windows", 0)),
                   int(s.get("windows", 0)), int(s.get("generated", 0)), int(s.get("space", 0)),
                   int(d.get("earlier", 0)), tuple(d.get("notes") or ()))


@dataclass(frozen=True, slots=True)
class Coverage:
    """A check's coverage: per model (each with the notes that weaken it), and the seed."""

    models: tuple[ModelCoverage, ...]
    seed: int | None = None

    @property
    def notes(self) -> tuple[str, ...]:
        """Every model's notes, each once, in model order."""
        return tuple(dict.fromkeys(n for m in self.models for n in m.notes))

    def with_note(self, note: str, models: Iterable[str] | None = None) -> Coverage:
        """This coverage with ``note`` on the given models (None: all)."""
        on = None if models is None else set(models)
        return replace(self, models=tuple(replace(m, notes=tuple(dict.fromkeys((*m.notes, note))))
                                          if on is None or m.model in on else m for m in self.models))

    @property
    def words(self) -> tuple[str, ...]:
        """Every word that applies, in WORDS order; ("exhaustive",) when none does."""
        got = {w for m in self.models for w in m.words if w != EXHAUSTIVE}
        return tuple(w for w in WORDS if w in got) or (EXHAUSTIVE,)

    @property
    def overall(self) -> str:
        """The worst word (WORDS order): what a one-word column shows."""
        return self.words[-1]

    @property
    def exhaustive(self) -> bool:
        return self.words == (EXHAUSTIVE,)

    @property
    def distinct(self) -> int:
        return sum(m.distinct for m in self.models)

    @property
    def judged(self) -> int:
        return sum(m.judged for m in self.models)

    def phrase(self, notes: bool = True) -> str:
        """What follows a verdict in parentheses everywhere: '' when exhaustive, else e.g.
        ``capped: 3 of 60 distinct states judged; sampled: 4 of 9 write-cache windows (212 of 16384 states)``."""
        parts = []
        earlier = sum(m.earlier for m in self.models)
        if CAPPED in self.words:
            parts.append(f"capped: {self.judged} of {self.distinct} distinct states judged"
                         + (f" ({earlier} more passed in earlier runs)" if earlier else ""))
        elif earlier:
            parts.append(f"{earlier} of {self.distinct} distinct states passed in earlier runs (ledger), "
                         f"the other {self.judged} judged now")
        sampled = [m for m in self.models if m.sampled_windows]
        if sampled:
            seed = f" (seed {self.seed})" if self.seed is not None else ""
            parts.append(f"sampled{seed}: " + ", ".join(
                f"{m.sampled_windows} of {m.windows} {m.model} windows ({m.sampled_generated} of "
                f"{_count(m.sampled_space)} states)" for m in sampled))
        if self.notes and not notes:   # a page that lists the notes beside it
            parts.append(f"weakened ({len(self.notes)} note{'s' * (len(self.notes) != 1)} below)")
        elif self.notes:   # each note's head and the acks it affects; in full in summary.json and the report
            parts.append("weakened: " + "; ".join(_short(n) for n in self.notes))
        return "; ".join(parts)

    def qualify(self, verdict: str) -> str:
        """``pass`` -> ``pass (capped: ...)``; an exhaustive check's verdict unchanged."""
        p = self.phrase()
        return f"{verdict} ({p})" if p else verdict

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"overall": self.overall, "words": list(self.words),
                             "models": {m.model: m.to_json() for m in self.models}}
        if self.notes:
            d["notes"] = list(self.notes)
        if self.seed is not None:
            d["seed"] = self.seed
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Coverage:
        return cls(tuple(ModelCoverage.from_json(m, v) for m, v in (d.get("models") or {}).items()), d.get("seed"))


def _short(note: str) -> str:
    """A note's head (what is weakened, before its first ': ') and the acks it affects."""
    head = note.split(": ", 1)[0]
    affects = note.rpartition("affects ")[2] if "affects " in note else ""
    return f"{head} (affects {affects})" if affects and affects not in head else head


def _count(n: int) -> str:
    return f">= 2^{n.bit_length() - 1}" if n >= SPACE_CAP else str(n)


def build(counts: Mapping[str, Any], tallies: Mapping[str, Tally], *,
          notes: Mapping[str, Iterable[str]] | None = None, seed: int | None = None) -> Coverage:
    """Join selection's per-model counts (``owned`` and ``judged``: selection.ModelCounts) with the
    enumeration's tallies and the notes that weaken each model."""
    notes = notes or {}
    models = []
    for m, c in counts.items():
        t = tallies.get(m) or Tally()
        earlier = c.earlier
        models.append(ModelCoverage(m, c.owned + earlier, c.judged, t.windows, t.sampled_windows, t.generated,
                                    t.space, earlier, tuple(dict.fromkeys(notes.get(m, ())))))
    return Coverage(tuple(models), seed)


def judged_only(cov: Coverage, judged: Mapping[str, int]) -> Coverage:
    """The coverage of a part of a check (a shard, an interrupted run): ``judged`` per model is what
    this part really judged; the rest of each model's distinct states count as left out."""
    return replace(cov, models=tuple(replace(m, judged=min(m.distinct - m.earlier, judged.get(m.model, 0)))
                                     for m in cov.models))


def merge(parts: Sequence[Coverage]) -> Coverage:
    """The coverage of shards of one check merged: the same spaces (every shard enumerated the same
    models), judged states added, notes joined."""
    if not parts:
        return Coverage(())
    first = parts[0]
    judged: dict[str, int] = {}
    notes: dict[str, dict[str, None]] = {}
    for p in parts:
        for m in p.models:
            judged[m.model] = judged.get(m.model, 0) + m.judged
            notes.setdefault(m.model, {}).update(dict.fromkeys(m.notes))
    return Coverage(tuple(replace(m, judged=min(m.distinct - m.earlier, judged[m.model]), notes=tuple(notes[m.model]))
                          for m in first.models), first.seed)


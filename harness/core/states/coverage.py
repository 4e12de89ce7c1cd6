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

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "ALL",
    "CAPPED",
    "COMMITS",
    "EXHAUSTIVE",
    "SAMPLED",
    "SETUP",
    "WEAKENED",
    "WORDS",
    "Coverage",
    "ModelCoverage",
    "Part",
    "Tally",
    "build",
    "judged_only",
    "merge",
    "requirement",
]

EXHAUSTIVE = "exhaustive"
SAMPLED = "sampled"
CAPPED = "capped"
WEAKENED = "weakened"
# the parts of a check's windows (ModelCoverage.part)
ALL = "all"
COMMITS = "commits"
SETUP = "setup"
WORDS = (EXHAUSTIVE, SAMPLED, CAPPED, WEAKENED)  # worst last
SPACE_CAP = (
    2**62
)  # a window's space is counted up to this (2^|window| overflows nothing, but JSON readers)


@dataclass(slots=True)
class Tally:
    """Filled while one model's states are generated (mutable; core/states/models.py).  A *window* is one
    unit the model enumerates on its own: a write-cache cut's droppable writes, a torn write's tears
    (alone, or combined with its window's subsets).  ``space`` counts the states a sampled window
    could hold (saturating at SPACE_CAP); ``generated`` the states generated there (before
    deduplication across windows)."""

    windows: int = 0
    sampled_windows: int = 0
    generated: int = 0
    space: int = 0
    setup: Tally | None = (
        None  # the same counts of the set-up windows alone (cuts before the first key mark)
    )
    commits: Tally | None = None  # and of the commit windows (the others)

    def window(self, space: int, generated: int, *, sampled: bool, setup: bool = False) -> None:
        """One window enumerated: ``space`` states possible, ``generated`` of them made; ``setup``:
        its cut lies before the program's first key mark (counted in ``setup``, else in ``commits``)."""
        self._count(space, generated, sampled)
        if self.setup is None or self.commits is None:
            self.setup, self.commits = Tally(), Tally()
        (self.setup if setup else self.commits)._count(space, generated, sampled)

    def _count(self, space: int, generated: int, sampled: bool) -> None:
        self.windows += 1
        if sampled:
            self.sampled_windows += 1
            self.generated += generated
            self.space = min(SPACE_CAP, self.space + max(space, generated))

    def add(self, other: Tally) -> None:
        """Count ``other``'s windows too (its parts into the parts)."""
        self.windows += other.windows
        self.sampled_windows += other.sampled_windows
        self.generated += other.generated
        self.space = min(SPACE_CAP, self.space + other.space)
        for name in ("setup", "commits"):
            theirs = getattr(other, name)
            if theirs is not None:
                if getattr(self, name) is None:
                    setattr(self, name, Tally())
                getattr(self, name).add(theirs)

    def part(self, name: str) -> Tally:
        """The set-up (SETUP) or commit (COMMITS) windows' counts (none counted: an empty Tally)."""
        return getattr(self, name) or Tally()


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
    earlier: int = (
        0  # distinct states a ledger says passed in earlier runs of the log (not judged again)
    )
    notes: tuple[str, ...] = ()  # what weakens this model's space or its judging, one sentence each
    setup: Part | None = (
        None  # the set-up windows' share of the above (None: not told apart, old output)
    )
    commits: Part | None = None  # the commit windows' share (None: not told apart)
    partial: bool = False  # a part of the check (a shard, a stopped run): the parts are the whole
    #                               selection's, which of their states this run judged is not counted

    @property
    def left_out(self) -> int:
        return self.distinct - self.judged - self.earlier

    def part(self, which: str) -> Part:
        """The set-up windows' part (SETUP), the commit windows' (COMMITS: the rest) or the whole (ALL)."""
        if which == SETUP:
            return self.setup or Part(self.model)
        if which == COMMITS and self.commits is not None:
            return self.commits
        return Part(
            self.model,
            self.distinct - self.earlier,
            self.judged,
            self.windows,
            self.sampled_windows,
            self.sampled_generated,
            self.sampled_space,
            self.notes,
        )  # the whole (also the commits untold)

    @property
    def words(self) -> tuple[str, ...]:
        w = tuple(
            x
            for x, on in (
                (SAMPLED, self.sampled_windows > 0),
                (CAPPED, self.left_out > 0),
                (WEAKENED, bool(self.notes)),
            )
            if on
        )
        return w or (EXHAUSTIVE,)

    def phrase(self) -> str:
        """This model's coverage alone (a matrix cell's): '' when exhaustive."""
        return Coverage((self,)).phrase()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "coverage": list(self.words),
            "distinct": self.distinct,
            "judged": self.judged,
        }
        if self.left_out:
            d["left_out"] = self.left_out
        if self.earlier:
            d["earlier"] = self.earlier
        if self.notes:
            d["notes"] = list(self.notes)
        if self.sampled_windows:
            d["sampled"] = {
                "windows": self.sampled_windows,
                "of_windows": self.windows,
                "generated": self.sampled_generated,
                "space": self.sampled_space,
            }
        if self.setup is not None and self.commits is not None:
            d["commits"] = {"coverage": list(self.commits.words), **self.commits.to_json()}
            d["setup"] = {"coverage": list(self.setup.words), **self.setup.to_json()}
            if self.partial:
                d["partial"] = True
        return d

    @classmethod
    def from_json(cls, model: str, d: Mapping[str, Any]) -> ModelCoverage:
        s = d.get("sampled") or {}
        u, c = d.get("setup"), d.get("commits")
        return cls(
            model,
            int(d["distinct"]),
            int(d["judged"]),
            int(s.get("of_windows", 0)),
            int(s.get("windows", 0)),
            int(s.get("generated", 0)),
            int(s.get("space", 0)),
            int(d.get("earlier", 0)),
            tuple(d.get("notes") or ()),
            None if u is None or c is None else Part.from_json(model, u),
            None if u is None or c is None else Part.from_json(model, c),
            bool(d.get("partial", False)),
        )


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a model's windows (the set-up windows, before the program's first key mark, or
    the commit windows, the rest): its distinct states (owned: not passed earlier), those judged,
    its windows and the sampled ones, and the notes that weaken it."""

    model: str
    distinct: int = 0
    judged: int = 0
    windows: int = 0
    sampled_windows: int = 0
    sampled_generated: int = 0
    sampled_space: int = 0
    notes: tuple[str, ...] = ()

    @property
    def left_out(self) -> int:
        return self.distinct - self.judged

    @property
    def words(self) -> tuple[str, ...]:
        w = tuple(
            x
            for x, on in (
                (SAMPLED, self.sampled_windows > 0),
                (CAPPED, self.left_out > 0),
                (WEAKENED, bool(self.notes)),
            )
            if on
        )
        return w or (EXHAUSTIVE,)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "distinct": self.distinct,
            "judged": self.judged,
            "windows": self.windows,
        }
        if self.sampled_windows:
            d["sampled"] = {
                "windows": self.sampled_windows,
                "generated": self.sampled_generated,
                "space": self.sampled_space,
            }
        if self.notes:
            d["notes"] = list(self.notes)
        return d

    @classmethod
    def from_json(cls, model: str, d: Mapping[str, Any]) -> Part:
        s = d.get("sampled") or {}
        return cls(
            model,
            int(d.get("distinct", 0)),
            int(d.get("judged", 0)),
            int(d.get("windows", 0)),
            int(s.get("windows", 0)),
            int(s.get("generated", 0)),
            int(s.get("space", 0)),
            tuple(d.get("notes") or ()),
        )


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
        return replace(
            self,
            models=tuple(
                _noted(m, note) if on is None or m.model in on else m for m in self.models
            ),
        )

    @property
    def split(self) -> bool:
        """Whether the set-up windows are told apart from the commit windows (both have some)."""
        return (
            all(
                m.setup is not None and m.commits is not None and not m.partial for m in self.models
            )
            and any(m.part(SETUP).windows or m.part(SETUP).distinct for m in self.models)
            and any(m.part(COMMITS).windows or m.part(COMMITS).distinct for m in self.models)
            and not any(m.earlier for m in self.models)
        )

    def part_words(self, which: str) -> tuple[str, ...]:
        """The words of one part (COMMITS, SETUP) of every model; the whole's when the parts are not
        told apart (``split``): a check that cannot tell its commits apart claims nothing more for them."""
        if not self.split or which == ALL:
            return self.words
        got = {w for m in self.models for w in m.part(which).words if w != EXHAUSTIVE}
        return tuple(w for w in WORDS if w in got) or (EXHAUSTIVE,)

    @property
    def commits_exhaustive(self) -> bool:
        """Every commit window's states judged, none sampled or weakened (the whole, if not told apart)."""
        return self.part_words(COMMITS) == (EXHAUSTIVE,)

    def meets(self, require: str | bool) -> bool:
        """Whether this coverage meets ``--require-exhaustive``: nothing asked ("" or False), the
        commit windows exhaustive (COMMITS, or True: a setting from before the parts), or everything (ALL)."""
        if not require:
            return True
        return self.exhaustive if require == ALL else self.commits_exhaustive

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
        ``capped: 3 of 60 distinct states judged; sampled: 4 of 9 write-cache windows (212 of 16384 states)``;
        the commit windows first when they are told apart from the set-up windows (``split``):
        ``every commit window exhaustive (412 distinct states); set-up windows sampled (seed 0): 3 of 5
        write-cache windows (330 of >= 2^62 states)``."""
        if self.exhaustive:
            return ""
        if not self.split:
            return self._phrase(ALL, notes)
        commits = self._phrase(COMMITS, notes)
        said = {
            n for m in self.models for n in m.part(COMMITS).notes
        }  # a note said once, for the commits
        setup = self._phrase(SETUP, notes, said)
        n = sum(m.part(COMMITS).distinct for m in self.models)
        head = (
            f"commit windows {commits}"
            if commits
            else f"every commit window exhaustive ({n} distinct states)"
        )
        return f"{head}; set-up windows {setup or 'exhaustive'}"

    def _phrase(self, which: str, notes: bool, said_before: Collection[str] = ()) -> str:
        parts = []
        ps = [m.part(which) for m in self.models]
        earlier = sum(m.earlier for m in self.models) if which == ALL else 0
        judged, distinct = sum(p.judged for p in ps), sum(p.distinct for p in ps) + earlier
        if any(p.left_out for p in ps):
            parts.append(
                f"capped: {judged} of {distinct} distinct states judged"
                + (f" ({earlier} more passed in earlier runs)" if earlier else "")
            )
        elif earlier:
            parts.append(
                f"{earlier} of {distinct} distinct states passed in earlier runs (ledger), "
                f"the other {judged} judged now"
            )
        sampled = [p for p in ps if p.sampled_windows]
        if sampled:
            seed = f" (seed {self.seed})" if self.seed is not None else ""
            parts.append(
                f"sampled{seed}: "
                + ", ".join(
                    f"{p.sampled_windows} of {p.windows} {p.model} windows ({p.sampled_generated} of "
                    f"{_count(p.sampled_space)} states)"
                    for p in sampled
                )
            )
        said = tuple(dict.fromkeys(n for p in ps for n in p.notes if n not in said_before))
        shared = (
            ", and as the commit windows"
            if any(n in said_before for p in ps for n in p.notes)
            else ""
        )
        if said and not notes:  # a page that lists the notes beside it
            parts.append(f"weakened ({len(said)} note{'s' * (len(said) != 1)} below){shared}")
        elif (
            said
        ):  # each note's head and the acks it affects; in full in summary.json and the report
            parts.append("weakened: " + "; ".join(_short(n) for n in said) + shared)
        elif shared:  # this part's notes all said already, for the commit windows
            parts.append("weakened as the commit windows")
        return "; ".join(parts)

    def qualify(self, verdict: str) -> str:
        """``pass`` -> ``pass (capped: ...)``; an exhaustive check's verdict unchanged."""
        p = self.phrase()
        return f"{verdict} ({p})" if p else verdict

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "overall": self.overall,
            "words": list(self.words),
            "models": {m.model: m.to_json() for m in self.models},
        }
        if self.notes:
            d["notes"] = list(self.notes)
        if self.seed is not None:
            d["seed"] = self.seed
        if (
            self.split
        ):  # the commit windows apart from the set-up windows (before the first key mark)
            for which in (COMMITS, SETUP):
                ps = [m.part(which) for m in self.models]
                d[which] = {
                    "words": list(self.part_words(which)),
                    "distinct": sum(p.distinct for p in ps),
                    "judged": sum(p.judged for p in ps),
                }
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Coverage:
        return cls(
            tuple(ModelCoverage.from_json(m, v) for m, v in (d.get("models") or {}).items()),
            d.get("seed"),
        )


def requirement(value: object) -> str:
    """A ``require_exhaustive`` setting as one of "", COMMITS, ALL (True, from settings and outputs
    made before the parts were told apart, is COMMITS: on such coverage the commits are the whole)."""
    if value in (ALL, COMMITS):
        return str(value)
    return COMMITS if value is True else ""


def _noted(m: ModelCoverage, note: str) -> ModelCoverage:
    """``m`` with ``note`` on it and on both its parts (a note of the whole check weakens each)."""

    def add(p: Part | None) -> Part | None:
        return None if p is None else replace(p, notes=tuple(dict.fromkeys((*p.notes, note))))

    return replace(
        m, notes=tuple(dict.fromkeys((*m.notes, note))), setup=add(m.setup), commits=add(m.commits)
    )


def _short(note: str) -> str:
    """A note's head (what is weakened, before its first ': ') and the acks it affects."""
    head = note.split(": ", 1)[0]
    affects = note.rpartition("affects ")[2] if "affects " in note else ""
    return f"{head} (affects {affects})" if affects and affects not in head else head


def _count(n: int) -> str:
    return f">= 2^{n.bit_length() - 1}" if n >= SPACE_CAP else str(n)


def build(
    counts: Mapping[str, Any],
    tallies: Mapping[str, Tally],
    *,
    notes: Mapping[str, Iterable[str]] | None = None,
    seed: int | None = None,
    setup_only: Iterable[str] = (),
) -> Coverage:
    """Join selection's per-model counts (``owned`` and ``judged``, and of them ``setup_owned`` and
    ``setup_judged``: selection.ModelCounts) with the enumeration's tallies and the notes that weaken
    each model.  ``setup_only``: the notes that weaken the set-up windows alone; every other note
    weakens both parts."""
    notes = notes or {}
    only = set(setup_only)
    models = []
    for m, c in counts.items():
        t = tallies.get(m) or Tally()
        earlier = c.earlier
        said = tuple(dict.fromkeys(notes.get(m, ())))
        su, co = t.part(SETUP), t.part(COMMITS)
        setup = Part(
            m,
            c.setup_owned,
            c.setup_judged,
            su.windows,
            su.sampled_windows,
            su.generated,
            su.space,
            said,
        )
        commits = Part(
            m,
            c.owned - c.setup_owned,
            c.judged - c.setup_judged,
            co.windows,
            co.sampled_windows,
            co.generated,
            co.space,
            tuple(n for n in said if n not in only),
        )
        models.append(
            ModelCoverage(
                m,
                c.owned + earlier,
                c.judged,
                t.windows,
                t.sampled_windows,
                t.generated,
                t.space,
                earlier,
                said,
                setup,
                commits,
            )
        )
    return Coverage(tuple(models), seed)


def judged_only(cov: Coverage, judged: Mapping[str, int]) -> Coverage:
    """The coverage of a part of a check (a shard, an interrupted run): ``judged`` per model is what
    this part really judged; the rest of each model's distinct states count as left out."""
    return replace(
        cov,
        models=tuple(
            _judged(m, min(m.distinct - m.earlier, judged.get(m.model, 0))) for m in cov.models
        ),
    )


def _judged(m: ModelCoverage, judged: int) -> ModelCoverage:
    """``m`` with ``judged`` states judged: when that is not every state chosen, which part's states
    were judged is not counted: ``partial`` (its words are the whole's until merged whole again)."""
    if judged == m.judged:
        return m
    return replace(m, judged=judged, partial=True)


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
    return Coverage(
        tuple(
            _whole_again(m, min(m.distinct - m.earlier, judged[m.model]), tuple(notes[m.model]))
            for m in first.models
        ),
        first.seed,
    )


def _whole_again(m: ModelCoverage, judged: int, notes: tuple[str, ...]) -> ModelCoverage:
    """A model of merged shards: its parts told apart again when the shards judged every state the
    selection chose (the parts' judged states add up to it), else still ``partial``."""
    chosen = (
        (m.setup.judged + m.commits.judged) if m.setup is not None and m.commits is not None else -1
    )
    return replace(m, judged=judged, notes=notes, partial=m.partial and judged != chosen)

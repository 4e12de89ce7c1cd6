"""The crash-model registry (core/crashmodels/registry.py): every model registered once under a
unique name, every model object of the family modules registered, the derived lists in the
documented order and the same wherever they are imported from, and a model added to a list of
models showing up in every derived list."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import powercut.core.crashmodels as crashmodels
from powercut.core.crashmodels.base import Bounds, CrashModel
from powercut.core.crashmodels.registry import REGISTERED, REGISTRY, derive, registered
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states import models, stateid
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState

DOCUMENTED = (
    "no-cache",
    "flush",
    "write-cache",
    "torn",
    "torn-4k",
    "lost-write",
    "misdirected-write",
    "corrupt-sector",
    "flush-ignored",
    "unreadable-sector",
)


HYPOTHETICAL = (
    "what-if",
)  # registered so that their ids rebuild; in no list (core/crashmodels/whatif.py)


def test_every_model_is_registered_once_under_a_unique_name() -> None:
    names = [m.name for m in REGISTERED]
    assert len(names) == len(set(names)) == len(DOCUMENTED) + len(HYPOTHETICAL)
    assert tuple(n for n in names if registered(n).hypothetical) == HYPOTHETICAL
    assert len({id(m) for m in REGISTERED}) == len(REGISTERED)
    assert all(registered(n) is m for n, m in zip(names, REGISTERED))
    with pytest.raises(ValueError, match="registered twice"):
        derive(REGISTERED + (REGISTERED[0],))


def test_every_model_object_of_the_family_modules_is_registered() -> None:
    """A family module's model object that the registry does not list would never be enumerated."""
    declared = []
    for info in pkgutil.iter_modules(crashmodels.__path__):
        mod = importlib.import_module(f"powercut.core.crashmodels.{info.name}")
        declared += [v for v in vars(mod).values() if isinstance(v, CrashModel)]
    assert {id(m) for m in declared} == {id(m) for m in REGISTERED}


def test_the_derived_lists_are_in_the_documented_order() -> None:
    assert REGISTRY.models == DOCUMENTED
    assert REGISTRY.honest == DOCUMENTED[:5]
    assert REGISTRY.lies == DOCUMENTED[5:]
    assert REGISTRY.torn == ("torn", "torn-4k")
    assert REGISTRY.prefix == ("no-cache", "flush")
    assert dict(REGISTRY.unit_bytes) == {"torn": 0, "torn-4k": 4096}
    # the public names other modules import are the registry's
    assert stateid.MODELS == models.MODELS == REGISTRY.models
    assert (stateid.HONEST_MODELS, stateid.LIE_MODELS) == (REGISTRY.honest, REGISTRY.lies)
    assert (stateid.TORN_MODELS, stateid.PREFIX_MODELS) == (REGISTRY.torn, REGISTRY.prefix)
    assert models.UNIT_BYTES == REGISTRY.unit_bytes


def test_each_model_declares_the_id_part_its_properties_imply() -> None:
    for m in REGISTERED:
        want = (
            "own"
            if m.hypothetical
            else "lie"
            if m.lie
            else "none"
            if m.prefix
            else "tear"
            if m.unit_bytes is not None
            else "subset"
        )
        assert m.id_part == want, m.name


@dataclass(frozen=True)
class _EveryCut(CrashModel):
    """A model for the test: every prefix, like no-cache."""

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        return (self.state(sp, c) for c in range(1, sp.n + 1))


def test_a_new_model_appears_in_every_derived_list() -> None:
    """A model added to the list (as a line in REGISTERED would) shows up in the lists derived from
    it without any other change; a lying one after every honest one.  (The module-level lists and
    stateid's grammar are derived once, at import: a model is added by its line in REGISTERED, not
    registered at run time.)"""
    extra = _EveryCut("every-cut", prefix=True, id_part="none")
    lie = _EveryCut("made-up-lie", lie=True, id_part="lie")
    got = derive((lie,) + REGISTERED + (extra,))
    assert got.models == DOCUMENTED[:5] + ("every-cut",) + ("made-up-lie",) + DOCUMENTED[5:]
    assert got.prefix == ("no-cache", "flush", "every-cut")
    assert got.lies[0] == "made-up-lie" and got.by_name["every-cut"] is extra
    assert "every-cut" not in got.torn and "every-cut" not in got.unit_bytes
    torn8k = _EveryCut("torn-8k", unit_bytes=8192, id_part="tear")
    assert derive(REGISTERED + (torn8k,)).unit_bytes["torn-8k"] == 8192


def test_a_hypothetical_model_is_in_no_list_and_cannot_be_chosen() -> None:
    assert (
        "what-if" in REGISTRY.by_name
        and "what-if" not in REGISTRY.models + REGISTRY.lies + REGISTRY.prefix
    )
    with pytest.raises(Exception, match="unknown crash model 'what-if'"):
        stateid.check_model("what-if")
    assert stateid.parse_id("what-if@12/a8/d3,5-6").lie == "a8/d3,5-6"

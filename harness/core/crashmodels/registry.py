"""The crash-model registry (pure; host and guest): every model in order, once, and the lists and
tables derived from it.  Adding a model: its family module (base.CrashModel) and one entry here.

The order is the documented one (stateid's grammar, ``--model`` help, selection's model order):
the power-loss models on an honest disk first, then the lying-disk models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from powercut.core.crashmodels import (
    corruptsector,
    flushignored,
    lostwrite,
    misdirected,
    prefix,
    torn,
    unreadable,
    whatif,
    writecache,
)
from powercut.core.crashmodels.base import CrashModel

REGISTERED: tuple[CrashModel, ...] = (
    prefix.NO_CACHE,
    prefix.FLUSH,
    writecache.WRITE_CACHE,
    torn.TORN,
    torn.TORN_4K,
    lostwrite.LOST_WRITE,
    misdirected.MISDIRECTED_WRITE,
    corruptsector.CORRUPT_SECTOR,
    flushignored.FLUSH_IGNORED,
    unreadable.UNREADABLE_SECTOR,
    whatif.WHAT_IF,
)


@dataclass(frozen=True, slots=True)
class Derived:
    """What the rest of the harness reads from a list of models: by name, and the name lists."""

    by_name: Mapping[str, CrashModel]  # every registered model, hypothetical ones too (what-if)
    models: tuple[str, ...]  # every model, in registry order
    honest: tuple[str, ...]  # power loss on a disk that keeps its word
    lies: tuple[str, ...]  # the lying-disk models (core/crashmodels/lies.py)
    torn: tuple[str, ...]  # the models that tear a write
    prefix: tuple[str, ...]  # the models whose states are prefixes (drop and tear nothing)
    unit_bytes: Mapping[str, int]  # a torn model's atomic unit (0: a log sector)


def derive(models: Sequence[CrashModel]) -> Derived:
    """The lists of ``models`` (registry order kept); ValueError if a name is registered twice."""
    by_name: dict[str, CrashModel] = {}
    for m in models:
        if m.name in by_name:
            raise ValueError(f"crash model {m.name!r} is registered twice")
        by_name[m.name] = m
    models = [m for m in models if not m.hypothetical]  # rebuilt from ids, never listed
    return Derived(
        by_name=MappingProxyType(by_name),
        models=tuple(m.name for m in models if not m.lie) + tuple(m.name for m in models if m.lie),
        honest=tuple(m.name for m in models if not m.lie),
        lies=tuple(m.name for m in models if m.lie),
        torn=tuple(m.name for m in models if m.unit_bytes is not None),
        prefix=tuple(m.name for m in models if m.prefix),
        unit_bytes=MappingProxyType(
            {m.name: m.unit_bytes for m in models if m.unit_bytes is not None}
        ),
    )


REGISTRY = derive(REGISTERED)


def registered(name: str) -> CrashModel:
    """The registered model of that name (KeyError if none: check names with stateid.check_model)."""
    return REGISTRY.by_name[name]

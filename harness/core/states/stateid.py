"""State ids: the grammar (pure; host and guest) -- the model lists, read from the crash-model
registry (core/crashmodels/registry.py), and ``parse_id``.  An id together with its log rebuilds one
crash state; the crash models give ids their meaning, this module owns their syntax; the parts of an
id (ranges, ``StateId``, ``format_id``, ``resolve``) and the seeded functions ``r`` parts stand for
live in core/states/idparts.py and are importable from here too.

Grammar (every id ever produced stays valid and keeps its meaning)::

    id      = model "@" cut [ "/" spec ]
    model   = "no-cache" | "flush" | "write-cache" | "torn" | "torn-4k" | lie-model
    spec    = subset                       write-cache: which droppable entries of the cut were lost
            | tear                         torn: entry cut-1 persisted partly, everything before kept
            | "t" entry ":" tear [ "/" subset ]
                                           torn (combined): ``entry``, a droppable multi-sector
                                           write of the cut's epoch, persisted partly; ``subset``
                                           says which of the *other* droppable entries were lost
                                           (absent: none)
    subset  = "d" ranges                   these entries lost, the other droppable ones kept
            | "k" [ ranges ]               only these droppable entries kept ("k" alone: none)
            | "r" seed "." n               the n-th seeded random subset (``wc_sample`` /
                                           ``tw_sample`` for a combined torn state)
    tear    = "s" ranges                   the units (0-based, in the write) that persisted: sectors
                                           for ``torn``, device-aligned 4 KiB units for ``torn-4k``
            | "r" seed "." n               the n-th seeded proper subset (``torn_sample``)
    ranges  = range *( "," range ) ; range = uint [ "-" uint ]   strictly increasing, inclusive
    cut, entry, seed, n = uint (ASCII digits, at most 19)

The lying-disk models (``LIE_MODELS``: lost-write, misdirected-write, corrupt-sector,
flush-ignored, unreadable-sector) have their own ``/`` part, kept as text here (``StateId.lie``);
its grammar and meaning: core/crashmodels/lies.py.  So has ``what-if`` (``what-if@C/aA[/dRANGES]``), the
counterfactual state a cause is proven with, never a model of MODELS (core/crashmodels/whatif.py).

Examples: ``write-cache@8/k5``, ``torn@6/s0,2``, ``torn@14/t9:s0-3/d11``, ``torn@14/t9:r0.2/r0.2``.
Canonical (``format_id``): of "d" and "k" the shorter (ties: "d"); a combined id that tears entry
cut-1 and loses nothing is written in the plain ``tear`` form; seeded ids stay as they are.
Seeded picks hash a text key with SHAKE-256, so an id's meaning does not depend on how many samples
were asked for or on the Python version (core/states/idparts.py).
"""

from __future__ import annotations

import re

from powercut.core.crashmodels.registry import REGISTRY
from powercut.core.states.idparts import (
    Pick,
    StateId,
    format_id,
    format_ranges,
    not_under,
    parse_ranges,
    pick_bits,
    resolve,
    runs,
    seeded_index,
    shake_bits,
    subset_picks,
    tear_picks,
    torn_sample,
    tw_sample,
    wc_sample,
)
from powercut.errors import UsageError

__all__ = [
    "HONEST_MODELS",
    "LIE_MODELS",
    "MODELS",
    "PREFIX_MODELS",
    "TORN_MODELS",
    "USAGE",
    "Pick",
    "StateId",
    "check_model",
    "format_id",
    "format_ranges",
    "not_under",
    "parse_id",
    "parse_ranges",
    "pick_bits",
    "resolve",
    "runs",
    "seeded_index",
    "shake_bits",
    "subset_picks",
    "tear_picks",
    "torn_sample",
    "tw_sample",
    "wc_sample",
]

HONEST_MODELS = REGISTRY.honest  # power loss on a disk that keeps its word
LIE_MODELS = REGISTRY.lies
MODELS = REGISTRY.models
TORN_MODELS = REGISTRY.torn
PREFIX_MODELS = (
    REGISTRY.prefix
)  # every state a prefix of the log: nothing lost or torn (shrink bisects cuts)
_NUM = r"[0-9]{1,19}"
_RANGES = rf"{_NUM}(?:-{_NUM})?(?:,{_NUM}(?:-{_NUM})?)*"
_HEAD = re.compile(
    rf"({'|'.join(sorted(REGISTRY.by_name, key=len, reverse=True))})@({_NUM})(?:/(.*))?", re.S
)
_PICK = re.compile(rf"(?:([dks])((?:{_RANGES})?)|r({_NUM})\.({_NUM}))")
_COMBINED = re.compile(rf"t({_NUM}):([^/]*)(?:/(.*))?", re.S)
USAGE = (
    "MODEL@CUT[/dRANGES|/kRANGES|/sRANGES|/rSEED.N|/tENTRY:TEAR[/SUBSET]] with MODEL one of "
    + ", ".join(MODELS)
)


def check_model(model: str) -> None:
    if model not in MODELS:
        raise UsageError(f"unknown crash model {model!r}; valid models: {', '.join(MODELS)}")


def _pick(text: str, kinds: str, state_id: str, what: str) -> Pick:
    m = _PICK.fullmatch(text)
    if m is not None and m.group(3) is not None:
        kind = "r"
    elif m:
        kind = m.group(1)
    else:
        kind = ""
    if m is None or kind not in kinds:
        raise UsageError(
            f"state id {state_id!r}: {what} {text!r} is not one of "
            + ", ".join(f"'{k}RANGES'" if k != "r" else "'rSEED.N'" for k in kinds)
        )
    if kind == "r":
        return Pick("r", "", int(m.group(3)), int(m.group(4)))
    return Pick(kind, m.group(2))


def parse_id(state_id: object) -> StateId:
    """Check an id's syntax (not whether it fits a log); UsageError with the grammar if malformed."""
    m = _HEAD.fullmatch(state_id.strip()) if isinstance(state_id, str) else None
    if m is None:
        raise UsageError(f"malformed state id {state_id!r}; expected {USAGE}")
    model = m.group(1)
    cut = int(m.group(2))
    spec = m.group(3)
    sid = str(state_id)
    part = REGISTRY.by_name[model].id_part
    if part in ("lie", "own"):
        return StateId(model, cut, lie=spec or "")
    if spec is None:
        return StateId(model, cut)
    if part == "none":
        raise UsageError(f"state id {sid!r}: model {model} takes no '/{spec[:1]}' part")
    if part == "subset":
        return StateId(model, cut, subset=_pick(spec, "dkr", sid, "write-cache part"))
    c = _COMBINED.fullmatch(spec)
    if c is None:
        return StateId(model, cut, tear=_pick(spec, "sr", sid, "torn part"))
    subset = _pick(c.group(3), "dkr", sid, "subset") if c.group(3) is not None else None
    return StateId(
        model, cut, subset=subset, tear=_pick(c.group(2), "sr", sid, "tear"), entry=int(c.group(1))
    )

"""What-if states (pure; host and guest): ``what-if@C/aA[/dRANGES]`` -- not a state a disk can
produce, but the counterfactual a failure's cause is proven with (debug/verify.py, issue 52): the
log replayed to entry C with the data entries RANGES left out (any data entry before C, across
flushes), judged against the keys acked before entry A (the failing state's cut, A <= C); every
key begun before C and not acked before A counts as begun (its writes may be there, or not).

A cause rule says which writes were missing when power failed ("/wal was changed and not fsynced
before ack:3"); its what-if state is the failing state with those writes made durable and nothing
else of the program's: if it passes, the rule is why the state failed; if it still fails, the rule
is true but not why.  Because the keys are the failing state's, the checker asks exactly what it
asked of the failing state -- only the disk differs.

The model is registered (so that an id rebuilds the state wherever a check runs: the host walk or a
checker VM) but ``hypothetical``: no selection enumerates it, ``--model`` does not take it, and no
count or coverage ever includes it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from powercut.core.crashmodels.base import Bounds, CrashModel
from powercut.core.crashmodels.tables import SpaceTables
from powercut.core.states.coverage import Tally
from powercut.core.states.crashstate import CrashState, Torn
from powercut.core.states.idparts import StateId, format_ranges, parse_ranges
from powercut.errors import UsageError

NAME = "what-if"
_NUM = r"[0-9]{1,19}"
_SPEC = re.compile(rf"a({_NUM})(?:/d({_NUM}(?:-{_NUM})?(?:,{_NUM}(?:-{_NUM})?)*))?")


def what_if_id(cut: int, keys_at: int, dropped: Iterable[int]) -> str:
    """The id of the what-if state: replayed to ``cut`` without ``dropped``, keys as before ``keys_at``."""
    lost = sorted(set(dropped))
    return f"{NAME}@{cut}/a{keys_at}" + (f"/d{format_ranges(lost)}" if lost else "")


@dataclass(frozen=True)
class WhatIf(CrashModel):
    """The counterfactual states of cause verification: never enumerated."""

    def iter_states(self, sp: SpaceTables, bounds: Bounds, tally: Tally) -> Iterator[CrashState]:
        return iter(())

    def refusal(self, sp: SpaceTables, cut: int, drop: tuple[int, ...], tears: Torn) -> str | None:
        if tears:
            return f"a {NAME} state tears no write"
        bad = [i for i in drop if not (0 <= i < cut and sp.is_data[i])]
        return (
            f"entries {format_ranges(bad)} are not data entries before cut {cut}" if bad else None
        )

    def make(
        self, sp: SpaceTables, cut: int, keys_at: int, dropped: Iterable[int] = ()
    ) -> CrashState:
        """The what-if state (UsageError if it does not fit the log)."""
        if not 1 <= keys_at <= cut <= sp.n:
            raise UsageError(
                f"a {NAME} state needs 1 <= keys' cut ({keys_at}) <= its cut ({cut}) <= {sp.n}"
            )
        drop = tuple(sorted(set(dropped)))
        why = self.refusal(sp, cut, drop, ())
        if why:
            raise UsageError(why)
        acks, begun = sp.keys(keys_at)
        later_acks, later_begun = sp.keys(cut)
        acked = set(acks)
        # what the keys' cut had begun, and every key begun or acked after it up to the cut: begun --
        # their writes may be in the state, which the checker must allow, not require
        begun = tuple(
            k
            for k in dict.fromkeys([*begun, *later_acks[len(acks) :], *later_begun])
            if k not in acked
        )
        return CrashState(
            NAME, cut, drop, (), acks, begun, what_if_id(cut, keys_at, drop), sp.epoch[keys_at]
        )

    def from_id(self, sp: SpaceTables, sid: StateId, state_id: str) -> CrashState:
        m = _SPEC.fullmatch(sid.lie or "")
        if m is None:
            raise UsageError(
                f"state id {state_id!r}: a {NAME} id is {NAME}@CUT/aKEYS_CUT[/dRANGES]"
            )
        try:
            lost = parse_ranges(m.group(2), sid.cut, "lost entries") if m.group(2) else ()
            return self.make(sp, sid.cut, int(m.group(1)), lost)
        except UsageError as e:
            raise UsageError(f"state id {state_id!r}: {e.one_line()}") from None


WHAT_IF = WhatIf(NAME, id_part="own", hypothetical=True)

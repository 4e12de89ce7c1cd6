"""The cause-rule registry (pure): every durability rule once, strongest first, then the causes that
are no broken rule (core/cause/rules/outcomes.py); the lists derived from it, and the dispatch from a
finding to its rule's sentence, note and counterfactual.  Adding a rule: its module (base.Rule) and
one entry in ``REGISTERED``, where its rank is.

The rank is the order a cause is picked in when a state broke several rules (core/cause/causes.py): a
failed call first, then what can reach the disk in the wrong order, then what was never synced,
then the rules about the commit the cut fell in."""

from __future__ import annotations

from typing import Any

from powercut.core.cause.rules import (
    acked_after_error,
    no_dir_fsync,
    no_fsync,
    no_msync,
    outcomes,
    pointer_before_data,
    rename_before_fsync,
    replaced_in_place,
    sync_still_running,
    unchecked_tear,
    unordered_writes,
)
from powercut.core.cause.rules.base import Plan, PlanInput, Rule
from powercut.core.trace.tracefacts import AtAck, InFlight

REGISTERED: tuple[Rule, ...] = (
    acked_after_error.RULE,
    rename_before_fsync.RULE,
    sync_still_running.RULE,
    no_fsync.RULE,
    no_dir_fsync.RULE,
    no_msync.RULE,
    replaced_in_place.RULE,
    pointer_before_data.RULE,
    unordered_writes.RULE,
    unchecked_tear.RULE,
)

ACK_RULES = tuple(
    r for r in REGISTERED if r.where == "ack"
)  # looked for at each ack, in rank order
CUT_RULES = tuple(
    r for r in REGISTERED if r.where == "cut"
)  # looked for in the commit the cut fell in
RANK = tuple(r.id for r in REGISTERED)  # every rule's id, strongest first
IDS = (
    *RANK,
    *dict.fromkeys(o.id for o in outcomes.OUTCOMES),
)  # every cause's id: rules, then the others
_BY_FINDING: dict[type, Rule | outcomes.Outcome] = {
    **{r.finding: r for r in REGISTERED},
    **{o.finding: o for o in outcomes.OUTCOMES},
}
_BY_ID = {r.id: r for r in REGISTERED}

if len(_BY_ID) != len(REGISTERED) or len(_BY_FINDING) != len(REGISTERED) + len(outcomes.OUTCOMES):
    raise ValueError("a cause rule, or its finding's class, is registered twice")


def rule(rule_id: str) -> Rule:
    """The registered rule of that id (KeyError if none)."""
    return _BY_ID[rule_id]


def of(finding: Any) -> Rule | outcomes.Outcome:
    """The rule (or outcome) whose finding this is; KeyError for a finding no entry declares."""
    return _BY_FINDING[type(finding)]


def sentence(finding: Any) -> str:
    """The finding in one sentence."""
    return of(finding).sentence(finding)


def note(finding: Any) -> str:
    """What qualifies a finding, said after its sentence ("" for none)."""
    entry = of(finding)
    return entry.note(finding) if isinstance(entry, Rule) else ""


def advice(finding: Any) -> str:
    """What the program should do instead ("" for a cause that is no broken rule)."""
    entry = of(finding)
    return entry.advice if isinstance(entry, Rule) else ""


def plan(finding: Any, inp: PlanInput) -> Plan | None:
    """The counterfactual of a rule's finding (None: nothing to make durable)."""
    entry = of(finding)
    if not isinstance(entry, Rule):
        raise TypeError(f"{type(finding).__name__} is no broken rule: it has no counterfactual")
    return entry.plan(finding, inp)


def broken(at: AtAck) -> list[Any]:
    """Every rule broken at one ack, strongest rule first (each rule's findings in the order of its
    facts)."""
    return [f for r in ACK_RULES for f in r.check(at)]


def at_cut(window: InFlight, torn: tuple[int, ...]) -> list[Any]:
    """Every rule the commit the cut fell in broke, in rank order (each rule's first finding)."""
    return [f for r in CUT_RULES if (f := r.check(window, torn)) is not None]

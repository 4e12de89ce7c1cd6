"""Confirmation by failure group (pure): which failing states are judged a second time, alone, and
which stand on their group's confirmation.

A failing state is confirmed by judging it again, alone (a fresh clone, nothing else mounted): the
same verdict makes it a finding, a different one makes it ``flaky`` (a harness problem).  Judging
every failing state again costs as much as the failures: 10,000 states failing for one cause cost
10,000 lone checks.  Failures of one cause fail the same way, so the states are grouped as triage
groups them (``group_key``: the verdict and the class of the first reason, particulars stripped),
and per group:

* a group of at most ``k`` states: every state is judged alone (``confirmed`` or ``flaky``);
* a larger group: a deterministic sample -- its first state (the one minimized and bundled), its
  last, its minimized state when that is a member, and seeded random others, ``k`` in all (more
  only if those named exceed ``k``) -- is judged alone; when every sampled state keeps
  its verdict the others are ``confirmed-by-group``; when any sampled state does not (flaky), the
  group is confirmed state by state (``escalate``): a flaky harness is never averaged away;
* a group that already holds a flaky state (an earlier, resumed run) is confirmed state by state;
* the minimized state of a diagnosed group that is not one of its members is judged alone in the
  same phase (the campaign does that); a different verdict there escalates its group too.

``mode="all"`` judges every failing state alone (the behaviour before groups)."""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from powercut.core.judging.shrink import reason_class
from powercut.core.judging.verdict import Verdict
from powercut.core.states.stateid import LIE_MODELS

MODES = ("group", "all")
DEFAULT_SAMPLE = 8
MIN_SAMPLE = 2  # the first and the last


def group_key(v: Verdict) -> tuple[str, str]:
    """How a failing state fails: (verdict, class of its first reason).  A flaky state counts under
    the group of its first verdict (``Verdict.first``).  Under a lying-disk model what the disk did
    is part of how (a lost write and a misdirected one that lose the same ack are two findings)."""
    if v.verdict == "flaky" and v.first:
        return v.first[0], reason_class(v.first[1]) if len(v.first) > 1 else ""
    cls = reason_class(v.reasons[0]) if v.reasons else ""
    return v.verdict, f"{v.model}: {cls}" if v.model in LIE_MODELS else cls


def order(v: Verdict) -> tuple[int, int, str]:
    """A group's order: the earliest cut first, then the shorter (simpler) id."""
    return v.cut, len(v.state), v.state


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One group's confirmation: its unconfirmed members (first verdicts, in ``order``) and the
    ones judged alone now.  ``whole``: every member is judged alone (small, escalated, or mode all)."""

    key: tuple[str, str]
    members: tuple[Verdict, ...]
    sample: tuple[Verdict, ...]

    @property
    def whole(self) -> bool:
        return len(self.sample) == len(self.members)

    def rest(self) -> tuple[Verdict, ...]:
        taken = {v.state for v in self.sample}
        return tuple(v for v in self.members if v.state not in taken)


def sample(
    members: list[Verdict], k: int, seed: int, key: tuple[str, str], always: Collection[str] = ()
) -> list[Verdict]:
    """``k`` of ``members`` (all of them if there are no more): the first, the last, those named in
    ``always`` (the minimized state), and seeded random others -- the same for the same group, seed,
    ``k`` and ``always`` on any machine (in ``order``)."""
    ordered = sorted(members, key=order)
    if len(ordered) <= k:
        return ordered
    fixed = {0, len(ordered) - 1} | {i for i, v in enumerate(ordered) if v.state in always}
    middle = [i for i in range(len(ordered)) if i not in fixed]
    rng = random.Random(f"powercut-confirm:{seed}:{key[0]}:{key[1]}:{len(ordered)}")
    picked = set(rng.sample(middle, max(0, min(len(middle), k - len(fixed)))))
    return [v for i, v in enumerate(ordered) if i in fixed or i in picked]


def plan(
    failures: Iterable[Verdict],
    *,
    mode: str = "group",
    k: int = DEFAULT_SAMPLE,
    seed: int = 0,
    settled: Iterable[Verdict] = (),
    always: Collection[str] = (),
) -> list[GroupPlan]:
    """The groups of the unconfirmed ``failures`` and what to judge alone first.  ``settled``: the
    run's verdicts already confirmed or flaky (a group with a flaky one is judged whole);
    ``always``: states every sample holds when they are members (the minimized ones)."""
    if mode not in MODES:
        raise ValueError(f"confirmation mode must be one of {', '.join(MODES)}, not {mode!r}")
    if k < MIN_SAMPLE:
        raise ValueError(
            f"the confirmation sample must be at least {MIN_SAMPLE} states (the first and the last), "
            f"not {k}"
        )
    groups: dict[tuple[str, str], list[Verdict]] = {}
    for v in failures:
        groups.setdefault(group_key(v), []).append(v)
    flaky_keys = {group_key(v) for v in settled if v.verdict == "flaky"}
    out = []
    for key, members in sorted(groups.items()):
        ordered = sorted(members, key=order)
        whole = mode == "all" or key in flaky_keys
        out.append(
            GroupPlan(
                key,
                tuple(ordered),
                tuple(ordered if whole else sample(ordered, k, seed, key, always)),
            )
        )
    return out


def agrees(first: Verdict, second: Verdict) -> bool:
    """A second, lone judgement confirms the first when the verdict is the same."""
    return first.verdict == second.verdict


def settle(
    plans: list[GroupPlan],
    seconds: dict[str, Verdict],
    disagreeing: Collection[tuple[str, str]] = (),
) -> tuple[list[Verdict], list[Verdict]]:
    """After the samples were judged alone (``seconds``: state -> its lone verdict): the members that
    now stand on their group's confirmation (to journal with ``by_group``), and the members still to
    judge alone (the rest of every group whose sample disagreed anywhere, or whose key is in
    ``disagreeing``: its minimized state, judged alone outside the group, gave another verdict)."""
    by_group: list[Verdict] = []
    escalate: list[Verdict] = []
    for p in plans:
        rest = p.rest()
        if not rest:
            continue
        missing = [v.state for v in p.sample if v.state not in seconds]
        if missing:
            raise ValueError(
                f"group {p.key}: no lone verdict for sampled state(s) {', '.join(missing[:3])}"
            )
        if p.key not in disagreeing and all(agrees(v, seconds[v.state]) for v in p.sample):
            by_group.extend(rest)
        else:
            escalate.extend(rest)
    return by_group, escalate

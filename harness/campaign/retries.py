"""More judgments of a state whose confirmation disagreed with its first verdict (host; issue 40):
``retry_disagreeing`` judges it ``RETRIES`` more times, as a cluster's recovery can be
nondeterministic on the same images.  Campaign/phases.py asks for it with N > 1 disks only: one
disk's recovery by one kernel has shown no such nondeterminism, and a one-disk ``flaky`` stays what
it has always meant (seen once, not again).  The phases themselves -- grouping, diagnosis,
confirmation by group, the journal, bundles -- are campaign/phases.py's and debug/triage.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from powercut.campaign.journal import Journal
from powercut.core.judging.verdict import Verdict
from powercut.linux import interrupt

RETRIES = 3  # more judgments of a state whose second verdict disagreed with its first


def retry_disagreeing(
    by_id: dict[str, Any], journal: Journal, judge: Callable[..., None], work: Path
) -> None:
    """A cluster's recovery can be nondeterministic on the same images (which member wins an
    election decides whether etcd panics: measured 3 of 4 on one state), so a state whose second
    verdict disagreed is judged ``RETRIES`` more times (``judge(states, sink, work, jobs)``): failing
    again in at least one of them (two failing judgments in all) keeps it a confirmed finding, saying
    how many judgments failed; a failure seen once stays ``flaky``.  The verdicts go to ``journal``."""
    flakies = [
        v for v in journal.done.values() if v.verdict == "flaky" and v.first and v.state in by_id
    ]
    if not flakies or interrupt.stopping():
        return
    more: dict[str, list[Verdict]] = {}
    judge(
        [by_id[v.state] for v in flakies for _ in range(RETRIES)],
        lambda v: more.setdefault(v.state, []).append(v),
        work,
        1,
    )
    for v in flakies:
        got = more.get(v.state, [])
        was = v.first[0]
        fails = 1 + sum(1 for x in got if x.failed)
        n = 2 + len(got)
        if fails < 2:  # seen once: not counted as a finding, and not blamed on the harness alone
            journal.add(
                dataclasses.replace(
                    v,
                    reasons=(
                        f"failed 1 of {n} judgments of the same images ({was}), passed the others: not counted as a "
                        "finding -- a harness problem or a recovery that rarely fails",
                        *v.reasons[1:],
                    ),
                )
            )
            continue
        reasons = (
            f"failed {fails} of {n} judgments of the same images ({was} each time it failed): the recovery "
            "is not deterministic, and fails in some runs",
            *v.first[1:],
        )
        journal.add(dataclasses.replace(v, verdict=was, reasons=reasons, confirmed=True, first=()))

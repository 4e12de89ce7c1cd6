"""A diagnosis as a value (host and guest): a failing state of N >= 1 disks, its minimized form, the
writes each disk's minimized state comes down to, and the cause in blocks -- made by
debug/diagnose.py, carried as JSON from the checker VM, into diagnoses.json, summary.json's groups
and repro bundles (debug/bundle.py).

Its JSON has one layout whatever the number of disks: ``nodes``, per node its ``culprits`` and, with
several disks, its minimization (core/judging/nodesshrink.NodeShrunk), and ``one_at_a_time``
(core/judging/shrink.Shrunk's lower bound).  Diagnoses written before it gave one disk's blame as a
flat ``culprits``: ``from_json`` and ``culprits_of`` read both (the one adapter).  The cause line is
one disk's sentence (its blamed objects, alphabetical) or names each node
(core/judging/nodesshrink.cause_line): the words the user reads differ, not the layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from powercut.core.judging.nodesshrink import cause_line, culprit_phrase


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A failing state of N >= 1 disks, its minimized form and, per disk, the writes it comes down to
    (``nodes``: per disk a dict with its ``culprits`` as debug/blame.Culprit JSON, and with several
    disks its minimization, core/judging/nodesshrink.NodeShrunk JSON)."""

    state: str
    verdict: str
    minimized: str
    minimized_reasons: tuple[str, ...]
    reason_class: str
    calls: int
    exhausted: bool
    nodes: tuple[dict[str, Any], ...]
    cause: str
    seconds: float
    one_at_a_time: int = 0

    def culprits(self, node: int) -> list[dict[str, Any]]:
        """Disk ``node``'s blamed writes as JSON (debug/blame.Culprit.to_json)."""
        return list(self.nodes[node].get("culprits", ()))

    def to_json(self) -> dict[str, Any]:
        head = {
            "state": self.state,
            "verdict": self.verdict,
            "minimized": self.minimized,
            "minimized_reasons": list(self.minimized_reasons),
            "reason_class": self.reason_class,
            "calls": self.calls,
        }
        return {
            **head,
            "one_at_a_time": self.one_at_a_time,
            "exhausted": self.exhausted,
            "nodes": [dict(n) for n in self.nodes],
            "cause": self.cause,
            "seconds": self.seconds,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Diagnosis:
        """The one layout, or one disk's before it (a flat ``culprits``)."""
        nodes = tuple(dict(n) for n in _nodes(d))
        culprits = [list(n.get("culprits", ())) for n in nodes]
        return Diagnosis(
            str(d["state"]),
            str(d["verdict"]),
            str(d["minimized"]),
            tuple(d.get("minimized_reasons", ())),
            str(d.get("reason_class", "")),
            int(d.get("calls", 0)),
            bool(d.get("exhausted", False)),
            nodes,
            str(
                d.get("cause")
                or cause_of(str(d["verdict"]), str(d.get("reason_class", "")), culprits)
            ),
            float(d.get("seconds", 0.0)),
            int(d.get("one_at_a_time", 0)),
        )


def cause_of(verdict: str, reason_cls: str, culprits: Sequence[Sequence[dict[str, Any]]]) -> str:
    """What groups failures of one bug: the verdict, its reason class and what the culprits are --
    one disk's blamed objects (alphabetical, every one), or each node's (core/judging/nodesshrink.cause_line)."""
    if len(culprits) > 1:
        return cause_line(verdict, reason_cls, culprits)
    objs = sorted({culprit_phrase(c) for c in (culprits[0] if culprits else ())})
    return f"{verdict}: {reason_cls} <- " + ("; ".join(objs) or "no write (the cut alone)")


def _nodes(d: dict[str, Any]) -> list[dict[str, Any]]:
    """A diagnosis JSON's per-node dicts: its ``nodes``, or one disk's flat ``culprits`` of a
    diagnosis written before the one layout."""
    if "nodes" in d:
        return list(d["nodes"])
    return [{"culprits": [dict(c) for c in d.get("culprits", ())]}]


def culprits_of(d: dict[str, Any] | None, node: int = 0) -> list[dict[str, Any]]:
    """Disk ``node``'s blamed writes in a diagnosis JSON of either layout ([] without one)."""
    nodes = _nodes(d or {})
    return list(nodes[node].get("culprits", ())) if node < len(nodes) else []

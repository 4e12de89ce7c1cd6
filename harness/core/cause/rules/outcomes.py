"""The causes that are no broken rule (pure), each an ``Outcome`` (its id, its finding, its
sentence) that core/cause/rules/registry.py lists after the rules:

- ``recovery-bug``: the program's recovery fails on a state it made itself -- every write durable
  at the first point at or after the cut where the program had synced all it wrote (what a process
  kill there leaves: the kill-equivalent state, core/cause/counterfactual.kill_point) fails too, so no
  durability rule is why;
- ``disk-lied``: a lying disk's state (core/crashmodels/lies.py): what the disk did, and whether the program
  noticed;
- ``unseen-writes``: the rules the trace can check were kept, but the program also wrote where the
  trace cannot see (stores through a shared mapping, io_uring);
- ``beyond-rules``: the rules were kept, the trace saw every write, and the kill-equivalent state
  passes (or could not be judged): a filesystem or disk behaviour beyond the rules -- or no ack was
  given before the cut."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from powercut.core.trace.syscalls import Op

RECOVERY = "recovery-bug"
LIED = "disk-lied"
UNSEEN = "unseen-writes"
BEYOND = "beyond-rules"

# what a lying disk did, by model (core/crashmodels/lies.py): e = the write's log entry, s = its sector, d = the
# sector the disk wrote or damaged, n = the bits flipped, ws = the writes an ignored flush lost
LIE_WORDS = {
    "lost-write": "acked write #{e} (sector {s}) and dropped it",
    "misdirected-write": "wrote write #{e}'s data at sector {d} instead of its own sector {s}",
    "corrupt-sector": "flipped {n} bit(s) of sector {d}, last written by write #{e}",
    "unreadable-sector": "could not read back sector {d}, last written by write #{e}",
    "flush-ignored": "acked a FLUSH without emptying its cache: writes {ws} before it were lost",
}
# what the program did with it, by verdict
SERVED = {
    "silent-corruption": "the program served the result as good data, with no error",
    "lost-ack": "an acked commit was gone without an error from the program",
}


@dataclass(frozen=True, slots=True)
class DiskLie:
    """What a lying disk did (``model``, core/crashmodels/lies.py) to the write at log entry ``entry`` (its
    ``sector``; ``dest``: where a misdirected write went, -1: its own sector; ``bits``: how many it
    flipped; ``dropped``: the writes an ignored flush lost), and the ``verdict``."""

    rule: ClassVar[str] = LIED
    model: str
    entry: int
    sector: int
    dest: int = -1
    bits: int = 0
    dropped: tuple[int, ...] = ()
    verdict: str = ""

    @property
    def evidence(self) -> tuple[Op, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class RulesKept:
    """Every rule was kept before ``ack`` (the last ack looked at) and it was lost."""

    rule: ClassVar[str] = BEYOND
    ack: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.ack,)


@dataclass(frozen=True, slots=True)
class RulesKeptUnseen:
    """Every rule the trace can check was kept before ``ack``, and the program also wrote where the
    trace cannot see (``unseen``: what, each said once)."""

    rule: ClassVar[str] = UNSEEN
    ack: Op
    unseen: tuple[str, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.ack,)


@dataclass(frozen=True, slots=True)
class NoAckBefore:
    """No ack was given before the cut, so no rule about an ack applies."""

    rule: ClassVar[str] = BEYOND

    @property
    def evidence(self) -> tuple[Op, ...]:
        return ()


@dataclass(frozen=True, slots=True)
class RecoveryFails:
    """The kill-equivalent state ``state`` failed as well (``verdict``: its verdict, ``reason``: its
    first reason); ``where``: what it holds, as core/cause/counterfactual.Kill says it ("every write
    durable at mark ack:7 (...), the first point at or after the cut where the program had synced
    everything it wrote")."""

    rule: ClassVar[str] = RECOVERY
    state: str
    verdict: str
    reason: str
    where: str

    @property
    def evidence(self) -> tuple[Op, ...]:
        return ()


def _lie(f: DiskLie) -> str:
    """What the disk did, what the program did with it, and what notices a lying disk."""
    ws = ", ".join(f"#{i}" for i in f.dropped[:6]) + (" ..." if len(f.dropped) > 6 else "")
    did = LIE_WORDS.get(f.model, "lied about write #{e}").format(
        e=f.entry, s=f.sector, d=f.dest if f.dest >= 0 else f.sector, n=f.bits, ws=ws
    )
    served = SERVED.get(
        f.verdict, f"the program answered {f.verdict or 'a failure'} without noticing"
    )
    return (
        f"the disk {did}, and {served} -- a checksum over what it reads back, or a refusal to go on, is what "
        "notices a lying disk"
    )


def _kept(f: RulesKept) -> str:
    return (
        f"the program did everything the rules ask before {f.ack.text} (its changes were fsynced before "
        "the ack) and still lost it: a filesystem or disk behaviour beyond the rules; the block-level "
        "blame is the evidence"
    )


def _unseen(f: RulesKeptUnseen) -> str:
    return (
        f"the rules the trace can check were kept before {f.ack.text}, but the program also wrote where the "
        f"trace cannot see ({'; '.join(f.unseen)}): the cause may lie there, so this is not said to be "
        "beyond the rules; the block-level blame is the evidence"
    )


def _no_ack(f: NoAckBefore) -> str:
    return (
        "no ack was given before the crash in the trace, so no rule about an ack applies: the failure is "
        "in recovery itself (see the blocks)"
    )


def _recovery(f: RecoveryFails) -> str:
    return (
        f"the program's recovery fails on a state it made itself: with {f.where} ({f.state}) -- what a "
        f"process kill there leaves -- it fails too ({f.verdict}: {f.reason}); no durability rule is why, "
        "its recovery is"
    )


@dataclass(frozen=True)
class Outcome:
    """A cause that is no broken rule: its id, its finding's class, its sentence."""

    id: str
    finding: type
    sentence: Callable[[Any], str]


OUTCOMES = (
    Outcome(RECOVERY, RecoveryFails, _recovery),
    Outcome(LIED, DiskLie, _lie),
    Outcome(UNSEEN, RulesKeptUnseen, _unseen),
    Outcome(BEYOND, RulesKept, _kept),
    Outcome(BEYOND, NoAckBefore, _no_ack),
)

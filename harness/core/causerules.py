"""The vocabulary of causes (core/causes.py): every rule's id, the broken rules' rank (strongest
first), and the findings that are no broken rule; the rules themselves are in two modules, by what
they look at -- re-exported here, so that ``causerules`` names every rule and finding:

- core/ackrules.py: the rules an ack can break (``ACK_RULES``: acked-after-error,
  rename-before-fsync, ack-before-sync-returned, no-fsync, no-dir-fsync, no-msync), over the
  trace's facts at one ack;
- core/cutrules.py: the rules about the commit in flight at the cut (``CUT_RULES``:
  replaced-in-place, unordered-writes, unchecked-tear), over that commit's calls.

A rule returns what it found as facts -- which file, which calls, which ack, how long a sync ran --
never as words (core/causewords.py says them).  The findings that are no broken rule:
``disk-lied`` (a lying disk's state: what the disk did), ``unseen-writes`` (the rules the trace can
check were kept, but the program also wrote where the trace cannot see: stores through a shared
mapping of its files, io_uring), ``beyond-rules`` (the rules were kept and the trace saw every
write, or no ack was given before the cut).  Pure: no I/O."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powercut.core.ackrules import (
    ACK_RULES,
    EARLY,
    ERROR,
    NO_DIR_FSYNC,
    NO_FSYNC,
    NO_MSYNC,
    RENAME,
    AckFinding,
    AckRule,
    FailedCall,
    RenameBeforeSync,
    SyncStillRunning,
    Unsynced,
    UnsyncedMapping,
    UnsyncedNames,
    acked_after_error,
    broken,
    no_dir_fsync,
    no_fsync,
    no_msync,
    rename_before_fsync,
    sync_still_running,
)
from powercut.core.cutrules import (
    CUT_RULES,
    REPLACED,
    TORN,
    UNORDERED,
    CutFinding,
    CutRule,
    ReplacedInPlace,
    Tear,
    UnorderedWrites,
    replaced_in_place,
    unchecked_tear,
    unordered_writes,
)
from powercut.core.syscalls import Op

__all__ = ["ACK_RULES", "BEYOND", "CUT_RULES", "EARLY", "ERROR", "LIED", "NO_DIR_FSYNC", "NO_FSYNC", "NO_MSYNC", "RANK",
           "RENAME", "REPLACED", "RULES", "TORN", "UNORDERED", "UNSEEN", "AckFinding", "AckRule",
           "CutFinding", "CutRule", "DiskLie", "FailedCall", "Finding", "NoAckBefore", "RenameBeforeSync",
           "ReplacedInPlace", "RulesKept", "RulesKeptUnseen", "SyncStillRunning", "Tear", "UnorderedWrites", "Unsynced",
           "UnsyncedMapping", "UnsyncedNames", "acked_after_error", "broken", "no_dir_fsync", "no_fsync", "no_msync",
           "rename_before_fsync", "replaced_in_place", "sync_still_running", "unchecked_tear", "unordered_writes"]

LIED = "disk-lied"
UNSEEN = "unseen-writes"
BEYOND = "beyond-rules"
RANK = (ERROR, RENAME, EARLY, NO_FSYNC, NO_DIR_FSYNC, NO_MSYNC, REPLACED, UNORDERED)   # broken rules, strongest first
RULES = (*RANK, TORN, LIED, UNSEEN, BEYOND)


# -- the findings that are no broken rule -----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DiskLie:
    """disk-lied: what a lying disk did (``model``, core/lies.py) to the write at log entry ``entry``
    (its ``sector``; ``dest``: where a misdirected write went, -1: its own sector; ``bits``: how
    many it flipped; ``dropped``: the writes an ignored flush lost), and the ``verdict``."""

    rule: ClassVar[str] = LIED
    model: str
    entry: int
    sector: int
    dest: int = -1
    bits: int = 0
    dropped: tuple[int, ...] = ()
    verdict: str = ""


@dataclass(frozen=True, slots=True)
class RulesKept:
    """beyond-rules: every rule was kept before ``ack`` (the last ack looked at) and it was lost."""

    rule: ClassVar[str] = BEYOND
    ack: Op

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.ack,)


@dataclass(frozen=True, slots=True)
class RulesKeptUnseen:
    """unseen-writes: every rule the trace can check was kept before ``ack``, and the program also
    wrote where the trace cannot see (``unseen``: what, each said once)."""

    rule: ClassVar[str] = UNSEEN
    ack: Op
    unseen: tuple[str, ...]

    @property
    def evidence(self) -> tuple[Op, ...]:
        return (self.ack,)


@dataclass(frozen=True, slots=True)
class NoAckBefore:
    """beyond-rules: no ack was given before the cut, so no rule about an ack applies."""

    rule: ClassVar[str] = BEYOND

    @property
    def evidence(self) -> tuple[Op, ...]:
        return ()


Finding = AckFinding | CutFinding | DiskLie | RulesKept | RulesKeptUnseen | NoAckBefore

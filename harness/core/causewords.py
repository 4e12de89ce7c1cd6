"""The words of the causes: the sentence that says a cause rule's finding (core/causerules.py) in
the program's own terms, and the lines that list its calls as evidence.

Every sentence names the ack, the file and the calls the finding holds, and says why the rule
matters for an ack to survive a power cut; nothing here looks at a trace.  Pure: no I/O."""
from __future__ import annotations

from collections.abc import Sequence

from powercut.core import syscalls as sc
from powercut.core.causerules import (
    DiskLie,
    FailedCall,
    Finding,
    NoAckBefore,
    RenameBeforeSync,
    ReplacedInPlace,
    RulesKept,
    RulesKeptUnseen,
    SyncStillRunning,
    Tear,
    UnorderedWrites,
    Unsynced,
    UnsyncedMapping,
    UnsyncedNames,
)
from powercut.core.syscalls import Op

__all__ = ["LIE_WORDS", "SERVED", "alike", "duration", "evidence_line", "evidence_lines", "held_suffix", "note",
           "sentence"]

# what a lying disk did, by model (core/lies.py): e = the write's log entry, s = its sector, d = the
# sector the disk wrote or damaged, n = the bits flipped, ws = the writes an ignored flush lost
LIE_WORDS = {"lost-write": "acked write #{e} (sector {s}) and dropped it",
             "misdirected-write": "wrote write #{e}'s data at sector {d} instead of its own sector {s}",
             "corrupt-sector": "flipped {n} bit(s) of sector {d}, last written by write #{e}",
             "unreadable-sector": "could not read back sector {d}, last written by write #{e}",
             "flush-ignored": "acked a FLUSH without emptying its cache: writes {ws} before it were lost"}
# what the program did with it, by verdict
SERVED = {"silent-corruption": "the program served the result as good data, with no error",
          "lost-ack": "an acked commit was gone without an error from the program"}
EVIDENCE_LINES = 6   # the calls a cause lists, at most (the last ones)


def evidence_line(o: Op) -> str:
    """One call as evidence: where the trace has it, and what it was."""
    where = f"line {o.line}, pid {o.pid}"
    if o.kind == sc.MARK:
        return f"{where}: mark {o.text}"
    return f"{where}: {o.text}{held_suffix(o)}"


def held_suffix(o: Op) -> str:
    """What a sync --delay-sync held says after its call ("" for any other call)."""
    return f" [--delay-sync held it {o.held * 1000:g} ms]" if o.held > 0 else ""


def evidence_lines(ops: Sequence[Op]) -> tuple[str, ...]:
    """The evidence lines of a finding's calls: the last ``EVIDENCE_LINES`` of them."""
    return tuple(evidence_line(o) for o in ops[-EVIDENCE_LINES:])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def duration(f: SyncStillRunning) -> str:
    """How long the sync ran, in milliseconds -- or "a while" when the trace does not say: strace did
    not split the call (its start is unknown), or its timestamps give it no time or less.  No figure
    is made up."""
    if f.duration > 0:
        return f"{f.duration * 1000:.1f} ms"
    return "a while"


def note(f: Finding) -> str:
    """What qualifies a finding, said after its sentence (no-fsync: why an O_DIRECT write or a
    sync_file_range did not count; unchecked-tear: the torn log entries); "" for the others."""
    if isinstance(f, Unsynced):
        notes = []
        if f.direct:
            notes.append("O_DIRECT bypasses the page cache, not the disk's write cache")
        if f.range_synced:
            notes.append("sync_file_range is not a durability barrier")
        return "; ".join(notes)
    if isinstance(f, Tear):
        return f" (log entr{'ies' if len(f.entries) > 1 else 'y'} #{', #'.join(map(str, f.entries))})"
    return ""


def sentence(f: Finding) -> str:
    """The finding in one sentence."""
    if isinstance(f, FailedCall):
        return (f"{f.ack.text} was given after {f.failed.kind} of {f.subject} failed ({f.failed.error}): the data "
                "it covers may never reach the disk, and the program acked it anyway")
    if isinstance(f, RenameBeforeSync):
        verb = "renamed" if f.rename.kind == sc.RENAME else "linked"
        return (f"{f.source} was {verb} over {f.subject} before its data was fsynced, and {f.ack.text} was given "
                f"with no fsync in between: the {f.rename.kind} can reach the disk before the data, leaving "
                f"{f.subject} empty or stale")
    if isinstance(f, SyncStillRunning) and f.sync.held > 0:
        other = " by another thread" if f.other_thread else ""
        before = f.ack.time - f.sync.began
        return (f"{f.ack.text} was sent while the {f.sync.kind} of {f.subject} that covers it, called{other} "
                f"{before * 1000:.1f} ms before the ack, was still held (--delay-sync holds it {f.sync.held * 1000:g} ms "
                f"before it runs) -- the reply did not wait for the "
                f"{f.sync.kind} to return; a slow sync of this one file loses this race")
    if isinstance(f, SyncStillRunning):
        other = " in another thread" if f.other_thread else ""
        return (f"{f.ack.text} was given while the {f.sync.kind} of {f.subject}{other} was still running: it began "
                f"before the ack and returned after it ({duration(f)} in all) -- an ack must wait for the "
                f"{f.sync.kind} to return; a slow disk loses this race")
    if isinstance(f, Unsynced):
        return _unsynced(f)
    if isinstance(f, UnsyncedMapping):
        return (f"{f.ack.text} was given while {f.subject} was mapped shared and writable (mmap at trace line "
                f"{f.mapping.line}) with no msync (MS_SYNC) or fsync of it since: what the program stored through "
                "the mapping was in the page cache only (the trace sees the mapping, not the stores)")
    if isinstance(f, UnsyncedNames):
        return (f"{f.ack.text} was given after a name in {f.subject} was created, renamed or removed, with no "
                "fsync of the directory: the name can be lost though the file's data was synced")
    if isinstance(f, ReplacedInPlace):
        how = (f"renamed it away to {f.moved_to} (trace line {f.away.line})" if f.moved_to
               else f"truncated it (trace line {f.away.line})")
        other = f"the {f.barrier.kind} of {f.synced}" if f.synced else "a sync"
        return (f"the commit in flight at the crash{' (' + f.ack.text + ')' if f.ack else ''} replaced {f.subject} in "
                f"place -- {how} and wrote a new one -- and {other} (trace line {f.barrier.line}) came before the new "
                f"file's own fsync: it can make the new, still empty {f.subject} durable before its contents, and a "
                "crash then leaves it empty though earlier commits were acked; write the new file under a temporary "
                "name, fsync it, then rename it over the old one")
    if isinstance(f, UnorderedWrites):
        # the count is of the writes the evidence shows (at most four), as it always was
        key = (f.ack or f.barrier).text
        return (f"the commit in flight at the crash ({key}) made {len(f.shown)} writes ({f.subject}) durable "
                f"with one {f.barrier.kind} and nothing ordering them before it: the disk may keep a later write "
                "without an earlier one (a record that commits data without that data); this state kept only part "
                "of them")
    if isinstance(f, Tear):
        key = f.ack.text if f.ack is not None else f.writes[-1].text if f.writes else "the end"
        return (f"the crash tore a write of the commit in flight ({key}; {f.subject}): part of it reached the "
                f"disk, part did not{note(f)}, and recovery took what it found as valid -- a write can tear at a "
                "sector or 4 KiB boundary on power loss, and only a checksum over each record detects it")
    if isinstance(f, DiskLie):
        return _lie(f)
    if isinstance(f, RulesKept):
        return (f"the program did everything the rules ask before {f.ack.text} (its changes were fsynced before "
                "the ack) and still lost it: a filesystem or disk behaviour beyond the rules; the block-level "
                "blame is the evidence")
    if isinstance(f, RulesKeptUnseen):
        return (f"the rules the trace can check were kept before {f.ack.text}, but the program also wrote where the "
                f"trace cannot see ({'; '.join(f.unseen)}): the cause may lie there, so this is not said to be "
                "beyond the rules; the block-level blame is the evidence")
    if isinstance(f, NoAckBefore):
        return ("no ack was given before the crash in the trace, so no rule about an ack applies: the failure is "
                "in recovery itself (see the blocks)")
    return ""


def _unsynced(f: Unsynced) -> str:
    """no-fsync: the file, how many calls changed it and how many bytes they wrote.  The counts are
    of the changes the evidence shows (the last four), as they always were."""
    nbytes = sum(o.nbytes for o in f.shown if o.kind == sc.WRITE)
    what = _plural(len(f.shown), "call") + (f", {nbytes} bytes" if nbytes else "")
    qualified = f" ({note(f)})" if note(f) else ""
    return (f"{f.ack.text} was given after changing {f.subject} ({what}) with no fsync or fdatasync of it in "
            f"between{qualified}")


def _lie(f: DiskLie) -> str:
    """disk-lied: what the disk did, what the program did with it, and what notices a lying disk."""
    ws = ", ".join(f"#{i}" for i in f.dropped[:6]) + (" ..." if len(f.dropped) > 6 else "")
    did = LIE_WORDS.get(f.model, "lied about write #{e}").format(
        e=f.entry, s=f.sector, d=f.dest if f.dest >= 0 else f.sector, n=f.bits, ws=ws)
    served = SERVED.get(f.verdict, f"the program answered {f.verdict or 'a failure'} without noticing")
    return (f"the disk {did}, and {served} -- a checksum over what it reads back, or a refusal to go on, is what "
            "notices a lying disk")


def alike(n: int) -> str:
    """What a cause adds when ``n`` other acked commits broke the same rule first ("" for none)."""
    return f" (and {_plural(n, 'more acked commit')} alike)" if n else ""

"""Why a state failed, in the program's own terms: the durability rules its system calls broke
before an acknowledgement the crash then lost, with the calls as evidence (the trace of
core/syscalls.py, aligned with the block log at its marks).

The rules (POSIX's, as ALICE states them; what a program must do for an ack to survive a power cut
on any filesystem and any disk with a write cache):

- ``acked-after-error``: an fsync/fdatasync (or a write) failed and the program acked afterwards;
- ``rename-before-fsync``: a file was renamed (or linked) over another name while its own data was
  not yet fsynced -- the rename can reach the disk first, leaving the new name on empty or old data;
- ``ack-before-sync-returned``: the program acked while the fsync/fdatasync (or sync) that would
  make the commit durable was still running -- it began before the ack and returned after it (one
  thread acks as another's fsync is issued: a race a slow disk loses, issue #43);
- ``no-fsync``: the program acked after changing a file with no fsync/fdatasync of it in between
  (writes through an O_SYNC/O_DSYNC descriptor are synced; O_DIRECT bypasses the page cache, not
  the disk's write cache; sync_file_range is not a barrier);
- ``no-dir-fsync``: a name was created, renamed or removed in a directory and acked with no fsync of
  the directory;
- ``unordered-writes``: the commit in flight at the crash wrote more than once and made the writes
  durable with one barrier: the disk may keep a later write without an earlier one, which a state
  that kept some and lost others shows (a commit record persisted before the data it commits);
- ``disk-lied``: a lying disk's state (core/lies.py): what the disk did to which write, and that
  the program served it (``silent-corruption``) or lost an ack without a word (``lost-ack``);
- ``beyond-rules``: the program did everything the rules ask and still lost the commit -- a
  filesystem or disk behaviour beyond them; the block-level blame is the evidence.

``explain`` picks the rule for one failing state: the acks given before its cut (those of the keys
the checker names as lost, when its reasons name them), the first whose commit broke a rule.  Pure:
no I/O."""
from __future__ import annotations

import bisect
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from powercut.core import syscalls as sc
from powercut.core.syscalls import Op, Trace

ERROR, RENAME, NO_FSYNC, NO_DIR_FSYNC = "acked-after-error", "rename-before-fsync", "no-fsync", "no-dir-fsync"
EARLY = "ack-before-sync-returned"
UNORDERED, TORN, BEYOND = "unordered-writes", "unchecked-tear", "beyond-rules"
LIED = "disk-lied"
RANK = (ERROR, RENAME, EARLY, NO_FSYNC, NO_DIR_FSYNC, UNORDERED)   # strongest first
RULES = (*RANK, TORN, LIED, BEYOND)
BARRIERS, EVIDENCE_LINES = (sc.FSYNC, sc.FDATASYNC, sc.SYNC, sc.SYNCFS), 6


@dataclass(frozen=True, slots=True)
class Violation:
    """One rule broken before one ack: the rule, what it is about, the calls that show it."""

    rule: str
    subject: str                  # the file or directory, relative to the filesystem's root
    ack: Op
    evidence: tuple[Op, ...]      # the calls, in trace order (the ack last)
    note: str = ""

    def sentence(self) -> str:
        key = self.ack.text
        w = [o for o in self.evidence if o.kind in (sc.WRITE, sc.TRUNCATE, sc.ALLOCATE, sc.OPEN)]
        if self.rule == ERROR:
            bad = next((o for o in self.evidence if o.error), None)
            call = bad.kind if bad else "fsync"
            return (f"{key} was given after {call} of {self.subject} failed ({bad.error if bad else 'an error'}): "
                    f"the data it covers may never reach the disk, and the program acked it anyway")
        if self.rule == RENAME:
            ren = next(o for o in self.evidence if o.kind in (sc.RENAME, sc.LINK))
            verb = "renamed" if ren.kind == sc.RENAME else "linked"
            return (f"{rel(ren.path, self._root)} was {verb} over {rel(ren.path2, self._root)} before its data was "
                    f"fsynced, and {key} was given with no fsync in between: the {ren.kind} can reach the disk "
                    f"before the data, leaving {rel(ren.path2, self._root)} empty or stale")
        if self.rule == EARLY:
            sync = next(o for o in self.evidence if o.kind in BARRIERS and o.seq > self.ack.seq)
            ran, other = f"{(sync.time - sync.began) * 1000:.1f} ms", " in another thread" * (sync.pid != self.ack.pid)
            return (f"{key} was given while the {sync.kind} of {self.subject}{other} was still running: it began "
                    f"before the ack and returned after it ({ran} in all) -- an ack must wait for the {sync.kind} "
                    "to return; a slow disk loses this race")
        if self.rule == NO_FSYNC:
            n = sum(o.nbytes for o in w if o.kind == sc.WRITE)
            what = f"{len(w)} call{'s' if len(w) != 1 else ''}" + (f", {n} bytes" if n else "")
            return (f"{key} was given after changing {self.subject} ({what}) with no fsync or fdatasync of it in "
                    f"between" + (f" ({self.note})" if self.note else ""))
        if self.rule == NO_DIR_FSYNC:
            return (f"{key} was given after a name in {self.subject} was created, renamed or removed, with no fsync "
                    f"of the directory: the name can be lost though the file's data was synced")
        if self.rule == UNORDERED:
            barrier = next((o.kind for o in reversed(self.evidence) if o.kind in BARRIERS), "sync")
            return (f"the commit in flight at the crash ({key}) made {len(w)} writes ({self.subject}) durable with "
                    f"one {barrier} and nothing ordering them before it: the disk may keep a later write without an "
                    "earlier one (a record that commits data without that data); this state kept only part of them")
        if self.rule == TORN:
            return (f"the crash tore a write of the commit in flight ({key}; {self.subject}): part of it reached the "
                    f"disk, part did not{self.note}, and recovery took what it found as valid -- a write can tear at "
                    "a sector or 4 KiB boundary on power loss, and only a checksum over each record detects it")
        return ""

    _root: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "subject": self.subject, "ack": self.ack.text, "sentence": self.sentence(),
                "note": self.note, "evidence": [evidence_line(o) for o in self.evidence]}


@dataclass(frozen=True, slots=True)
class Cause:
    """The cause of one failing state: the first rule broken, the others seen, and how the block
    level agrees."""

    rule: str
    sentence: str
    evidence: tuple[str, ...]
    others: tuple[str, ...] = ()      # the other broken rules' sentences (at most a few)
    blame: str = ""                   # how the block-level blame agrees or disagrees
    blind: tuple[str, ...] = ()       # what the trace could not see
    subject: str = ""                 # the file(s) or directory the rule is about, comma-separated

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "sentence": self.sentence, "evidence": list(self.evidence),
                "others": list(self.others), "blame": self.blame, "blind": list(self.blind), "subject": self.subject}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Cause":
        return Cause(str(d.get("rule", "")), str(d.get("sentence", "")), tuple(d.get("evidence", ())),
                     tuple(d.get("others", ())), str(d.get("blame", "")), tuple(d.get("blind", ())),
                     str(d.get("subject", "")))

    def lines(self) -> list[str]:
        out = [f"cause ({self.rule}): {self.sentence}"]
        out += [f"  | {e}" for e in self.evidence]
        if self.blame:
            out.append(f"  blocks: {self.blame}")
        out += [f"  also: {o}" for o in self.others]
        out += [f"  not seen by the trace: {b}" for b in self.blind]
        return out


def rel(path: str, root: str) -> str:
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return "/" + path[len(root):].lstrip("/")
    return path


def evidence_line(o: Op) -> str:
    where = f"line {o.line}, pid {o.pid}"
    if o.kind == sc.MARK:
        return f"{where}: mark {o.text}"
    return f"{where}: {o.text}"


# -- the rules, ack by ack --------------------------------------------------------------------------

@dataclass(slots=True)
class _State:
    root: str
    dirty: dict[str, list[Op]] = field(default_factory=dict)       # file -> changes since its last sync
    direct: set[str] = field(default_factory=set)                  # files written with O_DIRECT since then
    entries: dict[str, list[Op]] = field(default_factory=dict)     # directory -> name changes since its sync
    renames: list[tuple[Op, tuple[Op, ...]]] = field(default_factory=list)   # (rename, the source's unsynced changes)
    failed: list[Op] = field(default_factory=list)                 # failed syncs/writes not since recovered
    opened: dict[str, tuple[str, ...]] = field(default_factory=dict)   # path -> flags of its last open
    exists: set[str] = field(default_factory=set)
    range_synced: set[str] = field(default_factory=set)

    def mine(self, path: str) -> bool:
        return bool(path) and (path == self.root or path.startswith(self.root.rstrip("/") + "/"))

    def name_change(self, path: str, o: Op) -> None:
        self.entries.setdefault(posixpath.dirname(path), []).append(o)

    def step(self, o: Op) -> None:
        k = o.kind
        if k in (sc.SYNC, sc.SYNCFS) and o.ok:   # (syncfs of another filesystem would not: rare, not told apart)
            self.dirty.clear()
            self.entries.clear()
            self.renames.clear()
            self.direct.clear()
            return
        if not self.mine(o.path):
            return
        if k == sc.OPEN:
            if not o.ok:
                return
            self.opened[o.path] = o.flags
            if "O_CREAT" in o.flags and o.path not in self.exists:
                self.name_change(o.path, o)
            if "O_TRUNC" in o.flags and o.path in self.exists:
                self.dirty.setdefault(o.path, []).append(o)
            self.exists.add(o.path)
        elif k in (sc.WRITE, sc.TRUNCATE, sc.ALLOCATE):
            if not o.ok:
                self.failed.append(o)
                return
            flags = self.opened.get(o.path, ())
            if k == sc.WRITE and any(f in sc.SYNC_FLAGS for f in flags):
                return
            if "O_DIRECT" in flags:
                self.direct.add(o.path)
            self.dirty.setdefault(o.path, []).append(o)
        elif k in (sc.FSYNC, sc.FDATASYNC, sc.MSYNC):
            if not o.ok:
                self.failed.append(o)
                return
            if k == sc.MSYNC and "MS_SYNC" not in o.flags:
                return
            self.dirty.pop(o.path, None)   # (a failure stays in ``failed``: a retried fsync that succeeds
            self.direct.discard(o.path)    # after an error does not bring back the pages the error dropped)
            if k == sc.FSYNC or k == sc.FDATASYNC:
                self.entries.pop(o.path, None)        # the directory's own fsync
                self.renames = [(r, d) for r, d in self.renames if posixpath.dirname(r.path2) != o.path]
        elif k == sc.RANGE_SYNC:
            self.range_synced.add(o.path)
        elif k in (sc.RENAME, sc.LINK) and o.ok:
            src = tuple(self.dirty.get(o.path, ()))
            if src:
                self.renames.append((o, src))
            self.name_change(o.path2, o)
            if k == sc.RENAME:
                self.name_change(o.path, o)
                moved = self.dirty.pop(o.path, None)
                if moved:
                    self.dirty[o.path2] = moved
                self.exists.discard(o.path)
                if o.path in self.opened:
                    self.opened[o.path2] = self.opened.pop(o.path)
            self.exists.add(o.path2)
        elif k in (sc.UNLINK, sc.RMDIR) and o.ok:
            self.name_change(o.path, o)
            self.dirty.pop(o.path, None)
            self.exists.discard(o.path)
        elif k == sc.MKDIR and o.ok:
            self.name_change(o.path, o)
            self.exists.add(o.path)

    def violations(self, ack: Op, since: int, running: dict[str, Op] | None = None) -> list[Violation]:
        """What is not durable at ``ack`` and was touched by this commit (an op after ``since``);
        ``running``: the syncs that began before the ack and returned after it, by path ("" for a
        sync/syncfs)."""
        root, out, running = self.root, [], running or {}
        for f in self.failed:
            if f.seq > since or any(o.seq > since for o in self.dirty.get(f.path, ())):
                out.append(Violation(ERROR, rel(f.path, root), ack, (f, ack), _root=root))
        for ren, src in self.renames:
            if ren.seq > since:
                out.append(Violation(RENAME, rel(ren.path2, root), ack, (*src[-3:], ren, ack), _root=root))
        for path, ops in self.dirty.items():
            if any(o.seq > since for o in ops):
                notes = []
                if path in self.direct:
                    notes.append("O_DIRECT bypasses the page cache, not the disk's write cache")
                if path in self.range_synced:
                    notes.append("sync_file_range is not a durability barrier")
                sync = running.get(path) or running.get("")
                if sync is not None:
                    out.append(Violation(EARLY, rel(path, root), ack, (*ops[-3:], ack, sync), _root=root))
                    continue
                out.append(Violation(NO_FSYNC, rel(path, root), ack, (*ops[-4:], ack), "; ".join(notes), _root=root))
        for d, ops in self.entries.items():
            if any(o.seq > since for o in ops):
                out.append(Violation(NO_DIR_FSYNC, rel(d, root), ack, (*ops[-3:], ack), _root=root))
        out.sort(key=lambda v: RANK.index(v.rule))
        return out


@dataclass(frozen=True, slots=True)
class Commit:
    """One ack in the trace: its op, where its commit began (its begin mark, else the previous ack),
    what it left not durable, and the log entry of its mark."""

    key: str
    ack: Op
    since: int
    entry: int | None
    violations: tuple[Violation, ...]


def commits(trace: Trace, root: str, aligned: dict[int, int] | None = None) -> list[Commit]:
    """Walk the trace once: every ack with the rules it broke."""
    st = _State(root)
    aligned = aligned or {}
    out: list[Commit] = []
    begun: dict[str, int] = {}
    last_ack = -1
    splits = [o for o in trace.ops if o.kind in BARRIERS and o.ok and o.start >= 0]   # began earlier
    seqs = [o.seq for o in splits]
    for o in trace.ops:
        if o.kind == sc.MARK:
            if o.text.startswith("begin:"):
                begun[o.text[6:]] = o.seq
            elif o.text.startswith("ack:"):
                key = o.text[4:]
                since = begun.pop(key, last_ack)
                out.append(Commit(key, o, since, aligned.get(o.seq),
                                  tuple(st.violations(o, since, _running(splits, seqs, o)))))
                last_ack = o.seq
            continue
        st.step(o)
    return out


def _running(splits: list[Op], seqs: list[int], ack: Op) -> dict[str, Op]:
    """Of ``splits`` (successful syncs strace split, in completion order) those that began before
    ``ack`` and returned within a minute after it, by path ("" for sync/syncfs)."""
    out: dict[str, Op] = {}
    for o in splits[bisect.bisect_right(seqs, ack.seq):]:
        if o.time > ack.time + 60:
            break
        if o.began < ack.time:
            out.setdefault("" if o.kind in (sc.SYNC, sc.SYNCFS) else o.path, o)
    return out


# -- one failing state ------------------------------------------------------------------------------
_KEYISH = re.compile(r"(?:ack:|key |txn |tid |record |['\"#])([\w.:-]+)")


def lost_keys(reasons: Iterable[str], keys: Iterable[str]) -> list[str]:
    """The acked keys a checker's reasons name (``ack:K``, ``'K'``, ``key K``, ``#K`` ...), in ack order."""
    text = " ".join(reasons)
    named = {m.group(1).strip(".:") for m in _KEYISH.finditer(text)}
    named |= {w.strip(".,;:()[]'\"") for w in text.split()}
    return [k for k in keys if k in named or f"ack:{k}" in text]


LIE_WORDS = {"lost-write": "acked write #{e} (sector {s}) and dropped it",
             "misdirected-write": "wrote write #{e}'s data at sector {d} instead of its own sector {s}",
             "corrupt-sector": "flipped {n} bit(s) of sector {d}, last written by write #{e}",
             "unreadable-sector": "could not read back sector {d}, last written by write #{e}",
             "flush-ignored": "acked a FLUSH without emptying its cache: writes {ws} before it were lost"}
SERVED = {"silent-corruption": "the program served the result as good data, with no error",
          "lost-ack": "an acked commit was gone without an error from the program"}


def lie_cause(model: str, entry: int, sector: int, *, dest: int = -1, bits: int = 0, dropped: Sequence[int] = (),
              verdict: str = "", reasons: Sequence[str] = ()) -> Cause:   # what the disk did; not noticed
    ws = ", ".join(f"#{i}" for i in list(dropped)[:6]) + (" ..." if len(dropped) > 6 else "")
    did = LIE_WORDS.get(model, "lied about write #{e}").format(e=entry, s=sector, d=dest if dest >= 0 else sector,
                                                               n=bits, ws=ws)
    served = SERVED.get(verdict, f"the program answered {verdict or 'a failure'} without noticing")
    return Cause(LIED, f"the disk {did}, and {served} -- a checksum over what it reads back, or a refusal to go "
                       "on, is what notices a lying disk", tuple(reasons[:3]))


def explain(trace: Trace, log_marks: Sequence[tuple[int, str]], cut: int, root: str, *,
            reasons: Sequence[str] = (), verdict: str = "", torn: Sequence[int] = ()) -> Cause:
    """The cause of a state cut at log entry ``cut`` (that tore the writes at the entries ``torn``)
    which failed with ``reasons`` (``verdict``: kept for the record; every rule here applies to any
    failing verdict)."""
    aligned = sc.align(trace, log_marks)
    all_commits = commits(trace, root, aligned)
    before = [c for c in all_commits if c.entry is not None and c.entry < cut]
    named = set(lost_keys(reasons, [c.key for c in before]))
    pool = [c for c in before if c.key in named] or before
    blind = tuple(trace.blind)
    for c in pool:
        if c.violations:
            top, *rest = c.violations
            others = tuple(dict.fromkeys(v.sentence() for v in rest if v.sentence() != top.sentence()))[:3]
            alike = sum(1 for d in pool if d is not c and d.violations and d.violations[0].rule == top.rule)
            sentence = top.sentence() + (f" (and {alike} more acked commit{'s' if alike != 1 else ''} alike)"
                                         if alike else "")
            return Cause(top.rule, sentence, tuple(evidence_line(o) for o in top.evidence[-EVIDENCE_LINES:]),
                         others, blind=blind, subject=top.subject)
    for c in before:   # a failed fsync before any ack before the cut: its pages may be gone for good
        err = next((v for v in c.violations if v.rule == ERROR), None)
        if err is not None:
            return Cause(ERROR, err.sentence(), tuple(evidence_line(o) for o in err.evidence[-EVIDENCE_LINES:]),
                         blind=blind, subject=err.subject)
    inflight = _in_flight(trace, aligned, cut, root)
    if inflight is not None:
        return Cause(UNORDERED, inflight.sentence(),
                     tuple(evidence_line(o) for o in inflight.evidence[-EVIDENCE_LINES:]), blind=blind,
                     subject=inflight.subject)
    if torn:
        tear = _torn(trace, aligned, cut, root, torn)
        return Cause(TORN, tear.sentence(), tuple(evidence_line(o) for o in tear.evidence[-EVIDENCE_LINES:]),
                     blind=blind, subject=tear.subject)
    if not before:
        return Cause(BEYOND, "no ack was given before the crash in the trace, so no rule about an ack applies: "
                     "the failure is in recovery itself (see the blocks)", (), blind=blind)
    last = pool[-1]
    return Cause(BEYOND, f"the program did everything the rules ask before {last.ack.text} (its changes were "
                 "fsynced before the ack) and still lost it: a filesystem or disk behaviour beyond the rules; the "
                 "block-level blame is the evidence", (evidence_line(last.ack),), blind=blind)


def _window(trace: Trace, aligned: dict[int, int], cut: int, root: str) -> tuple[list[Op], int]:
    """The calls of the commit in flight at the cut (between the last mark before it and the first
    mark at or after it) on the filesystem under test, with the trace position of that next mark."""
    marks = sorted((e, s) for s, e in aligned.items())
    lo = max((s for e, s in marks if e < cut), default=-1)
    hi = min((s for e, s in marks if e >= cut), default=len(trace.ops))
    prefix = root.rstrip("/") + "/"
    return [o for o in trace.ops[lo + 1:hi] if o.path.startswith(prefix) or o.kind in (sc.SYNC,)], hi


def _next_ack(trace: Trace, hi: int) -> Op | None:
    return next((m for m in trace.ops[hi:] if m.kind == sc.MARK and m.text.startswith("ack:")), None)


def _in_flight(trace: Trace, aligned: dict[int, int], cut: int, root: str) -> Violation | None:
    """The commit in flight at the cut when it made two or more writes durable with one barrier."""
    window, hi = _window(trace, aligned, cut, root)
    writes: list[Op] = []
    for o in window:
        if o.kind == sc.WRITE and o.ok:
            writes.append(o)
        elif o.kind in BARRIERS and o.ok:
            if len(writes) >= 2:
                files = ", ".join(dict.fromkeys(rel(w.path, root) for w in writes))
                return Violation(UNORDERED, files, _next_ack(trace, hi) or o, (*writes[-4:], o), _root=root)
            writes.clear()
    return None


def _torn(trace: Trace, aligned: dict[int, int], cut: int, root: str, torn: Sequence[int]) -> Violation:
    """The torn write's commit: the writes in flight at the cut."""
    window, hi = _window(trace, aligned, cut, root)
    writes = [o for o in window if o.kind == sc.WRITE and o.ok]
    files = ", ".join(dict.fromkeys(rel(w.path, root) for w in writes)) or "its writes"
    ack = _next_ack(trace, hi)
    note = f" (log entr{'ies' if len(torn) > 1 else 'y'} #{', #'.join(map(str, torn))})"
    last = writes[-1] if writes else (ack or Op(-1, 0, 0, 0.0, sc.MARK, text="the end"))
    return Violation(TORN, files, ack or last, tuple(writes[-4:]), note, _root=root)


def with_blame(cause: Cause, culprits: Sequence[dict[str, Any]], root: str = "") -> Cause:
    """The cause checked against the block-level blame: do the writes blame found lost or not yet
    durable belong to the file or directory the rule names?  Says both when they disagree."""
    if not culprits:
        return cause
    subjects = {s.strip() for s in cause.subject.split(",") if s.strip()}
    texts = [str(c.get("text", "")) for c in culprits]
    hit = [t for c, t in zip(culprits, texts) if subjects and _touches(c, subjects)]
    if cause.rule == BEYOND or not subjects:
        note = "blame: " + "; ".join(texts[:2])
    elif hit:
        note = "blame agrees: " + "; ".join(hit[:2])
    else:
        note = ("blame names other blocks than the rule's: its writes may not have reached the disk before the cut "
                "at all (still in the page cache), which is what the rule says")
    return Cause(cause.rule, cause.sentence, cause.evidence, cause.others, note, cause.blind, cause.subject)


def _touches(culprit: dict[str, Any], subjects: set[str]) -> bool:
    paths = {p.strip() for p in str(culprit.get("path", "")).split(",") if p.strip()}
    return bool(paths & subjects) or any(posixpath.dirname(s) in paths for s in subjects
                                         if "directory" in str(culprit.get("what", "")))

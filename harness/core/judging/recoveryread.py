"""What recovery read: the files under a state's mount(s) its checker opened, in the order first
opened -- each with its size in the state before the checker ran, the bytes the checker read from
it and whether its open failed -- and the sentence that says them: "recovery read CURRENT (16
bytes), then MANIFEST-000004 (0 of 1,193 bytes present), then stopped".

A file is named relative to its mount (``.``: the mount's top directory); a state of several disks
names node i's files ``n<i>/...`` (its top directory ``n<i>``).  Paths outside the mounts (the
program's libraries, /proc, pipes) are not recovery's reads and are left out.

Pure (text in, records out).  A command checker's accesses come from ``strace -f -y`` (the
arguments: ``strace_args``; check/readtrace.py runs it) read by ``parse``: every descriptor a call
names carries its path (``-y``: ``read(3</mnt/CURRENT>, ...)``), and where one does not the
descriptor is followed through open, dup, fcntl F_DUPFD, close, close_range, fork/clone (shared with
CLONE_FILES) and execve (its close-on-exec descriptors go); relative names are resolved against
the process's working directory (chdir, fchdir, ``AT_FDCWD</dir>``).  Bytes read are what read,
pread64, readv, preadv(2), copy_file_range, sendfile and splice returned; a file mapped (mmap) was
read in a way no call counts, and its bytes are unknown (-1).  An in-process checker's accesses
come from Python's audit events (check/readtrace.py), fed to the same ``Accesses``, its bytes read
unknown."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from powercut.core.trace.syscalls import fd_path, split_args, unquote

# the calls a traced checker's strace watches (``?``: a call this strace does not know is skipped)
CALLS = (
    "open",
    "openat",
    "?openat2",
    "creat",
    "access",
    "faccessat",
    "?faccessat2",
    "stat",
    "lstat",
    "newfstatat",
    "?statx",
    "read",
    "pread64",
    "readv",
    "preadv",
    "?preadv2",
    "copy_file_range",
    "sendfile",
    "splice",
    "mmap",
    "close",
    "?close_range",
    "dup",
    "dup2",
    "dup3",
    "fcntl",
    "chdir",
    "fchdir",
    "clone",
    "?clone3",
    "fork",
    "vfork",
    "execve",
)
READ_CALLS = {
    "read": 0,
    "pread64": 0,
    "readv": 0,
    "preadv": 0,
    "preadv2": 0,
    "copy_file_range": 0,
    "sendfile": 1,
    "splice": 0,
}  # name -> the argument that is the source fd
LOOKUPS = {
    "access": 0,
    "stat": 0,
    "lstat": 0,
    "faccessat": 1,
    "faccessat2": 1,
    "newfstatat": 1,
    "statx": 1,
}  # name -> the argument that is the path (after a dirfd at 0, for the *at calls)
WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"})
FIRST = 4  # a long list is said as its first FIRST files,
NOTABLE = (
    3  # at most NOTABLE notable ones among the rest (a failed open, a file short of its bytes),
)
#                 and always the last one; the others as "... N more"
ERRNO_WORDS = {
    "ENOENT": "it does not exist",
    "EACCES": "permission denied (EACCES)",
    "EIO": "an I/O error (EIO)",
    "EEXIST": "it exists already (EEXIST)",
    "ENOTDIR": "a part of its path is not a directory (ENOTDIR)",
    "EUCLEAN": "the filesystem found it damaged (EUCLEAN)",
    "EBADMSG": "a bad checksum (EBADMSG)",
}


def strace_args(out: str, seccomp: bool = True) -> tuple[str, ...]:
    """strace's arguments (after its own path, before the command) for a traced checker: every
    thread and child (-f), descriptors with their paths (-y), no strings (-s 0: a file name is
    printed whole all the same), the trace to ``out``; with ``seccomp`` only the traced calls stop."""
    return (
        "-f",
        "-y",
        "-qq",
        "-ttt",
        "-s",
        "0",
        *(("--seccomp-bpf",) if seccomp else ()),
        "-e",
        "signal=none",
        "-e",
        "trace=" + ",".join(CALLS),
        "-o",
        out,
        "--",
    )


@dataclass(frozen=True, slots=True)
class ReadFile:
    """One file the checker opened (or tried to).  ``size``: its bytes in the state before the
    checker ran (-1: it did not exist then); ``read``: the bytes the checker read from it (-1:
    unknown -- mapped, or an in-process checker); ``error``: the errno name (``ENOENT``) when no
    open of it succeeded; ``dir``: a directory (listed); ``write``: opened for writing too;
    ``mapped``: mapped into memory (mmap); ``looked``: never opened, only looked up (stat,
    access) and not found."""

    path: str
    size: int = -1
    read: int = -1
    error: str = ""
    dir: bool = False
    write: bool = False
    mapped: bool = False
    looked: bool = False

    @property
    def created(self) -> bool:
        """Opened, not there before the checker ran: the checker (the program's recovery) made it."""
        return self.size < 0 and not self.error

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "read": self.read,
            **{
                k: getattr(self, k)
                for k in ("error", "dir", "write", "mapped", "looked")
                if getattr(self, k)
            },
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> "ReadFile":
        return ReadFile(
            str(d["path"]),
            int(d.get("size", -1)),
            int(d.get("read", -1)),
            str(d.get("error", "")),
            bool(d.get("dir", False)),
            bool(d.get("write", False)),
            bool(d.get("mapped", False)),
            bool(d.get("looked", False)),
        )


def relative(path: str, mounts: Sequence[str]) -> str | None:
    """``path`` (absolute) named as recovery's reads name it (the module's docstring); None when it
    lies under no mount.  Node i of several: ``n<i>/...``."""
    if not path.startswith("/"):
        return None
    p = posixpath.normpath(path)
    for i, m in sorted(enumerate(mounts), key=lambda im: -len(im[1])):  # the deepest mount first
        m = posixpath.normpath(m)
        if p == m or p.startswith(m.rstrip("/") + "/"):
            rel = posixpath.relpath(p, m)
            if len(mounts) == 1:
                return rel
            return f"n{i}" if rel == "." else f"n{i}/{rel}"
    return None


@dataclass(slots=True)
class _File:
    error: str = ""
    opened: bool = False
    read: int = 0
    dir: bool = False
    write: bool = False
    mapped: bool = False
    looked: bool = False  # only looked up (stat, access) and not found


@dataclass(slots=True)
class Accesses:
    """The accesses of one checker run, folded per file in the order first opened.  ``mounts``:
    the absolute mount points (as the kernel names them); ``sizes``: each file's size before the
    checker ran, by its name (``relative``); ``counted``: the bytes read are counted (strace), else
    unknown (-1).  Every method takes an absolute path and ignores one under no mount."""

    mounts: tuple[str, ...]
    sizes: Mapping[str, int] = field(default_factory=dict)
    counted: bool = True
    _files: dict[str, _File] = field(default_factory=dict)

    def _file(self, path: str) -> _File | None:  # the files in the order first seen (a dict's)
        name = relative(path, self.mounts)
        return None if name is None else self._files.setdefault(name, _File())

    def opened(
        self, path: str, error: str = "", *, directory: bool = False, write: bool = False
    ) -> None:
        """An open of ``path``: failed with the errno name ``error``, or succeeded ("")."""
        if (f := self._file(path)) is None:
            return
        f.error, f.opened = f.error or error, f.opened or not error
        f.dir, f.write = f.dir or directory, f.write or write

    def looked_for(self, path: str, error: str) -> None:
        """A lookup of ``path`` (stat, access) that failed with ``error``: recovery looked for it."""
        if (f := self._file(path)) is not None and not f.opened:
            f.error, f.looked = f.error or error, not f.error or f.looked

    def read(self, path: str, nbytes: int) -> None:
        if (f := self._file(path)) is not None:
            f.opened = True  # a descriptor it had (inherited, or an open the trace missed)
            f.read += max(0, nbytes)

    def mapped(self, path: str) -> None:
        if (f := self._file(path)) is not None:
            f.opened = f.mapped = True

    def files(self) -> tuple[ReadFile, ...]:
        return tuple(
            ReadFile(
                name,
                self.sizes.get(name, -1),
                f.read if self.counted and not f.mapped else -1,
                "" if f.opened else f.error,
                f.dir,
                f.write,
                f.mapped,
                f.looked and not f.opened,
            )
            for name, f in self._files.items()
        )


# -- strace's text ----------------------------------------------------------------------------------
_HEAD = re.compile(r"^(?:(\d+)\s+)?(?:[\d:]+\.\d+\s+)?(.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>\s?(.*)$")
_UNFINISHED = "<unfinished ...>"
_RET = re.compile(r"^\s*=\s*(0x[0-9a-fA-F]+|-?\d+|\?)(<(?:[^>\\]|\\.)*>)?(?:\s+([A-Z][A-Z0-9_]*))?")


@dataclass(frozen=True, slots=True)
class Call:
    """One completed call: its process, name, arguments, return value, its ``-y`` path, its errno name."""

    pid: int
    name: str
    args: tuple[str, ...]
    ret: int
    ret_path: str = ""
    error: str = ""


def _close_paren(text: str, i: int) -> int:
    """The index of the ``)`` that closes the argument list starting at ``i`` (-1: none)."""
    depth, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == '"' or (c == "<" and i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            close = '"' if c == '"' else ">"
            i += 1
            while i < n and text[i] != close:
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def call_of(pid: int, text: str) -> Call | None:
    """The call one whole line's text (after its pid and time) is; None when it is no completed call."""
    m = re.match(r"(\w+)\(", text)
    if not m:
        return None
    end = _close_paren(text, m.end())
    if end < 0:
        return None
    tail = _RET.match(text[end + 1 :])
    if tail is None:
        return None
    raw = tail.group(1)
    if raw == "?":  # its process ended inside it: nothing completed
        return None
    ret = int(raw, 0)
    path = fd_path(raw + tail.group(2)) if tail.group(2) else ""
    return Call(
        pid,
        m.group(1),
        tuple(split_args(text[m.end() : end])),
        ret,
        path,
        (tail.group(3) or "") if ret < 0 else "",
    )


def calls_of(lines: Iterable[str]) -> Iterable[Call]:
    """The completed calls of strace's lines, in completion order: a call split by another
    process's (``<unfinished ...>``, then ``<... NAME resumed>``) whole where it completed."""
    pending: dict[tuple[int, str], str] = {}
    for raw in lines:
        m = _HEAD.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, rest = int(m.group(1) or 0), m.group(2).strip()
        if rest.startswith(("---", "+++")):
            continue
        r = _RESUMED.match(rest)
        if r:  # resumed: its start, or (a vfork child's execve, begun in its parent) a bare name
            rest = pending.pop((pid, r.group(1)), f"{r.group(1)}(") + r.group(2)
        elif rest.endswith(_UNFINISHED):
            pending[(pid, rest.split("(", 1)[0])] = rest[: -len(_UNFINISHED)].rstrip() + " "
            continue
        c = call_of(pid, rest)
        if c is not None:
            yield c


def _int(arg: str, default: int = -1) -> int:
    m = re.match(r"\s*(0x[0-9a-fA-F]+|-?\d+)", arg)
    return int(m.group(1), 0) if m else default


class _Tracer:
    """Descriptor tables (shared by the processes of a CLONE_FILES clone) and working directories
    of the traced processes, fed one call at a time into ``acc``."""

    def __init__(self, acc: Accesses, cwd: str) -> None:
        self.acc, self.cwd0 = acc, cwd
        self.tables: dict[
            int, dict[int, tuple[str, bool]]
        ] = {}  # pid -> fd -> (path, close-on-exec)
        self.cwds: dict[int, str] = {}

    def table(self, pid: int) -> dict[int, tuple[str, bool]]:
        return self.tables.setdefault(pid, {})

    def fd(self, pid: int, arg: str) -> str:
        """The absolute path of a descriptor argument ("" when unknown)."""
        p = fd_path(arg)
        if not p:
            entry = self.table(pid).get(_int(arg))
            p = entry[0] if entry else ""
        return p.removesuffix(" (deleted)")

    def at(self, pid: int, dirfd: str, name: str) -> str:
        if name.startswith("/"):
            return posixpath.normpath(name)
        if dirfd.startswith("AT_FDCWD") or not dirfd:
            base = fd_path(dirfd) or self.cwds.get(pid, self.cwd0)
        else:
            base = self.fd(pid, dirfd)
        return posixpath.normpath(posixpath.join(base, name)) if base else ""

    def call(self, c: Call) -> None:
        a = c.args
        name = c.name
        pid = c.pid
        for x in a:  # each AT_FDCWD<...> strace prints is the process's working directory then
            if x.startswith("AT_FDCWD<"):
                self.cwds[pid] = fd_path(x)
        if name in ("open", "openat", "openat2", "creat"):
            self.open(c)
        elif name in LOOKUPS:
            k = LOOKUPS[name]
            if c.error and len(a) > k:
                path = self.at(pid, a[0] if k else "", unquote(a[k]))
                if path:
                    self.acc.looked_for(path, c.error)
        elif name in READ_CALLS:
            if c.ret > 0 and len(a) > READ_CALLS[name]:
                path = self.fd(pid, a[READ_CALLS[name]])
                if path:
                    self.acc.read(path, c.ret)
        elif name == "mmap":
            if c.ret != -1 and len(a) > 4 and _int(a[4]) >= 0 and (path := self.fd(pid, a[4])):
                self.acc.mapped(path)
        elif name == "close":
            self.table(pid).pop(_int(a[0]) if a else -1, None)
        elif name == "close_range":
            self.close_range(pid, a)
        elif name in ("dup", "dup2", "dup3") or (
            name == "fcntl" and len(a) > 1 and "F_DUPFD" in a[1]
        ):
            if c.ret >= 0 and a:  # dup3's O_CLOEXEC, fcntl's F_DUPFD_CLOEXEC
                if name == "dup3" and len(a) > 2:
                    flags = a[2]
                elif name == "fcntl":
                    flags = a[1]
                else:
                    flags = ""
                self.table(pid)[c.ret] = (c.ret_path or self.fd(pid, a[0]), "CLOEXEC" in flags)
        elif name == "fcntl" and len(a) > 2 and a[1] == "F_SETFD" and c.ret == 0:
            entry = self.table(pid).get(_int(a[0]))
            if entry:
                self.table(pid)[_int(a[0])] = (entry[0], "FD_CLOEXEC" in a[2] or _int(a[2], 0) == 1)
        elif name in ("chdir", "fchdir") and c.ret == 0 and a:
            where = (
                self.fd(pid, a[0]) if name == "fchdir" else self.at(pid, "AT_FDCWD", unquote(a[0]))
            )
            if where:
                self.cwds[pid] = where
        elif name in ("clone", "clone3", "fork", "vfork") and c.ret > 0:
            self.forked(pid, c.ret, shared="CLONE_FILES" in ", ".join(a))
        elif (
            name == "execve" and c.ret == 0
        ):  # the new program: its own table, without close-on-exec fds
            self.tables[pid] = {fd: e for fd, e in self.table(pid).items() if not e[1]}

    def open(self, c: Call) -> None:
        a, pid = c.args, c.pid
        if c.name == "creat":
            dirfd = ""
            name = a[0] if a else ""
            flags = "O_WRONLY|O_CREAT|O_TRUNC"
        elif c.name == "open":
            dirfd = ""
            name = a[0] if a else ""
            flags = a[1] if len(a) > 1 else ""
        else:
            dirfd, name = (a[0], a[1]) if len(a) > 1 else ("", "")
            flags = a[2] if len(a) > 2 else ""
            if c.name == "openat2":
                m = re.search(r"flags=([A-Z0-9_|]+)", flags)
                flags = m.group(1) if m else ""
        words = set(flags.split("|"))
        path = (
            c.ret_path.removesuffix(" (deleted)")
            if c.ret >= 0 and c.ret_path
            else self.at(pid, dirfd, unquote(name))
        )
        if c.ret >= 0:
            self.table(pid)[c.ret] = (path, "O_CLOEXEC" in words)
        if not path or "O_PATH" in words:  # an O_PATH descriptor names a file, never reads it
            return
        self.acc.opened(
            path,
            c.error or ("" if c.ret >= 0 else "EUNKNOWN"),
            directory="O_DIRECTORY" in words,
            write=bool(words & WRITE_FLAGS),
        )

    def close_range(self, pid: int, a: tuple[str, ...]) -> None:
        if len(a) < 2:
            return
        lo, hi = _int(a[0]), (1 << 32) if a[1].strip() in ("~0U", "~0") else _int(a[1])
        table = self.table(pid)
        for fd in [fd for fd in table if lo <= fd <= hi]:
            if len(a) > 2 and "CLOSE_RANGE_CLOEXEC" in a[2]:
                table[fd] = (table[fd][0], True)
            else:
                del table[fd]

    def forked(self, parent: int, child: int, shared: bool) -> None:
        """``child`` starts with ``parent``'s descriptors (the very table with CLONE_FILES) and
        working directory.  Its own calls may have come first (strace prints the clone when the
        parent returns): those are kept."""
        mine = self.tables.get(child, {})
        if shared:
            table = self.table(parent)
            table.update(mine)
            self.tables[child] = table
        else:
            self.tables[child] = {**self.table(parent), **mine}
        if child not in self.cwds and parent in self.cwds:
            self.cwds[child] = self.cwds[parent]


def parse(
    text: str | Iterable[str],
    mounts: Sequence[str],
    sizes: Mapping[str, int] | None = None,
    cwd: str = "",
) -> tuple[ReadFile, ...]:
    """The files under ``mounts`` a traced checker opened (strace's output, ``strace_args``: a string
    or its lines), in the order first opened.  ``sizes``: each file's size before the checker ran (by
    its name, ``relative``); ``cwd``: where the checker started (default: the first mount)."""
    acc = Accesses(tuple(mounts), sizes or {})
    tracer = _Tracer(acc, cwd or (mounts[0] if mounts else "/"))
    for c in calls_of(text.splitlines() if isinstance(text, str) else text):
        try:
            tracer.call(c)
        except (IndexError, ValueError):  # a call printed in a form not foreseen: the next one
            continue
    return acc.files()


# -- words --------------------------------------------------------------------------------------------
def complete(reads: Sequence[ReadFile]) -> bool:
    """Whether the reads come from a trace that sees every open and lookup (strace: bytes read are
    counted), not from Python's audit events (bytes unknown; a C library's own opens, such as
    SQLite's of its -wal file, unseen) -- only a complete trace can say a file was never read."""
    return any(r.read >= 0 for r in reads)


def read_paths(reads: Sequence[ReadFile]) -> tuple[str, ...]:
    """The files recovery opened (or tried to), in order."""
    return tuple(r.path for r in reads)


def rank_paths(reads: Sequence[ReadFile]) -> tuple[str, ...]:
    """The files whose rules are tried first, in order: those recovery opened, as ``read_paths``,
    but the ones it only wrote last -- from a complete trace, a file opened for writing of which
    not a byte was read (a lock file recovery truncates and rewrites: surrealkv's db/LOCK) is one
    whose lost contents recovery never looked at."""
    only = {r.path for r in reads if r.write and r.read == 0 and not r.mapped and not r.dir}
    paths = read_paths(reads)
    return (*(p for p in paths if p not in only), *(p for p in paths if p in only))


def _bytes(n: int) -> str:
    return f"{n:,} byte" + ("" if n == 1 else "s")


def _said(r: ReadFile, written: Mapping[str, int] | None) -> tuple[str, str]:
    """(verb, object) of one file."""
    w = (written or {}).get(r.path, -1)
    present = max(r.size, 0)
    if r.error:
        what = "the top directory" if r.path == "." else r.path + ("/" if r.dir else "")
        return (
            "looked for" if r.looked else "tried to open",
            f"{what}: {ERRNO_WORDS.get(r.error, r.error)}",
        )
    if r.dir:
        return "listed", "the top directory" if r.path == "." else f"{r.path}/"
    if r.created:
        return "created", r.path + (f" (0 of {_bytes(w)} present)" if w > 0 else "")
    if w > present:
        detail = f"{present:,} of {_bytes(w)} present"
        if 0 <= r.read < present:
            detail += f", {r.read:,} read"
    elif r.read < 0 or r.read == present:
        detail = _bytes(present)
    elif r.read < present:
        detail = f"{r.read:,} of {_bytes(present)}"
    else:
        detail = f"{_bytes(present)}, {r.read:,} read"
    if r.mapped:
        detail = "mapped, " + detail
    if r.write and r.read <= 0 and not r.mapped:  # nothing read (or, in-process, unknown): written
        return "opened", f"{r.path} for writing ({detail})"
    return "read", f"{r.path} ({detail})"


def words(reads: Sequence[ReadFile], written: Mapping[str, int] | None = None) -> str:
    """One sentence for what recovery read: "recovery read CURRENT (16 bytes), then
    MANIFEST-000004 (0 of 1,193 bytes present), then stopped".  ``written``: each file's bytes the
    program had written by the crash (by its name): a file holding fewer is said "X of Y bytes
    present".  A failed open is said "tried to open X: it does not exist", a file that was not
    there and was opened "created X", a directory "listed X/".  A long list keeps its first files,
    the notable ones after them (a failed open, a file short of its bytes) and always its last,
    the others said as "... N more"."""
    if not reads:
        return "recovery opened no file under the mount"
    n = len(reads)
    w = written or {}
    keep = set(range(n))
    if n > FIRST + 2:
        keep = set(range(FIRST)) | {n - 1}
        notable = [
            i
            for i in range(FIRST, n - 1)
            if reads[i].error or w.get(reads[i].path, -1) > max(reads[i].size, 0)
        ]
        keep |= set(notable[:NOTABLE])
    parts: list[str] = []
    last_verb, gap = "", 0
    for i, r in enumerate(reads):
        if i not in keep:
            gap += 1
            continue
        if gap:
            parts.append(f"... {gap} more")
            last_verb, gap = "", 0
        verb, what = _said(r, written)
        parts.append(what if verb == last_verb else f"{verb} {what}")
        last_verb = verb
    return "recovery " + ", then ".join(parts) + ", then stopped"

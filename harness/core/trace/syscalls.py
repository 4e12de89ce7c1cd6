"""The workload's durability-relevant system calls, from the trace the recording takes with
``strace -f -y`` (guest/record.py, ``STRACE_ARGV``), as a list of ``Op`` in completion order.

A trace line is ``PID TIME NAME(ARGS) = RET [ERRNO (text)]``; a call another thread interrupted is
split into ``NAME(ARGS <unfinished ...>`` and ``<... NAME resumed>ARGS) = RET``, and is placed where it
completed.  ``-y`` prints every descriptor with its path (``5</run/powercut/mnt/wal>``, also
``AT_FDCWD</cwd>``), so each call names its file; a relative path of a plain ``rename``/``mkdir``
is resolved against the process's last known working directory.

Marks are system calls too: the ``DM_TARGET_MSG`` ioctl whose message is ``mark TEXT`` (decoded
with ``-e abbrev=none``), so the trace lines up with the block log at every mark (``align``).

What a trace cannot see is named, not guessed over: stores through a shared writable mapping
(``mmap-shared``: visible only as its ``msync``) and io_uring (``io_uring``: its writes and syncs
never appear as system calls)."""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# the calls the recording traces (strace -e trace=...); ioctl for the marks, mmap/msync/io_uring to
# say what the trace cannot see, chdir/fchdir for relative paths
TRACED = (
    "open",
    "openat",
    "openat2",
    "creat",
    "write",
    "pwrite64",
    "writev",
    "pwritev",
    "pwritev2",
    "copy_file_range",
    "sendfile",
    "splice",
    "truncate",
    "ftruncate",
    "fallocate",
    "rename",
    "renameat",
    "renameat2",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "unlink",
    "unlinkat",
    "mkdir",
    "mkdirat",
    "rmdir",
    "fsync",
    "fdatasync",
    "sync_file_range",
    "syncfs",
    "sync",
    "msync",
    "mmap",
    "ioctl",
    "chdir",
    "fchdir",
    "io_uring_setup",
)

WRITE_CALLS = {
    "write": 0,
    "pwrite64": 0,
    "writev": 0,
    "pwritev": 0,
    "pwritev2": 0,
    "copy_file_range": 2,
    "sendfile": 0,
    "splice": 2,
}  # name -> the argument that is the target fd
SYNC_FLAGS = ("O_SYNC", "O_DSYNC")

# Op kinds
OPEN = "open"
WRITE = "write"
TRUNCATE = "truncate"
ALLOCATE = "allocate"
RENAME = "rename"
LINK = "link"
UNLINK = "unlink"
MKDIR = "mkdir"
RMDIR = "rmdir"
FSYNC = "fsync"
FDATASYNC = "fdatasync"
RANGE_SYNC = "sync_file_range"
SYNCFS = "syncfs"
SYNC = "sync"
MSYNC = "msync"
MMAP_SHARED = "mmap-shared"
IO_URING = "io_uring"
MARK = "mark"
CHDIR = "chdir"


@dataclass(frozen=True, slots=True)
class Call:
    """One completed system call as strace printed it."""

    line: int  # the trace line it completed on (1-based)
    pid: int
    time: float
    name: str
    args: tuple[str, ...]
    ret: str  # "0", "5</path>", "-1", "?"
    error: str = ""  # the errno name when it failed
    start: float = (
        -1.0
    )  # when it began, if strace split it (<unfinished ...>), else -1: at ``time``
    duration: float = -1.0  # seconds inside the call (strace -T), -1 if the trace does not say


@dataclass(frozen=True, slots=True)
class Op:
    """One durability-relevant operation, its paths absolute."""

    seq: int  # position in the trace (completion order)
    line: int
    pid: int
    time: float
    kind: str
    path: str = ""  # the file (for rename/link: the source)
    path2: str = ""  # rename/link/symlink: the new name
    nbytes: int = 0  # write: bytes written; truncate: the new size
    flags: tuple[str, ...] = ()  # open: its O_ flags; sync_file_range/msync: their flags
    error: str = ""
    text: str = ""  # a mark's text; otherwise the call as printed (shortened)
    start: float = -1.0  # when the call began, if another call completed while it ran; else -1
    target: str = (
        ""  # a mark: the device-mapper device it was sent to (a cluster's node: ``...-n<i>``)
    )
    duration: float = -1.0  # seconds inside the call (strace -T), -1 if the trace does not say
    held: float = 0.0  # seconds --delay-sync held it before the kernel (``start``: when the program called it)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def began(self) -> float:
        return self.time if self.start < 0 else self.start

    @property
    def sync_open(self) -> bool:
        return any(f in SYNC_FLAGS for f in self.flags)


@dataclass(slots=True)
class Trace:
    ops: list[Op] = field(default_factory=list)
    lines: int = 0
    unparsed: int = 0  # lines that are neither a call nor a signal/exit notice
    blind: list[str] = field(default_factory=list)  # what the trace could not see, said once each

    def marks(self) -> list[Op]:
        return [o for o in self.ops if o.kind == MARK]


# -- one line ---------------------------------------------------------------------------------------
_HEAD = re.compile(r"^(\d+)\s+(\d+(?:\.\d+)?)\s+(.*)$")
_RESUMED = re.compile(r"^<\.\.\. (\w+) resumed>\s?(.*)$")
_UNFINISHED = " <unfinished ...>"
_RET = re.compile(
    r"\)\s+=\s+(-?\d+(?:<(?:[^>\\]|\\.)*>)?|0x[0-9a-fA-F]+|\?)"
    r"(?:\s+([A-Z][A-Z0-9_]+)(?:\s+\(.*\))?)?(?:\s+<([\d.]+)>)?\s*$"
)


_RUN = {'"': re.compile(r'"(?:[^"\\]|\\.)*"?', re.S), ">": re.compile(r"<(?:[^>\\]|\\.)*>?", re.S)}


def _closing(text: str, i: int, close: str) -> int:
    """The index just past the ``close`` that ends the quoted run opening at ``i`` (backslash escapes
    skipped; the end of the text if it never closes)."""
    m = _RUN[close].match(text, i)
    assert m is not None  # the pattern matches its opening character at least
    return m.end()


def split_args(text: str) -> list[str]:
    """The top-level arguments of a call's argument text (quotes, brackets and ``<path>`` kept whole)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '"' or (c == "<" and cur and (cur[-1][-1:].isalnum() or cur[-1][-1:] == "_")):
            j = _closing(text, i, '"' if c == '"' else ">")
            cur.append(text[i:j])
            i = j
            continue
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        if c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    last = "".join(cur).strip()
    if last or out:
        out.append(last)
    return out


def unquote(s: str) -> str:
    """A strace string literal (``"a\\"b"...``) as text; undecodable bytes as surrogate escapes."""
    s = s.strip()
    if s.endswith("..."):
        s = s[:-3]
    if len(s) < 2 or s[0] != '"' or s[-1] != '"':
        return s
    return _unescape(s[1:-1])


def _unescape(body: str) -> str:
    out = bytearray()
    i, n = 0, len(body)
    simple = {
        "n": 10,
        "t": 9,
        "r": 13,
        "v": 11,
        "f": 12,
        "\\": 92,
        '"': 34,
        "'": 39,
        "<": 60,
        ">": 62,
    }
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 == n:
            out += c.encode()
            i += 1
            continue
        d = body[i + 1]
        if d == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", body[i + 2 : i + 4]):
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif d in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert m is not None
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        else:
            out.append(simple.get(d, ord(d) if ord(d) < 128 else 63))
            i += 2
    return out.decode("utf-8", "surrogateescape")


def fd_path(arg: str) -> str:
    """The path ``-y`` printed with a descriptor (``5</a/b>``, ``AT_FDCWD</a>``), or ""."""
    m = re.fullmatch(r"(?:-?\d+|AT_FDCWD)<(.*)>", arg.strip(), re.S)
    return _unescape(m.group(1)) if m else ""


def parse_lines(lines: Iterable[str]) -> tuple[list[Call], int, int]:
    """(calls in completion order, lines read, lines not understood)."""
    calls: list[Call] = []
    pending: dict[tuple[int, str], tuple[str, float]] = {}
    bad = n = 0
    for n, raw in enumerate(lines, 1):
        line = raw.rstrip("\n")
        m = _HEAD.match(line)
        if not m:
            bad += bool(line.strip())
            continue
        pid = int(m.group(1))
        t = float(m.group(2))
        rest = m.group(3)
        if rest.startswith(("---", "+++")):
            continue
        r = _RESUMED.match(rest)
        if r:
            name = r.group(1)
            split = pending.pop((pid, name), None)
            if split is None:
                bad += 1
                continue
            rest, began = split[0] + r.group(2), split[1]
        elif rest.endswith(_UNFINISHED):
            name = rest.split("(", 1)[0]
            pending[(pid, name)] = (rest[: -len(_UNFINISHED)], t)
            continue
        else:
            began = -1.0
        call = _call(n, pid, t, rest)
        if call is None:
            bad += 1
        else:
            calls.append(dataclasses.replace(call, start=began) if began >= 0 else call)
    return calls, n, bad


def _number(text: str) -> int:
    """An address or length as strace prints it (0x... or decimal; -1 when it is neither)."""
    try:
        return int(text.strip(), 0)
    except ValueError:
        return -1


def _mapped(maps: dict[int, tuple[int, str]], addr: int) -> str:
    """The file of the shared writable mapping that holds ``addr`` ("" when none does): an msync
    may name any page of a mapping, not only its start."""
    if addr in maps:
        return maps[addr][1]
    return next(
        (path for start, (length, path) in maps.items() if start <= addr < start + length), ""
    )


def _call(line: int, pid: int, t: float, text: str) -> Call | None:
    m = re.match(r"(\w+)\(", text)
    if not m:
        return None
    tail = _RET.search(text)
    if tail is None:
        if text.endswith("= ?"):  # the process exited inside the call
            return Call(
                line, pid, t, m.group(1), tuple(split_args(text[m.end() : text.rfind(")")])), "?"
            )
        return None
    body = text[m.end() : tail.start()]
    ret = tail.group(1)
    error = (tail.group(2) or "") if ret.startswith("-") else ""
    return Call(
        line,
        pid,
        t,
        m.group(1),
        tuple(split_args(body)),
        ret,
        error,
        duration=float(tail.group(3)) if tail.group(3) else -1.0,
    )


# -- calls -> ops ----------------------------------------------------------------------------------
_MSG = re.compile(r'message="mark ((?:[^"\\]|\\.)*)"')
_DEV = re.compile(
    r'\bname="((?:[^"\\]|\\.)*)"'
)  # the device the message is for (the header's name)


def ops_of(calls: Sequence[Call], cwd: str = "/") -> Trace:
    """The durability-relevant operations of ``calls`` (each process's working directory starts at
    ``cwd`` and follows its chdir calls and the ``AT_FDCWD<...>`` strace prints)."""
    tr = Trace()
    cwds: dict[int, str] = {}
    maps: dict[
        int, tuple[int, str]
    ] = {}  # a shared writable mapping's address -> (its length, its file)

    def here(pid: int) -> str:
        return cwds.get(pid, cwd)

    def at(pid: int, dirfd: str, name: str) -> str:
        if name.startswith("/"):
            return posixpath.normpath(name)
        base = fd_path(dirfd) or here(pid)
        return posixpath.normpath(posixpath.join(base, name))

    def blind(what: str) -> None:
        if what not in tr.blind:
            tr.blind.append(what)

    for c in calls:
        a = c.args
        name = c.name
        err = c.error
        for x in a:  # each AT_FDCWD<...> strace prints is the process's working directory then
            if x.startswith("AT_FDCWD<"):
                cwds[c.pid] = fd_path(x)
        short = f"{name}({', '.join(_short(x) for x in a)}) = {_short(c.ret)}" + (
            f" {err}" if err else ""
        )

        def op(
            kind: str,
            path: str = "",
            path2: str = "",
            nbytes: int = 0,
            flags: tuple[str, ...] = (),
            text: str = short,
            c: Call = c,
            target: str = "",
        ) -> None:
            tr.ops.append(
                Op(
                    len(tr.ops),
                    c.line,
                    c.pid,
                    c.time,
                    kind,
                    path,
                    path2,
                    nbytes,
                    flags,
                    c.error,
                    text,
                    c.start,
                    target,
                    c.duration,
                )
            )

        try:
            if name in ("open", "creat", "openat", "openat2"):
                if name == "openat2":
                    path = fd_path(c.ret) or at(c.pid, a[0], unquote(a[1]))
                    flags = tuple(re.findall(r"O_[A-Z_]+", a[2]))
                elif name == "openat":
                    path = fd_path(c.ret) or at(c.pid, a[0], unquote(a[1]))
                    flags = tuple(a[2].split("|"))
                else:
                    path = fd_path(c.ret) or at(c.pid, "", unquote(a[0]))
                    flags = (
                        ("O_WRONLY", "O_CREAT", "O_TRUNC")
                        if name == "creat"
                        else tuple(a[1].split("|"))
                    )
                op(OPEN, path, flags=flags)
            elif name in WRITE_CALLS:
                path = fd_path(a[WRITE_CALLS[name]])
                op(WRITE, path, nbytes=_int(c.ret))
            elif name in ("truncate", "ftruncate"):
                path = fd_path(a[0]) or at(c.pid, "", unquote(a[0]))
                op(TRUNCATE, path, nbytes=_int(a[1]))
            elif name == "fallocate":
                op(ALLOCATE, fd_path(a[0]), nbytes=_int(a[3]), flags=tuple(a[1].split("|")))
            elif name in ("rename", "link"):
                op(
                    RENAME if name == "rename" else LINK,
                    at(c.pid, "", unquote(a[0])),
                    at(c.pid, "", unquote(a[1])),
                )
            elif name in ("renameat", "renameat2", "linkat"):
                op(
                    LINK if name == "linkat" else RENAME,
                    at(c.pid, a[0], unquote(a[1])),
                    at(c.pid, a[2], unquote(a[3])),
                )
            elif name == "symlink":
                op(OPEN, at(c.pid, "", unquote(a[1])), flags=("O_CREAT", "symlink"))
            elif name == "symlinkat":
                op(OPEN, at(c.pid, a[1], unquote(a[2])), flags=("O_CREAT", "symlink"))
            elif name in ("unlink", "rmdir"):
                op(UNLINK if name == "unlink" else RMDIR, at(c.pid, "", unquote(a[0])))
            elif name == "unlinkat":
                op(RMDIR if "AT_REMOVEDIR" in a[2] else UNLINK, at(c.pid, a[0], unquote(a[1])))
            elif name == "mkdir":
                op(MKDIR, at(c.pid, "", unquote(a[0])))
            elif name == "mkdirat":
                op(MKDIR, at(c.pid, a[0], unquote(a[1])))
            elif name in (FSYNC, FDATASYNC, SYNCFS):
                op(name, fd_path(a[0]))
            elif name == "sync_file_range":
                op(RANGE_SYNC, fd_path(a[0]), flags=tuple(a[3].split("|")) if len(a) > 3 else ())
            elif name == "sync":
                op(SYNC)
            elif name == "mmap":
                if (
                    len(a) > 4
                    and "MAP_SHARED" in a[3]
                    and "PROT_WRITE" in a[2]
                    and fd_path(a[4])
                    and not err
                ):
                    maps[_number(c.ret)] = (_number(a[1]), fd_path(a[4]))
                    op(MMAP_SHARED, fd_path(a[4]))
                    blind(
                        f"stores through a shared mapping of {fd_path(a[4])} (mmap MAP_SHARED|PROT_WRITE): "
                        "the trace sees only its msync calls"
                    )
            elif name == "msync":
                op(
                    MSYNC,
                    _mapped(maps, _number(a[0])),
                    flags=tuple(a[2].split("|")) if len(a) > 2 else (),
                )
            elif name == "ioctl":
                m = _MSG.search(", ".join(a[2:]))
                if m and "DM_TARGET_MSG" in a[1] and not err:
                    dev = _DEV.search(a[2]) if len(a) > 2 else None
                    op(
                        MARK,
                        text=_unescape(m.group(1)),
                        target=_unescape(dev.group(1)) if dev else "",
                    )
            elif name in ("chdir", "fchdir"):
                if not err:
                    cwds[c.pid] = (
                        fd_path(a[0]) if name == "fchdir" else at(c.pid, "", unquote(a[0]))
                    )
                    op(CHDIR, cwds[c.pid])
            elif name == "io_uring_setup" and not err:
                op(IO_URING)
                blind("io_uring: its writes and syncs are not system calls the trace can see")
        except (IndexError, ValueError):
            tr.unparsed += 1
    return tr


def _int(s: str) -> int:
    m = re.match(r"-?\d+", s.strip())
    return int(m.group(0)) if m else 0


def _short(s: str, width: int = 60) -> str:
    s = s.strip()
    if s.startswith('"') and len(s) > width:
        return s[: width - 6] + '"...'
    return s if len(s) <= width + 40 else s[: width + 36] + "..."


def parse(text: str | Iterable[str], cwd: str = "/") -> Trace:
    """The Trace of strace's output (a string or its lines)."""
    lines = text.splitlines() if isinstance(text, str) else text
    calls, n, bad = parse_lines(lines)
    tr = ops_of(calls, cwd)
    tr.lines, tr.unparsed = n, tr.unparsed + bad
    return tr


# -- the trace against the block log ---------------------------------------------------------------


def align(trace: Trace, log_marks: Sequence[tuple[int, str]]) -> dict[int, int]:
    """Trace mark op seq -> the log entry index of the same mark: the k-th mark of a text in the
    trace is the k-th mark of that text in the log (the recording job's own marks -- ``mkfs``, a fault
    plan's -- are in the log only; a mark whose ioctl failed is in neither)."""
    by_text: dict[str, list[int]] = {}
    for entry, text in log_marks:
        by_text.setdefault(text, []).append(entry)
    seen: dict[str, int] = {}
    out: dict[int, int] = {}
    for o in trace.marks():
        k = seen.get(o.text, 0)
        seen[o.text] = k + 1
        entries = by_text.get(o.text, [])
        if k < len(entries):
            out[o.seq] = entries[k]
    return out

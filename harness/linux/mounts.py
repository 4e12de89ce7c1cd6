"""Mounts by system call: mount(2) with mount(8)-style option words, the one umount retry loop
(EBUSY backoff, then a lazy detach when asked), and /proc/self/mountinfo (mounts under a path,
the filesystem type of a path).  No mount/umount fork.

Runs on the host (host-mode checks, the XFS workspace, stale-run cleanup) and in the guest (the
same Python, as root).  Loop devices are loopdev's business: the ``loop`` option is refused.

Also the guest's mount table (vm-images/mounts.txt, in the initramfs as /etc/powercut/mounts):
``guest_mounts`` turns it into the mounts a guest makes under its root, exactly as init.sh's
``mount_table`` walks it; the template agent (guest/template.py) mounts those, the image builder
checks the table with ``parse_guest_table``."""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from powercut.errors import ImageError, PowercutError, UsageError

log = logging.getLogger(__name__)

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_SYNCHRONOUS = 16
MS_MANDLOCK = 64
MS_DIRSYNC = 128
MS_NOSYMFOLLOW = 256
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_SILENT = 1 << 15
MS_RELATIME = 1 << 21
MS_I_VERSION = 1 << 23
MS_STRICTATIME = 1 << 24
MS_LAZYTIME = 1 << 25
MS_BIND = 4096
MNT_DETACH = 2

# option word -> (flag, set it?) -- the words mount(8) turns into MS_* flags
FLAG_WORDS: dict[str, tuple[int, bool]] = {
    "ro": (MS_RDONLY, True),
    "rw": (MS_RDONLY, False),
    "nosuid": (MS_NOSUID, True),
    "suid": (MS_NOSUID, False),
    "nodev": (MS_NODEV, True),
    "dev": (MS_NODEV, False),
    "noexec": (MS_NOEXEC, True),
    "exec": (MS_NOEXEC, False),
    "sync": (MS_SYNCHRONOUS, True),
    "async": (MS_SYNCHRONOUS, False),
    "dirsync": (MS_DIRSYNC, True),
    "mand": (MS_MANDLOCK, True),
    "nomand": (MS_MANDLOCK, False),
    "nosymfollow": (MS_NOSYMFOLLOW, True),
    "symfollow": (MS_NOSYMFOLLOW, False),
    "noatime": (MS_NOATIME, True),
    "atime": (MS_NOATIME, False),
    "nodiratime": (MS_NODIRATIME, True),
    "diratime": (MS_NODIRATIME, False),
    "relatime": (MS_RELATIME, True),
    "norelatime": (MS_RELATIME, False),
    "strictatime": (MS_STRICTATIME, True),
    "nostrictatime": (MS_STRICTATIME, False),
    "lazytime": (MS_LAZYTIME, True),
    "nolazytime": (MS_LAZYTIME, False),
    "iversion": (MS_I_VERSION, True),
    "noiversion": (MS_I_VERSION, False),
    "silent": (MS_SILENT, True),
    "loud": (MS_SILENT, False),
    "bind": (MS_BIND, True),
}
# fstab-only words that mount(8) drops before the kernel sees them
USERSPACE_WORDS = frozenset(
    {"defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "nofail", "_netdev"}
)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
)
_libc.mount.restype = ctypes.c_int
_libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
_libc.umount2.restype = ctypes.c_int


class MountError(PowercutError):
    """mount(2) or umount(2) failed; ``errno`` says why."""

    def __init__(self, message: str, err: int = 0) -> None:
        super().__init__(message)
        self.errno = err


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of /proc/self/mountinfo (paths unescaped)."""

    mount_id: int
    parent_id: int
    dev: str  # major:minor of the filesystem
    root: str
    target: str
    options: str  # per-mount options
    fstype: str
    source: str
    super_options: str


def split_options(options: str) -> list[str]:
    """Comma-separated words; a double-quoted value may hold commas (``context="a,b"``)."""
    words: list[str] = []
    cur: list[str] = []
    quoted = False
    for ch in options:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            words.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    words.append("".join(cur))
    return [w.strip() for w in words if w.strip()]


def parse_options(options: str, *, readonly: bool = False) -> tuple[int, str]:
    """mount(8) option words -> (MS_* flags, data string for the filesystem): ``ro,noatime,nouuid``
    -> (MS_RDONLY|MS_NOATIME, "nouuid").  Later words win (``ro,rw`` is read-write)."""
    flags = MS_RDONLY if readonly else 0
    data: list[str] = []
    for word in split_options(options):
        if word in FLAG_WORDS:
            bit, on = FLAG_WORDS[word]
            flags = flags | bit if on else flags & ~bit
        elif word == "loop" or word.startswith("loop="):
            raise UsageError(
                f"mount option {word!r} is mount(8)'s: attach a loop device (powercut.loopdev) "
                "and mount that"
            )
        elif word in USERSPACE_WORDS or word.startswith(("x-", "comment=")):
            continue
        else:
            data.append(word)
    return flags, ",".join(data)


def mount(
    device: str | os.PathLike[str],
    target: str | os.PathLike[str],
    fstype: str,
    options: str = "",
    *,
    readonly: bool = False,
) -> None:
    """mount(2) ``device`` as ``fstype`` on ``target``; MountError names all four and the reason."""
    flags, data = parse_options(options, readonly=readonly)
    dev, tgt = os.fspath(device), os.fspath(target)
    if _libc.mount(
        os.fsencode(dev), os.fsencode(tgt), fstype.encode(), flags, data.encode() if data else None
    ):
        err = ctypes.get_errno()
        shown = ",".join(filter(None, ["ro" if readonly else "", options]))
        opts = f" (-o {shown})" if shown else ""
        raise MountError(f"mount(2) of {dev} as {fstype} on {tgt}{opts}: {os.strerror(err)}", err)
    log.debug("mounted %s (%s) on %s flags=%#x data=%r", dev, fstype, tgt, flags, data)


def umount(
    target: str | os.PathLike[str],
    *,
    attempts: int = 5,
    lazy_fallback: bool = True,
    missing_ok: bool = False,
) -> str:
    """umount(2) ``target``: EBUSY is retried ``attempts`` times with backoff (0.1 s doubling, at
    most 1 s), then, with ``lazy_fallback``, detached lazily (MNT_DETACH: gone from the namespace,
    torn down when its last user leaves).  Returns "unmounted", "detached", or -- only with
    ``missing_ok`` -- "not-mounted".  Never use the lazy fallback where the device must be free
    right after (a recording removing its dm target)."""
    tgt = os.fspath(target)
    raw = os.fsencode(tgt)
    for attempt in range(max(1, attempts)):
        if _libc.umount2(raw, 0) == 0:
            return "unmounted"
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT) and missing_ok:
            return "not-mounted"
        if err != errno.EBUSY:
            raise MountError(f"umount(2) of {tgt}: {os.strerror(err)}", err)
        if attempt + 1 < attempts:
            time.sleep(min(0.1 * 2**attempt, 1.0))
    if not lazy_fallback:
        raise MountError(
            f"umount(2) of {tgt}: {os.strerror(errno.EBUSY)} (after {attempts} attempts)",
            errno.EBUSY,
        )
    if _libc.umount2(raw, MNT_DETACH) == 0:
        log.warning("%s was busy: detached lazily", tgt)
        return "detached"
    err = ctypes.get_errno()
    raise MountError(
        f"umount(2) of {tgt} (lazy, after {attempts} busy attempts): {os.strerror(err)}", err
    )


# -- /proc/self/mountinfo ----------------------------------------------------------------------------------
_ESCAPE = re.compile(rb"\\([0-7]{3})")


def unescape(raw: bytes) -> str:
    r"""mountinfo's octal escapes (``\040`` space, ``\011`` tab, ``\012`` newline, ``\134`` backslash)."""
    return os.fsdecode(_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8) & 0xFF]), raw))


def parse_mountinfo(data: bytes) -> list[Mount]:
    """Every well-formed line of a mountinfo file, in order (later lines stack on earlier ones)."""
    out = []
    for line in data.splitlines():
        f = line.split(b" ")
        try:
            sep = f.index(b"-", 6)
            out.append(
                Mount(
                    int(f[0]),
                    int(f[1]),
                    f[2].decode(),
                    unescape(f[3]),
                    unescape(f[4]),
                    f[5].decode(),
                    unescape(f[sep + 1]),
                    unescape(f[sep + 2]),
                    f[sep + 3].decode(errors="replace") if len(f) > sep + 3 else "",
                )
            )
        except (ValueError, IndexError):
            log.debug("unparsable mountinfo line %r", line)
    return out


def mountinfo() -> list[Mount]:
    with open("/proc/self/mountinfo", "rb") as f:
        return parse_mountinfo(f.read())


def _inside(p: str, top: str) -> bool:
    return top == "/" or p == top or p.startswith(top + "/")


def mounts_under(path: str | os.PathLike[str], table: list[Mount] | None = None) -> list[Mount]:
    """The mounts at or below ``path``, deepest first (and, on one target, the last stacked first):
    the order to unmount them in."""
    top = os.path.realpath(path)
    rows = list(enumerate(table if table is not None else mountinfo()))
    hits = [(i, m) for i, m in rows if _inside(m.target, top)]
    hits.sort(key=lambda im: (len([c for c in im[1].target.split("/") if c]), im[0]), reverse=True)
    return [m for _, m in hits]


def fs_type(path: str | os.PathLike[str]) -> str:
    """Filesystem type of the mount holding ``path`` (the innermost one; '?' if unknown)."""
    try:
        top = os.path.realpath(path)
        holders = [m for m in mountinfo() if _inside(top, m.target)]
    except OSError:
        return "?"
    if not holders:
        return "?"
    return max(enumerate(holders), key=lambda im: (len(im[1].target), im[0]))[1].fstype


# -- the guest's mount table (vm-images/mounts.txt; init.sh walks it in busybox sh) -------------------------
GUEST_WHEN = ("always", "keep", "kept", "share", "if-dir")


@dataclass(frozen=True, slots=True)
class TableRow:
    """One line of the guest's mount table, as written (its header says what each word means)."""

    when: str
    source: str
    target: str
    fstype: str
    options: str


@dataclass(frozen=True, slots=True)
class GuestMount:
    """One step of the guest's mounts under its root: ``fstype`` "" only makes the directory
    ``target``; ``optional``: only if ``target`` is a directory already, a failure ignored."""

    source: str
    target: str
    fstype: str
    options: str
    optional: bool = False


def parse_guest_table(text: str) -> tuple[str, tuple[TableRow, ...]]:
    """(the 9p options, the rows in order); ImageError names a bad line."""
    ninep = ""
    rows: list[TableRow] = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] == "9p-options" and len(words) == 2 and not rows:
            ninep = words[1]
            continue
        if len(words) != 5 or words[0] not in GUEST_WHEN:
            raise ImageError(
                f"mount table line {n}: {line.strip()!r} is not 'WHEN SOURCE TARGET FSTYPE OPTIONS' "
                f"(WHEN one of {', '.join(GUEST_WHEN)}; '9p-options OPTIONS' before any mount)"
            )
        row = TableRow(*words)
        if not row.target.startswith("/") or (row.fstype == "9p" and not ninep):
            raise ImageError(
                f"mount table line {n}: the target must be absolute, and a 9p share comes after "
                "the 9p-options line"
            )
        rows.append(row)
    return ninep, tuple(rows)


def _fill(word: str, item: str) -> str:
    head, pct, tail = word.partition("%")
    return head + item + tail if pct else word


def guest_mounts(text: str, root: str, args: Mapping[str, str]) -> list[GuestMount]:
    """The table ``text`` as the mounts under ``root`` for the kernel command line's ``powercut.*``
    words ``args`` (transport, keep, mount): what init.sh's ``mount_table`` does, step by step."""
    ninep, rows = parse_guest_table(text)
    virtiofs = args.get("powercut.transport") == "virtiofs"
    kept = [
        p[len("/tmp") :] for p in args.get("powercut.keep", "").split(",") if p.startswith("/tmp/")
    ]
    shares = [t for t in args.get("powercut.mount", "").split(",") if t]
    out: list[GuestMount] = []
    for row in rows:
        items = {"kept": kept, "share": shares, "keep": ["-"] if kept else []}.get(row.when, ["-"])
        for item in items:
            src, dst = _fill(row.source, item), (root + _fill(row.target, item)).removesuffix("/")
            opts = "" if row.options == "-" else row.options
            fstype = row.fstype
            if fstype == "9p" and virtiofs:
                fstype, opts = "virtiofs", "ro" if "ro" in opts.split(",") else ""
            elif fstype == "9p":
                opts = ",".join(filter(None, [ninep, opts]))
            elif fstype == "bind":
                src = root + src
                fstype = "none"
                opts = ",".join(filter(None, ["bind", opts]))
            elif fstype == "dir":
                src = fstype = opts = ""
            out.append(GuestMount(src, dst, fstype, opts, row.when == "if-dir"))
    return out

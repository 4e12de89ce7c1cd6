"""The guest agent's runtime as files (host side): the Python interpreter, the libraries it maps and
the modules the template agent imports, asked of this very Python (a probe in a child process, in
the guest's environment), then written as a cpio archive under ``pcroot/`` that the host appends
to the image's initramfs for a checker VM's template (check/template.py, guest/template.py).

Each file keeps its host path, so imports, ``sys.executable`` and the dynamic loader find the same
names in the template's root as in the host root it chroots into once restored.  A symbolic link
on the way (``/lib64``, ``bin/python``) is kept as the link, and its target added too."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import sys
from dataclasses import dataclass

from powercut.errors import EnvironmentNotReady, PowercutError
from powercut.images.cpio import CpioWriter
from powercut.linux import process

PREFIX = "pcroot"
ALWAYS = ("/etc/ld.so.cache",)

PROBE = r"""
import importlib, json, os, sys
for name in {preload!r}:
    importlib.import_module(name)
files = set()
for m in list(sys.modules.values()):
    spec = getattr(m, "__spec__", None)
    for f in (getattr(spec, "origin", None), getattr(spec, "cached", None)):
        if isinstance(f, str) and os.path.isabs(f) and os.path.isfile(f):
            files.add(f)
with open("/proc/self/maps") as fh:
    for line in fh:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and os.path.isfile(parts[5].rstrip("\n")):
            files.add(parts[5].rstrip("\n"))
landmark = os.path.join(getattr(sys, "_stdlib_dir", None) or os.path.dirname(os.__file__), "os.py")
if os.path.isfile(landmark):   # how Python finds its prefix (os itself is a frozen module)
    files.add(landmark)
dirs = [p for p in sys.path if os.path.isdir(p)]
print(json.dumps({{"files": sorted(files), "dirs": dirs, "executable": sys.executable}}))
"""


@dataclass(frozen=True, slots=True)
class Runtime:
    executable: str
    files: tuple[str, ...]  # absolute host paths, as the agent refers to them
    dirs: tuple[str, ...]  # sys.path directories (they must exist for the import system)
    boot: str  # the template's boot.py

    def key(self) -> str:
        """Changes whenever a file of the runtime does (path, size, mtime) or the boot script."""
        h = hashlib.sha256(self.boot.encode())
        for p in (self.executable, *self.files, *ALWAYS):
            try:
                st = os.stat(p)
            except OSError:
                continue
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        for d in self.dirs:
            h.update(f"{d}\n".encode())
        return h.hexdigest()[:16]


def elf_interpreter(path: str) -> str | None:
    """The dynamic loader an ELF executable names (PT_INTERP), None for a static or non-ELF file."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            end = "<" if head[5] == 1 else ">"
            (phoff,) = struct.unpack(end + "Q", head[32:40])
            phentsize, phnum = struct.unpack(end + "HH", head[54:58])
            for i in range(phnum):
                f.seek(phoff + i * phentsize)
                (ptype,) = struct.unpack(end + "I", f.read(4))
                if ptype == 3:
                    f.seek(phoff + i * phentsize + 8)
                    (off,) = struct.unpack(end + "Q", f.read(8))
                    f.seek(phoff + i * phentsize + 32)
                    (size,) = struct.unpack(end + "Q", f.read(8))
                    f.seek(off)
                    return f.read(size).rstrip(b"\0").decode()
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    return None


def probe(
    preload: tuple[str, ...], boot: str, env: dict[str, str], extra: tuple[str, ...] = ()
) -> Runtime:
    """What the template agent needs, asked of this Python started as the guest starts it: ``boot``
    (the template's boot.py) up to its ``bind()`` (its finder and site paths), in environment
    ``env``, then importing ``preload``.  ``extra``: more files to take (packages' ``__init__``)."""
    bootstrap = boot.split("if not bind():")[0] + "bind()\n"
    try:
        out = process.run(
            [sys.executable, "-S", "-c", bootstrap + PROBE.format(preload=preload)],
            env=env,
            timeout=120,
            cwd="/",
        ).stdout
        found = json.loads(out)
    except (PowercutError, ValueError) as e:
        raise EnvironmentNotReady(
            f"cannot list the guest agent's files with {sys.executable}: {e}"
        ) from None
    files = set(found["files"]) | set(extra)
    interp = elf_interpreter(os.path.realpath(found["executable"]))
    if interp:
        files.add(interp)
    files |= aliases(files)
    return Runtime(found["executable"], tuple(sorted(files)), tuple(found["dirs"]), boot)


def aliases(files: set[str]) -> set[str]:
    """The symbolic links the dynamic loader looks libraries up by (``libffi.so.8`` for the mapped
    ``libffi.so.8.1.2``) in the mapped libraries' directories, and the root's links (``/lib`` on a
    merged /usr, through which ld.so.cache names them)."""
    real = {os.path.realpath(f) for f in files}
    out: set[str] = set()
    for d in sorted({os.path.dirname(f) for f in files if ".so" in os.path.basename(f)} | {"/"}):
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_symlink() and (d == "/" or os.path.realpath(e.path) in real):
                out.add(e.path)
    return out


class _Tree:
    """Host paths into the archive under PREFIX, every directory before its entries and every
    symbolic link on the way kept as a link."""

    def __init__(self, w: CpioWriter) -> None:
        self.w = w
        self.seen: set[str] = set()
        w.dir(PREFIX)

    def put(self, path: str) -> None:
        path = os.path.normpath(path)
        if path in self.seen or path == "/":
            return
        self.seen.add(path)
        parent, name = os.path.split(path)
        if parent != "/":
            self.put(parent)
            parent = os.path.realpath(parent)
        real = os.path.join(parent, name)
        if real != path:
            self.put(real)
            return
        st = os.lstat(real)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(real)
            self.w.symlink(PREFIX + real, target)
            self.put(os.path.join(parent, target))
        elif stat.S_ISDIR(st.st_mode):
            self.w.dir(PREFIX + real, stat.S_IMODE(st.st_mode))
        elif stat.S_ISREG(st.st_mode):
            with open(real, "rb") as f:
                self.w.file(PREFIX + real, f.read(), stat.S_IMODE(st.st_mode), int(st.st_mtime))


def write_archive(rt: Runtime, out) -> None:  # out: a binary file
    """The runtime as a newc cpio archive (to be appended to the image's initramfs)."""
    w = CpioWriter(out)
    tree = _Tree(w)
    for p in (rt.executable, *rt.files, *ALWAYS, *rt.dirs):
        if os.path.lexists(p):
            tree.put(p)
    for d in ("proc", "sys", "dev", "tmp", "run", ".powercut/host"):
        w.dir(f"{PREFIX}/{d}")
    w.file(f"{PREFIX}/.powercut/boot.py", rt.boot.encode())
    w.file(f"{PREFIX}/.powercut/python", rt.executable.encode())
    w.close()

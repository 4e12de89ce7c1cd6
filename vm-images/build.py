"""Build and cache the default guest: a Debian kernel package plus an initramfs with busybox, exactly
the modules listed in modules.txt (dependencies resolved through modules.dep), init.sh and the mount
table it walks (mounts.txt, checked here, as /etc/powercut/mounts).

Images are cached by content hash under ``<cache>/images/<hash>/``; kernel packages are fetched with
``apt-get download`` and unpacked with ``dpkg-deb -x`` under ``<cache>/kernels/<package>/``."""

from __future__ import annotations

import functools
import hashlib
import logging
import lzma
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from powercut.config import cache_root, dumps_toml, loads_toml
from powercut.core.recording.syncdelay import SUPERVISOR
from powercut.errors import CommandFailed, EnvironmentNotReady, ImageError, UsageError
from powercut.images.cpio import CpioWriter
from powercut.linux import process
from powercut.linux.mounts import parse_guest_table

log = logging.getLogger(__name__)

BUILDER_VERSION = "3"
META_PACKAGE = "linux-image-amd64"


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """What to build.  ``kernel_package`` pins a Debian kernel package (e.g. linux-image-6.1.0-56-amd64);
    empty means the one ``linux-image-amd64`` resolves to.  ``kernel`` + ``modules_dir`` (a
    lib/modules/<release> directory with modules.dep) use a kernel of the user's own instead."""

    kernel_package: str = ""
    kernel: str = ""
    modules_dir: str = ""
    busybox: str = "/bin/busybox"
    extra_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if bool(self.kernel) != bool(self.modules_dir):
            raise UsageError(
                "--kernel and --modules go together (a kernel image and its lib/modules/<release>)"
            )
        if self.kernel and self.kernel_package:
            raise UsageError("give either --kernel-package or --kernel/--modules, not both")


@dataclass(frozen=True, slots=True)
class Image:
    dir: str
    kernel: str
    initrd: str
    kernel_release: str
    source: str
    modules: tuple[str, ...]
    hash: str
    initrd_bytes: int = 0
    built_at: str = ""
    extra: dict = field(default_factory=dict)

    def info(self) -> dict:
        return {
            "hash": self.hash,
            "dir": self.dir,
            "kernel": self.kernel,
            "initrd": self.initrd,
            "kernel_release": self.kernel_release,
            "source": self.source,
            "initrd_bytes": self.initrd_bytes,
            "built_at": self.built_at,
            "modules": list(self.modules),
        }


# ---------------------------------------------------------------- kernel packages


@functools.cache
def resolve_kernel_package() -> str:
    """The versioned package the meta package linux-image-amd64 depends on (asked once per process:
    ``apt-cache depends`` takes ~0.7 s, and every recording, check and bench VM of a run asks; an
    error is not remembered)."""
    try:
        out = process.run(["apt-cache", "depends", META_PACKAGE], timeout=60).stdout
    except (CommandFailed, EnvironmentNotReady) as e:
        cached = sorted((cache_root() / "kernels").glob("linux-image-*"))
        if cached:
            log.warning("apt-cache failed (%s); using cached %s", e, cached[-1].name)
            return cached[-1].name
        raise EnvironmentNotReady(
            f"cannot resolve {META_PACKAGE} with apt-cache ({e}); "
            "run 'apt-get update' or give --kernel-package"
        ) from None
    m = re.search(r"Depends:\s*(linux-image-[0-9][^\s]*)", out)
    if not m:
        raise EnvironmentNotReady(
            f"apt-cache depends {META_PACKAGE} names no kernel package; run 'apt-get update'"
        )
    return m.group(1)


def fetch_kernel_package(package: str) -> Path:
    """Download and unpack ``package`` once; returns the unpacked root."""
    if not re.fullmatch(r"linux-image-[A-Za-z0-9.+~_-]+", package):
        raise UsageError(f"not a kernel package name: {package!r}")
    dest = cache_root() / "kernels" / package
    if (dest / ".complete").exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        log.info("downloading %s", package)
        try:
            process.run(["apt-get", "download", package], timeout=900, cwd=tmp)
        except CommandFailed as e:
            raise EnvironmentNotReady(
                f"cannot download {package} with apt-get ({e.one_line()}); "
                "run 'apt-get update' or pin another --kernel-package"
            ) from None
        debs = list(Path(tmp).glob("*.deb"))
        if not debs:
            raise EnvironmentNotReady(f"apt-get download {package} produced no .deb")
        root = Path(tmp) / "root"
        process.run(["dpkg-deb", "-x", str(debs[0]), str(root)], timeout=300)
        (root / "package").write_text(package + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        root.rename(dest)
    (dest / ".complete").touch()
    return dest


def _package_kernel_and_modules(root: Path) -> tuple[Path, Path]:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise ImageError(f"{root}: the kernel package has no boot/vmlinuz-*")
    release = kernels[-1].name[len("vmlinuz-") :]
    for base in (root / "lib" / "modules", root / "usr" / "lib" / "modules"):
        if (base / release).is_dir():
            moddir = base / release
            break
    else:
        raise ImageError(f"{root}: no lib/modules/{release} in the kernel package")
    if not (moddir / "modules.dep").exists():
        process.run(["depmod", "-b", str(root), release], timeout=300)
        if not (moddir / "modules.dep").exists():
            raise ImageError(f"depmod wrote no modules.dep for {moddir}")
    return kernels[-1], moddir


# ---------------------------------------------------------------- module resolution


def _norm(name: str) -> str:
    return re.sub(r"\.ko(\.(xz|zst|gz))?$", "", os.path.basename(name)).replace("-", "_")


def wanted_modules(extra: tuple[str, ...] = ()) -> list[tuple[str, bool, str]]:
    """(name, optional, group) from modules.txt, plus ``extra`` (required, always loaded);
    group '*' means always loaded."""
    text = resources.files("powercut.images").joinpath("modules.txt").read_text()
    out = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            group = next((w[1:] for w in words[1:] if w.startswith("@")), "*")
            out.append((words[0].lstrip("?"), words[0].startswith("?"), group))
    return out + [(m, False, "*") for m in extra]


def resolve_modules(
    modules_dep: str, builtin: str, wanted: list[tuple[str, bool, str]]
) -> list[tuple[str, bool, str]]:
    """(relative module path, optional, groups) in load order: each module after its dependencies,
    once.  ``groups`` is '*' when an always-loaded module needs it, else the comma-joined groups of
    the modules that need it.  A wanted module built into the kernel is skipped; one neither built
    in nor in modules.dep raises ImageError naming it, unless it is optional."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        if ":" not in line:
            continue
        mod, rest = line.split(":", 1)
        deps[mod.strip()] = rest.split()
        by_name[_norm(mod)] = mod.strip()
    builtins = {_norm(line) for line in builtin.split()}
    order: list[str] = []
    optional: dict[str, bool] = {}
    groups: dict[str, set[str]] = {}

    def visit(path: str, opt: bool, group: str, stack: tuple[str, ...]) -> None:
        if path in stack:
            raise ImageError(f"module dependency cycle: {' -> '.join(stack + (path,))}")
        groups.setdefault(path, set()).add(group)
        optional[path] = optional.get(path, True) and opt
        for dep in deps.get(path, []):
            visit(dep, opt, group, stack + (path,))
        if path not in order:
            order.append(path)

    missing = []
    for name, opt, group in wanted:
        key = _norm(name)
        if key in by_name:
            visit(by_name[key], opt, group, ())
        elif key in builtins:
            continue
        elif not opt:
            missing.append(name)
    if missing:
        raise ImageError(
            f"kernel module{'s' if len(missing) > 1 else ''} not found in this kernel: "
            f"{', '.join(missing)} (neither in modules.dep nor built in)"
        )
    return [
        (p, optional[p], "*" if "*" in groups[p] else ",".join(sorted(groups[p]))) for p in order
    ]


def _read_module(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".zst"):
        return process.run(["zstd", "-dc", str(path)], timeout=60, text=False).stdout  # type: ignore[return-value]
    if path.name.endswith(".gz"):
        import gzip

        return gzip.decompress(data)
    return data


# ---------------------------------------------------------------- kernel image

XEN_ELFNOTE_PHYS32_ENTRY = 18


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The uncompressed ELF vmlinux inside a bzImage, if it carries a PVH entry note.

    QEMU boots such an ELF directly (PVH), skipping the real-mode setup and the in-guest
    decompression -- under TCG that decompression alone takes seconds.  None when the payload's
    compression is not one we can undo here or the ELF has no PVH note (then boot the bzImage)."""
    import gzip
    import zlib

    for magic, kind in (
        (b"\xfd7zXZ\x00", "xz"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\x1f\x8b\x08", "gzip"),
    ):
        start = bzimage.find(magic)
        while start != -1:
            try:
                if kind == "xz":
                    out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(bzimage[start:])
                elif kind == "gzip":
                    out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(bzimage[start:])
                else:
                    out = _zstd(bzimage[start:])
            except (
                lzma.LZMAError,
                zlib.error,
                gzip.BadGzipFile,
                CommandFailed,
                EnvironmentNotReady,
            ):
                out = b""
            if out[:4] == b"\x7fELF":
                return out if _has_pvh_note(out) else None
            start = bzimage.find(magic, start + 1)
    return None


def _zstd(data: bytes) -> bytes:
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        return process.run(["zstd", "-dcq", f.name], timeout=120, check=False, text=False).stdout  # type: ignore[return-value]


def _has_pvh_note(elf: bytes) -> bool:
    """Does this 64-bit little-endian ELF carry a Xen PHYS32_ENTRY note (the PVH entry point)?"""
    import struct

    if elf[4] != 2 or elf[5] != 1:
        return False
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        ptype, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if ptype != 4:  # PT_NOTE
            continue
        pos, end = offset, offset + filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12 : pos + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and ntype == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + ((namesz + 3) & ~3) + ((descsz + 3) & ~3)
    return False


# ---------------------------------------------------------------- building


@dataclass(frozen=True, slots=True)
class _Inputs:
    """Everything an image is built from, and the content hash that names it in the cache."""

    kernel: Path
    release: str
    source: str
    busybox: bytes
    init: bytes
    mount_table: bytes
    mark_src: bytes
    hold_src: bytes  # the --delay-sync supervisor (powercut_holdsync.c)
    modules: list[tuple[str, bool, str, bytes]]
    digest: str


def _inputs(spec: ImageSpec, fetch: bool = True) -> _Inputs | None:
    """The image's inputs; None when ``fetch`` is False and its kernel package is not downloaded yet."""
    if spec.kernel:
        kernel, moddir = Path(spec.kernel), Path(spec.modules_dir)
        if not kernel.is_file():
            raise UsageError(f"--kernel {kernel}: no such file")
        if not (moddir / "modules.dep").is_file():
            raise UsageError(
                f"--modules {moddir}: no modules.dep there (run depmod for that kernel)"
            )
        source = f"kernel {kernel}, modules {moddir}"
    else:
        package = spec.kernel_package or resolve_kernel_package()
        if not fetch and not (cache_root() / "kernels" / package / ".complete").exists():
            return None
        kernel, moddir = _package_kernel_and_modules(fetch_kernel_package(package))
        source = f"Debian package {package}"
    release = moddir.name
    busybox = Path(spec.busybox)
    if not busybox.is_file():
        raise EnvironmentNotReady(
            f"{busybox} not found (install the Debian package busybox-static: powercut setup)"
        )
    wanted = wanted_modules(spec.extra_modules)
    builtin = (
        (moddir / "modules.builtin").read_text() if (moddir / "modules.builtin").exists() else ""
    )
    order = resolve_modules((moddir / "modules.dep").read_text(), builtin, wanted)
    init = resources.files("powercut.images").joinpath("init.sh").read_bytes()
    mount_table = resources.files("powercut.images").joinpath("mounts.txt").read_bytes()
    parse_guest_table(
        mount_table.decode()
    )  # a bad line is an ImageError naming it, not a guest that stops
    mark_src = resources.files("powercut.images").joinpath("powercut_mark.c").read_bytes()
    hold_src = resources.files("powercut.images").joinpath("powercut_holdsync.c").read_bytes()
    busybox_bytes = busybox.read_bytes()

    h = hashlib.sha256(BUILDER_VERSION.encode())
    for part in (kernel.read_bytes(), init, busybox_bytes, mark_src, mount_table, hold_src):
        h.update(hashlib.sha256(part).digest())
    modules = [(rel, opt, group, _read_module(moddir / rel)) for rel, opt, group in order]
    for rel, opt, group, data in modules:
        h.update(f"{rel}:{opt}:{group}:".encode() + hashlib.sha256(data).digest())
    return _Inputs(
        kernel,
        release,
        source,
        busybox_bytes,
        init,
        mount_table,
        mark_src,
        hold_src,
        modules,
        h.hexdigest()[:16],
    )


def find_image(spec: ImageSpec = ImageSpec()) -> Image | None:
    """The image ``build_image(spec)`` would return, if it is built already (nothing is fetched or
    built; the kernel package is still resolved with apt-cache)."""
    inputs = _inputs(spec, fetch=False)
    if inputs is None:
        return None
    out = cache_root() / "images" / inputs.digest
    return load_image(out) if (out / "image.toml").exists() else None


def build_image(spec: ImageSpec = ImageSpec(), force: bool = False) -> Image:
    inputs = _inputs(spec)
    assert inputs is not None
    kernel = inputs.kernel
    release = inputs.release
    source = inputs.source
    modules = inputs.modules
    digest = inputs.digest
    init = inputs.init
    mount_table = inputs.mount_table
    mark_src = inputs.mark_src
    out = cache_root() / "images" / digest
    if (out / "image.toml").exists() and not force:
        return load_image(out)

    tmp = Path(
        tempfile.mkdtemp(
            prefix=".build-", dir=out.parent if out.parent.exists() else _mk(out.parent)
        )
    )
    try:
        shutil.copyfile(kernel, tmp / "vmlinuz")
        vmlinux = extract_vmlinux(kernel.read_bytes())
        if vmlinux:
            (tmp / "vmlinux").write_bytes(vmlinux)
        with open(tmp / "initrd.cpio", "wb") as f:
            w = CpioWriter(f)
            for d in (
                "bin",
                "sbin",
                "dev",
                "proc",
                "sys",
                "tmp",
                "newroot",
                "etc",
                "etc/powercut",
                "lib",
                f"lib/modules/{release}",
            ):
                w.dir(d)
            w.chardev("dev/console", 5, 1)
            w.chardev("dev/null", 1, 3)
            w.file("init", init, mode=0o755)
            w.file("bin/busybox", inputs.busybox, mode=0o755)
            listing = []
            for rel, opt, group, data in modules:
                target = f"lib/modules/{release}/" + re.sub(r"\.(xz|zst|gz)$", "", rel)
                w.file(target, data, mode=0o644)
                listing.append(f"/{target} {group}" + (" optional" if opt else ""))
            w.file("etc/powercut/modules", ("\n".join(listing) + "\n").encode())
            w.file("etc/powercut/release", f"{release}\n".encode())
            w.file("etc/powercut/mounts", mount_table)
            w.close()
        _build_mark_tool(mark_src, tmp / "bin")
        _build_supervisor(inputs.hold_src, tmp / "bin")
        boot = "vmlinux" if vmlinux else "vmlinuz"
        image = Image(
            dir=str(out),
            kernel=str(out / boot),
            initrd=str(out / "initrd.cpio"),
            kernel_release=release,
            source=source,
            modules=tuple(_norm(r) for r, _, _, _ in modules),
            hash=digest,
            initrd_bytes=(tmp / "initrd.cpio").stat().st_size,
            built_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        )
        (tmp / "image.toml").write_text(dumps_toml({"image": image.info()}))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return load_image(out)


def _build_mark_tool(source: bytes, bindir: Path) -> None:
    """Compile the C powercut-mark (one ioctl, no interpreter start-up: ~1000x cheaper than the
    Python entry point in a TCG guest).  Without a C compiler the Python fallback is used."""
    bindir.mkdir()
    src = bindir / "powercut_mark.c"
    src.write_bytes(source)
    try:
        process.run(["cc", "-O2", "-o", str(bindir / "powercut-mark"), str(src)], timeout=120)
    except (CommandFailed, EnvironmentNotReady) as e:
        log.warning(
            "cannot compile the C powercut-mark (%s); workloads use the slower Python one",
            e.one_line(),
        )
    src.unlink()


def _build_supervisor(source: bytes, bindir: Path) -> None:
    """Compile the --delay-sync supervisor (core/recording/syncdelay.py), which runs the workload and holds its
    syncs.  Without a C compiler there is none, and a recording that asks for --delay-sync is refused."""
    src = bindir / "powercut_holdsync.c"
    src.write_bytes(source)
    try:
        process.run(["cc", "-O2", "-o", str(bindir / SUPERVISOR), str(src)], timeout=120)
    except (CommandFailed, EnvironmentNotReady) as e:
        log.warning(
            "cannot compile the --delay-sync supervisor (%s): recordings cannot hold one file's syncs",
            e.one_line(),
        )
    src.unlink()


def tools_dir(image: "Image") -> str | None:
    """Directory of guest-side tools built with the image (put first on the workload's PATH)."""
    d = Path(image.dir) / "bin"
    return str(d) if (d / "powercut-mark").exists() else None


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def load_image(path: Path | str) -> Image:
    path = Path(path)
    meta = path / "image.toml"
    if not meta.is_file():
        raise ImageError(
            f"{path}: not a powercut image (no image.toml); run 'powercut image build'"
        )
    d = loads_toml(meta.read_text(), str(meta))["image"]
    boot = "vmlinux" if (path / "vmlinux").exists() else "vmlinuz"
    return Image(
        dir=str(path),
        kernel=str(path / boot),
        initrd=str(path / "initrd.cpio"),
        kernel_release=d["kernel_release"],
        source=d["source"],
        modules=tuple(d["modules"]),
        hash=d["hash"],
        initrd_bytes=d.get("initrd_bytes", 0),
        built_at=d.get("built_at", ""),
    )

"""Guest image builder: module resolution through modules.dep, cpio layout, vmlinux extraction."""

from __future__ import annotations

import io
import lzma
import struct
import subprocess
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest

from powercut.errors import ImageError, UsageError
from powercut.images import build
from powercut.images.build import (
    ImageSpec,
    _has_pvh_note,
    extract_vmlinux,
    resolve_modules,
    wanted_modules,
)
from powercut.images.cpio import CpioWriter
from powercut.linux import process

DEP = """kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/drivers/md/dm-mod.ko:
kernel/drivers/md/dm-log-writes.ko: kernel/drivers/md/dm-mod.ko
kernel/fs/xfs/xfs.ko: kernel/lib/libcrc32c.ko
kernel/fs/btrfs/btrfs.ko: kernel/lib/libcrc32c.ko kernel/lib/raid6/raid6_pq.ko
kernel/lib/libcrc32c.ko:
kernel/lib/raid6/raid6_pq.ko:
"""


def test_dependencies_load_first_once_with_groups() -> None:
    order = resolve_modules(
        DEP,
        "",
        [
            ("dm-log-writes", False, "*"),
            ("ext4", False, "ext4"),
            ("xfs", False, "xfs"),
            ("btrfs", False, "btrfs"),
        ],
    )
    paths = [p for p, _, _ in order]
    assert paths.index("kernel/drivers/md/dm-mod.ko") < paths.index(
        "kernel/drivers/md/dm-log-writes.ko"
    )
    assert paths.index("kernel/fs/jbd2/jbd2.ko") < paths.index("kernel/fs/ext4/ext4.ko")
    assert len(paths) == len(set(paths))
    groups = {p: g for p, _, g in order}
    assert groups["kernel/lib/libcrc32c.ko"] == "btrfs,xfs"  # shared dependency: needed by either
    assert groups["kernel/drivers/md/dm-mod.ko"] == "*"
    assert groups["kernel/lib/raid6/raid6_pq.ko"] == "btrfs"


def test_missing_module_is_named() -> None:
    dep = "\n".join(line for line in DEP.splitlines() if "log-writes" not in line)
    with pytest.raises(ImageError, match="dm-log-writes"):
        resolve_modules(dep, "", [("dm-log-writes", False, "*")])


def test_optional_and_builtin_modules_are_skipped() -> None:
    order = resolve_modules(
        DEP,
        "kernel/drivers/virtio/virtio_blk.ko\n",
        [("virtio_blk", False, "*"), ("crc32c-intel", True, "*"), ("dm_mod", False, "*")],
    )
    assert [p for p, _, _ in order] == ["kernel/drivers/md/dm-mod.ko"]


def test_dependency_cycle_is_an_error() -> None:
    with pytest.raises(ImageError, match="cycle"):
        resolve_modules("a.ko: b.ko\nb.ko: a.ko\n", "", [("a", False, "*")])


def test_modules_txt_names_what_powercut_needs() -> None:
    names = {n for n, _, _ in wanted_modules()}
    for needed in (
        "dm-mod",
        "dm-log-writes",
        "dm-snapshot",
        "brd",
        "ext4",
        "xfs",
        "btrfs",
        "9p",
        "virtiofs",
        "virtio_blk",
        "ahci",
        "sd_mod",
        "crc32c_generic",
    ):
        assert needed in names


def test_cpio_creates_parents_before_children_and_unpacks(tmp_path: Path) -> None:
    buf = io.BytesIO()
    w = CpioWriter(buf)
    w.dir("lib/modules/1.0/kernel")
    w.file("lib/modules/1.0/kernel/a.ko", b"abc")
    w.file("init", b"#!/bin/sh\n", mode=0o755)
    w.chardev("dev/console", 5, 1)
    w.close()
    names = []
    data = buf.getvalue()
    pos = 0
    while True:
        assert data[pos : pos + 6] == b"070701"
        namesize = int(data[pos + 94 : pos + 102], 16)
        filesize = int(data[pos + 54 : pos + 62], 16)
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        if name == "TRAILER!!!":
            break
        names.append(name)
        pos += 110 + namesize
        pos += -pos % 4
        pos += filesize + (-filesize % 4)
    for n in names:  # every parent appears before its child
        parent = n.rsplit("/", 1)[0] if "/" in n else None
        assert parent is None or names.index(parent) < names.index(n)
    (tmp_path / "x.cpio").write_bytes(data)
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["cpio", "-idm", "--quiet", "-F", str(tmp_path / "x.cpio")], cwd=out, check=True)
    assert (out / "lib/modules/1.0/kernel/a.ko").read_bytes() == b"abc"


def _elf_with_note(ntype: int) -> bytes:
    note = struct.pack("<III", 4, 4, ntype) + b"Xen\0" + b"\0\0\0\0"
    phoff, phentsize = 64, 56
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, phoff)
    struct.pack_into("<HH", header, 0x36, phentsize, 1)
    ph = struct.pack("<IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(note), len(note), 4)
    return bytes(header) + ph + note


def test_vmlinux_extraction_needs_a_pvh_note() -> None:
    good, bad = _elf_with_note(18), _elf_with_note(5)
    assert _has_pvh_note(good) and not _has_pvh_note(bad)
    bz = b"\x00" * 100 + lzma.compress(good, format=lzma.FORMAT_XZ) + b"\x00" * 10
    assert extract_vmlinux(bz) == good
    assert extract_vmlinux(b"\x00" * 100 + lzma.compress(bad, format=lzma.FORMAT_XZ)) is None
    assert extract_vmlinux(b"not a kernel") is None


def test_image_spec_rejects_half_a_user_kernel() -> None:
    with pytest.raises(UsageError):
        ImageSpec(kernel="/boot/vmlinuz")


def test_the_mount_table_is_checked_hashed_and_in_the_initramfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """init.sh reads /etc/powercut/mounts (vm-images/mounts.txt); a bad table is an ImageError at build
    time, and the table is part of the image's hash (a new table, a new image and template key)."""
    monkeypatch.setenv("POWERCUT_CACHE", str(tmp_path / "cache"))
    moddir = tmp_path / "lib" / "modules" / "6.1.0-test"
    moddir.mkdir(parents=True)
    (moddir / "modules.dep").write_text("")
    (moddir / "modules.builtin").write_text(
        "".join(f"kernel/{n}.ko\n" for n, _, _ in wanted_modules())
    )
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"not a real kernel")
    monkeypatch.setattr(build, "_build_mark_tool", lambda source, bindir: bindir.mkdir())
    spec = ImageSpec(kernel=str(kernel), modules_dir=str(moddir))
    image = build.build_image(spec)
    out = tmp_path / "x"
    out.mkdir()
    process.run(["cpio", "-idm", "--quiet", "-F", image.initrd], cwd=str(out), timeout=60)
    table = resources.files("powercut.images").joinpath("mounts.txt").read_bytes()
    assert (out / "etc" / "powercut" / "mounts").read_bytes() == table

    def with_table(text: bytes) -> SimpleNamespace:
        """importlib.resources as build.py sees it, with mounts.txt replaced by ``text``."""
        (tmp_path / "mounts.txt").write_bytes(text)
        pkg = resources.files("powercut.images")
        return SimpleNamespace(
            files=lambda name: SimpleNamespace(
                joinpath=lambda f: tmp_path / f if f == "mounts.txt" else pkg.joinpath(f)
            )
        )

    more = b"if-dir securityfs /sys/kernel/security securityfs -\n"
    monkeypatch.setattr(build, "resources", with_table(table + more))
    assert build.build_image(spec).hash != image.hash
    monkeypatch.setattr(build, "resources", with_table(table + b"always proc proc proc -\n"))
    with pytest.raises(ImageError, match="mount table line"):
        build.build_image(spec)


def test_find_image_finds_a_built_image_and_never_builds_or_fetches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """powercut doctor looks for the image build_image would return, without building it, and without
    downloading a kernel package that is not there yet."""
    monkeypatch.setenv("POWERCUT_CACHE", str(tmp_path / "cache"))
    moddir = tmp_path / "lib" / "modules" / "6.1.0-test"
    moddir.mkdir(parents=True)
    (moddir / "modules.dep").write_text("")
    (moddir / "modules.builtin").write_text(
        "".join(f"kernel/{n}.ko\n" for n, _, _ in wanted_modules())
    )
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"not a real kernel")
    monkeypatch.setattr(build, "_build_mark_tool", lambda source, bindir: bindir.mkdir())
    spec = ImageSpec(kernel=str(kernel), modules_dir=str(moddir))
    assert build.find_image(spec) is None
    assert not (tmp_path / "cache" / "images").exists()
    image = build.build_image(spec)
    assert build.find_image(spec) == image

    def no_download(package: str) -> Path:
        raise AssertionError(f"find_image downloaded {package}")

    monkeypatch.setattr(build, "resolve_kernel_package", lambda: "linux-image-9.9.9-test-amd64")
    monkeypatch.setattr(build, "fetch_kernel_package", no_download)
    assert build.find_image(ImageSpec()) is None

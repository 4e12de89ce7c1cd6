"""Checker VM templates without a VM: the agent's runtime as files and as a cpio part, the template's
key, the restored VM's spec, the go block, the QMP client."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from powercut.config import DiskSpec, ShareSpec, VmSpec
from powercut.errors import UsageError, VmError
from powercut.images import runtime
from powercut.images.cpio import CpioWriter
from powercut.vm import guestjob
from powercut.vm.qemu import build_argv
from powercut.vm.qmp import Qmp, QmpError, wait_migration
from powercut.vmstart import template


def read_cpio(data: bytes) -> dict[str, tuple[int, bytes, int]]:
    """name -> (mode, data, mtime) of a newc archive (several concatenated: later entries win)."""
    out, pos = {}, 0
    while pos + 110 <= len(data):
        if data[pos : pos + 6] != b"070701":
            pos += 4  # padding between concatenated archives
            continue
        fields = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, mtime, size, namesize = fields[1], fields[5], fields[6], fields[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        body = data[pos : pos + size]
        pos += size
        pos += -pos % 4
        if name != "TRAILER!!!":
            out[name] = (mode, body, mtime)
    return out


# ---------------------------------------------------------------- the runtime as files


def test_elf_interpreter_of_this_python_and_of_a_text_file(tmp_path: Path) -> None:
    interp = runtime.elf_interpreter(os.path.realpath(sys.executable))
    assert interp is None or os.path.exists(interp)  # a static Python has none
    text = tmp_path / "x.txt"
    text.write_text("not an ELF file")
    assert runtime.elf_interpreter(str(text)) is None
    assert runtime.elf_interpreter(str(tmp_path / "missing")) is None


def test_aliases_are_the_loaders_names_of_mapped_libraries(tmp_path: Path) -> None:
    lib = tmp_path / "libx.so.8.1.2"
    lib.write_bytes(b"\x7fELF")
    (tmp_path / "libx.so.8").symlink_to("libx.so.8.1.2")
    (tmp_path / "liby.so.1").symlink_to("elsewhere.so")
    got = runtime.aliases({str(lib)})
    assert str(tmp_path / "libx.so.8") in got
    assert str(tmp_path / "liby.so.1") not in got


def test_the_archive_keeps_links_as_links_and_files_with_their_mtime(tmp_path: Path) -> None:
    real = tmp_path / "real" / "lib"
    real.mkdir(parents=True)
    mod = real / "mod.py"
    mod.write_text("x = 1\n")
    os.utime(mod, (1_600_000_000, 1_600_000_000))
    (tmp_path / "link").symlink_to("real")  # a directory link on the way
    (real / "alias.py").symlink_to("mod.py")  # a file link
    rt = runtime.Runtime(
        executable=str(tmp_path / "link" / "lib" / "mod.py"),
        files=(str(tmp_path / "link" / "lib" / "alias.py"),),
        dirs=(str(real),),
        boot="print(1)\n",
    )
    out = tmp_path / "rt.cpio"
    with open(out, "wb") as f:
        runtime.write_archive(rt, f)
    entries = read_cpio(out.read_bytes())
    p = runtime.PREFIX
    link = entries[f"{p}{tmp_path}/link"]
    assert stat.S_ISLNK(link[0]) and link[1] == b"real"
    assert stat.S_ISDIR(entries[f"{p}{real}"][0])
    m = entries[f"{p}{real}/mod.py"]
    assert stat.S_ISREG(m[0]) and m[1] == b"x = 1\n" and m[2] == 1_600_000_000
    assert stat.S_ISLNK(entries[f"{p}{real}/alias.py"][0])
    assert entries[f"{p}/.powercut/boot.py"][1] == b"print(1)\n"
    assert entries[f"{p}/.powercut/python"][1] == rt.executable.encode()
    for d in ("proc", "sys", "dev", "tmp", "run"):
        assert stat.S_ISDIR(entries[f"{p}/{d}"][0])
    # every entry's parent comes before it (the kernel creates no missing directories)
    names = list(entries)
    for i, name in enumerate(names):
        parent = name.rsplit("/", 1)[0]
        if "/" in name:
            assert parent in names[:i], name


def test_cpio_symlink_entry() -> None:
    import io

    buf = io.BytesIO()
    w = CpioWriter(buf)
    w.symlink("a/b", "../c")
    w.close()
    entries = read_cpio(buf.getvalue())
    assert stat.S_ISDIR(entries["a"][0]) and entries["a/b"][1] == b"../c"


def test_the_agent_runtime_holds_what_the_template_agent_needs() -> None:
    rt = template.agent_runtime()
    assert rt.executable == sys.executable
    files = set(rt.files)
    assert any(f.endswith(os.sep + "os.py") for f in files)  # Python's prefix landmark
    for name in ("guest/template.py", "guest/check.py", "vm/guestjob.py", "linux/mounts.py"):
        assert any(f.endswith(name) for f in files), name
    assert all(os.path.isabs(f) for f in files)
    assert rt.key() == template.agent_runtime().key()


def test_the_runtime_key_follows_its_files(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("a\n")
    rt = runtime.Runtime(sys.executable, (str(f),), (), "boot\n")
    k = rt.key()
    f.write_text("ab\n")
    assert rt.key() != k
    assert replace(rt, boot="other\n").key() != rt.key()


# ---------------------------------------------------------------- the template's key and the restored VM


def _spec(tmp: Path, run: str, *, scratch: int = 1 << 30, memory: int = 768, **kw) -> VmSpec:
    d = tmp / run
    (d / "job").mkdir(parents=True, exist_ok=True)
    with open(d / "scratch.img", "wb") as f:
        f.truncate(scratch)
    kernel, initrd = tmp / "vmlinux", tmp / "initrd.cpio"
    for p in (kernel, initrd):
        if not p.exists():
            p.write_bytes(b"k")
    return VmSpec(
        kernel=str(kernel),
        initrd=str(initrd),
        memory_mb=memory,
        disks=(DiskSpec(str(d / "scratch.img"), "pcscratch"),),
        shares=(
            ShareSpec("hostroot", "/"),
            ShareSpec("job", str(d / "job"), readonly=False),
            ShareSpec("rec", str(tmp)),
        ),
        console_path=str(d / "console.log"),
        modules=("ext4",),
        cmdline=("powercut.mount=rec",),
        **kw,
    )


def test_scratch_sizes_round_up_to_powers_of_two() -> None:
    assert template.scratch_bytes(1) == 1 << 30
    assert template.scratch_bytes(1 << 30) == 1 << 30
    assert template.scratch_bytes((1 << 30) + 1) == 2 << 30
    assert template.scratch_bytes(3 * (700 << 20) + (512 << 20)) == 4 << 30


def test_the_key_ignores_the_runs_own_paths_and_follows_the_shape(tmp_path: Path) -> None:
    rt = runtime.Runtime(sys.executable, (), (), "boot\n")
    qemu = sys.executable  # any file: its identity is part of the key

    def key(spec: VmSpec, accel: str = "tcg", r: runtime.Runtime = rt) -> str:
        return template.template_key(spec, accel, r, qemu)

    a, b = _spec(tmp_path, "run1"), _spec(tmp_path, "run2")
    assert key(a) == key(b)
    assert key(a) != key(a, "kvm")
    assert key(a) != key(_spec(tmp_path, "run3", scratch=2 << 30))
    assert key(a) != key(_spec(tmp_path, "run4", memory=1024))
    assert key(a) != key(replace(a, modules=("xfs",)))
    assert key(a) != key(replace(a, cmdline=()))
    assert key(a) != key(a, r=replace(rt, boot="other\n"))
    import powercut.vm.cmdline as cmdline  # a host whose "cpu MHz" wanders keeps its templates

    khz = iter([2_596_128, 3_100_000])
    orig = cmdline.host_tsc_khz
    try:
        cmdline.host_tsc_khz = lambda: next(khz)  # type: ignore[assignment]
        assert key(a) == key(a)
    finally:
        cmdline.host_tsc_khz = orig  # type: ignore[assignment]


def test_eligible_only_for_9p_non_interactive_vms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POWERCUT_VM_START", raising=False)
    s = _spec(tmp_path, "run")
    assert template.eligible(s)
    assert not template.eligible(replace(s, transport="virtiofs"))
    assert not template.eligible(replace(s, interactive=True))
    monkeypatch.setenv("POWERCUT_VM_START", "boot")
    assert not template.eligible(s)
    monkeypatch.setenv("POWERCUT_VM_START", "boot ")
    with pytest.raises(UsageError, match="POWERCUT_VM_START='boot ': 'snapshot' .* or 'boot'"):
        template.eligible(s)


def test_a_restored_vm_has_the_templates_devices_in_order(tmp_path: Path) -> None:
    """Only the run's own paths differ between the template's QEMU and a restored one's."""
    tdir = tmp_path / "tmpl"
    tdir.mkdir()
    tmpl = template.Template(tdir)
    spec = _spec(tmp_path, "run")
    restored = tmpl.restored_spec(spec, tmp_path / "run")
    assert restored.restore == tmpl.state and restored.initrd == tmpl.initrd
    assert restored.cmdline[-1] == "powercut.template=1"
    assert restored.disks[-1].serial == guestjob.CONTROL_SERIAL
    go = guestjob.parse_go((tmp_path / "run" / "control.img").read_bytes()[: guestjob.GO_BLOCK])
    assert (
        go is not None
        and abs(go["time"] - __import__("time").time()) < 60
        and len(go["seed"]) == 128
    )
    assert (tmp_path / "run" / "control.img").stat().st_size == template.CONTROL_BYTES
    built = template._template_spec(
        _spec(tmp_path, "build"),
        tdir,
        tmpl.initrd,
        rundir=tmp_path / "build",
        console=str(tmp_path / "build" / "console.log"),
    )
    a = build_argv(replace(built, qmp=str(tmp_path / "q.sock")), "tcg")
    b = build_argv(restored, "tcg")

    def shape(argv: list[str]) -> list[str]:
        out = []
        skip = False
        for x in argv:
            if skip:
                skip = False
                continue
            if x in ("-qmp", "-incoming"):
                skip = True
                continue
            out.append(x.replace(str(tmp_path / "build"), "R").replace(str(tmp_path / "run"), "R"))
        return out

    assert shape(a) == shape(b)


def test_go_blocks_parse_and_zeros_are_no_go() -> None:
    block = guestjob.go_block(123.5, "ab" * 64)
    assert len(block) == guestjob.GO_BLOCK
    assert guestjob.parse_go(block) == {"time": 123.5, "seed": "ab" * 64}
    assert guestjob.parse_go(b"\0" * guestjob.GO_BLOCK) is None
    with pytest.raises(ValueError):
        guestjob.parse_go(guestjob.GO_MAGIC + b'{"time": "x"}' + b"\0" * 100)


def test_a_failed_build_makes_this_process_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERCUT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("POWERCUT_VM_START", raising=False)
    monkeypatch.setattr(template, "resolve_accel", lambda *a: "tcg")
    monkeypatch.setattr(
        template, "agent_runtime", lambda: runtime.Runtime(sys.executable, (), (), "b\n")
    )
    calls = []

    def fail(self, spec, accel, rt):  # type: ignore[no-untyped-def]
        calls.append(1)
        raise VmError("the template VM did not get ready")

    monkeypatch.setattr(template.Template, "build", fail)
    saved = set(template._failed)
    try:
        spec = _spec(tmp_path, "run")
        assert template.template_for(spec) is None
        assert template.template_for(spec) is None
        assert calls == [1]  # not tried again in this process
    finally:
        template._failed.clear()
        template._failed.update(saved)


# ---------------------------------------------------------------- QMP


class FakeQmp:
    """A QMP server on a unix socket: for each command line read, the next list of messages."""

    def __init__(self, path: str, replies: list[list[dict]]) -> None:
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(1)
        self.replies, self.got = replies, []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        conn, _ = self.srv.accept()
        f = conn.makefile("rwb")
        f.write(b'{"QMP": {"version": {}}}\n')
        f.flush()
        for messages in self.replies:
            line = f.readline()
            if not line:
                break
            self.got.append(json.loads(line))
            for m in messages:
                f.write(json.dumps(m).encode() + b"\n")
            f.flush()
        conn.close()


def test_qmp_commands_events_and_errors(tmp_path: Path) -> None:
    path = str(tmp_path / "q.sock")
    fake = FakeQmp(
        path,
        [
            [{"return": {}}],
            [{"event": "STOP"}, {"return": {"status": "running"}}],
            [{"error": {"class": "GenericError", "desc": "no such thing"}}],
        ],
    )
    q = Qmp(path, timeout_s=10)
    assert q.command("query-status") == {"status": "running"}  # the event before the reply skipped
    with pytest.raises(QmpError, match="refused migrate: no such thing"):
        q.command("migrate", uri="exec:cat > x")
    q.close()
    fake.thread.join(5)
    assert fake.got == [
        {"execute": "qmp_capabilities"},
        {"execute": "query-status"},
        {"execute": "migrate", "arguments": {"uri": "exec:cat > x"}},
    ]


def test_qmp_unreachable_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(QmpError, match="cannot reach"):
        Qmp(str(tmp_path / "none.sock"), timeout_s=0.2)


def test_wait_migration_completed_and_failed() -> None:
    class Q:
        def __init__(self, statuses: list[dict]) -> None:
            self.statuses = statuses

        def command(self, name: str) -> dict:
            return self.statuses.pop(0)

    wait_migration(Q([{"status": "active"}, {"status": "completed"}]), 5)  # type: ignore[arg-type]
    with pytest.raises(QmpError, match="failed: disk full"):
        wait_migration(Q([{"status": "failed", "error-desc": "disk full"}]), 5)  # type: ignore[arg-type]


def test_prune_keeps_the_recent_templates_and_any_used_within_the_hour(tmp_path: Path) -> None:
    import time

    root = tmp_path / "templates"
    old = []
    for i in range(9):
        d = root / f"old{i}"
        d.mkdir(parents=True)
        t = time.time() - 7200 - i * 60  # old0 the most recently used
        os.utime(d, (t, t))
        old.append(d)
    fresh = root / "fresh"
    fresh.mkdir()
    keep = root / "current"
    keep.mkdir()
    template._prune(root, keep=keep)
    left = {d.name for d in root.iterdir()}
    assert "current" in left and "fresh" in left  # this run's, and one used within the hour
    # KEEP in all: the current one, then the most recently used (fresh and old0..old3)
    assert left == {"current", "fresh"} | {f"old{i}" for i in range(template.KEEP - 2)}


def test_prewarm_builds_the_template_the_checks_vms_will_ask_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The matrix and the main job build the first row's template while it records: the spec that
    prewarm asks for has the key of the spec a checker VM of that row's check asks for (after the
    host's scratch disk rounding), and a different filesystem or disk size would not."""
    from powercut.check import checkervm
    from powercut.check.context import CheckContext, LogSource
    from powercut.checker import CheckerSpec
    from powercut.linux import filesystems

    rt = runtime.Runtime(sys.executable, (), (), "boot\n")
    asked: list[VmSpec] = []

    def fake_template_for(vm: VmSpec) -> None:
        asked.append(
            replace(vm, disks=tuple(replace(d, path=str(tmp_path / "sized.img")) for d in vm.disks))
        )
        with open(tmp_path / "sized.img", "wb") as f:
            f.truncate(os.path.getsize(vm.disks[0].path))

    monkeypatch.setattr(template, "template_for", fake_template_for)
    kernel, initrd = tmp_path / "vmlinux", tmp_path / "initrd.cpio"
    kernel.write_bytes(b"k")
    initrd.write_bytes(b"i")
    spec = checkervm.VmCheckSpec(str(kernel), str(initrd), accel="tcg")
    ext4 = filesystems.get("ext4")
    size = 256 << 20
    before = set(os.listdir(tempfile.gettempdir()))
    checkervm.prewarm(spec, ext4, size).join(30)
    assert (
        len(asked) == 1 and set(os.listdir(tempfile.gettempdir())) <= before
    )  # its scratch file removed
    key = lambda vm: template.template_key(vm, "tcg", rt, sys.executable)  # noqa: E731
    prewarmed = key(asked[0])
    rec = tmp_path / "rec"
    rec.mkdir()
    vm = checkervm.CheckerVm(
        CheckContext(ext4, CheckerSpec(name="osync")),
        LogSource(rec / "log.bin", size),
        spec,
        tmp_path / "work",
    )
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "scratch.img", "wb") as f:
        f.truncate(template.scratch_bytes(vm.scratch_bytes))  # hosts.CheckHost.boot's rounding
    check = vm._vm_spec(checkervm.Staged(spec.kernel, spec.initrd, "", str(rec)), str(run), 60.0)
    assert key(check) == prewarmed
    asked.clear()
    checkervm.prewarm(spec, filesystems.get("xfs"), size).join(30)
    checkervm.prewarm(spec, ext4, 4 * size).join(30)
    assert prewarmed not in {key(a) for a in asked} and len(asked) == 2

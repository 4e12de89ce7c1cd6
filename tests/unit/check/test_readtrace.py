"""What a state's checker read (check/readtrace.py, ``CheckContext.trace_reads``): a command checker
under strace and an in-process one through the audit hook, over plain directories; the verdict the
same traced or not, whatever the checker does (exit codes, a signal, the timeout, a protocol
error); no strace means no reads, never a failed judge; the flag and the reads travel to and from
the checker VM (the job, the verdict's JSON).  With root: the judge on loop-mounted ext4 images,
one disk and two."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import threading
from pathlib import Path

import pytest

from powercut.check import readtrace
from powercut.check.context import CheckContext, LogSource
from powercut.check.readtrace import ReadTracer, sizes_under
from powercut.checker import CheckerSpec, CheckInput, CheckResult
from powercut.core.judging.recoveryread import ReadFile, words
from powercut.core.judging.verdict import Verdict
from powercut.errors import CheckerError
from powercut.linux import filesystems
from powercut.vm import guestjob

needs_strace = pytest.mark.skipif(
    readtrace.strace_tool() is None, reason="strace cannot trace here"
)


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A directory as a recovered mount: LevelDB's CURRENT, an empty MANIFEST."""
    m = tmp_path / "mnt"
    (m / "db").mkdir(parents=True)
    (m / "CURRENT").write_text("MANIFEST-000004\n")
    (m / "MANIFEST-000004").write_bytes(b"")
    (m / "db" / "000003.log").write_bytes(b"x" * 100)
    os.symlink("/etc/passwd", m / "link")
    return m


def given(mnt: Path, mounts: tuple[str, ...] = ()) -> CheckInput:
    return CheckInput(str(mnt), ("1",), (), {}, "flush@1", mounts=mounts)


def traced(spec: object, mnt: Path) -> tuple[CheckResult, tuple[ReadFile, ...]]:
    t = ReadTracer(spec, [str(mnt)])
    return t.run(given(mnt)), t.files()


def test_sizes_before_the_checker(state: Path) -> None:
    sizes = sizes_under([str(state)])
    assert (
        sizes["CURRENT"] == 16 and sizes["MANIFEST-000004"] == 0 and sizes["db/000003.log"] == 100
    )
    assert sizes["link"] == len("/etc/passwd") and {".", "db"} <= set(
        sizes
    )  # a link's own size: not followed
    two = sizes_under([str(state / "db"), str(state)])
    assert two["n0/000003.log"] == 100 and two["n1/CURRENT"] == 16 and "n0" in two and "n1" in two


@needs_strace
def test_a_command_checker_under_strace(state: Path) -> None:
    spec = CheckerSpec(
        command="cat CURRENT MANIFEST-000004 >/dev/null; head -c 10 db/000003.log >/dev/null; "
        "cat 000005.log 2>/dev/null; ls >/dev/null; "
        """echo '{"verdict": "lost-ack", "reasons": ["key 1 lost"]}'""",
        timeout_s=30,
    )
    result, reads = traced(spec, state)
    assert result == spec.run(given(state)) == CheckResult("lost-ack", ("key 1 lost",))
    got = {r.path: r for r in reads}
    assert [r.path for r in reads][:4] == [
        "CURRENT",
        "MANIFEST-000004",
        "db/000003.log",
        "000005.log",
    ]
    assert got["CURRENT"] == ReadFile("CURRENT", 16, 16) and got["MANIFEST-000004"] == ReadFile(
        "MANIFEST-000004", 0, 0
    )
    assert got["db/000003.log"].size == 100 and 10 <= got["db/000003.log"].read <= 100
    assert got["000005.log"].error == "ENOENT" and got["."].dir
    said = words(reads, {"MANIFEST-000004": 1193})
    assert said.startswith(
        "recovery read CURRENT (16 bytes), then MANIFEST-000004 (0 of 1,193 bytes present), then "
    )


@needs_strace
@pytest.mark.parametrize(
    "command",
    [
        "exit 0",
        "echo found a problem; exit 1",
        "echo oops >&2; exit 3",
        "kill -SEGV $$",
        "true | kill -KILL $$",
        "python3 -c 'raise KeyError(1)'",
        "sleep 5",
        """echo '{"verdict": "pass"}'; echo trailing""",
        "nosuchprogram-x",
    ],
)
def test_the_verdict_is_the_same_traced_or_not(state: Path, command: str) -> None:
    spec = CheckerSpec(command=command, timeout_s=0.5 if "sleep" in command else 30)

    def outcome(run: object) -> object:
        try:
            return run()  # type: ignore[operator]
        except CheckerError as e:
            return ("CheckerError", str(e))

    plain = outcome(lambda: spec.run(given(state)))
    t = ReadTracer(spec, [str(state)])
    assert outcome(lambda: t.run(given(state))) == plain
    assert not any(r.path == "." and r.error for r in t.files())


def test_no_strace_no_reads_and_the_same_verdict(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = CheckerSpec(command="cat CURRENT; exit 1", timeout_s=30)
    monkeypatch.setattr(readtrace, "strace_tool", lambda: None)
    result, reads = traced(spec, state)
    assert result == spec.run(given(state)) and result.verdict == "fail" and reads == ()


def test_a_strace_that_cannot_trace_is_no_strace(monkeypatch: pytest.MonkeyPatch) -> None:
    readtrace.strace_tool.cache_clear()
    try:
        monkeypatch.setattr(readtrace.shutil, "which", lambda name, **kw: "/bin/false")
        assert readtrace.strace_tool() is None
        readtrace.strace_tool.cache_clear()
        monkeypatch.setattr(readtrace.shutil, "which", lambda name, **kw: None)
        monkeypatch.setattr(readtrace.os, "access", lambda p, mode: False)
        assert readtrace.strace_tool() is None
    finally:
        monkeypatch.undo()
        readtrace.strace_tool.cache_clear()


def test_a_failed_trace_leaves_no_reads(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong reading the trace, the checker's verdict stands and the reads are empty."""
    monkeypatch.setattr(
        readtrace, "strace_tool", lambda: readtrace.Strace("/bin/sh", False)
    )  # no trace written
    monkeypatch.setattr(
        readtrace.recoveryread, "strace_args", lambda out, seccomp: ("-c", 'exec "$@"', "sh")
    )
    spec = CheckerSpec(command="cat CURRENT", timeout_s=30)
    result, reads = traced(spec, state)
    assert result.verdict == "pass" and result == spec.run(given(state)) and reads == ()

    def broken(*a: object, **k: object) -> None:
        raise ValueError("a trace not foreseen")

    monkeypatch.setattr(readtrace.recoveryread, "parse", broken)
    result, reads = traced(spec, state)
    assert result.verdict == "pass" and reads == ()


class Reader:
    """An in-process checker: what it reads, the Python way."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def run(self, inp: CheckInput) -> CheckResult:
        m = Path(inp.mount)
        assert (m / "CURRENT").read_text() == "MANIFEST-000004\n"
        with open(m / "MANIFEST-000004", "rb") as f:
            f.read()
        try:
            open(os.path.join(inp.mount, "000005.log"))  # noqa: SIM115
        except FileNotFoundError:
            pass
        os.listdir(m / "db")
        fd = os.open(m / "db" / "000003.log", os.O_RDONLY)
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mm:
            assert mm[:1] == b"x"
        os.close(fd)
        with open(m / "LOG", "w") as f:
            f.write("recovered\n")
        open(
            fd := os.open(m / "CURRENT", os.O_RDONLY), closefd=True
        ).close()  # an open of a descriptor
        if self.fail:
            raise KeyError("boom")
        return CheckResult("pass")


def test_an_in_process_checker_through_the_audit_hook(state: Path) -> None:
    result, reads = traced(Reader(), state)
    assert result.verdict == "pass"
    assert reads == (
        ReadFile("CURRENT", 16, -1),
        ReadFile("MANIFEST-000004", 0, -1),
        ReadFile("000005.log", -1, -1, "ENOENT"),
        ReadFile("db", sizes_under([str(state)])["db"], -1, dir=True),
        ReadFile("db/000003.log", 100, -1, mapped=True),
        ReadFile("LOG", -1, -1, write=True),
    )
    assert words(reads[:3]) == (
        "recovery read CURRENT (16 bytes), then MANIFEST-000004 (0 bytes), then tried to "
        "open 000005.log: it does not exist, then stopped"
    )
    again, more = traced(Reader(), state)  # a second trace: the one hook, recording again
    assert again == result and [r.path for r in more][:3] == [
        "CURRENT",
        "MANIFEST-000004",
        "000005.log",
    ]


def test_an_in_process_checker_that_raises_keeps_its_reads(state: Path) -> None:
    t = ReadTracer(Reader(fail=True), [str(state)])
    with pytest.raises(KeyError):
        t.run(given(state))
    assert [r.path for r in t.files()][:2] == ["CURRENT", "MANIFEST-000004"]


def test_a_checker_function_by_reference(state: Path, tmp_path: Path) -> None:
    (tmp_path / "mychecks.py").write_text(
        "import os\n\ndef check(state):\n"
        "    assert open(os.path.join(state.mount, 'CURRENT')).read()\n"
        "    assert not os.path.exists(os.path.join(state.mount, 'gone'))\n"
    )
    spec = CheckerSpec(function=f"{tmp_path}/mychecks.py::check", timeout_s=30)
    result, reads = traced(spec, state)
    assert result.verdict == "pass" and reads == (ReadFile("CURRENT", 16, -1),)  # a stat is no open


def test_judges_tracing_side_by_side_see_their_own_mounts(tmp_path: Path) -> None:
    mounts = []
    for i in range(3):
        (tmp_path / f"m{i}").mkdir()
        (tmp_path / f"m{i}" / f"only{i}").write_text("x" * i)
        mounts.append(tmp_path / f"m{i}")

    class Touch:
        def run(self, inp: CheckInput) -> CheckResult:
            start.wait()
            for m in mounts:  # every mount, whoever traces it
                for name in os.listdir(m):
                    (m / name).read_text()
            return CheckResult("pass")

    start = threading.Barrier(3)
    out: dict[int, tuple[ReadFile, ...]] = {}

    def judge(i: int) -> None:
        t = ReadTracer(Touch(), [str(mounts[i])])
        t.run(given(mounts[i]))
        out[i] = t.files()

    threads = [threading.Thread(target=judge, args=(i,)) for i in (0, 1)] + [
        threading.Thread(target=Touch().run, args=(given(mounts[2]),))
    ]  # not traced
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert out[0] == (ReadFile(".", out[0][0].size, -1, dir=True), ReadFile("only0", 0, -1))
    assert out[1] == (ReadFile(".", out[1][0].size, -1, dir=True), ReadFile("only1", 1, -1))
    assert not readtrace._watches


@needs_strace
def test_several_mounts_are_named_by_node(tmp_path: Path) -> None:
    for i in (0, 1):
        (tmp_path / f"n{i}").mkdir()
        (tmp_path / f"n{i}" / "wal").write_text("w" * (i + 1))
    spec = CheckerSpec(command="cat wal ../n1/wal >/dev/null", timeout_s=30)
    mnts = [str(tmp_path / "n0"), str(tmp_path / "n1")]
    t = ReadTracer(spec, mnts)
    assert t.run(given(tmp_path / "n0", tuple(mnts))).verdict == "pass"
    assert t.files() == (ReadFile("n0/wal", 1, 1), ReadFile("n1/wal", 2, 2))


def test_no_checker_reads_nothing(state: Path) -> None:
    result, reads = traced(CheckerSpec(), state)
    assert result.verdict == "pass" and reads == ()


# -- the flag and the reads between host and VM ---------------------------------------------------------------
def test_the_verdict_carries_its_reads_and_says_nothing_without() -> None:
    v = Verdict("flush@1", "flush", 1, "lost-ack", ("x",), 1, 0, 0.1)
    assert "read" not in v.to_json() and Verdict.from_json(v.to_json()) == v
    r = Verdict(
        "flush@1",
        "flush",
        1,
        "lost-ack",
        ("x",),
        1,
        0,
        0.1,
        read=(ReadFile("CURRENT", 16, 16), ReadFile("x", -1, 0, "ENOENT")),
    )
    d = json.loads(json.dumps(r.to_json()))
    assert d["read"] == [
        {"path": "CURRENT", "size": 16, "read": 16},
        {"path": "x", "size": -1, "read": 0, "error": "ENOENT"},
    ]
    assert Verdict.from_json(d) == r


def test_the_job_carries_the_flag_and_an_old_job_is_untraced(tmp_path: Path) -> None:
    from powercut.check.checkervm import CheckerVm, VmCheckSpec

    ctx = CheckContext(filesystems.get("ext4"), CheckerSpec(command="true"), trace_reads=True)
    vm = CheckerVm(
        ctx, LogSource(tmp_path / "log.bin", 1 << 20), VmCheckSpec("/k", "/i"), tmp_path / "vm0"
    )
    job = vm.check_job(("flush@1",))
    d = json.loads(json.dumps(guestjob.to_json(job)))
    back = guestjob.from_json(d)
    assert d["src"]["trace_reads"] is True and back.src.trace_reads is True and job.src.trace_reads  # type: ignore[union-attr]
    vm.rebind(CheckContext(filesystems.get("ext4"), CheckerSpec(command="true")), vm.src)
    d = guestjob.to_json(vm.check_job(("flush@1",)))
    assert "trace_reads" not in d["src"]  # an agent that predates it reads the job
    assert guestjob.from_json(d).src.trace_reads is False  # type: ignore[union-attr]


def test_the_guest_judges_with_the_jobs_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from powercut.guest import check as guest

    monkeypatch.setattr(guest, "WORK", str(tmp_path / "work"))
    monkeypatch.setattr(guest, "find_disk", lambda serial: "/dev/null")
    monkeypatch.setattr(guest, "mount", lambda *a, **k: None)
    monkeypatch.setattr(guest, "umount", lambda *a, **k: None)
    for flag in (True, False):
        src = guestjob.StateSource(
            log="/l",
            size=1 << 20,
            fstype="ext4",
            mount_opts="",
            checker=CheckerSpec(),
            disks={"scratch": "s"},
            scratch_ready=True,
            trace_reads=flag,
        )
        with guest.prepared(src) as ctx:
            assert ctx.trace_reads is flag


# -- the judge on real mounts -----------------------------------------------------------------------------------
@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/loop-control") or not shutil.which("mkfs.ext4"),
    reason="needs root (loop device, mount) and mkfs.ext4",
)
@needs_strace
def test_the_judge_traces_a_real_mount(tmp_path: Path) -> None:
    from powercut.check.judge import judge, judge_nodes
    from powercut.core.states.crashstate import CrashState
    from powercut.linux import loopdev, process
    from powercut.linux.mounts import mount, umount

    imgs = [tmp_path / "a.img", tmp_path / "b.img"]
    for img in imgs:
        with open(img, "wb") as f:
            f.truncate(32 << 20)
        process.run(["mkfs.ext4", "-F", "-q", str(img)], timeout=60)
    with loopdev.LoopDevice(imgs[0]) as a, loopdev.LoopDevice(imgs[1]) as b:
        for i, dev in enumerate((a, b)):
            m = tmp_path / f"setup{i}"
            m.mkdir()
            mount(dev, str(m), "ext4", "")
            (m / "CURRENT").write_text("MANIFEST-000004\n")
            (m / "MANIFEST-000004").write_bytes(b"m" * (i * 7))
            umount(str(m))
        state = CrashState("flush", 1, (), (), ("1",), (), "flush@1", 0)
        answer = """; echo '{"verdict": "lost-ack", "reasons": ["key 1 lost"]}'"""
        spec = CheckerSpec(
            command="cat CURRENT MANIFEST-000004 000005.log >/dev/null 2>&1" + answer, timeout_s=30
        )
        plain = judge(CheckContext(filesystems.get("ext4"), spec), a, state, str(tmp_path / "j"))
        v = judge(
            CheckContext(filesystems.get("ext4"), spec, trace_reads=True),
            a,
            state,
            str(tmp_path / "j"),
        )
        assert (
            (v.verdict, v.reasons)
            == (plain.verdict, plain.reasons)
            == ("lost-ack", ("key 1 lost",))
        )
        assert plain.read == () and v.read == (
            ReadFile("CURRENT", 16, 16),
            ReadFile("MANIFEST-000004", 0, 0),
            ReadFile("000005.log", -1, 0, "ENOENT"),
        )
        assert Verdict.from_json(json.loads(json.dumps(v.to_json()))) == v

        spec = CheckerSpec(command="cat ../n1/MANIFEST-000004 CURRENT >/dev/null", timeout_s=30)
        mnts = [str(tmp_path / "k" / "n0"), str(tmp_path / "k" / "n1")]
        v = judge_nodes(
            CheckContext(filesystems.get("ext4"), spec, trace_reads=True),
            (a, b),
            (state, state),
            mnts,
            sid="flush~flush@1+flush@1",
            model="flush",
            at=1,
        )
        assert v.verdict == "pass" and v.read == (
            ReadFile("n1/MANIFEST-000004", 7, 7),
            ReadFile("n0/CURRENT", 16, 16),
        )
        v = judge(
            CheckContext(
                filesystems.get("ext4"), CheckerSpec(function="", name=""), trace_reads=True
            ),
            a,
            state,
            str(tmp_path / "j"),
        )
        assert v.verdict == "pass" and v.read == ()

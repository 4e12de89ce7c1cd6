"""gotwofile, the Go program with twofile's race: registered with twofile's params and checker; the
records it is handed are twofile's; the build (a fake toolchain: static, local, no download; one
line without Go; nothing when built); one line when the program is missing; and -- where the
program is built -- its store equals twofile's byte for byte, its marks are twofile's, a failed
mark fails it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from powercut.checker import CheckInput
from powercut.checker import get as get_checker
from powercut.checkers import twofile as checker
from powercut.workload import get as get_workload
from powercut.workloads import gotwofile as wl
from powercut.workloads import twofile

N, SIZE = 4, 300
HAVE_PROGRAM = os.access(wl.binary(), os.X_OK)


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_registered_with_twofiles_params_and_checker() -> None:
    w = get_workload("gotwofile")
    assert w is wl.WORKLOAD
    p = w.params({"n": "3", "reply_on": "index"})
    assert p == {"n": 3, "size": 1000, "seed": 0, "reply_on": "index", "binary": wl.binary()}
    assert {k: v for k, v in w.defaults.items() if k != "binary"} == {
        k: v for k, v in twofile.WORKLOAD.defaults.items() if k != "log_via"
    }
    assert w.choices == {"reply_on": ("both", "index")}
    assert get_checker("gotwofile") is checker.CHECKER


def test_the_records_written_are_twofiles(tmp_path: Path) -> None:
    path = tmp_path / "records"
    wl.write_records(str(path), N, 7, SIZE)
    want = b"".join(twofile.record(7, i, SIZE) for i in range(N))
    assert path.read_bytes() == want == b"".join(checker.record(7, i, SIZE) for i in range(N))


def test_the_binary_is_named_by_its_source() -> None:
    assert wl.binary("/c") == f"/c/gotwofile-{wl.digest()}" and len(wl.digest()) == 12
    assert wl.SOURCE.endswith("gotwofile.go") and os.path.isfile(wl.SOURCE)


def test_the_build_is_static_local_and_downloads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen"
    go = executable(
        tmp_path / "go",
        f"""#!/bin/sh
echo "$@" > {seen}
env > {seen}.env
while [ "$1" != -o ]; do shift; done
printf '#!/bin/sh\\n' > "$2" && chmod +x "$2"
""",
    )
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.delenv("GOCACHE", raising=False)
    built = wl.build(str(tmp_path / "cache"), go=str(go), say=lambda s: None)
    assert built == wl.binary(str(tmp_path / "cache")) and os.access(built, os.X_OK)
    argv = seen.read_text().split()
    assert argv[:2] == ["build", "-trimpath"] and argv[-1] == wl.SOURCE
    env = dict(
        line.split("=", 1) for line in Path(f"{seen}.env").read_text().splitlines() if "=" in line
    )
    assert env["CGO_ENABLED"] == "0" and env["GOTOOLCHAIN"] == "local" and env["GOPROXY"] == "off"
    assert env["GOCACHE"].startswith(env["HOME"]) and env["HOME"] != ""  # no home: a scratch one
    assert os.listdir(tmp_path / "cache") == [os.path.basename(built)]  # no temporary left
    assert (
        wl.build(str(tmp_path / "cache"), say=pytest.fail) == built
    )  # there already: nothing built or said


def test_a_failed_build_or_no_go_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = executable(tmp_path / "go", "#!/bin/sh\necho 'main.go:1: syntax error' >&2\nexit 1\n")
    with pytest.raises(wl.BuildError, match=r"exited 1: main.go:1: syntax error$"):
        wl.build(str(tmp_path / "cache"), go=str(bad), say=lambda s: None)
    monkeypatch.setattr(wl, "find_go", lambda: None)
    with pytest.raises(wl.BuildError, match=r"no Go toolchain .*apt-get install golang-go"):
        wl.build(str(tmp_path / "cache"))
    assert wl.cli(["--build", "--cache", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("gotwofile: cannot build gotwofile: no Go toolchain")
        and err.count("\n") == 1
    )


def test_no_program_is_one_line_naming_the_build(tmp_path: Path) -> None:
    with pytest.raises(
        SystemExit,
        match=r"no program at .*/absent: build it on the host first "
        r"\(python -m powercut.workloads.gotwofile --build\)",
    ):
        wl.main(wl.WORKLOAD.params({"binary": str(tmp_path / "absent")}))


@pytest.fixture
def marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake powercut-mark first on PATH, appending each mark to ``tmp_path/marks`` (exit 1 when
    ``tmp_path/fail`` exists); the cwd a fresh directory ``tmp_path/mnt``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(
        bin_dir / "powercut-mark",
        f'#!/bin/sh\n[ -e {tmp_path}/fail ] && exit 1\necho "$1" >> {tmp_path}/marks\n',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "mnt").mkdir()
    monkeypatch.chdir(tmp_path / "mnt")
    return tmp_path


@pytest.mark.skipif(
    not HAVE_PROGRAM,
    reason=f"no program at {wl.binary()}: python -m powercut.workloads.gotwofile "
    "--build (ci/setup.sh does)",
)
@pytest.mark.parametrize("reply_on", ["both", "index"])
def test_the_programs_store_and_marks_are_twofiles(
    marked: Path, monkeypatch: pytest.MonkeyPatch, reply_on: str
) -> None:
    assert wl.main(wl.WORKLOAD.params({"n": N, "size": SIZE, "seed": 3, "reply_on": reply_on})) == 0
    assert (marked / "marks").read_text().split() == [
        m for i in range(N) for m in (f"begin:{i}", f"ack:{i}")
    ]
    (marked / "py").mkdir()
    monkeypatch.chdir(marked / "py")
    monkeypatch.setattr(twofile.powercut, "begin", lambda k: None)
    monkeypatch.setattr(twofile.powercut, "ack", lambda k: None)
    twofile.main(twofile.WORKLOAD.params({"n": N, "size": SIZE, "seed": 3, "reply_on": reply_on}))
    for name in ("store.log", "store.idx"):
        assert (marked / "mnt" / name).read_bytes() == (marked / "py" / name).read_bytes(), name
    acked = tuple(map(str, range(N)))
    r = get_checker("gotwofile").check(
        CheckInput(str(marked / "mnt"), acked, acked, {"size": SIZE, "seed": 3})
    )
    assert r.verdict == "pass"


@pytest.mark.skipif(not HAVE_PROGRAM, reason=f"no program at {wl.binary()}")
def test_a_failed_mark_fails_the_program(marked: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (marked / "fail").touch()
    with pytest.raises(SystemExit, match=r"gotwofile: .* exited with status 1"):
        wl.main(wl.WORKLOAD.params({"n": 2, "size": 10}))
    assert "gotwofile: powercut-mark begin:0: exit status 1" in capfd.readouterr().err

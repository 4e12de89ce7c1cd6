"""A user's Python functions as workload and checker (powercut/_pycall.py, checker.call_function):
references, imports by file, the answers a checker function gives, and the workload runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from powercut._pycall import FunctionRef, assertion_reason, workload_command
from powercut.check.judge import judge
from powercut.checker import CheckerSpec, CheckInput, CheckResult
from powercut.errors import CheckerError, UsageError

USER = """
import json, os
from pathlib import Path
from powercut import CheckResult
from helper_mod import EXPECTED          # a sibling import: needs the path given with the reference

def passes(state):
    return None

def says_true(state):
    return True

def says_false(state):
    return False

def asserts_with_message(state):
    assert state.acked == ("9",), f"acked {state.acked} lost"

def asserts_bare(state):
    assert len(state.acked) == 7

def lost(state):
    return CheckResult("lost-ack", tuple(f"key {k} missing" for k in state.acked))

def harness_verdict(state):
    return CheckResult("mount-failed", ("not mine to say",))

def wrong_type(state):
    return "ok"

def prints_a_verdict(state):     # what it prints is its own business: the return value is the answer
    print(json.dumps({"verdict": "lost-ack", "reasons": ["printed, not returned"]}))

def prints_pass_returns_lost(state):
    print('{"verdict": "pass"}')
    return CheckResult("lost-ack", ("returned",))

def crashes(state):
    raise KeyError("boom")

def chatty(state):
    raise AssertionError("\\n".join(f"line {i}" for i in range(100)))

def reads_mount(state):
    assert (Path(state.mount) / "data").read_text() == EXPECTED, "data differs"

class Checks:
    @staticmethod
    def nested_name(state):
        return CheckResult("corrupt-data", ("from a class",))

def workload(mount, n=1, tag="x"):
    (mount / "out.json").write_text(json.dumps({"cwd": os.getcwd(), "n": n, "tag": tag}))
    return 0

def failing_workload(mount):
    return 3
"""


@pytest.fixture
def user(tmp_path: Path) -> tuple[Path, tuple[str, ...]]:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper_mod.py").write_text("EXPECTED = 'hello'\n")
    mod = tmp_path / "test_user_mod.py"
    mod.write_text(USER)
    return mod, (str(lib),)


def spec(user: tuple[Path, tuple[str, ...]], name: str) -> CheckerSpec:
    return CheckerSpec(function=f"{user[0]}::{name}", path=user[1])


HOST_PATH = tuple(
    p for p in sys.path if p and os.path.isdir(p)
)  # what the plugin passes: this process's path
INP = CheckInput("/nonexistent", ("1", "2"), ("3",), {"n": 2}, "flush@7")


@pytest.mark.parametrize(
    "name, verdict, reason",
    [
        ("passes", "pass", None),
        ("says_true", "pass", None),
        ("says_false", "fail", "says_false returned False"),
        ("asserts_with_message", "fail", "acked ('1', '2') lost"),
        ("asserts_bare", "fail", "assert len(state.acked) == 7 (test_user_mod.py:"),
        ("lost", "lost-ack", "key 1 missing"),
        ("Checks.nested_name", "corrupt-data", "from a class"),
    ],
)
def test_checker_function_answers(user, name, verdict, reason) -> None:
    res = spec(user, name).run(INP)
    assert res.verdict == verdict
    if reason:
        assert res.reasons[0].startswith(reason)


def test_checker_function_prints_are_never_its_answer(user, capfd) -> None:
    """#37: a function checker answers with its return value; a JSON verdict it prints is
    output, never read (checker.call_function captures nothing)."""
    assert spec(user, "prints_a_verdict").run(INP) == CheckResult("pass")
    assert spec(user, "prints_pass_returns_lost").run(INP) == CheckResult("lost-ack", ("returned",))
    assert (
        '"verdict": "lost-ack"' in capfd.readouterr().out
    )  # it did print, to this process's stdout


def test_checker_function_output_is_capped(user) -> None:
    res = spec(user, "chatty").run(INP)
    assert res.verdict == "fail" and len(res.reasons) == 41 and "60 more lines" in res.reasons[-1]


@pytest.mark.parametrize(
    "name, words", [("wrong_type", "returned str"), ("harness_verdict", "mount-failed")]
)
def test_checker_function_that_answers_nonsense_is_the_harness_error(user, name, words) -> None:
    with pytest.raises(CheckerError, match=words):
        spec(user, name).run(INP)


def test_checker_function_exception_reaches_judge(user, tmp_path) -> None:
    """The checker's own exception goes up to judge(), which makes it that state's checker-crashed
    (test_function_checker_judges_a_real_mount)."""
    with pytest.raises(KeyError):
        spec(user, "crashes").run(INP)


@pytest.mark.parametrize(
    "ref, words",
    [
        ("{dir}/missing.py::f", "no such file"),
        ("{mod}::not_there", "has no not_there"),
    ],
)
def test_validate_finds_a_checker_that_cannot_load(user, ref, words) -> None:
    text = ref.format(dir=user[0].parent, mod=user[0])
    with pytest.raises(CheckerError, match=words):
        CheckerSpec(function=text, path=user[1]).validate()


def test_import_error_in_the_users_file_is_one_checker_error(tmp_path) -> None:
    bad = tmp_path / "test_broken_import.py"
    bad.write_text("import no_such_module_anywhere\ndef check(state):\n    pass\n")
    with pytest.raises(CheckerError, match="importing .* failed: ModuleNotFoundError"):
        CheckerSpec(function=f"{bad}::check").validate()


def test_reference_round_trip_and_refusals(tmp_path) -> None:
    ref = FunctionRef.of(test_reference_round_trip_and_refusals, "checker")
    assert ref.file == os.path.abspath(__file__) and FunctionRef.parse(ref.text) == ref
    with pytest.raises(UsageError, match="top level"):
        FunctionRef.of(lambda s: None, "checker")

    def inner(state):
        return None

    with pytest.raises(UsageError, match="top level"):
        FunctionRef.of(inner, "workload")
    with pytest.raises(UsageError, match="must be a function"):
        FunctionRef.of(42, "checker")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="FILE::NAME"):
        FunctionRef.parse("no-separator")


def test_assertion_reason_prefers_the_message() -> None:
    assert assertion_reason(AssertionError("said")) == "said"
    assert assertion_reason(AssertionError()) == "assertion failed"


def test_workload_runs_with_mount_params_and_path(user, tmp_path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cmd = workload_command(FunctionRef(str(user[0]), "workload"), (*user[1], *HOST_PATH))
    env = dict(
        os.environ, POWERCUT_PARAMS=json.dumps({"n": 3, "tag": "t"}), POWERCUT_MOUNT=str(mnt)
    )
    subprocess.run(["/bin/sh", "-c", cmd], cwd=mnt, env=env, check=True, timeout=60)
    got = json.loads((mnt / "out.json").read_text())
    assert got == {"cwd": str(mnt), "n": 3, "tag": "t"}


def test_workload_exit_status_and_bad_reference(user, tmp_path) -> None:
    cmd = workload_command(FunctionRef(str(user[0]), "failing_workload"), (*user[1], *HOST_PATH))
    res = subprocess.run(["/bin/sh", "-c", cmd], cwd=tmp_path, capture_output=True, timeout=60)
    assert res.returncode == 3
    res = subprocess.run(
        [sys.executable, "-m", "powercut._pycall", f"{tmp_path}/nope.py::w"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=":".join(HOST_PATH)),
    )
    assert res.returncode == 2 and "no such file" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop device, mount)")
def test_function_checker_judges_a_real_mount(user, tmp_path) -> None:
    """The whole path on a real ext4 image: mount, the function reads state.mount, fsck."""
    from powercut.check.context import CheckContext
    from powercut.core.states.crashstate import CrashState
    from powercut.linux import filesystems, loopdev, process
    from powercut.linux.mounts import mount, umount

    img = tmp_path / "fs.img"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    process.run(["mkfs.ext4", "-F", "-q", str(img)], timeout=60)
    with loopdev.LoopDevice(img) as dev:
        (tmp_path / "m").mkdir()
        mount(dev, str(tmp_path / "m"), "ext4", "")
        (tmp_path / "m" / "data").write_text("hello")
        umount(str(tmp_path / "m"))
        ctx = CheckContext(filesystems.get("ext4"), spec(user, "reads_mount"))
        state = CrashState("flush", 1, (), (), ("1",), (), "flush@1", 0)
        v = judge(ctx, dev, state, str(tmp_path / "j"))
        assert v.verdict == "pass", v.reasons
        ctx = CheckContext(filesystems.get("ext4"), spec(user, "crashes"))
        v = judge(ctx, dev, state, str(tmp_path / "j"))
        assert v.verdict == "checker-crashed" and "KeyError" in v.reasons[0]

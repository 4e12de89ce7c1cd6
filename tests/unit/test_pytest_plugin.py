"""The pytest plugin (powercut/pytest_plugin.py) through pytester, with a fake campaign: no VM.

The fake replaces ``campaign.crashtest.run`` and ``missing`` (the plugin calls them through the
module) and builds a real ``Outcome`` from made-up verdicts, so the words a failing crash test
prints, its JUnit properties, the settings' precedence and the prerequisite handling are the
real code's.  tests/vm/test_pytest_plugin_vm.py runs the same plugin on real VMs."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from powercut.campaign import crashtest as ct
from powercut.core.judging.verdict import Verdict
from powercut.core.states.coverage import Coverage, ModelCoverage
from powercut.report.summary import summarize

pytest_plugins = ["pytester"]

TEST_FILE = """
import pytest
import powercut

def put_keys(mount, n=3):
    for i in range(n):
        powercut.ack(i)

def check_keys(state):
    assert True

@pytest.mark.powercut(fs="xfs", models=["flush"], params={"n": 5})
def test_kv(crashtest):
    crashtest(put_keys, check_keys)
"""


def verdict(state: str, v: str = "pass", cut: int = 5, reason: str = "") -> Verdict:
    return Verdict(
        state,
        state.split("@")[0],
        cut,
        v,
        (reason,) if reason else (),
        2,
        0,
        0.1,
        confirmed=v != "pass",
    )


class FakeCampaign:
    """What the plugin asked for (the CrashTest values) and what it gets back."""

    def coverage(self) -> Coverage:
        judged = Counter(v.model for v in self.verdicts)
        return Coverage(tuple(ModelCoverage(m, n + self.left_out, n) for m, n in judged.items()))

    def __init__(
        self,
        verdicts: list[Verdict],
        groups: list[dict] | None = None,
        acks: int = 5,
        status: str = "complete",
        left_out: int = 0,
    ) -> None:
        self.verdicts, self.groups, self.acks, self.status = verdicts, groups or [], acks, status
        self.left_out = left_out  # distinct states --max-states left out (0: an exhaustive check)
        self.tests: list[ct.CrashTest] = []

    def run(self, test: ct.CrashTest, out: Path, on_verdict=None) -> ct.Outcome:
        self.tests.append(test)
        (out / "check").mkdir(parents=True, exist_ok=True)
        fails = [v for v in self.verdicts if v.finding]
        summary = summarize(
            self.verdicts,
            recording=str(out / "recording"),
            fstype=test.fs,
            workload="cmd",
            check_in=test.place.check_in,
            seconds=2.0,
            status=self.status,
            rejudged=len(fails),
            groups=self.groups,
            acks=self.acks,
            coverage=self.coverage(),
        )
        return ct.Outcome(
            test,
            summary,
            {"summary": out / "check" / "summary.json", "junit": out / "check" / "junit.xml"},
            out,
        )


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def install(campaign: FakeCampaign, lacking: list[str] | None = None) -> FakeCampaign:
        monkeypatch.setattr(ct, "run", campaign.run)
        monkeypatch.setattr(ct, "missing", lambda test: list(lacking or []))
        return campaign

    return install


LOST = [
    verdict("flush@9", "lost-ack", 9, "acked key 3 missing: got 2 records"),
    verdict("flush@12", "lost-ack", 12, "acked key 4 missing: got 2 records"),
    verdict("flush@3"),
    verdict("flush@4"),
]
GROUP = {
    "verdict": "lost-ack",
    "reason_class": "acked key * missing: got * records",
    "count": 2,
    "first": "flush@9",
    "minimized": "flush@9/d3",
    "shrink_calls": 7,
    "culprits": ["entry 41: 4096 bytes at sector 2048: file data of /store.db (inode 12)"],
    "bundle": "/tmp/out/check/bundles/01-flush_9",
}


def test_plugin_is_registered_by_its_entry_point(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest("--help")
    res.stdout.fnmatch_lines(
        ["*powercut crash tests*", "*--powercut-check-in*", "*--powercut-skip-missing*"]
    )
    res = pytester.runpytest("--markers")
    res.stdout.fnmatch_lines(["*@pytest.mark.powercut(**settings)*"])


def test_plugin_module_loads_nothing_of_the_harness() -> None:
    """pytest imports the plugin in every session of a project with powercut installed."""
    code = (
        "import sys; import powercut.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.startswith('powercut')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "['powercut', 'powercut.pytest_plugin']"


def test_a_passing_crash_test_passes_with_its_settings(pytester: pytest.Pytester, fake) -> None:
    camp = fake(FakeCampaign([verdict("flush@3"), verdict("flush@4")]))
    pytester.makepyfile(test_kv=TEST_FILE)
    res = pytester.runpytest("--junitxml=junit.xml")
    res.assert_outcomes(passed=1)
    (test,) = camp.tests
    assert (test.fs, test.models, test.params, test.place.check_in, test.expect) == (
        "xfs",
        ("flush",),
        {"n": 5},
        "vm",
        "pass",
    )
    assert test.checker_function.endswith("test_kv.py::check_keys") and not test.checker_cmd
    assert (
        "-m powercut._pycall" in test.workload_cmd and "test_kv.py::put_keys" in test.workload_cmd
    )
    assert (
        test.campaign().label == test.name == "test_kv.py::test_kv"
    )  # report.html's title: the test's id
    res.stdout.fnmatch_lines(
        [
            "*powercut crash tests*",
            "*test_kv.py::test_kv: pass (exhaustive): all 2 distinct crash states pass (xfs; flush; judged in vm)",
        ]
    )
    props = {
        p.get("name"): p.get("value")
        for p in ET.parse(pytester.path / "junit.xml").iter("property")
    }
    assert props["powercut_verdict"] == "pass" and props["powercut_states"] == "2"


def test_a_failing_crash_test_reads_like_a_finding(pytester: pytest.Pytester, fake) -> None:
    fake(FakeCampaign(LOST, [GROUP]))
    pytester.makepyfile(test_kv=TEST_FILE)
    res = pytester.runpytest("--junitxml=junit.xml")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        [
            "*powercut: lost-ack: 2 of 4 distinct crash states fail (xfs; flush; judged in vm), 2 confirmed alone; exhaustive*",
            "group 1: lost-ack x 2: acked key * missing: got * records",
            "  minimized: flush@9 -> flush@9/d3 (7 checks)",
            "  blame: entry 41: 4096 bytes at sector 2048: file data of /store.db (inode 12)",
            "  repro: powercut repro /tmp/out/check/bundles/01-flush_9",
            "artifacts: *",
            "*FAILED test_kv.py::test_kv - *lost-ack*",
        ]
    )
    assert "def __call__" not in res.stdout.str() and "CrashTestFailed" not in res.stdout.str()
    case = next(ET.parse(pytester.path / "junit.xml").iter("testcase"))
    failure = case.find("failure")
    assert (
        failure is not None
        and "repro: powercut repro /tmp/out/check/bundles/01-flush_9" in failure.text
    )
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["powercut_failed"] == "2" and props["powercut_repro"].startswith("powercut repro ")


@pytest.mark.parametrize(
    "expect, verdicts, outcome, words",
    [
        ("lost-ack", LOST, "passed", None),
        ("fail", LOST, "passed", None),
        ("corrupt-data", LOST, "failed", "expected corrupt-data, found lost-ack"),
        (
            "fail",
            [verdict("flush@3")],
            "failed",
            "expected fail: the crash test was expected to find a failure",
        ),
    ],
)
def test_expectations_for_known_broken_variants(
    pytester: pytest.Pytester, fake, expect, verdicts, outcome, words
) -> None:
    fake(FakeCampaign(verdicts))
    pytester.makepyfile(
        test_kv=TEST_FILE.replace(
            "crashtest(put_keys, check_keys)", f"crashtest(put_keys, check_keys, expect={expect!r})"
        )
    )
    res = pytester.runpytest()
    res.assert_outcomes(**{outcome: 1})
    if words:
        res.stdout.fnmatch_lines([f"*{words}*"])


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"status": "interrupted"}, "powercut: incomplete: the check is interrupted"),
        ({"acks": 0}, "powercut: no-acks: the workload acknowledged no commit"),
    ],
)
def test_a_run_that_proves_nothing_fails_even_when_a_failure_was_expected(
    pytester, fake, kwargs, words
) -> None:
    fake(FakeCampaign([verdict("flush@3")], **kwargs))
    pytester.makepyfile(test_kv=TEST_FILE)
    res = pytester.runpytest()
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([f"*{words}*"])


def test_command_line_overrides_marker_and_call(pytester: pytest.Pytester, fake) -> None:
    camp = fake(FakeCampaign([verdict("flush@3")]))
    pytester.makepyfile(
        test_kv=TEST_FILE.replace(
            "crashtest(put_keys, check_keys)",
            "crashtest(put_keys, 'true', fs='ext4', max_states=9)",
        )
    )
    res = pytester.runpytest(
        "--powercut-models=write-cache,torn",
        "--powercut-check-in=host",
        "--powercut-max-states=3",
        "--powercut-jobs=2",
        f"--powercut-out={pytester.path}/pc",
    )
    res.assert_outcomes(passed=1)
    (test,) = camp.tests
    assert (
        test.fs,
        test.models,
        test.place.check_in,
        test.selection.max_states,
        test.place.jobs,
    ) == ("ext4", ("write-cache", "torn"), "host", 3, 2)
    assert test.checker_cmd == "true" and not test.checker_function
    res.stdout.fnmatch_lines(["*test_kv.py::test_kv: pass*"])


def test_delay_sync_from_the_marker_and_the_command_line_reaches_the_recording(
    pytester, fake
) -> None:
    camp = fake(FakeCampaign([verdict("flush@3")]))
    pytester.makepyfile(
        test_kv=TEST_FILE.replace(
            "crashtest(put_keys, check_keys)",
            "crashtest(put_keys, 'true', delay_sync='app.log= 0.2s')",
        )
    )
    pytester.runpytest().assert_outcomes(passed=1)
    assert camp.tests[-1].recording().workload.delay_sync == ("app.log=200ms",)
    pytester.runpytest(
        "--powercut-delay-sync=*.idx=1s", "--powercut-delay-sync=*.wal=5ms"
    ).assert_outcomes(passed=1)
    assert camp.tests[-1].recording().workload.delay_sync == ("*.idx=1s", "*.wal=5ms")


def test_shell_command_workload_and_no_checker(pytester: pytest.Pytester, fake) -> None:
    camp = fake(FakeCampaign([verdict("flush@3")]))
    pytester.makepyfile(
        test_cmd="""
        def test_cmd(crashtest):
            out = crashtest("for i in 1 2 3; do echo $i >> f; sync; powercut-mark ack:$i; done")
            assert out.summary.total == 1
    """
    )
    pytester.runpytest().assert_outcomes(passed=1)
    (test,) = camp.tests
    assert (
        test.workload_cmd.startswith("for i in")
        and not test.checker_cmd
        and not test.checker_function
    )
    assert (test.fs, test.models) == ("ext4", ("flush", "write-cache", "torn-4k"))


@pytest.mark.parametrize(
    "body, words",
    [
        ("crashtest(lambda m: None)", "must be defined at the top level of its module"),
        ("crashtest('true', nonsense=1)", "unknown crash-test setting(s) nonsense"),
        ("crashtest('true', models=['cache'])", "unknown crash model(s) cache"),
        ("crashtest('true', fs='ntfs')", "ntfs"),
        ("crashtest('true', expect='maybe')", "expect='maybe'"),
        ("crashtest('true', params={'a': None})", "workload parameter a=None"),
        ("crashtest('true', max_states=-1)", "--max-states"),
        ("crashtest('true', nodes=9)", "nodes=9: a whole number from 1"),
        (
            "crashtest('true', nodes=3, fault='eio-writes')",
            "a cluster recording: name the node whose disk fails",
        ),
        (
            "crashtest('true', nodes=3, fault='3=eio-writes')",
            "node 3 named, and the recording has nodes 0..2",
        ),
        (
            "crashtest('true', nodes=3, disk_latency='3=hdd')",
            "node 3 named, and the recording has nodes 0..2",
        ),
        (
            "crashtest('true', delay_sync='app.log')",
            "delay_sync='app.log': --delay-sync app.log: expected GLOB=TIME",
        ),
        ("crashtest('true', delay_sync=['a=1ms', 'a=2ms'])", "a is given twice"),
        ("crashtest('true', delay_sync=5)", "a GLOB=TIME rule or a list of them"),
    ],
)
def test_mistakes_are_one_line_failures(pytester: pytest.Pytester, fake, body, words) -> None:
    camp = fake(FakeCampaign([verdict("flush@3")]))
    pytester.makepyfile(test_bad=f"def test_bad(crashtest):\n    {body}\n")
    res = pytester.runpytest()
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([f"*{words}*"])
    assert (
        "Traceback" not in res.stdout.str()
        and "During handling" not in res.stdout.str()
        and not camp.tests
    )


def test_missing_prerequisite_is_an_error_unless_skips_were_asked_for(
    pytester: pytest.Pytester, fake
) -> None:
    fake(
        FakeCampaign([verdict("flush@3")]),
        lacking=["qemu-system-x86_64 not found (install the Debian package qemu-system-x86)"],
    )
    pytester.makepyfile(test_kv=TEST_FILE)
    res = pytester.runpytest()
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        [
            "*cannot run crash tests here: qemu-system-x86_64 not found (install*powercut doctor*"
            "powercut setup*--powercut-skip-missing*"
        ]
    )
    res = pytester.runpytest("--powercut-skip-missing", "-rs")
    res.assert_outcomes(skipped=1)
    res.stdout.fnmatch_lines(["SKIPPED*qemu-system-x86_64 not found*"])


def test_harness_error_says_what_happened_and_where(pytester: pytest.Pytester, monkeypatch) -> None:
    from powercut.errors import WorkloadFailed

    def run(test, out, on_verdict=None):
        raise WorkloadFailed("the workload exited 1: KeyError: 'x' (see /o/job/workload.err)")

    monkeypatch.setattr(ct, "run", run)
    monkeypatch.setattr(ct, "missing", lambda test: [])
    pytester.makepyfile(test_kv=TEST_FILE)
    res = pytester.runpytest()
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        ["*powercut could not finish the crash test: WorkloadFailed: the workload exited 1*"]
    )
    assert "Traceback" not in res.stdout.str() and "During handling" not in res.stdout.str()


def test_no_crash_test_no_section(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    res = pytester.runpytest()
    res.assert_outcomes(passed=1)
    assert "powercut crash tests" not in res.stdout.str()


def test_shards_split_the_crash_tests_over_runners(pytester: pytest.Pytester, fake) -> None:
    fake(FakeCampaign([verdict("flush@3")]))
    body = "\n".join(f"def test_crash_{i}(crashtest):\n    crashtest('true')\n" for i in range(5))
    pytester.makepyfile(test_many=body + "\ndef test_plain():\n    pass\n")
    ran = []
    for i in (1, 2, 3):
        res = pytester.runpytest(f"--powercut-shard={i}/3", "-v")
        ran.append({line.split("::")[1].split()[0] for line in res.outlines if " PASSED" in line})
    crash = [r - {"test_plain"} for r in ran]
    assert (
        set().union(*crash) == {f"test_crash_{i}" for i in range(5)} and sum(map(len, crash)) == 5
    )
    assert (
        [len(c) for c in crash] == [2, 2, 1]
        and "test_plain" in ran[0]
        and "test_plain" not in ran[1] | ran[2]
    )
    res = pytester.runpytest("--powercut-shard=4/3")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--powercut-shard wants I/N*"])


def test_a_capped_pass_says_so_and_fails_where_proof_is_asked_for(
    pytester: pytest.Pytester, fake
) -> None:
    """#37: a pass that judged 2 of 5 distinct states says 'capped' in its line and JUnit property; with
    --powercut-require-exhaustive the crash test fails, naming the coverage."""
    fake(FakeCampaign([verdict("flush@3"), verdict("flush@4")], left_out=3))
    pytester.makepyfile(test_kv=TEST_FILE)
    res = pytester.runpytest("--junitxml=junit.xml")
    res.assert_outcomes(passed=1)
    res.stdout.fnmatch_lines(
        ["*test_kv.py::test_kv: pass (capped: 2 of 5 distinct states judged): all 2 judged*"]
    )
    props = {
        p.get("name"): p.get("value")
        for p in ET.parse(pytester.path / "junit.xml").getroot().iter("property")
    }
    assert props["powercut_coverage"] == "capped: 2 of 5 distinct states judged"
    res = pytester.runpytest("--powercut-require-exhaustive")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(
        ["*require_exhaustive: the pass is not exhaustive (capped: 2 of 5 distinct states judged)*"]
    )


def test_seed_auto_and_a_bad_seed(pytester: pytest.Pytester, fake) -> None:
    camp = fake(FakeCampaign([verdict("flush@3")]))
    pytester.makepyfile(test_kv=TEST_FILE)
    pytester.runpytest("--powercut-seed", "auto").assert_outcomes(passed=1)
    assert (
        camp.tests[-1].selection.seed == -1
    )  # resolved when the campaign starts (core.selection.SEED_AUTO)
    pytester.runpytest("--powercut-seed", "7").assert_outcomes(passed=1)
    assert camp.tests[-1].selection.seed == 7
    res = pytester.runpytest("--powercut-seed", "soon")
    assert res.ret != 0 and "--powercut-seed" in "\n".join(res.stdout.lines + res.stderr.lines)

"""The GitHub Action (action.yml, its scripts under ci/action/, docs/examples/crash-tests.yml):

* actionlint accepts the example workflow, as written and with the action resolved to this
  checkout's action.yml (so its inputs are checked against the action's), and the action's own
  steps (a composite action's steps, linted as a workflow's job whose inputs are the action's);
* every script the action runs exists, and its outputs name steps it has;
* the shard and merge steps, run here as the action runs them, on a small project whose crash tests
  write what a crash test writes (the VM part faked: tests/vm/test_action_vm.py runs real ones):
  two shards, one failing test, merged into one JUnit, report.html and job summary; KVM asked for
  and a VM that ran under TCG fails both the shard and the merge; a missing shard is named; the KVM
  step's answers; bad inputs get one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.unit.ci.test_workflow import actionlint

ROOT = Path(__file__).resolve().parents[3]
ACTION = ROOT / "action.yml"
EXAMPLE = ROOT / "docs" / "examples" / "crash-tests.yml"
SCRIPTS = ROOT / "ci" / "action"
USES = "uses: OWNER/powercut@main"


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [actionlint(), "-no-color", "-shellcheck=", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )


def action_inputs() -> list[str]:
    block = re.search(r"^inputs:\n(.*?)^\S", ACTION.read_text(), re.S | re.M)
    assert block
    return re.findall(r"^  ([a-z][a-z-]*):$", block.group(1), re.M)


def action_as_workflow() -> str:
    """The composite action's steps as one job of a workflow called with the action's inputs."""
    text = ACTION.read_text()
    steps = text.split("\n  steps:\n", 1)[1]
    inputs = "".join(f"      {name}:\n        type: string\n" for name in action_inputs())
    body = "".join(f"  {line}\n" if line else "\n" for line in steps.splitlines())
    return (
        f"name: the action's steps\non:\n  workflow_call:\n    inputs:\n{inputs}"
        f"jobs:\n  action:\n    runs-on: ubuntu-24.04\n    steps:\n{body}"
    )


def repo_with_local_action(tmp_path: Path, example: str) -> Path:
    """A repository holding this action.yml at its root and the example workflow using it as ./"""
    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".git").mkdir()
    shutil.copy(ACTION, repo / "action.yml")
    wf = repo / ".github" / "workflows" / "crash-tests.yml"
    wf.write_text(example.replace(USES, "uses: ./"))
    return wf


def test_the_example_workflow_passes_actionlint(tmp_path: Path) -> None:
    res = lint(EXAMPLE)
    assert res.returncode == 0, res.stdout + res.stderr
    text = EXAMPLE.read_text()
    assert text.count(USES) == 2 and "mode: merge" in text
    local = lint(repo_with_local_action(tmp_path, text))
    assert local.returncode == 0, local.stdout + local.stderr


def test_actionlint_checks_the_example_against_the_actions_inputs(tmp_path: Path) -> None:
    broken = EXAMPLE.read_text().replace("          install: -e .", "          instal: -e .")
    res = lint(repo_with_local_action(tmp_path, broken))
    assert res.returncode != 0 and "instal" in res.stdout


def test_the_actions_steps_pass_actionlint(tmp_path: Path) -> None:
    wf = tmp_path / ".github" / "workflows" / "action.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(action_as_workflow())
    res = lint(wf)
    assert res.returncode == 0, res.stdout + res.stderr
    wf.write_text(
        action_as_workflow().replace(
            "steps.install.outputs.python", "steps.instal.outputs.python", 1
        )
    )
    assert lint(wf).returncode != 0


def test_the_action_runs_its_scripts_and_its_outputs_name_its_steps() -> None:
    text = ACTION.read_text()
    scripts = set(re.findall(r'"\$GITHUB_ACTION_PATH/(ci/action/[\w-]+\.sh)"', text))
    assert scripts == {f"ci/action/{p.name}" for p in SCRIPTS.glob("*.sh")}
    ids = set(re.findall(r"^    - id: ([\w-]+)$", text, re.M))
    assert set(re.findall(r"steps\.([\w-]+)\.outputs", text)) <= ids
    assert "99-kvm4all.rules" in (SCRIPTS / "kvm.sh").read_text()
    for needed in (
        "actions/cache@v4",
        "actions/upload-artifact@v4",
        "actions/download-artifact@v4",
    ):
        assert needed in text


# -- the steps, run here ---------------------------------------------------------------------------

# a crash test's outputs as the plugin's crashtest fixture writes them (crashtest.json, the recording's
# manifest with the acceleration its VM used, the check's summary, report and a repro bundle), without
# the VMs: FAKE_ACCEL is what the "VM" ran under; a test passes params={"broken": True} to fail
CONFTEST = """
import json
import os
from pathlib import Path

import pytest

from powercut.pytest_plugin import _slug


@pytest.fixture
def crashtest(request, tmp_path):
    base = request.config.getoption("powercut_out")
    out = Path(base).absolute() / _slug(request.node.nodeid)

    def run(workload, checker=None, params=None):
        out.mkdir(parents=True)
        (out / "crashtest.json").write_text(json.dumps({"test": request.node.nodeid}))
        rec, check = out / "recording", out / "check"
        rec.mkdir()
        (rec / "manifest.toml").write_text(f'[recording]\\naccel = "{os.environ.get("FAKE_ACCEL", "kvm")}"\\n')
        (rec / "log.bin").write_bytes(b"L" * 4096)
        (rec / "data-final.img").write_bytes(b"D" * 4096)
        bundle = check / "bundles" / "01-flush_9"
        bundle.mkdir(parents=True)
        (bundle / "bundle.json").write_text("{}")
        (bundle / "log.bin").write_bytes(b"l" * 512)
        broken = bool((params or {}).get("broken"))
        groups = [{"verdict": "lost-ack", "count": 3, "first": "flush@9", "minimized": "flush@7",
                   "cause": "lost-ack: acknowledged key k# is lost <- present inode table",
                   "culprits": ["durable: inode table"], "bundle": str(bundle)}] if broken else []
        (check / "summary.json").write_text(json.dumps({"groups": groups}))
        (check / "report.html").write_text("<html>one test</html>")
        props = [("powercut_verdict", "lost-ack" if broken else "pass"), ("powercut_coverage", "exhaustive"),
                 ("powercut_artifacts", str(out)), ("powercut_report", str(check / "report.html"))]
        if broken:
            props.append(("powercut_repro", f"powercut repro {bundle}"))
        request.node.user_properties.extend(props)
        if broken:
            pytest.fail(f"powercut: lost-ack: 3 of 10 distinct crash states fail (ext4; flush)\\n"
                        f"  repro: powercut repro {bundle}", pytrace=False)

    return run
"""

TESTS = """
import pytest


def put(mount):
    pass


def test_store_survives(crashtest):
    crashtest(put)


def test_store_without_fsync(crashtest):
    crashtest(put, params={"broken": True})


def test_journal_survives(crashtest):
    crashtest(put)


def test_plain_unit_test():
    assert 1 + 1 == 2
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    (d / "tests").mkdir(parents=True)
    (d / "tests" / "conftest.py").write_text(CONFTEST)
    (d / "tests" / "test_store.py").write_text(TESTS)
    return d


def step(script: str, cwd: Path, tmp_path: Path, **env: str) -> tuple[int, str, dict[str, str]]:
    """Run one of the action's scripts as its step does: (exit status, stdout + stderr, $GITHUB_OUTPUT)."""
    outputs = tmp_path / f"github-output-{script}-{len(list(tmp_path.glob('github-output-*')))}"
    full = {**os.environ, "PYTHON": sys.executable, "GITHUB_OUTPUT": str(outputs), **env}
    full.pop("PYTEST_ADDOPTS", None)
    res = subprocess.run(
        ["bash", str(SCRIPTS / script)],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
    )
    got = (
        dict(line.split("=", 1) for line in outputs.read_text().splitlines())
        if outputs.exists()
        else {}
    )
    return res.returncode, res.stdout + res.stderr, got


def test_two_shards_merge_into_one_junit_report_and_job_summary(
    project: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    statuses = {}
    for i in (1, 2):
        rc, text, out = step(
            "shard.sh",
            project,
            tmp_path,
            SHARD=f"{i}/2",
            ACCEL="kvm",
            TESTS="tests -q",
            OUT=str(runs / "shards" / f"powercut-shard-{i}-of-2"),
        )
        statuses[i] = rc
        assert out.get("status") == str(rc), text
    # 3 crash tests over 2 shards, round-robin over their sorted ids; the plain test runs in shard 1
    # (journal_survives, store_without_fsync and the plain test in 1; store_survives in 2)
    assert statuses == {1: 3, 2: 0}
    s1 = runs / "shards" / "powercut-shard-1-of-2"
    doc = json.loads((s1 / "shard.json").read_text())
    assert doc["shard"] == "1/2" and doc["pytest_status"] == 1 and doc["status"] == 3
    assert doc["accels"] == {
        "tests_test_store.py_test_store_without_fsync": "kvm",
        "tests_test_store.py_test_journal_survives": "kvm",
    }
    assert list(s1.glob("tests/*/recording/manifest.toml"))
    assert not list(s1.glob("tests/*/recording/log.bin")), (
        "the recordings' log and disk are dropped"
    )
    assert "1 failed, 2 passed, 1 deselected" in (s1 / "pytest.log").read_text()

    summary = tmp_path / "step-summary.md"
    rc, text, out = step(
        "merge.sh",
        tmp_path,
        tmp_path,
        OUT=str(runs),
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_REPOSITORY="me/kv",
        GITHUB_RUN_ID="42",
        GITHUB_SERVER_URL="https://github.com",
    )
    assert rc == 3 and out == {"status": "3"}, text
    assert "fail: 3 crash tests and 1 other test in 2 of 2 shards; 1 failed" in text
    merged = runs / "merged"
    md = summary.read_text()
    assert md == (merged / "summary.md").read_text()
    assert md.startswith("## :x: powercut crash tests: fail")
    for words in (
        "| `tests/test_store.py::test_store_without_fsync` | 1/2 | failed | lost-ack: 3 of 10 distinct",
        "| `tests/test_store.py::test_plain_unit_test` | 1/2 | passed |",
        "1. **lost-ack** x 3: acknowledged key k# is lost <- present inode table; minimized: flush@9 -> flush@7",
        "   powercut repro tests/tests_test_store.py_test_store_without_fsync/check/bundles/01-flush_9",
        "- `powercut-merged`:",
        "- `powercut-shard-2-of-2`:",
        "[The run's artifacts](https://github.com/me/kv/actions/runs/42#artifacts)",
    ):
        assert words in md, words
    # the repro command's path is in the merge, with the bundle's own log
    bundle = (
        merged
        / "tests"
        / "tests_test_store.py_test_store_without_fsync"
        / "check"
        / "bundles"
        / "01-flush_9"
    )
    assert (bundle / "log.bin").is_file() and (bundle / "bundle.json").is_file()
    # one JUnit: every shard's cases, their shard a property, the runners' paths relative to the merge
    root = ET.parse(merged / "junit.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "0")
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {
        "test_store_survives",
        "test_store_without_fsync",
        "test_journal_survives",
        "test_plain_unit_test",
    }
    props = {
        p.get("name"): p.get("value") for p in cases["test_store_without_fsync"].iter("property")
    }
    assert props["powercut_shard"] == "1/2"
    assert props["powercut_repro"] == (
        "powercut repro tests/tests_test_store.py_test_store_without_fsync/check/bundles/01-flush_9"
    )
    assert str(tmp_path) not in (merged / "junit.xml").read_text()
    # one report.html linking each crash test's own report, which the merge holds
    page = (merged / "report.html").read_text()
    links = re.findall(r'href="([^"]+)"', page)
    assert len(links) == 3 and all((merged / link).is_file() for link in links)
    assert "powercut repro tests/tests_test_store.py_test_store_without_fsync" in page
    assert json.loads((merged / "summary.json").read_text())["verdict"] == "fail"


def test_kvm_asked_for_and_tcg_used_fails_the_shard_and_the_merge(
    project: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    rc, text, out = step(
        "shard.sh",
        project,
        tmp_path,
        SHARD="1/1",
        ACCEL="kvm",
        TESTS="tests -q -k survives",
        OUT=str(runs / "shards" / "s1"),
        FAKE_ACCEL="tcg",
        GITHUB_ACTIONS="true",
    )
    assert rc == 1 and out == {"status": "1"}, text
    assert re.search(
        r"^::error::shard 1/1: KVM was asked for, but 2 of 2 crash test\(s\) ran their VM under tcg",
        text,
        re.M,
    ), text
    summary = tmp_path / "summary.md"
    rc, text, _ = step(
        "merge.sh", tmp_path, tmp_path, OUT=str(runs), GITHUB_STEP_SUMMARY=str(summary)
    )
    assert rc == 1 and "KVM was asked for" in summary.read_text()
    assert summary.read_text().startswith("## :warning: powercut crash tests: error")
    # auto accepts TCG
    rc, text, _ = step(
        "shard.sh",
        project,
        tmp_path,
        SHARD="1/1",
        ACCEL="auto",
        TESTS="tests -q -k survives",
        OUT=str(runs / "shards" / "s1"),
        FAKE_ACCEL="tcg",
    )
    assert rc == 0, text


def test_a_missing_shard_is_named_and_never_a_pass(project: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    rc, text, _ = step(
        "shard.sh", project, tmp_path, SHARD="1/3", TESTS="tests -q", OUT=str(runs / "shards" / "a")
    )
    assert rc == 0, text
    summary = tmp_path / "summary.md"
    rc, text, _ = step(
        "merge.sh", tmp_path, tmp_path, OUT=str(runs), GITHUB_STEP_SUMMARY=str(summary)
    )
    assert rc == 1
    assert "shards 2/3, 3/3 missing" in text and "shard 2/3: missing" in summary.read_text()
    # nothing at all to merge: one line, and the summary says so
    (runs / "shards" / "a" / "shard.json").unlink()
    rc, text, _ = step(
        "merge.sh", tmp_path, tmp_path, OUT=str(runs), GITHUB_STEP_SUMMARY=str(summary)
    )
    assert rc == 2 and text.strip().startswith("powercut-action: no shard output under")


@pytest.mark.parametrize(
    "env, status, words",
    [
        ({"SHARD": "2-of-4"}, 2, "shard wants I/N (e.g. 2/4), not '2-of-4'"),
        ({"ACCEL": "fast"}, 2, "accel wants auto, kvm or tcg, not 'fast'"),
        ({"TESTS": "tests -k 'unclosed"}, 2, "tests: not shell words (an unclosed quote?)"),
        ({"SHARD": "5/4"}, 2, "--powercut-shard wants I/N with 1 <= I <= N"),
    ],
)
def test_bad_shard_inputs_get_one_line(
    project: Path, tmp_path: Path, env: dict[str, str], status: int, words: str
) -> None:
    rc, text, _ = step("shard.sh", project, tmp_path, **{"OUT": str(tmp_path / "o"), **env})
    assert (rc, text.count("Traceback")) in ((status, 0), (1, 0)), text
    assert words in text


def test_the_kvm_step(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-kvm")
    rc, text, _ = step("kvm.sh", tmp_path, tmp_path, ACCEL="tcg", KVM_DEVICE=missing)
    assert rc == 0 and "TCG" in text
    rc, text, _ = step(
        "kvm.sh", tmp_path, tmp_path, ACCEL="kvm", KVM_DEVICE=missing, GITHUB_ACTIONS="true"
    )
    assert rc == 1 and re.search(
        rf"^::error title=powercut::accel kvm: {missing} is missing", text, re.M
    ), text
    rc, text, _ = step(
        "kvm.sh", tmp_path, tmp_path, ACCEL="auto", KVM_DEVICE=missing, GITHUB_ACTIONS="true"
    )
    assert rc == 0 and "::warning title=powercut::accel auto" in text
    rc, text, _ = step("kvm.sh", tmp_path, tmp_path, ACCEL="KVM", KVM_DEVICE=missing)
    assert rc == 2 and text.strip() == "powercut-action: accel wants auto, kvm or tcg, not 'KVM'"


def test_the_cache_key_names_the_kernel_package_and_powercut_version(tmp_path: Path) -> None:
    from importlib.metadata import version

    rc, text, out = step("cache-key.sh", tmp_path, tmp_path)
    assert rc == 0, text
    assert re.fullmatch(
        rf"powercut-guest-(linux-image-\S+|unresolved)-{re.escape(version('powercut'))}-[0-9a-f]{{12}}",
        out["key"],
    ), out
    assert text.strip().splitlines()[-1] == out["key"]

"""The nightly GitHub Actions workflow (.github/workflows/nightly.yml): actionlint accepts it and
refuses a broken copy, and every step it runs is a step ci/nightly.sh has (the local run of the same
campaign is tests/vm/test_nightly_vm.py).  actionlint is installed by ci/setup.sh (a pinned release
built from the Go module proxy)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
NIGHTLY = ROOT / "ci" / "nightly.sh"


def actionlint() -> str:
    cached = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "powercut"
        / "bin"
        / "actionlint"
    )
    found = shutil.which("actionlint") or (str(cached) if cached.is_file() else None)
    assert found, (
        "actionlint is missing: ci/setup.sh installs it (the README's test command runs ci/setup.sh)"
    )
    return found


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [actionlint(), "-no-color", "-shellcheck=", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
    )


def test_the_workflow_passes_actionlint() -> None:
    res = lint(WORKFLOW)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    "old, new, words",
    [
        (
            "runs-on: ubuntu-24.04\n    timeout-minutes: 30",
            "runs-on: ubuntu-24.04\n    timeout-minute: 30",
            "timeout-minute",
        ),
        (
            "${{ fromJSON(needs.rows.outputs.rows) }}",
            "${{ fromJSON(needs.row.outputs.rows) }}",
            "needs.row",
        ),
        ("needs: [rows, check]", "needs: [rows, chekc]", "chekc"),
    ],
)
def test_actionlint_refuses_a_broken_workflow(
    tmp_path: Path, old: str, new: str, words: str
) -> None:
    text = WORKFLOW.read_text()
    assert old in text
    broken = tmp_path / ".github" / "workflows" / "nightly.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(old, new, 1))
    res = lint(broken)
    assert res.returncode != 0 and words in res.stdout


def test_every_step_the_workflow_runs_is_a_step_of_nightly_sh() -> None:
    steps = set(re.findall(r"bash ci/nightly\.sh (\w+)", WORKFLOW.read_text()))
    assert steps == {"rows", "record", "check", "merge", "schedules", "explore", "corpus"}
    script = NIGHTLY.read_text()
    for step in steps:
        assert re.search(rf"^\s+{step}\)", script, re.M), f"ci/nightly.sh has no step {step}"


def test_a_nightly_row_holds_syncs_and_the_exploration_runs_its_row(tmp_path) -> None:
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = dict(
        os.environ,
        PYTHON=str(fake),
        OUT=str(tmp_path / "n"),
        EXPLORE_ROW="twofile:xfs:n=4,reply_on=index",
        EXPLORE_BUDGET="3",
    )
    rec = subprocess.run(
        ["bash", str(NIGHTLY), "record", "twofile:ext4:n=6,delay-sync=store.*=200ms"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert rec.returncode == 0, rec.stderr
    assert "--workload twofile --fs ext4 --param n=6 --delay-sync store.*=200ms -o" in rec.stdout
    assert (tmp_path / "n" / "twofile_ext4_n_6_delay-sync_store.__200ms").is_dir()
    ex = subprocess.run(
        ["bash", str(NIGHTLY), "explore"], capture_output=True, text=True, env=env, timeout=30
    )
    assert ex.returncode == 0, ex.stderr
    assert (
        "run --workload twofile --fs xfs --param n=4 --param reply_on=index --explore-races --budget 3"
        in ex.stdout
    )


def test_the_nightly_corpus_builds_first_then_runs_the_chosen_entries(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), OUT=str(tmp_path / "n"), CORPUS="a-bug b-bug")
    res = subprocess.run(
        ["bash", str(NIGHTLY), "corpus"], capture_output=True, text=True, env=env, timeout=30
    )
    assert res.returncode == 0, res.stderr
    build, run = res.stdout.splitlines()
    assert build == "-m powercut.cli corpus --build-only a-bug b-bug"
    assert run == f"-m powercut.cli corpus a-bug b-bug -o {tmp_path}/n/corpus"


def test_nightly_rows_and_wrong_step() -> None:
    env = dict(os.environ, ROWS="wal:xfs:n=4 osync:ext4")
    rows = subprocess.run(
        ["bash", str(NIGHTLY), "rows"], capture_output=True, text=True, env=env, timeout=30
    )
    assert rows.returncode == 0 and rows.stdout.split() == ["wal:xfs:n=4", "osync:ext4"]
    bad = subprocess.run(
        ["bash", str(NIGHTLY), "shake"], capture_output=True, text=True, timeout=30
    )
    assert bad.returncode == 2 and "unknown step 'shake'" in bad.stderr


def test_the_suite_workflow_passes_actionlint_and_runs_everything() -> None:
    suite = ROOT / ".github" / "workflows" / "suite-nightly.yml"
    res = lint(suite)
    assert res.returncode == 0, res.stdout + res.stderr
    text = suite.read_text()
    assert (
        "bash ci/test.sh --nightly" in text and "shell: bash" in text
    )  # pipefail: the suite's status, not tee's

"""Running the corpus (campaign/corpus.py) without a VM: a release is built once into the cache
and again only when its driver's sources change, a failed build is one line with its log kept, the
crash test of a release is the entry's driver and settings, and a second run starts from the last
passing state of the entry's model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from powercut.campaign import corpus as run
from powercut.report.corpus import Entry

BUILD = """#!/bin/bash
set -euo pipefail
echo "building $1 into $2"
echo "$1" >> "$(dirname "$0")/../builds.txt"
printf '#!/bin/sh\\necho %s\\n' "$1" > "$2/driver"
chmod +x "$2/driver"
"""


@pytest.fixture
def program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "src" / "kv"
    folder.mkdir(parents=True)
    (folder / "build.sh").write_text(BUILD)
    (folder / "main.rs").write_text("fn main() {}\n")
    monkeypatch.setattr(run, "program_dir", lambda name: tmp_path / "src" / name)
    return folder


def builds(program: Path) -> list[str]:
    f = program.parent / "builds.txt"
    return f.read_text().split() if f.exists() else []


def test_a_release_is_built_once_and_again_when_its_sources_change(
    program: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    out = run.build("kv", "1.0.0", cache)
    assert out == cache / "kv-1.0.0" and os.access(out / "driver", os.X_OK)
    assert "building 1.0.0" in (out / run.BUILD_LOG).read_text()
    run.build("kv", "1.0.0", cache)
    assert builds(program) == ["1.0.0"]
    (program / "main.rs").write_text("fn main() { println!(); }\n")
    assert not run.is_built("kv", "1.0.0", cache)
    run.build("kv", "1.0.0", cache)
    assert builds(program) == ["1.0.0", "1.0.0"]


def test_a_failed_build_is_one_line_naming_its_last_words_and_its_log(
    program: Path, tmp_path: Path
) -> None:
    (program / "build.sh").write_text(
        "echo fetching\necho 'error: no matching package' >&2\nexit 101\n"
    )
    with pytest.raises(run.BuildError) as e:
        run.build("kv", "9.9.9", tmp_path / "cache")
    text = str(e.value)
    assert "\n" not in text and "kv 9.9.9" in text and "exited 101" in text
    assert "error: no matching package" in text and run.BUILD_LOG in text
    assert not run.is_built("kv", "9.9.9", tmp_path / "cache")


def test_a_build_that_leaves_no_driver_and_a_program_without_a_script_are_refused(
    program: Path, tmp_path: Path
) -> None:
    (program / "build.sh").write_text("true\n")
    with pytest.raises(run.BuildError, match="no executable .*/driver"):
        run.build("kv", "1.0.0", tmp_path / "cache")
    with pytest.raises(run.BuildError, match="no .*build.sh"):
        run.build("nothing", "1.0.0", tmp_path / "cache")


def test_the_crash_test_of_a_release_is_its_driver_with_the_entry_settings(tmp_path: Path) -> None:
    e = Entry(
        name="kv-lost-fsync",
        program="kv",
        title="t",
        bug="https://example.org/1",
        fix="https://example.org/2",
        kinds=("lost-fsync",),
        buggy="1.0.0",
        fixed="1.0.1",
        expect="corrupt-data",
        fs="xfs",
        params={"n": 30},
        models=("flush", "write-cache"),
        max_states=200,
    )
    t = run.test_of(e, "1.0.1", cache=tmp_path)
    assert t.workload_cmd == f"{tmp_path}/kv-1.0.1/driver run"
    assert t.checker_cmd == f"{tmp_path}/kv-1.0.1/driver check"
    assert (t.fs, t.params, t.selection.models, t.selection.max_states) == (
        "xfs",
        {"n": 30},
        ("flush", "write-cache"),
        200,
    )
    assert t.place.check_in == "host" and t.start is None
    again = run.test_of(e, "1.0.1", cache=tmp_path, params={"n": 5}, start=(tmp_path, "flush@9"))
    assert again.params == {"n": 5} and again.recording().start is not None
    assert again.recording().start.state == "flush@9"


def test_the_second_run_starts_from_the_last_passing_state_of_the_model(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    lines = [
        ("flush@10", "flush", 10, "pass"),
        ("flush@30", "flush", 30, "pass"),
        ("flush@40", "flush", 40, "corrupt-data"),
        ("write-cache@50/d44", "write-cache", 50, "pass"),
    ]
    journal.write_text(
        "".join(
            json.dumps(
                {
                    "state": s,
                    "model": m,
                    "cut": c,
                    "verdict": v,
                    "reasons": [],
                    "acked": 1,
                    "begun": 1,
                    "seconds": 0.1,
                }
            )
            + "\n"
            for s, m, c, v in lines
        )
    )
    assert run.last_state(journal, "flush") == "flush@30"
    assert run.last_state(journal, "write-cache") == "write-cache@50/d44"
    assert run.last_state(journal, "torn-4k") == ""


def test_a_release_is_said_by_the_group_of_the_entry_message(tmp_path: Path) -> None:
    """Another bug of the same release may fail first: the cause and the reason said are those of
    the group whose state holds the entry's message."""
    from types import SimpleNamespace

    from powercut.core.judging.verdict import Verdict

    def v(state: str, cut: int, reason: str) -> Verdict:
        return Verdict(state, "flush", cut, "corrupt-data", (reason,), 0, 0, 0.1)

    failures = [
        v("flush@5", 5, "panicked: empty database"),
        v("flush@9", 9, "All roots are corrupted"),
    ]
    groups = [
        {"first": "flush@5", "why": {"rule": "unordered-writes", "proven": True}},
        {"first": "flush@9", "why": {"rule": "pointer-before-data", "proven": False}},
    ]
    s = SimpleNamespace(
        failures=failures,
        groups=groups,
        status="complete",
        no_acks=False,
        verdict="corrupt-data",
        total=40,
        coverage_phrase=lambda: "exhaustive",
    )
    r = run.release_of("0.16.0", SimpleNamespace(summary=s), "All roots", 12.34)
    assert (r.cause, r.proof, r.message_seen) == ("pointer-before-data", "not proven", True)
    assert r.first_reason == "All roots are corrupted" and r.failing == 2 and r.seconds == 12.3
    plain = run.release_of("0.16.0", SimpleNamespace(summary=s), "", 1.0)
    assert (plain.cause, plain.proof, plain.message_seen) == ("unordered-writes", "proven", False)
    assert plain.first_reason == "panicked: empty database"

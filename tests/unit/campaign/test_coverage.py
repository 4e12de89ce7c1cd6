"""#37: a pass says what it covered.  Host-mode campaigns on the synthetic recording of test_run.py
(root, loop devices): a capped, a sampled, a checker-less and a sharded check each say so in the
headline, summary.json, JUnit, report.html and the exit status of ``powercut check``; an exhaustive
one says exhaustive; --seed auto picks a seed per run, prints it, and a resumed run keeps it."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from powercut.campaign.merge import merge
from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.core.states.shard import Shard
from powercut.errors import UsageError
from tests.unit.campaign.test_run import CHECKER, STRICT, synthetic  # noqa: F401  (the fixture)

HOST = dict(check_in="host", jobs=1, shrink=0, confirm=False)


def _junit_skipped(path: Path) -> list[str]:
    return [
        c.find("skipped").get("message")
        for c in ET.parse(path).getroot().iter("testcase")
        if c.find("skipped") is not None
    ]


def test_an_exhaustive_pass_says_exhaustive(synthetic: Path, tmp_path: Path) -> None:
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(models=("flush",), checker_command=CHECKER, **HOST),
        tmp_path / "out",
    )
    assert (
        s.ok
        and s.exhaustive
        and s.headline() == f"pass (exhaustive: all {s.total} distinct states judged)"
    )
    summary = json.loads(paths["summary"].read_text())
    assert summary["coverage"]["overall"] == "exhaustive" and summary["headline"] == s.headline()
    assert _junit_skipped(paths["junit"]) == []
    assert "exhaustive" in paths["html"].read_text()


def test_a_capped_pass_says_capped_everywhere_and_can_be_refused(
    synthetic: Path, tmp_path: Path
) -> None:
    """Case 1: --max-states hides a lost ack (STRICT loses key 2) -- the capped run passes, but its
    every output says 'capped', and --require-exhaustive makes it exit 1."""
    full, _ = run_campaign(
        synthetic,
        CampaignSpec.of(models=("flush",), checker_command=STRICT, **HOST),
        tmp_path / "full",
    )
    assert full.verdict == "lost-ack"
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(models=("flush",), checker_command=STRICT, max_states=1, **HOST),
        tmp_path / "capped",
    )
    assert s.verdict == "pass" and s.ok and not s.exhaustive
    phrase = f"capped: 1 of {full.total} distinct states judged"
    assert s.headline() == f"pass ({phrase})"
    summary = json.loads(paths["summary"].read_text())
    assert (
        summary["coverage"]["overall"] == "capped"
        and summary["coverage"]["models"]["flush"]["left_out"] > 0
    )
    assert _junit_skipped(paths["junit"]) == [phrase]
    assert phrase in paths["html"].read_text()
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "check",
            str(synthetic),
            "-o",
            str(tmp_path / "c"),
            "--model",
            "flush",
            "--check-in",
            "host",
            "-j",
            "1",
            "--checker",
            STRICT,
            "--max-states",
            "1",
            "--shrink",
            "0",
            "--no-confirm",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0 and cli.stdout.splitlines()[0] == f"pass ({phrase})"
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "powercut.cli",
            "check",
            str(synthetic),
            "-o",
            str(tmp_path / "c"),
            "--force",
            "--model",
            "flush",
            "--check-in",
            "host",
            "-j",
            "1",
            "--checker",
            STRICT,
            "--max-states",
            "1",
            "--shrink",
            "0",
            "--no-confirm",
            "--require-exhaustive",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        cli.returncode == 1
        and "not exhaustive" in cli.stderr
        and "--require-exhaustive" in cli.stderr
    )


def test_sampled_windows_are_named_with_their_seed(synthetic: Path, tmp_path: Path) -> None:
    """Case 2: above --bound a write-cache window is sampled; the verdict names how many windows and
    states, and the seed."""
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("write-cache",), checker_command=CHECKER, bound=0, samples=1, seed=5, **HOST
        ),
        tmp_path / "out",
    )
    assert not s.exhaustive and s.coverage is not None and "sampled" in s.coverage.words
    assert (
        "(commit windows sampled (seed 5): " in s.headline()
        and "write-cache windows" in s.headline()
    )  # fsck-error there
    m = json.loads(paths["summary"].read_text())["coverage"]["models"]["write-cache"]
    assert m["sampled"]["windows"] >= 1 and m["sampled"]["generated"] <= m["sampled"]["space"]


def test_no_checker_is_weakened(synthetic: Path, tmp_path: Path) -> None:
    """Case 4: a --cmd recording checked without a checker is judged by mount and fsck only: weakened."""
    s, _ = run_campaign(synthetic, CampaignSpec.of(models=("flush",), **HOST), tmp_path / "out")
    assert s.verdict == "pass" and s.coverage is not None and s.coverage.words == ("weakened",)
    assert "weakened: no checker, recovery mount and fsck only" in s.headline()


def test_a_shard_is_capped_and_the_merge_is_exhaustive(synthetic: Path, tmp_path: Path) -> None:
    outs = []
    for i in (1, 2):
        s, _ = run_campaign(
            synthetic,
            CampaignSpec.of(models=("flush",), checker_command=CHECKER, shard=Shard(i, 2), **HOST),
            tmp_path / f"s{i}",
        )
        assert not s.exhaustive and "capped" in s.headline()
        outs.append(tmp_path / f"s{i}")
    merged, _ = merge(outs[:1], tmp_path / "m1")
    assert not merged.exhaustive
    merged, _ = merge(outs, tmp_path / "m")
    assert merged.exhaustive and merged.ok


def test_seed_auto_is_a_new_seed_each_run_printed_and_kept_on_resume(
    synthetic: Path, tmp_path: Path
) -> None:
    spec = dict(
        models=("write-cache",), checker_command=CHECKER, bound=0, samples=2, seed=-1, **HOST
    )
    a, pa = run_campaign(synthetic, CampaignSpec.of(**spec), tmp_path / "a")
    b, _ = run_campaign(synthetic, CampaignSpec.of(**spec), tmp_path / "b")
    assert a.coverage is not None and b.coverage is not None
    assert (
        a.coverage.seed != b.coverage.seed
        and a.coverage.seed >= 0
        and f"seed {a.coverage.seed}" in a.headline()
    )
    assert json.loads((tmp_path / "a" / "campaign.json").read_text())["seed"] == a.coverage.seed
    again, _ = run_campaign(synthetic, CampaignSpec.of(resume=True, **spec), tmp_path / "a")
    assert again.coverage is not None and again.coverage.seed == a.coverage.seed


def test_a_ledger_skips_what_passed_before_and_coverage_grows(
    synthetic: Path, tmp_path: Path
) -> None:
    """#37: with --seed auto and a ledger, the second night judges only states the first did not,
    and the coverage says how many passed earlier; a failing state is never in the ledger."""
    led = tmp_path / "ledger.json"
    spec = dict(
        models=("write-cache",),
        checker_command=CHECKER,
        bound=0,
        samples=4,
        ledger=str(led),
        **HOST,
    )
    first, _ = run_campaign(synthetic, CampaignSpec.of(seed=1, **spec), tmp_path / "n1")
    passed1 = sum(
        1
        for f in (tmp_path / "n1" / "journal.jsonl").read_text().splitlines()
        if json.loads(f)["verdict"] == "pass"
    )
    assert passed1 and len(json.loads(led.read_text())["logs"]) == 1
    second, _ = run_campaign(synthetic, CampaignSpec.of(seed=2, **spec), tmp_path / "n2")
    assert second.coverage is not None and sum(m.earlier for m in second.coverage.models) == passed1
    assert second.total < first.total + passed1  # the states judged before were not judged again
    assert "passed in earlier runs" in second.headline()
    j2 = {
        json.loads(x)["state"] for x in (tmp_path / "n2" / "journal.jsonl").read_text().splitlines()
    }
    j1_pass = {
        json.loads(x)["state"]
        for x in (tmp_path / "n1" / "journal.jsonl").read_text().splitlines()
        if json.loads(x)["verdict"] == "pass"
    }
    assert not (j2 & j1_pass)
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(UsageError, match="not a powercut ledger"):
        run_campaign(
            synthetic, CampaignSpec.of(seed=1, **dict(spec, ledger=str(bad))), tmp_path / "n3"
        )


def test_seed_auto_with_shards_is_refused() -> None:
    with pytest.raises(UsageError, match="every shard must sample the same states"):
        CampaignSpec.of(seed=-1, shard=Shard(1, 2))

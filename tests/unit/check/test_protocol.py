"""The checker protocol end to end (#37): a host-mode campaign on the synthetic recording of
tests/unit/campaign/test_run.py with command checkers that talk before their JSON answer (or after
it).  Needs root (loop devices, mount)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.errors import CheckerError
from tests.unit.campaign.test_run import CHECKER, synthetic  # noqa: F401  (the fixture)

SPEC = dict(models=("flush",), check_in="host", jobs=2, bound=2, samples=2)
ALWAYS_LOST = """python3 -c '
import json, subprocess, sys
d = json.load(sys.stdin)
print("checking", len(d["acked"]), "keys", flush=True)
subprocess.run(["sh", "-c", "echo child says hi"], check=True)   # a child (pg_ctl, sqlite3) shares stdout
print(json.dumps({"verdict": "lost-ack", "reasons": ["every key lost, says this checker"]}))'"""


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]


def test_progress_then_a_lost_ack_verdict_is_found_in_every_state(
    synthetic: Path, tmp_path: Path
) -> None:
    s, _ = run_campaign(
        synthetic, CampaignSpec.of(checker_command=ALWAYS_LOST, **SPEC), tmp_path / "out"
    )
    assert set(s.by_model["flush"]) == {"lost-ack"}, s.by_model  # was: every state "pass"
    for v in journal(tmp_path / "out"):
        assert v["verdict"] == "lost-ack"
        first, progress, child = v["reasons"][:3]  # the answer's reasons, then the output before it
        assert first == "every key lost, says this checker" and progress.startswith(
            "output: checking "
        )
        assert child == "output: child says hi"


def test_a_talking_checker_that_finds_nothing_still_passes(synthetic: Path, tmp_path: Path) -> None:
    talking = CHECKER.replace(
        "d = json.load(sys.stdin)\n", 'd = json.load(sys.stdin)\nprint("checking")\n'
    )
    assert talking != CHECKER
    s, _ = run_campaign(
        synthetic, CampaignSpec.of(checker_command=talking, **SPEC), tmp_path / "out"
    )
    assert set(s.by_model["flush"]) == {"pass"} and s.status == "complete"


def test_a_verdict_that_is_not_the_last_line_stops_the_campaign_with_one_line(
    synthetic: Path, tmp_path: Path
) -> None:
    trailing = ALWAYS_LOST + "; echo done"
    with pytest.raises(
        CheckerError, match=r"state flush@\d+: stdout line 3 of 4 is a JSON verdict.*'done'"
    ) as e:
        run_campaign(
            synthetic,
            CampaignSpec.of(checker_command=trailing, **dict(SPEC, jobs=1)),
            tmp_path / "out",
        )
    assert "\n" not in str(e.value) and e.value.one_line() == str(e.value)
    done = tmp_path / "out" / "journal.jsonl"
    assert not done.exists() or all(v["verdict"] != "pass" for v in journal(tmp_path / "out"))

"""campaign/run.py without a VM: spec validation and whole host-mode campaigns on
a synthetic recording (a real ext4 image written into a dm-log-writes log by LogWriter, then a file
written through the log in two flush windows) -- selection, judging, confirmation, flaky, aliases,
resume.  Host mode needs root (loop devices, mount); CI runs as root."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.errors import CheckerError, UsageError
from powercut.record import recording
from tests.unit.synthrec import CHECKER, ext4_recording


def test_spec_validation() -> None:
    with pytest.raises(UsageError, match="--check-in"):
        CampaignSpec.of(check_in="cloud")
    with pytest.raises(UsageError, match="-j"):
        CampaignSpec.of(jobs=-1)
    with pytest.raises(UsageError, match="--max-states"):
        CampaignSpec.of(max_states=-2)
    assert CampaignSpec.of(jobs=3).workers() == 3 and CampaignSpec().workers() >= 1


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mkfs'd ext4 (written and flushed, then the mkfs mark), then a file 'data' written in two
    flush windows, with an ack after each and an informational mark in between (tests/unit/synthrec)."""
    if os.geteuid() != 0:
        pytest.skip("host-mode campaigns need root (loop devices, mount); CI runs as root")
    return ext4_recording(tmp_path_factory.mktemp("synthetic"), commits=2)


def verdicts(out: Path) -> dict[str, str]:
    return {
        o["state"]: o["verdict"]
        for o in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
    }


def test_host_campaign_distinct_states_and_aliases(synthetic: Path, tmp_path: Path) -> None:
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("flush", "write-cache", "no-cache"),
            check_in="host",
            jobs=2,
            checker_command=CHECKER,
            bound=2,
            samples=2,
        ),
        tmp_path / "out",
    )
    # flush cuts are consistent; the unjournaled writer's other states may not be (real findings)
    assert set(s.by_model["flush"]) == {"pass"} and s.status == "complete" and not s.flaky
    assert {f.verdict for f in s.failures} <= {"fsck-error", "mount-failed"}
    assert all(f.confirmation in ("confirmed", "confirmed-by-group") for f in s.failures)
    c = s.counts
    assert (
        c["flush"]["generated"] >= c["flush"]["distinct"]
        and c["write-cache"]["owned"] < c["write-cache"]["distinct"]
    )
    summary = json.loads(paths["summary"].read_text())
    journal = [json.loads(x) for x in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]
    aliased = [j for j in journal if j.get("aliases")]
    assert aliased, (
        "flush states and write-cache keep-all states share images: some verdicts must carry aliases"
    )
    # one line per judged state, plus one per failure confirmed alone or by its group (the later line wins)
    assert (
        summary["total"]
        == len({j["state"] for j in journal})
        == sum(m["judged"] for m in summary["states"].values())
    )
    assert (
        len(journal)
        == summary["total"] + summary["confirmation"]["rejudged"] + summary["confirmed_by_group"]
    )


STRICT = CHECKER.replace(
    'if f"commit {k}\\n" not in text', 'if k == "2" or f"commit {k}\\n" not in text'
)  # key 2: always "lost"
assert STRICT != CHECKER


def test_host_campaign_confirms_real_failures(synthetic: Path, tmp_path: Path) -> None:
    # a checker that claims key 2 is always lost: every state acking 2 fails, twice the same way
    s, _ = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("flush",), check_in="host", checker_command=STRICT, confirm_mode="all"
        ),
        tmp_path / "out",
    )
    assert (
        s.failures
        and all(f.confirmed and f.verdict == "lost-ack" for f in s.failures)
        and not s.flaky
    )
    assert s.rejudged == len(s.failures) and s.by_group == 0


def test_group_confirmation_judges_a_sample_and_the_rest_stand_on_it(
    synthetic: Path, tmp_path: Path
) -> None:
    """One cause, many states: the first, the last and seeded others (2 here) are judged alone; the
    rest are confirmed-by-group, in the summary, the journal, JUnit and the report."""
    spec = dict(
        models=("flush", "write-cache"),
        check_in="host",
        checker_command=STRICT,
        bound=2,
        samples=2,
        confirm_sample=2,
        shrink=2,
    )
    s, paths = run_campaign(synthetic, CampaignSpec.of(**spec), tmp_path / "g")
    every, _ = run_campaign(
        synthetic, CampaignSpec.of(**dict(spec, confirm_mode="all")), tmp_path / "a"
    )
    assert not s.flaky and max(g["count"] for g in s.groups) > 2
    for g in (
        s.groups
    ):  # each group: min(count, 2) judged alone (3 if its minimized state is a member), the rest
        alone = g["confirmed_alone"]  # stand on that sample
        assert min(g["count"], 2) <= alone <= min(g["count"], 3) and not g["escalated"]
        assert g["confirmed_by_group"] == g["count"] - alone
        mine = sorted(
            (f for f in s.failures if f.state in g["states"] or f.state == g["first"]),
            key=lambda f: (f.cut, len(f.state), f.state),
        )
        assert (
            mine[0].confirmed and mine[0].state == g["first"]
        )  # the first is always in the sample
    assert s.rejudged == s.confirmed == sum(g["confirmed_alone"] for g in s.groups)
    assert s.by_group == len(s.failures) - s.rejudged > 0
    assert verdicts(tmp_path / "g") == verdicts(
        tmp_path / "a"
    )  # the same verdicts, fewer lone checks
    assert every.rejudged == len(every.failures) > s.rejudged
    assert "confirmation: confirmed-by-group" in paths["junit"].read_text()
    assert "confirmed-by-group" in (tmp_path / "g" / "report.html").read_text()
    minimized = [g for g in s.groups if g.get("minimized")]
    assert minimized and all(
        g["minimized_confirmed"] is True
        for g in minimized
        if g["minimized"] not in {f.state for f in s.failures}
    )  # a minimized state outside the group judged alone
    again, _ = run_campaign(
        synthetic, CampaignSpec.of(**spec), tmp_path / "g2"
    )  # deterministic: the same sample
    assert {f.state for f in again.failures if f.confirmed} == {
        f.state for f in s.failures if f.confirmed
    }


def test_a_flaky_checker_escalates_its_group_and_every_state_is_flaky(
    synthetic: Path, tmp_path: Path
) -> None:
    """The forced flake: a checker that fails a state the first time it sees it.  The group's sample
    passes alone, so the whole group is judged state by state: every state flaky, no finding.
    (Every state judged: a proven state's first real judge would be its confirmation.)"""
    seen = tmp_path / "seen"
    seen.mkdir()
    flake = (
        "python3 -c 'import json, sys, os, hashlib\n"
        's = json.load(sys.stdin)["state"]\n'
        f'm = os.path.join("{seen}", hashlib.md5(s.encode()).hexdigest())\n'
        "if not os.path.exists(m):\n"
        '    open(m, "w").close(); print(json.dumps({"verdict": "lost-ack", "reasons": ["key 9 lost"]})); sys.exit(0)\n'
        'print(json.dumps({"verdict": "pass"}))\''
    )
    s, _ = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("flush", "write-cache"),
            check_in="host",
            checker_command=flake,
            bound=2,
            samples=2,
            confirm_sample=2,
            prove=False,
        ),
        tmp_path / "out",
    )
    assert not s.failures and len(s.flaky) == s.total > 2 and s.escalated == 1
    assert s.rejudged == s.total and not s.ok and s.verdict == "flaky"  # never "pass"


def test_verdicts_equal_at_j1_and_j2_and_after_resume(synthetic: Path, tmp_path: Path) -> None:
    spec = dict(
        models=("flush", "write-cache"),
        check_in="host",
        checker_command=CHECKER,
        bound=2,
        samples=2,
    )
    run_campaign(synthetic, CampaignSpec.of(jobs=1, **spec), tmp_path / "j1")
    run_campaign(synthetic, CampaignSpec.of(jobs=2, **spec), tmp_path / "j2")
    assert verdicts(tmp_path / "j1") == verdicts(tmp_path / "j2")
    lines = (tmp_path / "j1" / "journal.jsonl").read_text().splitlines()
    (tmp_path / "j1" / "journal.jsonl").write_text("\n".join(lines[:2]) + "\n")
    s, _ = run_campaign(synthetic, CampaignSpec.of(jobs=2, resume=True, **spec), tmp_path / "j1")
    assert verdicts(tmp_path / "j1") == verdicts(tmp_path / "j2") and s.status == "complete"


def test_max_states_spreads_and_reports_left_out(synthetic: Path, tmp_path: Path) -> None:
    s, _ = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("flush", "write-cache"),
            check_in="host",
            checker_command=CHECKER,
            max_states=4,
            bound=2,
            samples=2,
        ),
        tmp_path / "out",
    )
    assert s.total == 4
    assert s.counts["flush"]["judged"] >= 1 and s.counts["write-cache"]["judged"] >= 1
    assert sum(c["left_out"] for c in s.counts.values()) > 0


def test_a_checker_broken_on_every_first_state_stops_the_campaign(
    synthetic: Path, tmp_path: Path
) -> None:
    """#25: a checker that crashes (or times out) on each of the first states is the harness's
    error, exit 1 -- not a confirmed finding per state; an unknown verdict and a command that
    cannot start are errors too, the latter before anything is judged."""
    spec = dict(models=("flush", "write-cache"), check_in="host", jobs=1, confirm=True)
    with pytest.raises(CheckerError, match="failed on each of the first 3 states"):
        run_campaign(
            synthetic, CampaignSpec.of(checker_command="exit 3", **spec), tmp_path / "crash"
        )
    with pytest.raises(CheckerError, match="first 3 states.*timed out"):
        run_campaign(
            synthetic,
            CampaignSpec.of(checker_command="sleep 5", checker_timeout_s=0.2, **spec),
            tmp_path / "slow",
        )
    with pytest.raises(CheckerError, match="'corrupt'"):
        run_campaign(
            synthetic,
            CampaignSpec.of(checker_command="""echo '{"verdict": "corrupt"}'""", **spec),
            tmp_path / "unknown",
        )
    with pytest.raises(UsageError, match="not an executable file"):
        run_campaign(
            synthetic,
            CampaignSpec.of(checker_command="/nonexistent/check.py", **spec),
            tmp_path / "typo",
        )
    assert not (tmp_path / "typo").exists()


def test_resume_with_other_settings_is_refused(synthetic: Path, tmp_path: Path) -> None:
    spec = dict(models=("flush",), check_in="host", jobs=1)
    run_campaign(synthetic, CampaignSpec.of(**spec), tmp_path / "out")
    with pytest.raises(UsageError, match="holds an earlier check"):
        run_campaign(synthetic, CampaignSpec.of(**spec), tmp_path / "out")
    for other in (dict(seed=7), dict(models=("flush", "no-cache")), dict(checker_command="true")):
        with pytest.raises(UsageError, match="--resume with other settings"):
            run_campaign(
                synthetic, CampaignSpec.of(resume=True, **{**spec, **other}), tmp_path / "out"
            )
    s, _ = run_campaign(
        synthetic,
        CampaignSpec.of(resume=True, jobs=2, models=("flush",), check_in="host"),
        tmp_path / "out",
    )  # where and how fast may change
    assert s.ok
    s, _ = run_campaign(synthetic, CampaignSpec.of(force=True, **spec), tmp_path / "out")
    assert s.ok


def test_a_diagnosis_that_fails_leaves_the_verdicts_and_says_why(
    synthetic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state that panics the kernel panics the VM that diagnoses it too: the check goes on, its
    groups carry the diagnosis error, and the verdict is the finding's (was: the whole check an error)."""
    from powercut.campaign.phases import CampaignRun
    from powercut.errors import PowercutError

    def broken(self, groups):  # noqa: ANN202
        raise PowercutError("the checker VM diagnosing 1 failure(s) failed: guest kernel panic")

    monkeypatch.setattr(CampaignRun, "_diagnose", broken)
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("flush",), check_in="host", checker_command=STRICT, shrink=1, jobs=1
        ),
        tmp_path / "out",
    )
    assert s.verdict == "lost-ack" and s.status == "complete"
    assert "guest kernel panic" in s.groups[0]["diagnosis_error"]


def test_a_label_names_the_workload_in_the_outputs(synthetic: Path, tmp_path: Path) -> None:
    """A crash test's outputs are titled with its test id (CrashTest.campaign's label), not 'cmd'."""
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(
            models=("flush",),
            check_in="host",
            checker_command=CHECKER,
            max_states=2,
            label="tests/test_kv.py::test_put",
        ),
        tmp_path / "out",
    )
    assert s.workload == "tests/test_kv.py::test_put"
    assert (
        "<title>powercut: pass -- tests/test_kv.py::test_put on ext4</title>"
        in paths["html"].read_text()
    )
    s, paths = run_campaign(
        synthetic,
        CampaignSpec.of(models=("flush",), check_in="host", checker_command=CHECKER, max_states=2),
        tmp_path / "plain",
    )
    assert s.workload == "cmd"


def test_a_traced_recording_gets_causes_and_every_check_its_commit_anatomy(
    synthetic: Path, tmp_path: Path
) -> None:
    """With the recording's system-call trace, each failure group names the rule the program broke
    (here: key 2 acked after writes to /data with no fsync), with the calls as evidence and the trace
    around it for report.html; without a trace the summary says why there is no such cause."""
    import gzip
    import shutil

    from tests.unit.core.test_syscalls import mark_line

    rec = tmp_path / "rec"
    shutil.copytree(synthetic, rec)
    mnt = "/run/powercut/mnt"
    lines = []
    for i in (1, 2):
        lines += [
            mark_line(9, 1.0 + i, f"begin:{i}"),
            f'9 {1.1 + i:.6f} openat(AT_FDCWD<{mnt}>, "data", O_WRONLY|O_CREAT|O_APPEND, 0666) = 3<{mnt}/data>',
            f'9 {1.2 + i:.6f} write(3<{mnt}/data>, "commit\\n", 7) = 7',
            mark_line(9, 1.3 + i, "note:informational"),
            mark_line(9, 1.4 + i, f"ack:{i}"),
        ]
    (rec / "job").mkdir(exist_ok=True)
    with gzip.open(rec / "job" / "syscalls.txt.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    m = recording.load(rec).manifest
    m["trace"] = {"file": "job/syscalls.txt.gz", "bytes": 1}
    recording.write(rec, m)
    s, paths = run_campaign(
        rec,
        CampaignSpec.of(models=("flush",), check_in="host", checker_command=STRICT, shrink=0),
        tmp_path / "out",
    )
    assert s.failures and s.groups and not s.trace_note
    why = s.groups[0]["why"]
    # the checker fails every state acking key 2, whatever the disk holds: the kill-equivalent state (the
    # end of the recording: nothing changed after the last mark) fails too -- a recovery bug, proven; the
    # rule the trace shows first is said after it
    assert why["rule"] == "recovery-bug" and why["proof"].startswith(
        "verified: a process kill fails too"
    )
    assert why["others"][0].startswith("no-fsync: ack:2 was given after changing /data")
    assert any("write(3</run/powercut/mnt/data>" in e for e in why["evidence"])
    assert any(r["kind"] == "mark" and r["text"] == "mark ack:2" for r in why["excerpt"])
    assert any(r["kind"] == "log" for r in why["excerpt"])  # what the block log holds after a mark
    page = paths["html"].read_text()
    assert "cause (recovery-bug):" in page and 'class="trace"' in page
    assert (
        s.anatomy["commits"] == 2
        and s.anatomy["program_bytes"] == 7.0
        and "what a commit costs" in page
    )
    bundle = Path(s.groups[0]["bundle"])
    assert (bundle / "syscalls.txt.gz").is_file() and json.loads(
        (bundle / "bundle.json").read_text()
    )["why"]
    # the same recording without its trace: block-level causes only, and the summary says why
    (rec / "job" / "syscalls.txt.gz").unlink()
    s2, _ = run_campaign(
        rec,
        CampaignSpec.of(models=("flush",), check_in="host", checker_command=STRICT, shrink=0),
        tmp_path / "out2",
    )
    assert s2.groups and "why" not in s2.groups[0] and "no system-call trace" in s2.trace_note
    assert s2.anatomy["commits"] == 2 and s2.anatomy["calls"] is None

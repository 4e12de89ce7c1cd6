"""Cluster states judged in checker VMs (docs/clusters.md, "Judging"): a three-node replog recording
whose replicas answer before their fsync is checked in checker VMs (-j 2, the default place) and on
the host; every state has the same verdict and reasons in both.  Two shards (one in a checker VM,
one on the host) merge into the unsharded check's counts and coverage, and a check cut short and
resumed judges only the states its journal lacks and ends with the same summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.vm,
    pytest.mark.skipif(os.geteuid() != 0, reason="host-mode checks need root"),
]

STATES = ("--max-states", "40", "--shrink", "0")  # verdicts; triage is test_cluster_debug_vm.py's


def powercut(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=900
    )


def journal(out: Path) -> dict[str, tuple[str, list[str]]]:
    return {
        v["state"]: (v["verdict"], v["reasons"])
        for v in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
    }


def summary(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "summary.json").read_text())


def test_checker_vms_judge_every_cluster_state_as_the_host_does(
    replog_unsynced: Path, tmp_path: Path
) -> None:
    rec = replog_unsynced  # shared (tests/vm/conftest.py): judged only, into tmp_path
    vm = powercut("check", str(rec), *STATES, "-j", "2", "-o", str(tmp_path / "vm"))
    host = powercut("check", str(rec), *STATES, "--check-in", "host", "-o", str(tmp_path / "host"))
    assert vm.returncode == host.returncode == 3, vm.stdout + vm.stderr + host.stdout + host.stderr
    assert "judged in vm" in vm.stdout
    got, want = journal(tmp_path / "vm"), journal(tmp_path / "host")
    assert len(want) == 40 and got == want
    assert {v for v, _ in want.values()} >= {"pass", "lost-ack"}
    s = summary(tmp_path / "vm")
    assert (
        s["check_in"] == "vm"
        and s["nodes"] == 3
        and s["by_model"] == summary(tmp_path / "host")["by_model"]
    )
    agents = sorted((tmp_path / "vm" / "work").glob("vm*/run*/job/result.json"))
    assert len(agents) == 2 and all(json.loads(a.read_text())["ok"] for a in agents)

    # two shards (one in a checker VM, one on the host) merge into the unsharded check
    one = powercut(
        "check", str(rec), *STATES, "--shard", "1/2", "-j", "1", "-o", str(tmp_path / "s1")
    )
    two = powercut(
        "check",
        str(rec),
        *STATES,
        "--shard",
        "2/2",
        "--check-in",
        "host",
        "-o",
        str(tmp_path / "s2"),
    )
    assert one.returncode in (0, 3) and two.returncode in (0, 3), one.stderr + two.stderr
    assert set(journal(tmp_path / "s1")).isdisjoint(journal(tmp_path / "s2"))
    merged = powercut(
        "merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "-o", str(tmp_path / "merged")
    )
    assert merged.returncode == 3, merged.stdout + merged.stderr
    m = summary(tmp_path / "merged")
    for key in ("verdict", "by_model", "total", "coverage", "headline", "states", "nodes"):
        assert m[key] == s[key], key
    assert journal(tmp_path / "merged") == want

    # cut short (the journal keeps 15 verdicts), then resumed: only the rest is judged
    lines = (tmp_path / "host" / "journal.jsonl").read_text().splitlines()
    (tmp_path / "host" / "journal.jsonl").write_text("\n".join(lines[:15]) + "\n")
    again = powercut(
        "check", str(rec), *STATES, "--check-in", "host", "--resume", "-o", str(tmp_path / "host")
    )
    assert again.returncode == 3, again.stdout + again.stderr
    r = summary(tmp_path / "host")
    firsts = [
        v
        for v in map(json.loads, (tmp_path / "host" / "journal.jsonl").read_text().splitlines())
        if not v.get("confirmed") and not v.get("by_group") and not v.get("first")
    ]
    assert (
        len(firsts) == 40 and r["total"] == 40 and r["by_model"] == s["by_model"]
    )  # the 15 not judged again
    assert journal(tmp_path / "host") == want
    other = powercut(
        "check",
        str(rec),
        "--max-states",
        "41",
        "--check-in",
        "host",
        "--resume",
        "-o",
        str(tmp_path / "host"),
    )
    assert other.returncode == 1 and "max_states was 40, now 41" in other.stderr


def test_a_ledger_skips_the_cluster_states_that_passed(
    replog_unsynced: Path, tmp_path: Path
) -> None:
    """--ledger on a cluster recording (campaign/ledger.py, under the node logs' sha256 joined): the
    states that passed in the first check are not judged in the second, and counted as ``earlier``."""
    led, args = (
        tmp_path / "ledger.json",
        ("--max-states", "24", "--shrink", "0", "--no-confirm", "--check-in", "host"),
    )
    first = powercut(
        "check", str(replog_unsynced), *args, "--ledger", str(led), "-o", str(tmp_path / "a")
    )
    assert first.returncode == 3, first.stdout + first.stderr
    was = journal(tmp_path / "a")
    passed = {sid for sid, (verdict, _) in was.items() if verdict == "pass"}
    assert passed and len(passed) < len(was)
    second = powercut(
        "check", str(replog_unsynced), *args, "--ledger", str(led), "-o", str(tmp_path / "b")
    )
    assert second.returncode == 3, second.stdout + second.stderr
    now = journal(tmp_path / "b")
    assert now and not set(now) & passed, "a state that passed before was judged again"
    counts = summary(tmp_path / "b")["states"]
    assert sum(c.get("earlier", 0) for c in counts.values()) == len(passed)


def test_a_lying_disk_model_on_a_cluster_lies_on_one_node_at_a_time(
    replog_unsynced: Path, tmp_path: Path
) -> None:
    """--model lost-write on a cluster recording: each state has one lying node (the others' flush
    states of the instant); a filesystem that notices is ``detected``, its reason naming that node."""
    out = powercut(
        "check",
        str(replog_unsynced),
        "--model",
        "lost-write",
        "--max-states",
        "16",
        "--shrink",
        "0",
        "--no-confirm",
        "--check-in",
        "host",
        "-o",
        str(tmp_path / "out"),
    )
    assert out.returncode in (0, 3), out.stdout + out.stderr
    got = journal(tmp_path / "out")
    assert len(got) == 16
    for sid, (verdict, reasons) in got.items():
        nodes = sid.partition("~")[2].split("+")
        liars = [n for n, s in enumerate(nodes) if s.startswith("lost-write@")]
        assert len(liars) == 1 and all(
            s.startswith("flush@") for s in nodes if not s.startswith("lost-write@")
        ), sid
        assert verdict not in ("mount-failed", "fsck-error", "corrupt-data"), (
            sid,
            verdict,
        )  # read as a lie's
        if verdict == "detected":
            assert any(r.startswith(f"node {liars[0]}: ") for r in reasons), (sid, reasons)
    assert "detected" in {v for v, _ in got.values()}

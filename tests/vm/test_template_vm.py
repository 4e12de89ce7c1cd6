"""Checker VMs restored from a template judge exactly as booted ones: the same verdicts (failures,
panics and hangs included), and a template that cannot be restored falls back to a boot."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from powercut.campaign.run import CampaignSpec, run_campaign
from powercut.core.log.dmlog import open_log
from powercut.core.states.selection import select
from powercut.record.recording import load
from powercut.vmstart import template
from tests.vm.vmcheckers import panic_or_hang

pytestmark = pytest.mark.vm


def judged(out: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """state -> (verdict, reasons without timings)"""
    got = {}
    for line in (out / "journal.jsonl").read_text().splitlines():
        v = json.loads(line)
        reasons = tuple(r for r in v.get("reasons", []) if " s" not in r and "[" not in r)
        got[v["state"]] = (
            v["verdict"],
            reasons if v["verdict"] not in ("kernel-panic", "timeout") else (),
        )
    return got


def consoles(out: Path) -> list[str]:
    return [p.read_text(errors="replace") for p in sorted(out.rglob("console.log"))]


@pytest.mark.nightly  # ~150 s: every state judged twice; every checker-VM test of the fast suite restores templates
def test_restored_checker_vms_judge_as_booted_ones(
    ack_early: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_log(load(ack_early).log_path) as index:
        ids = [s.id for s in select(index, ["flush"]).states]
    panic_id, hang_id = ids[1], ids[3]
    checker = panic_or_hang(panic_id, hang_id)
    runs = {}
    for start in ("boot", "snapshot"):
        monkeypatch.setenv("POWERCUT_VM_START", start)
        for name, spec in (
            (
                "builtin",
                CampaignSpec.of(
                    models=("flush", "write-cache"),
                    check_in="vm",
                    jobs=2,
                    shrink=0,
                    bound=2,
                    samples=2,
                ),
            ),
            (
                "faults",
                CampaignSpec.of(
                    models=("flush",),
                    check_in="vm",
                    checker_command=checker,
                    shrink=0,
                    state_timeout_s=15,
                ),
            ),
        ):
            out = tmp_path / f"{start}-{name}"
            run_campaign(ack_early, spec, out)
            runs[start, name] = judged(out)
            restored = [c for c in consoles(out) if "powercut-restored" in c]
            if start == "boot":
                assert not restored
            else:
                assert restored, f"no checker VM of the {name} run was restored from a template"
    for name in ("builtin", "faults"):
        assert runs["snapshot", name] == runs["boot", name], name
    builtin = runs["snapshot", "builtin"]
    assert any(v == "lost-ack" for v, _ in builtin.values()) and any(
        v == "pass" for v, _ in builtin.values()
    )
    faults = runs["snapshot", "faults"]
    assert faults[panic_id][0] == "kernel-panic" and faults[hang_id][0] == "timeout"


def test_a_template_that_does_not_restore_falls_back_to_a_boot(
    ack_early: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("POWERCUT_VM_START", raising=False)
    monkeypatch.setattr(template, "_failed", set())
    spec = CampaignSpec.of(models=("flush",), check_in="vm", jobs=1, shrink=0)
    first, _ = run_campaign(
        ack_early, spec, tmp_path / "first"
    )  # builds the template (or finds it)
    used = {
        a.split("exec:cat ", 1)[1].split("'")[0].strip()
        for p in (tmp_path / "first").rglob("qemu.argv")
        if "exec:cat " in (a := p.read_text())
    }
    assert len(used) == 1, f"the first run's VMs were not restored from one template: {used}"
    state = Path(used.pop())
    state.write_bytes(b"not a saved VM")
    with caplog.at_level(logging.WARNING, logger="powercut.vmstart.template"):
        second, _ = run_campaign(ack_early, spec, tmp_path / "second")
    assert judged(tmp_path / "second") == judged(tmp_path / "first")
    assert any("failed to restore" in r.getMessage() for r in caplog.records)
    assert list((tmp_path / "second").rglob("console-restore.log"))
    assert not state.exists()  # discarded: the next process builds a new one

"""journal.py: JSON lines written at once and fsync'd within SYNC_S and at close; a torn last line
is dropped on resume; the later verdict for a state wins (confirmation, flaky)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from powercut.campaign import journal
from powercut.campaign.journal import Journal
from powercut.core.judging.verdict import Verdict
from powercut.errors import UsageError
from powercut.linux.jsonlines import JsonLines, read_lines


def v(state: str, verdict: str = "pass", model: str = "flush", cut: int = 1) -> Verdict:
    return Verdict(state, model, cut, verdict, (f"reason for {state}",), 1, 0, 0.01)


def test_journal_resume_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(path, resume=False)
    j.add(v("flush@1"))
    j.add(v("flush@2", "lost-ack"))
    j.close()
    with open(path, "ab") as f:
        f.write(b'{"state":"flush@3","mod')  # kill -9 in the middle of a write
    with pytest.raises(UsageError, match="--resume"):
        Journal(path, resume=False)
    j = Journal(path, resume=True)
    assert set(j.done) == {"flush@1", "flush@2"} and j.done["flush@2"].verdict == "lost-ack"
    j.add(v("flush@3"))
    j.close()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["state"] for x in lines] == ["flush@1", "flush@2", "flush@3"]


def test_later_line_wins_and_fields_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(path, resume=False)
    first = dataclasses.replace(
        v("write-cache@5/d3", "lost-ack", "write-cache", 5), aliases=("flush@5",)
    )
    j.add(first)
    j.add(dataclasses.replace(first, confirmed=True))
    j.close()
    back = Journal(path, resume=True).done["write-cache@5/d3"]
    assert (
        back.confirmed
        and back.aliases == ("flush@5",)
        and back == dataclasses.replace(first, confirmed=True)
    )


def test_verdicts_are_written_at_once_and_fsynced_later_in_one_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    monkeypatch.setattr(journal, "SYNC_S", 0.2)
    path = tmp_path / "journal.jsonl"
    j = Journal(path, resume=False)
    for i in range(50):
        j.add(v(f"flush@{i}"))
    # in the file at once (what a killed run leaves for --resume), not one fsync per verdict
    assert [o["state"] for o in read_lines(path)[0]] == [f"flush@{i}" for i in range(50)]
    assert len(synced) <= 1
    for _ in range(100):
        if synced:
            break
        time.sleep(0.02)
    assert len(synced) == 1, "no fsync within SYNC_S of the verdicts"
    monkeypatch.setattr(journal, "SYNC_S", 30.0)
    j.add(v("flush@50"))
    j.close()  # the last verdict's fsync does not wait for the timer
    assert len(synced) == 2
    assert set(Journal(path, resume=True).done) == {f"flush@{i}" for i in range(51)}


def test_unreadable_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"state": "x"}\nnot json\n' + json.dumps(v("flush@4").to_json()) + "\n")
    assert list(Journal(path, resume=True).done) == ["flush@4"]


def test_jsonlines_reader_follows_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    assert read_lines(path) == ([], 0)
    with JsonLines(path) as out:
        out.add({"begin": "a"})
        objs, pos = read_lines(path)
        assert objs == [{"begin": "a"}]
        with open(path, "ab") as f:
            f.write(b'{"verdict"')  # half a line: not yet
        assert read_lines(path, pos) == ([], pos)


def test_settings_pinned_before_the_one_form_resume_as_the_same_campaign(tmp_path: Path) -> None:
    """A campaign.json written before one form and one word (one disk's ``log_sha256``, a cluster's
    ``cluster_bound``) is read as today's keys: a resume with the same logs and bound goes on, a
    different one is refused naming the key."""
    (tmp_path / journal.SETTINGS).write_text(
        json.dumps({"log_sha256": "a" * 64, "cluster_bound": 8, "bound": 7})
    )
    now = {"logs_sha256": ["a" * 64], "node_bound": 8, "bound": 7}
    assert journal.pinned_settings(tmp_path) == now
    journal.pin_settings(tmp_path, now, resume=True)  # not refused
    with pytest.raises(UsageError, match="node_bound was 8, now 9"):
        journal.pin_settings(tmp_path, {**now, "node_bound": 9}, resume=True)
    with pytest.raises(UsageError, match="logs_sha256"):
        journal.pin_settings(tmp_path, {**now, "logs_sha256": ["b" * 64]}, resume=True)

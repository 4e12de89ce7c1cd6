"""record/vm.py: the manifest's [trace], the same for one disk and a cluster (``note_trace``)."""

from __future__ import annotations

from typing import Any

from powercut.record.vm import note_trace
from powercut.vm.guestjob import GuestResult


def test_the_trace_section_says_where_the_trace_is_or_why_there_is_none() -> None:
    m: dict[str, Any] = {}
    note_trace(
        GuestResult(True, data={"trace_file": "syscalls.txt.gz", "trace_bytes": 805049}), m, True
    )
    assert m["trace"] == {"file": "job/syscalls.txt.gz", "bytes": 805049}
    m = {}
    note_trace(GuestResult(True, data={"trace_error": "strace is not installed"}), m, True)
    assert m["trace"] == {"error": "strace is not installed"}
    m = {}
    note_trace(GuestResult(True), m, False)  # --no-trace: no section
    assert "trace" not in m

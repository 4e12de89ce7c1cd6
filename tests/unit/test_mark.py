"""Marks: the DM_TARGET_MSG ioctl buffer, and errors outside a recording."""
from __future__ import annotations

import struct

import pytest

from powercut import marks as markmod


def test_ioctl_number_matches_linux_header() -> None:
    # _IOWR(0xfd, 14, struct dm_ioctl) with sizeof(struct dm_ioctl) == 312
    assert markmod.DM_TARGET_MSG == 0xC138FD0E


def test_message_buffer_layout() -> None:
    buf = markmod.message_buffer("powercut-rec", "mark ack:7")
    version = struct.unpack_from("<3I", buf, 0)
    data_size, data_start = struct.unpack_from("<II", buf, 12)
    assert version == (4, 0, 0)
    assert data_size == len(buf) and data_size % 8 == 0
    assert data_start == 312
    assert buf[48:48 + 13] == b"powercut-rec\0"
    sector, = struct.unpack_from("<Q", buf, 312)
    assert sector == 0
    assert bytes(buf[320:320 + 11]) == b"mark ack:7\0"


def test_mark_outside_recording_is_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POWERCUT_DM_NAME", raising=False)
    with pytest.raises(markmod.MarkError, match="only inside a powercut recording"):
        markmod.mark("ack:1")


@pytest.mark.parametrize("text", ["", "two words", "x" * 500])
def test_bad_mark_text(text: str) -> None:
    with pytest.raises(ValueError):
        markmod.mark(text, "dev")


def test_command_line_tool(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("POWERCUT_DM_NAME", raising=False)
    assert markmod.main(["ack:1"]) == 1
    assert "powercut-mark:" in capsys.readouterr().err
    assert markmod.main([]) == 2

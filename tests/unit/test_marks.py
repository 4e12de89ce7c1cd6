"""Marks: sent as dm target messages (the packing is dm's), errors outside a recording."""

from __future__ import annotations

import errno

import pytest

from powercut import marks as markmod
from powercut.linux import dm


def test_the_packing_is_dm_s() -> None:
    """One place packs a dm_ioctl (tests/unit/test_dm.py checks the layout): marks and the insertion
    under it (logmark) send through dm.message and pack nothing of their own."""
    import inspect

    from powercut import _logmark as logmark

    for mod in (markmod, logmark):
        src = inspect.getsource(mod)
        assert "struct" not in src and "ioctl(" not in src
    assert logmark.dm is dm and dm.DM_TARGET_MSG == 0xC138FD0E


def test_mark_sends_a_target_message(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = []
    monkeypatch.setattr(dm, "control", lambda: 99)
    monkeypatch.setattr(
        dm, "message", lambda name, text, sector=0: sent.append((name, text, sector))
    )
    monkeypatch.setenv("POWERCUT_DM_NAME", "powercut-rec")
    markmod.ack(7)
    markmod.begin("k")
    markmod.mark("x", "other")
    assert sent == [
        ("powercut-rec", "mark ack:7", 0),
        ("powercut-rec", "mark begin:k", 0),
        ("other", "mark x", 0),
    ]


def test_kernel_errors_become_mark_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(name: str, text: str, sector: int = 0) -> None:
        raise dm.DmError(
            f"device-mapper TARGET_MSG on {name}: EINVAL (Invalid argument)", errno.EINVAL
        )

    monkeypatch.setattr(dm, "control", lambda: 99)
    monkeypatch.setattr(dm, "message", fail)
    with pytest.raises(markmod.MarkError) as ei:
        markmod.mark("ack:1", "rec")
    assert ei.value.errno == errno.EINVAL and "mark 'ack:1' on rec: Invalid argument" in str(
        ei.value
    )

    def no_control() -> int:
        raise dm.DmError("cannot open /dev/mapper/control: Permission denied", errno.EACCES)

    monkeypatch.setattr(dm, "control", no_control)
    with pytest.raises(markmod.MarkError, match="only inside a powercut recording, as root"):
        markmod.mark("ack:1", "rec")


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


def test_timing_mode_writes_timestamps_not_marks(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """$POWERCUT_TIMING: begin/ack append '<monotonic ns> <mark>' lines; no ioctl, no target needed."""
    import time

    from powercut.bench import parse as bench

    def no_ioctl(*a, **k):
        raise AssertionError("timing mode must not send a dm message")

    monkeypatch.setattr(dm, "control", no_ioctl)
    monkeypatch.setattr(dm, "message", no_ioctl)
    monkeypatch.delenv("POWERCUT_DM_NAME", raising=False)
    path = tmp_path / "timing.txt"
    monkeypatch.setenv(markmod.TIMING_ENV, str(path))
    before = time.monotonic_ns()
    for i in range(3):
        markmod.begin(i)
        markmod.ack(i)
    after = time.monotonic_ns()
    lines = path.read_text().splitlines()
    assert [ln.split()[1] for ln in lines] == [
        "begin:0",
        "ack:0",
        "begin:1",
        "ack:1",
        "begin:2",
        "ack:2",
    ]
    stamps = [int(ln.split()[0]) for ln in lines]
    assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= after
    assert bench.parse_timing(path.read_text()).commits == 3
    with pytest.raises(ValueError):  # the text rules still hold
        markmod.mark("two words")
    assert markmod.main(["ack:9"]) == 0 and path.read_text().splitlines()[-1].endswith(" ack:9")


def test_timing_file_that_cannot_be_opened_is_a_mark_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv(markmod.TIMING_ENV, str(tmp_path / "no" / "such" / "dir" / "t.txt"))
    with pytest.raises(markmod.MarkError, match="POWERCUT_TIMING=.*cannot open it"):
        markmod.ack(1)


def test_an_ordered_mark_flushes_and_waits_before_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """With an order device: begin mark, an fsync of that device, end mark, suspend and resume of
    the target, then the mark; the device is opened once per process."""
    calls: list[tuple[str, ...]] = []
    dev = tmp_path / "order"
    dev.write_bytes(b"")
    monkeypatch.setattr(dm, "control", lambda: 99)
    monkeypatch.setattr(
        dm, "message", lambda name, text, sector=0: calls.append(("msg", name, text))
    )
    monkeypatch.setattr(dm, "suspend", lambda name: calls.append(("suspend", name)))
    monkeypatch.setattr(dm, "resume", lambda name: calls.append(("resume", name)))
    real_fsync, opened = markmod.os.fsync, []
    monkeypatch.setattr(
        markmod.os, "fsync", lambda fd: (calls.append(("fsync",)), real_fsync(fd))[1]
    )
    real_open = markmod.os.open
    monkeypatch.setattr(
        markmod.os, "open", lambda *a, **k: (opened.append(a[0]), real_open(*a, **k))[1]
    )
    monkeypatch.setenv("POWERCUT_DM_NAME", "rec")
    monkeypatch.setenv(markmod.ORDER_ENV, str(dev))
    try:
        markmod.ack(1)
        markmod.ack(2)
    finally:
        markmod.close()
    one = [
        ("msg", "rec", "mark powercut-order-begin"),
        ("fsync",),
        ("msg", "rec", "mark powercut-order-end"),
        ("suspend", "rec"),
        ("resume", "rec"),
    ]
    assert calls == one + [("msg", "rec", "mark ack:1")] + one + [("msg", "rec", "mark ack:2")]
    assert opened == [str(dev)]
    calls.clear()
    markmod.mark("x", "rec", order_dev="")  # explicitly unordered
    assert calls == [("msg", "rec", "mark x")]


def test_an_order_device_that_cannot_be_opened_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dm, "control", lambda: 99)
    monkeypatch.setattr(dm, "message", lambda name, text, sector=0: None)
    with pytest.raises(
        markmod.MarkError, match="POWERCUT_ORDER_DEV=/nonexistent/order: cannot open it"
    ):
        markmod.mark("ack:1", "rec", order_dev="/nonexistent/order")

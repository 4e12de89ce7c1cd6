"""campaign/matrix.run_rows: the next row records while this one is checked, and ``then`` runs in the
recording lane after the last recording (the main job's bench template), never before it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from powercut.campaign import matrix as cm
from powercut.report.matrix import Row


def _rows(n: int) -> list[Row]:
    return [
        Row(
            workload="osync",
            variant=f"v{i}",
            params={},
            fs="ext4",
            expect={"flush": "pass"},
            why="a lane",
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [0, 1, 3])
def test_then_runs_after_the_last_recording_in_the_recording_lane(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    lock = threading.Lock()

    def note(what: str) -> None:
        with lock:
            events.append((what, threading.current_thread().name))

    monkeypatch.setattr(cm, "_prewarm", lambda row, how: None)
    monkeypatch.setattr(
        cm, "record_row", lambda row, how: (time.sleep(0.01), note(f"record {row.variant}"), "")[2]
    )
    monkeypatch.setattr(
        cm, "check_row", lambda row, how, err: (note(f"check {row.variant}"), ([], {}))[1]
    )
    out = cm.run_rows(_rows(n), cm.MatrixRun(out=tmp_path), then=lambda: note("then"))
    assert len(out) == n
    names = [e for e, _ in events]
    assert names.count("then") == 1
    recorded = [i for i, e in enumerate(names) if e.startswith("record")]
    assert all(i < names.index("then") for i in recorded)
    lane = {t for e, t in events if e.startswith("record") or e == "then"}
    assert len(lane) == 1 and all(t.startswith("powercut-record") for t in lane)


def test_without_then_nothing_extra_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cm, "_prewarm", lambda row, how: None)
    monkeypatch.setattr(cm, "record_row", lambda row, how: "")
    monkeypatch.setattr(cm, "check_row", lambda row, how, err: ([], {"row": row.id}))
    assert [i["row"] for _, i in cm.run_rows(_rows(2), cm.MatrixRun(out=tmp_path))] == [
        r.id for r in _rows(2)
    ]


@pytest.mark.parametrize("check_in", ["vm", "host"])
def test_the_rows_checks_share_one_pool_of_checker_vms_closed_after_the_last(
    check_in: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[object] = []
    closed: list[bool] = []
    monkeypatch.setattr(cm, "_prewarm", lambda row, how: None)
    monkeypatch.setattr(cm, "record_row", lambda row, how: "")
    monkeypatch.setattr(
        cm, "check_row", lambda row, how, err: (seen.append(how.place.warm), ([], {}))[1]
    )
    monkeypatch.setattr(cm.VmPool, "close", lambda self, force=False: closed.append(force))
    cm.run_rows(_rows(3), cm.MatrixRun(out=tmp_path, check_in=check_in))
    if check_in == "host":
        assert seen == [None] * 3 and closed == []
        return
    pool = seen[0]
    assert isinstance(pool, cm.VmPool) and seen == [pool] * 3 and pool.shared
    assert (
        pool.root == tmp_path.resolve()
        and pool.workdir == tmp_path / "checker-vms"
        and closed == [False]
    )


def test_a_matrix_that_fails_closes_its_checker_vms_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[bool] = []
    monkeypatch.setattr(cm, "_prewarm", lambda row, how: None)
    monkeypatch.setattr(cm, "record_row", lambda row, how: "")
    monkeypatch.setattr(
        cm, "check_row", lambda row, how, err: (_ for _ in ()).throw(KeyboardInterrupt())
    )
    monkeypatch.setattr(cm.VmPool, "close", lambda self, force=False: closed.append(force))
    with pytest.raises(KeyboardInterrupt):
        cm.run_rows(_rows(2), cm.MatrixRun(out=tmp_path))
    assert closed == [True]

"""replog's checker: acked records on a majority of node mounts pass; on a minority, lost-ack;
garbage or a record never sent, corrupt-data.  The records pinned to the workload's."""

from __future__ import annotations

from pathlib import Path

from powercut import CheckInput
from powercut.checkers.replog import check, record
from powercut.workloads.replog import record as wl_record


def nodes(tmp_path: Path, counts: list[int], tail: bytes = b"") -> tuple[str, ...]:
    out = []
    for n, c in enumerate(counts):
        d = tmp_path / f"n{n}"
        d.mkdir(parents=True)
        (d / "replog.log").write_bytes(b"".join(record(0, i, 50) for i in range(c)) + tail)
        out.append(str(d))
    return tuple(out)


def inp(mounts: tuple[str, ...], acked: int, begun: int = -1) -> CheckInput:
    return CheckInput(
        mounts[0],
        tuple(map(str, range(acked))),
        (str(begun),) if begun >= 0 else (),
        {"size": 50},
        "s",
        mounts=mounts,
    )


def test_record_matches_the_workload() -> None:
    assert record(3, 7, 40) == wl_record(3, 7, 40)


def test_majority_passes_minority_loses(tmp_path: Path) -> None:
    m = nodes(tmp_path, [3, 3, 0])
    assert check(inp(m, 3)).verdict == "pass"
    r = check(inp(m, 4))
    assert r.verdict == "lost-ack" and "acked record 3 is intact on 0 of 3 nodes" in r.reasons[0]


def test_torn_tail_is_fine_garbage_is_not(tmp_path: Path) -> None:
    assert (
        check(
            inp(nodes(tmp_path / "a", [2, 2, 2], record(0, 2, 50)[:20] + bytes(30)), 2, 2)
        ).verdict
        == "pass"
    )
    r = check(inp(nodes(tmp_path / "b", [2, 2, 2], b"junk"), 2))
    assert r.verdict == "corrupt-data" and "neither record 2" in r.reasons[0]


def test_record_never_sent(tmp_path: Path) -> None:
    r = check(inp(nodes(tmp_path, [3, 1, 1]), 1))
    assert r.verdict == "corrupt-data" and "record 1 is on disk but was never sent" in r.reasons[0]


def test_a_node_that_cannot_be_read_holds_no_record(tmp_path: Path) -> None:
    """An I/O error reading one node's log (the filesystem noticed) is that node serving nothing,
    not a crash of the checker: the majority still decides."""
    m = nodes(tmp_path, [3, 3, 3])
    bad = Path(m[2]) / "replog.log"
    bad.unlink()
    bad.mkdir()  # reading it fails with an OSError (EISDIR), as a bad block's EBADMSG does
    r = check(inp(m, 3))
    assert (
        r.verdict == "pass"
        and r.reasons
        and r.reasons[0].startswith("node 2: replog.log cannot be read")
    )
    m2 = nodes(tmp_path / "b", [3, 0, 3])
    (Path(m2[2]) / "replog.log").unlink()
    (Path(m2[2]) / "replog.log").mkdir()
    r = check(inp(m2, 3))
    assert r.verdict == "lost-ack" and any(
        "node 2: replog.log cannot be read" in x for x in r.reasons
    )

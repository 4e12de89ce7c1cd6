"""core/trace/anatomy.py: each commit's block writes, flushes and FUAs (ordering flushes not counted), and
its traced calls."""

from powercut.core.log.dmlog import FUA
from powercut.core.trace import anatomy
from powercut.core.trace import syscalls as sc
from tests.unit.core.test_causes import T
from tests.unit.logops import build_log

ORDER = [("m", "powercut-order-begin"), ("f",), ("m", "powercut-order-end")]


def commit(key: str, data_writes: int, flushes: int, fua: bool = False) -> list[tuple]:
    ops: list[tuple] = [*ORDER, ("m", f"begin:{key}")]
    for k in range(data_writes):
        ops.append(("w", 100 + k * 8, 8, 0, k))
    ops += [("f",)] * flushes
    if fua:
        ops.append(("w", 0, 1, FUA, 9))
    return ops + [*ORDER, ("m", f"ack:{key}")]


def test_counts_per_commit_without_the_ordering_flushes(tmp_path):
    index = build_log(
        tmp_path / "log", [("m", "mkfs"), *commit("1", 2, 2, fua=True), *commit("2", 1, 1)]
    )
    costs = anatomy.commit_costs(index.entries, index.sectorsize)
    assert [(c.key, c.writes, c.write_bytes, c.flushes, c.fuas) for c in costs] == [
        ("1", 3, 2 * 4096 + 512, 2, 1),
        ("2", 1, 4096, 1, 0),
    ]
    assert costs[0].calls is None
    a = anatomy.summarize(costs)
    assert (a.commits, a.flushes, a.writes) == (2, 1.5, 2.0)
    assert a.phrase().startswith("1.5 flushes, 0.5 FUA, 2 block writes (6.2 KiB) per commit")


def test_without_begin_marks_a_commit_starts_at_the_previous_ack(tmp_path):
    ops = [
        ("m", "mkfs"),
        ("w", 8, 8, 0, 1),
        ("f",),
        ("m", "ack:a"),
        ("w", 16, 8, 0, 2),
        ("f",),
        ("f",),
        ("m", "ack:b"),
    ]
    costs = anatomy.commit_costs(build_log(tmp_path / "log", ops).entries)
    assert [(c.key, c.writes, c.flushes) for c in costs] == [("a", 1, 1), ("b", 1, 2)]


def test_traced_calls_and_program_bytes():
    t = (
        T()
        .open("wal", "O_WRONLY|O_CREAT")
        .mark("begin:1")
        .write("wal", 100)
        .fsync("wal")
        .mark("ack:1")
    )
    t.mark("begin:2").write("wal", 50).write("wal", 50).fsync("wal", call="fdatasync").mark("ack:2")
    windows = anatomy._trace_windows(t.trace(), "/run/powercut/mnt")
    assert windows["1"] == {"calls": {sc.WRITE: 1, sc.FSYNC: 1}, "bytes": 100}
    assert windows["2"] == {"calls": {sc.WRITE: 2, sc.FDATASYNC: 1}, "bytes": 100}


def test_summary_with_a_trace_and_empty():
    costs = [anatomy.CommitCost("1", 3, 12288, 2, 0, {"write": 2, "fsync": 2}, 100)]
    a = anatomy.summarize(costs)
    assert a.phrase() == (
        "2 flushes, 0 FUA, 3 block writes (12 KiB) per commit of 100 B written by the program, "
        "2 sync calls (medians)"
    )
    assert a.to_json()["first_commits"][0]["program_bytes"] == 100
    assert anatomy.summarize([]).phrase() == "no acked commits"


def test_short_for_the_matrix_tables():
    a = anatomy.summarize([anatomy.CommitCost("1", 3, 12288, 2, 0, {"write": 2}, 100)]).to_json()
    assert anatomy.short(a) == "2 flushes, 3 writes (12 KiB) for 100 B"
    assert anatomy.short({}) == ""
    assert (
        anatomy.short(
            {"commits": 4, "flushes": 1, "writes": 1, "write_bytes": 4096, "program_bytes": None}
        )
        == "1 flush, 1 write (4 KiB)"
    )

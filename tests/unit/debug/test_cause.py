"""debug/cause.py: each failure group's cause from the recording's trace -- one disk exactly as
core/cause/causes.py explains its state, a cluster node by node (core/cause/nodetrace.py), naming the node
and never blaming a rule another node broke."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.core.cause import causes
from powercut.core.judging.verdict import Verdict
from powercut.core.log.dmlog import LogIndex
from powercut.core.states.models import space
from powercut.core.states.nodes import Nodes
from powercut.core.trace import syscalls as sc
from powercut.debug import cause
from powercut.debug.triage import Group
from tests.unit.core.test_causes import kv
from tests.unit.core.test_nodetrace import Cluster, node0_unsynced
from tests.unit.logops import build_log

LATE = {
    "how": "not yet durable at the cut",
    "what": "data block",
    "path": "/replog.log",
    "text": "late replog.log",
}


@dataclass
class Rec:
    """What explain_groups reads of a Recording: its trace file, its workload (--delay-sync), the
    log of the syncs it held and its manifest (which mechanism held them)."""

    trace_path: Path | None
    workload: dict[str, Any] = field(default_factory=dict)
    delay_log: Path | None = None
    manifest: dict[str, Any] = field(default_factory=dict)


def log_of(path: Path, marks: list[str]) -> LogIndex:
    """A log with a write before each of ``marks`` (in order), after mkfs and a flush; ends with a flush."""
    ops: list[tuple[Any, ...]] = [("m", "mkfs"), ("w", 1, 1, 0, 1), ("f",)]
    for k, text in enumerate(marks):
        ops += [("w", 10 + k, 1, 0, k), ("m", text)]
    return build_log(path, [*ops, ("w", 9, 1, 0, 9), ("f",)])


def after(index: LogIndex, text: str) -> int:
    """The flush model's cut just after the (last) mark ``text``."""
    return max(e for e, t in index.marks() if t == text) + 1


def traced(tmp_path: Path, lines: list[str]) -> Rec:
    path = tmp_path / "syscalls.txt.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return Rec(path)


def group(state: str, reasons: tuple[str, ...], diagnosis: dict[str, Any] | None = None) -> Group:
    v = Verdict(state, "flush", 0, "lost-ack", reasons, 1, 1, 0.0)
    return Group("lost-ack", reasons[0], [v], diagnosis=diagnosis)


def test_one_disk_is_explained_as_before(tmp_path: Path) -> None:
    t = kv(durable=False)
    index = log_of(tmp_path / "log.bin", [m.text for m in t.trace().marks()])
    rec = traced(tmp_path, t.lines)
    st = space(index).make_state("flush", after(index, "ack:1"))
    culprits = [{"path": "/store.json", "what": "data block", "text": "lost data of /store.json"}]
    g = group(st.id, ("acknowledged key 1 is lost",), {"culprits": culprits})
    cause.explain_groups(rec, index, [g])  # type: ignore[arg-type]
    # today's cause: the whole trace against the one log, under the one mount
    trace = sc.parse("\n".join(t.lines), cause.ROOT)
    want = causes.with_blame(
        causes.explain(
            trace,
            index.marks(),
            st.cut,
            cause.ROOT,
            reasons=list(g.first.reasons),
            verdict="lost-ack",
            torn=[],
        ),
        culprits,
    ).to_json()
    want["excerpt"] = cause.excerpt(trace, index, want)
    assert g.why == want and g.why["rule"] == causes.RENAME and "node" not in g.why
    assert "/store.json.tmp was renamed over /store.json" in g.why["sentence"]


def cluster(tmp_path: Path, c: Cluster) -> tuple[Rec, list[LogIndex], Nodes]:
    marks = [m.text for m in c.trace().marks() if m.target.endswith("-n0")]
    logs = [log_of(tmp_path / f"log-n{n}.bin", marks) for n in range(c.nodes)]
    return traced(tmp_path, c.lines), logs, Nodes(logs)


def at_ack(disks: Nodes, logs: list[LogIndex], text: str = "ack:1") -> str:
    return disks.make("flush", [space(ix).make_state("flush", after(ix, text)) for ix in logs]).id


def test_a_cluster_cause_names_the_failing_node_and_its_own_rule(tmp_path: Path) -> None:
    rec, logs, disks = cluster(tmp_path, node0_unsynced())
    g = group(at_ack(disks, logs), ("node 0: acked record 1 lost",))
    cause.explain_groups(rec, logs, [g])  # type: ignore[arg-type]
    assert g.why is not None and g.why["node"] == 0 and g.why["nodes_by"] == "reasons"
    assert g.why["rule"] == causes.NO_FSYNC and g.why["sentence"].startswith(
        "node 0: ack:1 was given after"
    )
    assert all("/n1/" not in e for e in g.why["evidence"]) and any(
        "/n0/replog.log" in e for e in g.why["evidence"]
    )
    lines = cause.group_lines("GROUP 1", g.to_json())  # the console's words, one disk's or N's
    assert lines[0].startswith("GROUP 1: lost-ack x 1: node 0: ack:1") and lines[0].endswith(
        "[no-fsync]"
    )


def test_a_rule_node_0_broke_is_not_the_cause_when_node_1_failed(tmp_path: Path) -> None:
    rec, logs, disks = cluster(tmp_path, node0_unsynced())
    g = group(at_ack(disks, logs), ("node 1: acked record 1 lost",))
    cause.explain_groups(rec, logs, [g])  # type: ignore[arg-type]
    assert g.why is not None and g.why["node"] == 1
    assert g.why["rule"] == causes.BEYOND and g.why["sentence"].startswith(
        "node 1: the program did everything"
    )
    assert not any("no fsync" in o or "node 0" in o for o in (g.why["sentence"], *g.why["others"]))


def test_without_named_nodes_the_blamed_nodes_rule_must_be_about_the_blamed_file(
    tmp_path: Path,
) -> None:
    rec, logs, disks = cluster(tmp_path, node0_unsynced())
    reasons = ("acked record 1 is intact on 1 of 3 nodes",)  # names no node
    sid = at_ack(disks, logs)
    on0 = group(sid, reasons, {"nodes": [{"culprits": [LATE]}, {"culprits": []}]})
    other_file = group(
        sid, reasons, {"nodes": [{"culprits": [dict(LATE, path="/other")]}, {"culprits": []}]}
    )
    nothing = group(sid, reasons, {"nodes": [{"culprits": []}, {"culprits": []}]})
    cause.explain_groups(rec, logs, [on0, other_file, nothing])  # type: ignore[arg-type]
    assert (
        on0.why is not None
        and on0.why["sentence"].startswith("node 0: ")
        and on0.why["nodes_by"] == "blame"
    )
    assert on0.why["blame"].startswith("blame agrees")
    assert (
        other_file.why is None and nothing.why is None
    )  # nothing shown to tie a rule to the failure: said less


def test_a_cluster_without_a_trace_or_with_old_marks_has_no_cause(tmp_path: Path) -> None:
    rec, logs, disks = cluster(tmp_path, node0_unsynced())
    g = group(at_ack(disks, logs), ("node 0: acked record 1 lost",))
    cause.explain_groups(Rec(None), logs, [g])  # type: ignore[arg-type]
    assert g.why is None
    old = [ln.replace('name="powercut-rec-n0"', 'name="x"') for ln in node0_unsynced().lines]
    cause.explain_groups(traced(tmp_path, old), logs, [g])  # type: ignore[arg-type]
    assert g.why is None


def test_a_held_sync_is_read_where_the_program_called_it_and_says_so_in_the_excerpt(
    tmp_path: Path,
) -> None:
    """The recording's --delay-sync log places the held sync before the ack: the cause is the hold
    (ack-before-sync-returned), not no-fsync, and the report's excerpt says when it was called."""
    from tests.unit.core.test_causes import T

    t = (
        T()
        .open("log", "O_WRONLY|O_CREAT|O_APPEND", fd=4)
        .fsync_dir()
        .mark("begin:1")
        .write("log", fd=4)
    )
    called = t.t + 0.001
    t.mark("ack:1", pid=2)
    t.t += 0.2
    t.fsync("log", fd=4, call="fdatasync")
    t.mark("begin:2").write("log", fd=4).fsync("log", fd=4, call="fdatasync").mark("ack:2")
    index = log_of(tmp_path / "log.bin", [m.text for m in t.trace().marks()])
    rec = traced(tmp_path, t.lines)
    st = space(index).make_state("flush", after(index, "ack:1"))
    plain = group(st.id, ("acknowledged key 1 is lost",))
    cause.explain_groups(rec, index, [plain])  # type: ignore[arg-type]
    assert plain.why["rule"] == causes.NO_FSYNC
    (tmp_path / "delay-sync.log").write_text(
        f"fdatasync\t200000000\t1\t{called:.6f}\t{cause.ROOT}/log\n"
    )
    held = Rec(rec.trace_path, {"delay_sync": ["log=200ms"]}, tmp_path / "delay-sync.log")
    g = group(st.id, ("acknowledged key 1 is lost",))
    cause.explain_groups(held, index, [g])  # type: ignore[arg-type]
    assert g.why["rule"] == causes.EARLY and "still held" in g.why["sentence"]
    assert not any(
        "enters the kernel (and the trace) only after" in b for b in g.why.get("blind", [])
    )
    assert any("--delay-sync held it" in r["text"] for r in g.why["excerpt"] if r["kind"] == "sync")

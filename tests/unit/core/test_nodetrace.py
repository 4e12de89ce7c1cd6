"""core/cause/nodetrace.py: a node's part of a cluster's trace (its marks by device, its files, sync), the
rules judged node by node against that node's log, and which nodes a cluster cause names."""

from __future__ import annotations

from powercut.core.cause import causes, nodetrace
from powercut.core.trace import syscalls as sc

ROOT = "/run/powercut/mnt"


def mark(pid: int, t: float, text: str, node: int) -> str:
    name = f"powercut-rec-n{node}"
    return (
        f"{pid} {t:.6f} ioctl(7</dev/mapper/control>, DM_TARGET_MSG, [{{version=[4, 0, 0], data_size=336, "
        f'data_start=312, name="{name}", flags=0}}, {{sector=0, message="mark {text}"}}] => '
        f'[{{version=[4, 47, 0], data_size=305, name="{name}", flags=DM_ACTIVE_PRESENT_FLAG}}]) = 0'
    )


class Cluster:
    """A cluster's trace (every mark one ioctl per node, in node order) and each node's log marks
    (each node's mark at its next log entry, 10 apart)."""

    def __init__(self, nodes: int = 2) -> None:
        self.nodes = nodes
        self.lines: list[str] = []
        self.logs: list[list[tuple[int, str]]] = [[(100, "mkfs")] for _ in range(nodes)]
        self.t = 1.0

    def call(self, text: str, pid: int = 1) -> Cluster:
        self.t += 0.01
        self.lines.append(f"{pid} {self.t:.6f} {text}")
        return self

    def mark(self, text: str) -> Cluster:
        for n in range(self.nodes):
            self.t += 0.01
            self.lines.append(mark(1, self.t, text, n))
            self.logs[n].append((self.logs[n][-1][0] + 10, text))
        return self

    def open(self, node: int, name: str, fd: int) -> Cluster:
        path = f"{ROOT}/n{node}/{name}"
        return (
            self.call(
                f'openat(AT_FDCWD<{ROOT}>, "n{node}/{name}", O_WRONLY|O_CREAT|O_APPEND, 0644) = {fd}<{path}>'
            )
            .call(f'openat(AT_FDCWD<{ROOT}>, "n{node}", O_RDONLY) = 9<{ROOT}/n{node}>')
            .call(f"fsync(9<{ROOT}/n{node}>) = 0")
        )

    def write(self, node: int, name: str, fd: int, pid: int = 1) -> Cluster:
        return self.call(f'write({fd}<{ROOT}/n{node}/{name}>, "RLOG1"..., 1022) = 1022', pid)

    def fsync(self, node: int, name: str, fd: int, pid: int = 1) -> Cluster:
        return self.call(f"fsync({fd}<{ROOT}/n{node}/{name}>) = 0", pid)

    def trace(self) -> sc.Trace:
        return sc.parse("\n".join(self.lines))

    def explain(self, node: int, reasons: list[str]) -> causes.Cause:
        view = nodetrace.node_trace(self.trace(), node, ROOT)
        assert view is not None
        cut = self.logs[node][-1][0] + 1
        return causes.explain(
            view,
            self.logs[node],
            cut,
            nodetrace.node_root(ROOT, node),
            reasons=reasons,
            keys_of=nodetrace.node_keys,
        )


def node0_unsynced() -> Cluster:
    """Two replicas: node 0 acks record 1 from its page cache (no fsync), node 1 fsyncs it."""
    c = Cluster().open(0, "replog.log", 4).open(1, "replog.log", 5).mark("begin:1")
    c.write(0, "replog.log", 4, pid=2).write(1, "replog.log", 5, pid=3).fsync(
        1, "replog.log", 5, pid=3
    )
    return c.mark("ack:1")


def test_a_nodes_trace_has_its_own_marks_files_and_syncs() -> None:
    c = node0_unsynced().call("sync() = 0").call(f"syncfs(4<{ROOT}/n0/replog.log>) = 0")
    tr = c.trace()
    assert [m.target for m in tr.marks()] == ["powercut-rec-n0", "powercut-rec-n1"] * 2
    v1 = nodetrace.node_trace(tr, 1, ROOT)
    assert v1 is not None
    assert [o.text for o in v1.marks()] == ["begin:1", "ack:1"] and {
        m.target for m in v1.marks()
    } == {"powercut-rec-n1"}
    assert all(o.path.startswith(f"{ROOT}/n1") for o in v1.ops if o.kind not in (sc.MARK, sc.SYNC))
    assert [o.kind for o in v1.ops][
        -1
    ] == sc.SYNC  # sync() reaches every filesystem; node 0's syncfs does not
    assert [o.seq for o in v1.ops] == list(
        range(len(v1.ops))
    )  # numbered again: positions in the view
    assert {o.line for o in v1.ops} <= {
        o.line for o in tr.ops
    }  # each keeps its line in the trace file
    assert sc.align(v1, c.logs[1]) == {3: 110, len(v1.ops) - 2: 120}  # its marks: its log's


def test_a_trace_whose_marks_name_no_node_gives_no_node_view() -> None:
    tr = sc.parse(
        '1 1.0 ioctl(3</dev/mapper/control>, DM_TARGET_MSG, [{sector=0, message="mark ack:1"}]) = 0'
    )
    assert tr.marks()[0].target == "" and nodetrace.node_trace(tr, 0, ROOT) is None
    assert (
        nodetrace.node_of_target("powercut-rec-n12") == 12
        and nodetrace.node_of_target("powercut-rec") is None
    )


def test_the_rule_a_node_broke_is_that_nodes_own() -> None:
    c = node0_unsynced()
    on0 = c.explain(0, ["node 0: acked record 1 lost"])
    assert on0.rule == causes.NO_FSYNC and on0.subject == "/replog.log" and "ack:1" in on0.sentence
    on1 = c.explain(
        1, ["node 1: acked record 1 lost"]
    )  # node 1 kept every rule: node 0's is not its cause
    assert on1.rule == causes.BEYOND and "did everything the rules ask before ack:1" in on1.sentence
    assert all("/n0/" not in e for e in on1.evidence)


def test_a_syncfs_of_another_nodes_filesystem_makes_nothing_durable() -> None:
    c = Cluster().open(0, "wal", 4).open(1, "wal", 5).mark("begin:1").write(0, "wal", 4)
    c.call(f"syncfs(5<{ROOT}/n1/wal>) = 0").mark("ack:1")
    assert c.explain(0, ["acked record 1 lost"]).rule == causes.NO_FSYNC
    assert c.explain(1, ["acked record 1 lost"]).rule == causes.BEYOND


def test_node_numbers_are_not_read_as_lost_keys() -> None:
    assert nodetrace.node_keys(
        ["node 2 (standby, promoted): acked txn(s) 3 lost"], ["1", "2", "3"]
    ) == ["3"]
    assert causes.lost_keys(
        ["node 2 (standby, promoted): acked txn(s) 3 lost"], ["1", "2", "3"]
    ) == ["2", "3"]
    replog = [
        "acked record 0 is intact on 0 of 3 nodes, a majority is 2 (records per node: [0, 0, 0]); 6 lost"
    ]
    assert nodetrace.node_keys(replog, ["0", "1", "2", "3"]) == ["0"]  # the record, not the counts


def test_which_nodes_a_cause_names() -> None:
    late = {"how": "not yet durable at the cut", "what": "data block", "path": "/replog.log"}
    kept = {
        "how": "durable, the last write before the cut",
        "what": "data block",
        "path": "/replog.log",
    }
    meta = {"how": "lost", "what": "journal", "path": ""}
    assert nodetrace.cause_nodes([2], ["node 1: lost"], [[], [late], []], 3) == ([2], nodetrace.LIE)
    assert nodetrace.cause_nodes([], ["node 1: lost", "node 7: ?"], [[late], [], []], 3) == (
        [1],
        nodetrace.REASONS,
    )
    assert nodetrace.cause_nodes(
        [], ["acked record 3 is intact on 1 of 3 nodes"], [[kept], [late], [meta, late]], 3
    ) == ([1, 2], nodetrace.BLAME)
    assert nodetrace.cause_nodes(
        [], ["acked record 3 is intact on 1 of 3 nodes"], [[kept], [meta], []], 3
    ) == ([], "")

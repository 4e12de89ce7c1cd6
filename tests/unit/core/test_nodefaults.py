"""``--fault`` per node of a cluster recording: the setting's grammar (core/recording/nodefaults.NodesFaults),
each node's plan moved by the marks and switching its own layer (faults.py), each node's fault
windows read from its own log, the judge's ``acked-after-error`` naming the node (check/context.py,
check/judge.py), and the host's reading of a cluster's result (record/vm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powercut import faults
from powercut.check.context import CheckContext, with_node_faults
from powercut.check.judge import after_error
from powercut.checker import CheckInput, CheckResult
from powercut.config import fault_for
from powercut.core.log.faultwindows import FAULT_OFF, FaultPlan, on_mark
from powercut.core.recording.nodefaults import FaultsError, NodesFaults
from powercut.core.states.crashstate import CrashState
from powercut.errors import UsageError, WorkloadFailed
from powercut.linux import filesystems
from powercut.record import vm as record_vm
from powercut.vm.guestjob import GuestResult
from tests.unit.logops import build_log


@pytest.mark.parametrize(
    "text, canonical",
    [
        ("", ""),
        ("eio-writes", "eio-writes"),
        ("1=eio-writes,mark=ack:3", "1=eio-writes,mark=ack:3"),
        (
            " 2 = eio-writes , writes=50 + 0=eio-writes,after=2",
            "0=eio-writes,after=2+2=eio-writes,writes=50",
        ),
        (
            "eio-range,sectors=100+8;200+8",
            "eio-range,sectors=100+8;200+8",
        ),  # its + stays in the plan
        ("1=eio-range,sectors=100+8+2=eio-writes", "1=eio-range,sectors=100+8+2=eio-writes"),
    ],
)
def test_a_setting_reads_back_as_its_canonical_text(text, canonical):
    got = NodesFaults.parse(text)
    assert (
        str(got) == canonical
        and NodesFaults.parse(str(got)) == got
        and bool(got) == bool(canonical)
    )


def test_each_node_has_its_own_plan_or_none():
    s = NodesFaults.parse("1=eio-writes,mark=ack:3+2=eio-writes,after=1")
    assert (
        s.of(0) is None and s.of(1) == FaultPlan("eio-writes", mark="ack:3") and s.of(2).after == 1
    )
    assert NodesFaults.parse("eio-writes").of(5) == FaultPlan(
        "eio-writes"
    )  # one disk's plan: any node asked


@pytest.mark.parametrize(
    "text, says",
    [
        ("1=eio-writes+1=eio-writes", "node 1 given twice"),
        ("1=", "node 1 has no plan"),
        ("1=eio-flush", "node 1: unknown fault kind 'eio-flush'"),
        ("2=eio-writes,nth=2", "node 2: nth= goes with mark="),
        ("eio-writes+1=eio-writes", "names no node"),
        (
            "1=eio-writes+eio-writes,mark=ack:1+2=eio-writes",
            "starts another plan only before its NODE=",
        ),
        ("bogus", "unknown fault kind"),
    ],
)
def test_a_bad_setting_is_one_line(text, says):
    with pytest.raises(FaultsError) as e:
        NodesFaults.parse(text)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "text, disks, says",
    [
        ("eio-writes", 3, "a cluster recording: name the node whose disk fails, e.g. 1=eio-writes"),
        ("3=eio-writes", 3, "node 3 named, and the recording has nodes 0..2"),
        ("1=eio-writes", 1, "node 1 named, and the recording has one disk (node 0)"),
    ],
)
def test_a_setting_that_does_not_fit_the_recording_is_one_line(text, disks, says):
    with pytest.raises(UsageError) as e:
        fault_for(text, disks)
    assert str(e.value).startswith(f"--fault {text}: ") and says in str(e.value)


def test_one_disk_takes_its_plan_with_or_without_node_0():
    assert (
        fault_for("0=eio-writes,mark=ack:1", 1)
        == fault_for("eio-writes,mark=ack:1", 1)
        == "eio-writes,mark=ack:1"
    )
    assert fault_for("", 3) == "" and fault_for("2=eio-writes", 3) == "2=eio-writes"


# ---------------------------------------------------------------------------------------------
# The guest side: each node's plan and layer (faults.py), without a device.


@pytest.fixture
def cluster(monkeypatch, tmp_path):
    """A 3-node cluster's environment with node 1's plan on at its 2nd ack; the switches made."""
    done: list[tuple] = []
    monkeypatch.setattr(
        faults,
        "fault",
        lambda kind, ranges=(), target=None, node=None: done.append(
            ("on", target.node, target.name, kind)
        ),
    )
    monkeypatch.setattr(
        faults, "recover", lambda target=None, node=None: done.append(("off", target.node))
    )
    monkeypatch.setenv(
        "POWERCUT_NODES", ",".join(f"rec-n{i}=/dev/mapper/rec-n{i}-order" for i in range(3))
    )
    monkeypatch.setenv("POWERCUT_MOUNTS", ":".join(str(tmp_path / f"n{i}") for i in range(3)))
    monkeypatch.setenv(
        "POWERCUT_FAULT_NODES", ",".join(f"rec-n{i}-fs:/dev/dm-{i}:2048" for i in range(3))
    )
    setting = NodesFaults.parse("1=eio-writes,mark=ack:*,nth=2,until=ack:3")
    for k, v in faults.plan_env(setting, str(tmp_path / "plan.json")).items():
        monkeypatch.setenv(k, v)
    return done


def test_a_cluster_mark_moves_only_the_planned_node_and_switches_its_layer(cluster, tmp_path):
    for m in ["begin:1", "ack:1", "ack:2", "ack:3", "ack:4"]:
        faults.plan_mark(m)
    assert cluster == [("on", 1, "rec-n1-fs", "eio-writes"), ("off", 1)]
    assert json.loads((tmp_path / "plan-n1.json").read_text())["off"] is True
    assert not (tmp_path / "plan-n0.json").exists() and not (tmp_path / "plan-n2.json").exists()


def test_a_node_layers_marks_go_to_its_log_alone_under_the_cluster_lock(monkeypatch, cluster):
    sent: list[tuple[str, str]] = []
    monkeypatch.setattr(faults, "insert_on_nodes", lambda text, spec: sent.append((text, spec)))
    t = faults.node_target(2)
    assert (t.name, t.lower, t.size, t.dm_name, t.order_dev) == (
        "rec-n2-fs",
        "/dev/dm-2",
        2048,
        "rec-n2",
        "/dev/mapper/rec-n2-order",
    )
    t.mark(FAULT_OFF)
    assert sent == [(FAULT_OFF, "rec-n2=/dev/mapper/rec-n2-order")]
    with pytest.raises(faults.FaultError, match="the cluster has nodes 0..2"):
        faults.node_target(3)


def test_in_a_cluster_the_api_asks_for_the_node(monkeypatch):
    monkeypatch.delenv("POWERCUT_FAULT_DEV", raising=False)
    monkeypatch.delenv("POWERCUT_TIMING", raising=False)
    monkeypatch.setenv("POWERCUT_FAULT_NODES", "rec-n0-fs:/dev/dm-0:2048,rec-n1-fs:/dev/dm-1:2048")
    with pytest.raises(faults.FaultError, match=r"name it \(powercut.fault\(kind, node=1\)"):
        faults.fault("eio-writes")
    assert faults.main(["--node", "x", "on", "eio-writes"]) == 2


# ---------------------------------------------------------------------------------------------
# The check side: each node's windows from its own log, the judge naming the node.

KEYS = [(1, "begin:0"), (2, "ack:0"), (3, "begin:1"), (6, "ack:1"), (7, "begin:2"), (8, "ack:2")]


class _Log:
    def __init__(self, marks):
        self._marks = sorted(marks)

    def marks(self):
        return self._marks


class _Checker:
    def __init__(self, lost):
        self.lost = set(lost)

    def run(self, inp):
        gone = sorted(self.lost & set(inp.acked))
        return CheckResult("lost-ack", (f"acked {gone} lost",)) if gone else CheckResult("pass")


def _judge_after_error(logs, lost):
    ctx = with_node_faults(CheckContext(filesystems.get("ext4"), _Checker(lost)), logs)  # type: ignore[arg-type]
    st = CrashState(
        model="flush",
        cut=9,
        dropped=(),
        torn=(),
        acks=("0", "1", "2"),
        begun=("0", "1", "2"),
        id="flush@9",
        epoch=0,
    )
    return ctx, after_error(
        ctx,
        st,
        CheckInput("/mnt/n0", st.acks, st.begun, {}, st.id),
        CheckResult("lost-ack", (f"acked {sorted(lost)} lost",)),
    )


def test_each_node_has_its_own_windows_and_the_verdict_names_the_node():
    node1 = [
        *KEYS,
        (4, on_mark("eio-writes")),
        (5, FAULT_OFF),
    ]  # node 1's disk failed during commit 1
    ctx, got = _judge_after_error([_Log(KEYS), _Log(node1), _Log(KEYS)], lost={"1"})
    assert [bool(f) for f in ctx.node_faults] == [False, True, False]
    assert ctx.node_faults[1].after_error == ("1",)
    assert got.verdict == "acked-after-error"
    assert (
        "commit 1 was acked after node 1's device failed I/O during it (eio-writes from entry 4"
        in got.reasons[0]
    )


def test_the_first_error_of_any_node_cuts_the_acks_and_both_nodes_are_named():
    both = [*KEYS, (4, on_mark("eio-writes")), (5, FAULT_OFF)]
    _, got = _judge_after_error([_Log(both), _Log(KEYS), _Log(both)], lost={"1"})
    assert (
        got.verdict == "acked-after-error" and "the devices of nodes 0, 2 failed" in got.reasons[0]
    )
    late = [*KEYS, (7, on_mark("eio-writes"))]  # node 2: during commit 2 only
    _, got = _judge_after_error([_Log(KEYS), _Log(both), _Log(late)], lost={"1"})
    assert "node 1's device" in got.reasons[0]


def test_no_window_on_any_node_leaves_the_context_and_a_trusted_failure_as_they_were():
    ctx, got = _judge_after_error([_Log(KEYS), _Log(KEYS)], lost={"1"})
    assert ctx.node_faults == () and got.verdict == "lost-ack"
    node1 = [*KEYS, (4, on_mark("eio-writes")), (5, FAULT_OFF)]
    _, got = _judge_after_error(
        [_Log(KEYS), _Log(node1)], lost={"0"}
    )  # commit 0 lost: before any error
    assert got.verdict == "lost-ack"


def test_a_malformed_fault_mark_names_its_node():
    with pytest.raises(UsageError, match="node 1: the log's fault marks are malformed"):
        with_node_faults(
            CheckContext(filesystems.get("ext4")),
            [_Log(KEYS), _Log([(4, "powercut-fault:on:eio-x")])],
        )


# ---------------------------------------------------------------------------------------------
# The host side: the recording's status and [faults] per node.


def _manifest(tmp_path: Path) -> dict:
    return {"recording": {}, "log": {"device_bytes": 1 << 20}, "workload": {"timeout_s": 60}}


def _guest(rc: int, nodes: list[dict]) -> GuestResult:
    """A cluster recording job's result as guest/record.py gives it: common keys, one dict per disk."""
    return GuestResult(True, data={"workload_rc": rc, "disks": nodes})


def test_a_node_plan_that_never_fired_fails_the_recording_naming_the_node(tmp_path):
    res = _guest(
        0,
        [
            {},
            {
                "fault_plan": {
                    "plan": "eio-writes,mark=ack:99",
                    "matches": 0,
                    "on": False,
                    "off": False,
                    "error": "",
                }
            },
        ],
    )
    m = _manifest(tmp_path)
    with pytest.raises(
        WorkloadFailed, match="node 1: the fault plan 'eio-writes,mark=ack:99' never fired"
    ):
        record_vm.judge_result(
            res, record_vm.per_disk_results(res, 2), m, tmp_path, ["log-n0.bin", "log-n1.bin"]
        )
    assert m["recording"]["status"] == "fault-plan-failed"


def test_one_disks_plan_that_never_fired_is_said_without_a_node(tmp_path):
    res = _guest(
        0,
        [
            {
                "fault_plan": {
                    "plan": "eio-writes,mark=ack:99",
                    "matches": 0,
                    "on": False,
                    "off": False,
                    "error": "",
                },
                "fault_left_on": False,
            }
        ],
    )
    with pytest.raises(
        WorkloadFailed, match=r"^the fault plan 'eio-writes,mark=ack:99' never fired"
    ):
        record_vm.judge_result(
            res, record_vm.per_disk_results(res, 1), _manifest(tmp_path), tmp_path, ["log.bin"]
        )


def test_a_cluster_workload_that_exits_after_a_node_error_is_recorded_with_that_nodes_faults(
    tmp_path,
):
    build_log(tmp_path / "log-n0.bin", [("m", t) for _, t in KEYS])
    build_log(
        tmp_path / "log-n1.bin",
        [
            ("m", "begin:0"),
            ("m", "ack:0"),
            ("m", "begin:1"),
            ("m", on_mark("eio-writes")),
            ("m", "ack:1"),
        ],
    )
    res = _guest(
        1,
        [
            {"fault_left_on": False},
            {
                "fault_left_on": True,
                "fault_plan": {
                    "plan": "eio-writes,mark=ack:0",
                    "matches": 1,
                    "on": True,
                    "off": False,
                    "error": "",
                },
            },
        ],
    )
    disks = record_vm.per_disk_results(res, 2)
    logs = ["log-n0.bin", "log-n1.bin"]
    record_vm.judge_result(res, disks, _manifest(tmp_path), tmp_path, logs)  # not raised
    with pytest.raises(WorkloadFailed, match="exited 1"):
        record_vm.judge_result(res, disks, _manifest(tmp_path), tmp_path, ["log-n0.bin"])
    got = record_vm.faults_of(tmp_path, logs, disks, 1)
    assert got["workload_rc"] == 1 and [n["node"] for n in got["node"]] == [1]
    assert got["node"][0]["acked_after_error"] == ["1"] and got["node"][0]["left_on"] is True
    assert got["node"][0]["plan"] == "eio-writes,mark=ack:0"
    tables = [{"log": log, "final": "f"} for log in logs]
    record_vm.note_nodes(disks, tables)  # each node's values in its own [[node]] table
    assert tables[1]["fault_plan"] == disks[1]["fault_plan"] and tables[1]["fault_left_on"]
    assert not tables[0]["fault_left_on"] and "fault_plan" not in tables[0]
    assert "disks" not in record_vm.result_section(res)


def test_one_disks_values_go_to_its_node_table_as_a_clusters_do(tmp_path):
    res = _guest(
        0,
        [
            {
                "target_write_cache": "write back",
                "latency": {"setting": "none"},
                "logged_entries": 7,
                "highest_sector": 9,
                "logging_disabled": False,
                "fault_left_on": False,
                "file_map": "files.json",
            }
        ],
    )
    tables = [{"log": "log.bin", "final": "data-final.img"}]
    record_vm.note_nodes(record_vm.per_disk_results(res, 1), tables)
    assert record_vm.result_section(res) == {"workload_rc": 0}
    assert tables == [
        {
            "log": "log.bin",
            "final": "data-final.img",
            "target_write_cache": "write back",
            "logged_entries": 7,
            "highest_sector": 9,
            "logging_disabled": False,
            "fault_left_on": False,
            "file_map": "job/files.json",
        }
    ]

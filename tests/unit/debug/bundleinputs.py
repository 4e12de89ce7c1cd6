"""The inputs of the repro-bundle fixtures in tests/unit/debug/bundles/ (``one-disk``: a one-disk
bundle; ``cluster``: a 3-node cluster bundle), each written there by the bundle writers of commit
72cc7f9 (debug/bundle.py and debug/clusterbundle.py, before the one bundle format): the test
writes the same inputs with today's writer and compares byte for byte, and reads both fixtures.
Everything here is deterministic (the logs, the verdicts); only ``created`` is the clock's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from powercut.checker import CheckerSpec
from powercut.core.judging.verdict import Verdict
from powercut.core.states.nodes import Nodes
from powercut.debug.diagnosis import Diagnosis
from tests.unit.core.test_nodesshrink import OPS as CLUSTER_OPS
from tests.unit.logops import build_log

FIXTURES = Path(__file__).parent / "bundles"
ONE_OPS = [
    ("m", "mkfs"),
    ("m", "begin:1"),
    ("w", 100, 4, 0, 1),
    ("d", 50, 8),
    ("f",),
    ("m", "ack:1"),
    ("w", 104, 4, 0, 3),
    ("f",),
    ("m", "ack:2"),
]
RECORDING = "/fixture/rec"


class OneDiagnosis:
    """What a one-disk bundle reads of a diagnosis (debug/diagnose.Diagnosis): its minimized state and JSON."""

    minimized = "write-cache@4/d2"

    def to_json(self) -> dict[str, Any]:
        return {
            "state": "write-cache@4/d2",
            "verdict": "lost-ack",
            "minimized": self.minimized,
            "calls": 3,
            "culprits": [
                {"entry": 2, "what": "data block", "path": "/f", "text": "entry 2: data of /f"}
            ],
        }


def blamed_diagnosis(state: str) -> Diagnosis:
    """A real one-disk Diagnosis of ``state``: minimized to write-cache@4/d2, which loses one data
    write of /f (entry 2)."""
    culprit = {"entry": 2, "what": "data block", "path": "/f", "text": "entry 2: data of /f"}
    return Diagnosis(
        state,
        "lost-ack",
        "write-cache@4/d2",
        ("acked record(s) [1] missing",),
        "lost",
        3,
        False,
        ({"culprits": [culprit]},),
        "lost-ack: lost <- data of /f",
        0.1,
    )


def one_disk(tmp: Path) -> dict[str, Any]:
    """A one-disk bundle's inputs (the keywords of the one-disk writer), its log built in ``tmp``."""
    log = tmp / "rec" / "log.bin"
    log.parent.mkdir(parents=True, exist_ok=True)
    build_log(log, ONE_OPS).close()
    trace = tmp / "rec" / "syscalls.txt.gz"
    trace.write_bytes(b"\x1f\x8b fixture trace")
    v = Verdict(
        "write-cache@4/d2",
        "write-cache",
        4,
        "lost-ack",
        ("acked record(s) [1] missing",),
        1,
        0,
        0.1,
    )
    return {
        "recording": RECORDING,
        "log_path": log,
        "data_size": 1 << 20,
        "fstype": "ext4",
        "mount_opts": "",
        "checker": CheckerSpec(name="append-fsync"),
        "params": {"n": 2},
        "workload": {"name": "append-fsync"},
        "verdict": v,
        "diagnosis": OneDiagnosis(),
        "cut": 6,
        "trace": trace,
        "why": {
            "rule": "lost-ack",
            "sentence": "record 1 was acked, then lost",
            "evidence": ["e1"],
        },
    }


CLUSTER_STATE = "write-cache~write-cache@11/d4,5,6,8,10+write-cache@11/d5+write-cache@11"


def cluster(tmp: Path) -> dict[str, Any]:
    """A 3-node cluster bundle's inputs (the keywords of the cluster writer), its logs built in ``tmp``."""
    logs = [tmp / "rec" / f"log-n{i}.bin" for i in range(3)]
    logs[0].parent.mkdir(parents=True, exist_ok=True)
    indexes = [build_log(p, CLUSTER_OPS) for p in logs]
    st = Nodes(indexes).state_from_id(CLUSTER_STATE)
    for x in indexes:
        x.close()
    v = Verdict(
        st.id,
        st.model,
        st.instant,
        "lost-ack",
        ("acked record 1 is intact on 1 of 3 nodes",),
        1,
        0,
        0.2,
    )
    nodes = tuple(
        {
            "node": n,
            "original": s.id,
            "minimized": s.id,
            "calls": 1,
            "cut": [s.cut, s.cut],
            "lost": [len(s.dropped), len(s.dropped)],
            "torn": [0, 0],
            "culprits": [
                {"entry": 5, "what": "data block", "path": "/replog.log", "text": f"node {n} w6"}
            ],
        }
        for n, s in enumerate(st.nodes)
    )
    d = Diagnosis(
        st.id,
        "lost-ack",
        st.id,
        ("acked record 1 is intact on 1 of 3 nodes",),
        "lost",
        4,
        False,
        nodes,
        "lost-ack: lost <- node 1: w6",
        0.5,
    )
    return {
        "recording": RECORDING,
        "logs": logs,
        "cuts": [13, 13, 13],
        "data_size": 1 << 20,
        "fstype": "ext4",
        "mount_opts": "",
        "checker": CheckerSpec(name="replog"),
        "params": {"n": 2},
        "workload": {"name": "replog"},
        "verdict": v,
        "diagnosis": d,
    }

"""A fault on one node of a cluster recording end to end (``fault="1=PLAN"`` in the pytest marker,
``--fault 1=PLAN`` on the command line): a user's two-node mirror, which only marks its commits,
meets an EIO on node 1's disk at a chosen mark, and the one judge names node 1.

The mirror writes record i into a preallocated file on every node and fsyncs it there, then acks.
Node 1's plan fails that file's sectors from ``begin:2`` until ``retry:*``.  The mirror retries
node 1's failed fsync -- Linux reports the error once, so the retry succeeds -- and acks: a state
that lost record 2 on node 1 fails with every ack and passes with the acks before the error:
``acked-after-error``, the reason naming node 1's device.  Node 0's log holds no fault window
(the fault marks go to node 1's log only), and the recording's ``[faults]`` names node 1.  The
mirror that stops at node 1's error (exit 3, recorded: a fault window) passes every state."""

from __future__ import annotations

import json
import os
import tomllib
from collections import Counter

import pytest

pytestmark = pytest.mark.vm
pytest_plugins = ["pytester"]

MIRROR = '''
import os
from pathlib import Path

import powercut
import pytest

REC = 4096


def put(mount, n=4, retry=True):
    nodes = [Path(mount) / "n0", Path(mount) / "n1"]
    fds = []
    for node in nodes:
        fd = os.open(node / "log", os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"." * (REC * n), 0)      # allocated before the fault: its sectors are known
        os.fsync(fd)
        fds.append(fd)
    for i in range(n):
        powercut.begin(i)
        for k, fd in enumerate(fds):
            os.pwrite(fd, f"rec{i}".encode().ljust(REC, b"-"), i * REC)
            try:
                os.fsync(fd)
            except OSError as e:
                if not retry:
                    print(f"node {k}: fsync of record {i}: {e.strerror}: stopping", flush=True)
                    raise SystemExit(3)
                print(f"node {k}: fsync of record {i}: {e.strerror}: retrying", flush=True)
                powercut.mark(f"retry:{i}")
                os.fsync(fd)                    # 0: the kernel reported the error once (fsyncgate)
        powercut.ack(i)


def check(state):
    """Every acked record on every node (a mirror)."""
    for node, mount in enumerate(state.mounts):
        path = Path(mount) / "log"
        data = path.read_bytes() if path.exists() else b""
        for key in state.acked:
            want = f"rec{key}".encode()
            if data[int(key) * REC:int(key) * REC + len(want)] != want:
                return powercut.CheckResult("lost-ack", (f"node {node}: acked record {key} is lost",))


@pytest.mark.powercut(nodes=2, fs="ext4", fault="1=eio-range,file=log,mark=begin:2,until=retry:*",
                      models=("flush",), expect="acked-after-error")
def test_retrying_node_1s_fsync_after_eio_is_caught(crashtest):
    out = crashtest(put, check)
    assert out.summary.failures and {f.verdict for f in out.summary.failures} == {"acked-after-error"}


@pytest.mark.powercut(nodes=2, fs="ext4", fault="1=eio-range,file=log,mark=begin:2,until=retry:*",
                      models=("flush",))
def test_stopping_at_node_1s_first_eio_passes(crashtest):
    out = crashtest(put, check, params={"retry": False})
    assert out.summary.total > 0
'''


@pytest.mark.nightly  # ~66 s; one disk's plan in the marker is fast: test_fault_plan_vm
def test_a_fault_on_node_1_is_judged_acked_after_error_naming_node_1(
    pytester: pytest.Pytester,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("host mode needs root")
    pytester.makepyfile(test_mirror=MIRROR)
    out = pytester.path / "pc-out"
    res = pytester.runpytest_subprocess(
        "--powercut-check-in=host", f"--powercut-out={out}", "-p", "no:cacheprovider", timeout=1200
    )
    text = res.stdout.str()
    print(text)
    res.assert_outcomes(passed=2)
    out = next(out.glob("*retrying*"))
    manifest = tomllib.loads(next(out.rglob("manifest.toml")).read_text())
    faults = manifest["faults"]
    assert [n["node"] for n in faults["node"]] == [1] and faults["node"][0]["plan"].startswith(
        "eio-range,file=log"
    )
    assert faults["node"][0]["acked_after_error"] and manifest["recording"]["status"] == "ok"
    journal = next(out.rglob("journal.jsonl")).read_text().splitlines()
    verdicts = [json.loads(line) for line in journal if '"verdict"' in line]
    print("verdict counts:", dict(Counter({v["state"]: v["verdict"] for v in verdicts}.values())))
    failing = [v for v in verdicts if v["verdict"] != "pass"]
    assert failing and {v["verdict"] for v in failing} == {"acked-after-error"}
    assert all("node 1's device failed I/O" in v["reasons"][0] for v in failing), failing[0]
    print("a reason:", failing[0]["reasons"][0])

"""The pytest plugin's ``nodes`` option on real VMs (issue 40): a user's own three-node store, written
as two functions in a throwaway project, crash-tested as one power cut of every node.  The store
that fsyncs each node's copy before counting it passes; the one that counts a node's copy as soon as
it is written is caught (its test expects lost-ack), and the same test without that expectation
fails with the cluster's words: the cluster state's id names every node's cut."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.vm
pytest_plugins = ["pytester"]

STORE = '''
import os
import re
import subprocess
import sys

import pytest

import powercut


def put_everywhere(mount, n=4, durable=True):
    """The client: key i to every node (its own file there), acked once a majority has it."""
    nodes = sorted(p for p in mount.iterdir() if p.name[:1] == "n" and p.name[1:].isdigit())
    assert len(nodes) == 3, nodes
    for i in range(n):
        powercut.begin(i)
        for node in nodes:
            fd = os.open(node / f"k{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, f"v{i}".encode() * 64)
            if durable:
                os.fsync(fd)
            os.close(fd)
            if durable:
                dfd = os.open(node, os.O_RDONLY)
                os.fsync(dfd)
                os.close(dfd)
        powercut.ack(i)


def check_majority(state):
    """Every acked key intact on a majority of the nodes (state.mounts: every node, node 0 first)."""
    assert len(state.mounts) == 3, state.mounts
    lost = []
    for i in state.acked:
        have = 0
        for m in state.mounts:
            try:
                with open(os.path.join(m, f"k{i}"), "rb") as f:
                    have += f.read() == f"v{i}".encode() * 64
            except FileNotFoundError:
                pass
        if have < 2:
            lost.append(f"acked key k{i} is intact on {have} of 3 nodes")
    if lost:
        return powercut.CheckResult("lost-ack", tuple(lost))


@pytest.mark.powercut(nodes=3, models=("flush", "write-cache"))
def test_majority_store_survives(crashtest):
    crashtest(put_everywhere, check_majority)


@pytest.mark.powercut(nodes=3, models=("flush", "write-cache"))
def test_unsynced_store_is_caught(crashtest):
    crashtest(put_everywhere, check_majority, params={"durable": False}, expect="lost-ack")


@pytest.mark.powercut(nodes=3, models=("flush", "write-cache"))
def test_unsynced_store_fails(crashtest):
    crashtest(put_everywhere, check_majority, params={"durable": False})
'''


@pytest.mark.parametrize("check_in", [pytest.param("host", marks=pytest.mark.nightly)])
def test_a_cluster_crash_test_passes_and_a_broken_one_is_caught(
    pytester: pytest.Pytester, check_in: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("host mode needs root")
    pytester.makepyfile(test_store=STORE)
    out = pytester.path / "pc-out"
    res = pytester.runpytest_subprocess(
        f"--powercut-check-in={check_in}",
        "--powercut-max-states=40",
        f"--powercut-out={out}",
        "-p",
        "no:cacheprovider",
        timeout=2400,
    )
    text = res.stdout.str()
    print(text)
    res.assert_outcomes(passed=2, failed=1)
    res.stdout.fnmatch_lines(
        [
            f"*powercut: lost-ack: * of * distinct crash states fail (ext4; flush, write-cache; judged in {check_in})*",
            # the group: its reason, then which of each node's writes were late (blame per node)
            "group 1: lost-ack x *: node *: ack:* was given after changing /k*no-fsync*",  # the trace's cause, a node
            "  confirmed: * alone*",
            "  minimized: *~*+*+* -> *~*+*+* (* check*)",
            "  repro: powercut repro *",
            "artifacts: *",
        ]
    )
    # the minimized cluster state names one cut per node; its bundle is re-judged alike
    minimized = re.search(r"minimized: \S+ -> (\S+)", text).group(1)
    assert len(minimized.split("~", 1)[1].split("+")) == 3, minimized
    bundle = re.search(r"repro: powercut repro (\S+)", text).group(1)
    rep = subprocess.run(
        [sys.executable, "-m", "powercut.cli", "repro", bundle, "--check-in", "host"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rep.returncode == 3 and "lost-ack" in rep.stdout, rep.stdout + rep.stderr
    res.stdout.fnmatch_lines(["*powercut crash tests*", "*test_majority_store_survives: pass (*"])

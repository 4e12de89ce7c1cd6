"""The pytest plugin on real VMs, as a user runs it: the README's example (a key-value store and its
crash tests, taken from the README itself so the README cannot go stale) in a throwaway project,
run by a fresh ``pytest`` process that finds the plugin through its entry point.  The correct
store passes; the store without fsync is caught (its test expects a failure), and the same test
without that expectation fails with the words a person acts on.  Host and VM mode."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.vm
pytest_plugins = ["pytester"]

README = Path(__file__).resolve().parents[2] / "README.md"


def example(name: str) -> str:
    """The code block after ``<!-- example: NAME -->`` in the README."""
    m = re.search(
        rf"<!-- example: {re.escape(name)} -->\n```python\n(.*?)```", README.read_text(), re.S
    )
    assert m, f"README has no example {name}"
    return m.group(1)


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(kvstore=example("kvstore.py"))
    test = example("test_kvstore.py")
    # a third test: the broken store without the expectation, to see the failure as pytest prints it
    test += """

@pytest.mark.powercut(fs="ext4")
def test_kvstore_without_fsync_fails(crashtest):
    crashtest(put_keys, check_keys, params={"durable": False})
"""
    pytester.makepyfile(test_kvstore=test)
    return pytester


# host: ~60 s, nightly; the fast suite runs the README's example where a user's runs it by default (checker
# VMs), and the plugin in host mode in test_action_vm and test_fault_plan_vm
@pytest.mark.parametrize("check_in", ["host", pytest.param("vm", marks=pytest.mark.nightly)])
def test_readme_example_correct_passes_broken_is_caught(
    project: pytest.Pytester, check_in: str
) -> None:
    if check_in == "host":
        import os

        if os.geteuid() != 0:
            pytest.skip("host mode needs root")
    out = project.path / "pc-out"
    # every state on the host; in checker VMs (TCG: a few states a second) at most 25 per model
    # VM mode: 25 states per test; host mode 400 (every state of the correct store is 6,611: 2 min of CI)
    cap = ["--powercut-max-states=25"] if check_in == "vm" else ["--powercut-max-states=400"]
    res = project.runpytest_subprocess(
        f"--powercut-check-in={check_in}",
        "--powercut-models=flush,write-cache",
        "--powercut-jobs=2",
        f"--powercut-out={out}",
        "--junitxml=junit.xml",
        "-p",
        "no:cacheprovider",
        *cap,
        timeout=2400,
    )
    text = res.stdout.str()
    print(text)
    res.assert_outcomes(passed=2, failed=1)
    # the failing test reads like a finding: verdict, counts, the cause's group (its confirmation, minimized
    # state, repro), artifacts
    res.stdout.fnmatch_lines(
        [
            f"*powercut: lost-ack: * of * distinct crash states fail (ext4; flush, write-cache; judged in {check_in})*",
            # the cause in the program's terms leads (issue #38), the calls as evidence, then the blocks
            "group 1: lost-ack x *: /store.json.tmp was renamed over /store.json before its data was fsynced*"
            " [[]rename-before-fsync]",
            "  | *rename(*store.json.tmp*store.json*",
            "  | *mark ack:*",
            "  blocks: *acknowledged key * is lost*",
            "  confirmed: * alone*",
            "  minimized: * -> * (* checks)",
            "  repro: powercut repro *",
            "artifacts: *",
        ]
    )
    res.stdout.fnmatch_lines(
        [
            "*powercut crash tests*",
            "*test_kvstore_survives_power_loss: pass (commit windows capped: * distinct states judged*): all * "
            "judged crash states pass*",
        ]
    )
    bundle = re.search(r"repro: powercut repro (\S+)", text).group(1)
    assert Path(bundle, "bundle.json").is_file() and Path(bundle).is_relative_to(out)
    cases = {c.get("name"): c for c in ET.parse(project.path / "junit.xml").iter("testcase")}
    props = {
        p.get("name"): p.get("value")
        for p in cases["test_kvstore_without_fsync_fails"].iter("property")
    }
    assert props["powercut_verdict"] == "lost-ack" and int(props["powercut_failed"]) > 0

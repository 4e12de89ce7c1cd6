"""#25: bad input never becomes a verdict, a traceback or lost work.  One test per case: the exit
status (2 for a bad option or value, 1 for bad input files), one clear line on stderr naming what is
wrong, and nothing left behind.  No VM boots: every case fails before one would.  (Damaged logs:
test_damaged_log.py; lost work: test_lost_work.py; parameters: test_workload.py; checkers:
test_checker.py and test_campaign.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from powercut.checker import CheckerSpec
from powercut.core.judging.verdict import Verdict
from powercut.debug import bundle
from tests.unit.logops import build_log


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "powercut.cli", *args], capture_output=True, text=True, timeout=300
    )


def one_line(p: subprocess.CompletedProcess, *words: str) -> None:
    lines = p.stderr.rstrip("\n").splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.parametrize(
    "argv,names",
    [
        (["check", "/nowhere", "-j", "-3"], "-j/--jobs"),
        (["matrix", "-j", "-3"], "-j/--jobs"),
        (["check", "/nowhere", "--state-timeout", "0"], "--state-timeout"),
        (["check", "/nowhere", "--checker-timeout", "-1"], "--checker-timeout"),
        (["check", "/nowhere", "--max-states", "-1"], "--max-states"),
        (["check", "/nowhere", "--shrink", "-2"], "--shrink"),
        (["check", "/nowhere", "--shrink-budget", "0"], "--shrink-budget"),
        (["check", "/nowhere", "--bound", "x"], "--bound"),
        (["record", "--workload", "wal", "--size", "-5", "-o", "/tmp/never"], "--size"),
        (["record", "--workload", "wal", "--memory", "0", "-o", "/tmp/never"], "--memory"),
        (["bench", "--vm-timeout", "-1"], "--vm-timeout"),
        (
            ["record", "--workload", "wal", "--disk-latency", "floppy", "-o", "/tmp/never"],
            "--disk-latency",
        ),
        (
            ["record", "--workload", "wal", "--disk-latency", "flush=8x", "-o", "/tmp/never"],
            "--disk-latency",
        ),
        (["run", "--disk-latency", "none,hdd,none", "-o", "/tmp/never"], "--disk-latency"),
        (["run", "--repeat", "0", "-o", "/tmp/never"], "--repeat"),
        (["record", "--workload", "wal", "--fault", "eio-flush", "-o", "/tmp/never"], "--fault"),
        (["record", "--workload", "wal", "--fault", "1=eio-writes", "-o", "/tmp/never"], "--fault"),
        (
            [
                "record",
                "--workload",
                "replog",
                "--nodes",
                "3",
                "--fault",
                "eio-writes",
                "-o",
                "/tmp/never",
            ],
            "name the node",
        ),
        (
            [
                "record",
                "--workload",
                "replog",
                "--nodes",
                "3",
                "--fault",
                "3=eio-writes",
                "-o",
                "/tmp/never",
            ],
            "node 3",
        ),
        (
            [
                "record",
                "--workload",
                "replog",
                "--nodes",
                "2",
                "--fault",
                "1=eio-writes+1=eio-writes",
                "-o",
                "/tmp/never",
            ],
            "node 1 given twice",
        ),
    ],
)
def test_a_bad_option_value_exits_2_before_anything_runs(argv: list[str], names: str) -> None:
    p = cli(*argv)
    assert p.returncode == 2
    one_line(p, names)


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "--workload", "append-fsync", "--nodes", "2"],
        ["run", "--workload", "wal", "--nodes", "3"],
    ],
)
def test_a_one_disk_workload_on_several_nodes_is_refused(argv: list[str], tmp_path: Path) -> None:
    """Its acks would be judged on node 0's filesystem, where it never wrote: every state a false
    lost-ack.  One line naming the cause, before any VM, and nothing written."""
    p = cli(*argv, "-o", str(tmp_path / "out"))
    assert p.returncode == 1
    one_line(p, "writes to one disk")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "--workload", "wal", "--mkfs-opts", "'x", "-o", "{out}"],
        ["record", "--workload", "wal", "--mkfs-opts", "'x", "-o", "{out}", "--dry-run"],
        ["run", "--mkfs-opts", "'x", "-o", "{out}"],
        ["bench", "--mkfs-opts", "'x", "-o", "{out}"],
    ],
)
def test_an_unbalanced_quote_in_mkfs_opts_is_one_line(tmp_path: Path, argv: list[str]) -> None:
    p = cli(*[a.format(out=tmp_path / "out") for a in argv])
    assert p.returncode == 2
    one_line(p, "--mkfs-opts", "closing quotation")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "--workload", "append-fsync", "-o", "{out}", "--dry-run"],
        ["bench", "--quick", "-o", "{out}", "--dry-run"],
    ],
)
def test_dry_run_leaves_no_directory(tmp_path: Path, argv: list[str]) -> None:
    p = cli(*[a.format(out=tmp_path / "out") for a in argv])
    assert p.returncode == 0, p.stderr
    assert "qemu-system" in p.stdout and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "param,says",
    [("fsync=maybe", "true or false"), ("n=-3", "at least 1"), ("bogus=1", "unknown parameter")],
)
@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_a_mistyped_parameter_is_refused_before_recording(
    tmp_path: Path, param: str, says: str, dry: list[str]
) -> None:
    """A bad --param value is a bad option value: exit 2, one line, no QEMU command (--dry-run too)."""
    p = cli(
        "record", "--workload", "append-fsync", "--param", param, "-o", str(tmp_path / "out"), *dry
    )
    assert p.returncode == 2
    one_line(p, param.split("=")[0], says)
    assert "qemu-system" not in p.stdout
    assert not (tmp_path / "out").exists()


def _bundle(tmp_path: Path) -> Path:
    log = tmp_path / "rec" / "log.bin"
    log.parent.mkdir()
    build_log(
        log, [("m", "mkfs"), ("m", "begin:1"), ("w", 100, 4, 0, 1), ("f",), ("m", "ack:1")]
    ).close()
    v = Verdict("flush@4", "flush", 4, "lost-ack", ("acked record(s) [1] missing",), 1, 0, 0.1)
    return bundle.write(
        tmp_path / "b",
        recording=str(log.parent),
        logs=[log],
        cuts=[0],
        data_size=1 << 20,
        fstype="ext4",
        mount_opts="",
        checker=CheckerSpec(name="append-fsync"),
        params={"n": 2},
        workload={"name": "append-fsync"},
        verdict=v,
    )


@pytest.mark.parametrize(
    "change,names",
    [
        (lambda d: d.pop("fstype"), "fstype"),
        (lambda d: d.pop("data_size"), "data_size"),
        (lambda d: d.update(data_size="1048576"), "data_size"),
        (lambda d: d.update(logs=["log0.bin"]), "logs"),
        (lambda d: d.update(checker={"name": "no-such-checker"}), "no-such-checker"),
        (lambda d: d.update(params=[1, 2]), "params"),
    ],
)
def test_a_damaged_bundle_is_one_line(tmp_path: Path, change, names: str) -> None:
    b = _bundle(tmp_path)
    doc = json.loads((b / "bundle.json").read_text())
    change(doc)
    (b / "bundle.json").write_text(json.dumps(doc))
    p = cli("repro", str(b), "--check-in", "host")
    assert p.returncode == 1
    one_line(p, names)


def test_a_bundle_without_its_checker_is_refused_not_no_longer_failing(tmp_path: Path) -> None:
    """#25: a lost-ack bundle whose checker is gone would be judged by recovery and fsck alone and
    'no longer fail' (exit 0): refused instead; so is a checker command this machine cannot run."""
    b = _bundle(tmp_path)
    doc = json.loads((b / "bundle.json").read_text())
    (b / "bundle.json").write_text(json.dumps(dict(doc, checker={"name": "", "command": ""})))
    p = cli("repro", str(b), "--check-in", "host")
    assert p.returncode == 1
    one_line(p, "names no checker", "lost-ack")
    (b / "bundle.json").write_text(json.dumps(dict(doc, checker={"command": "/opt/gone/check.py"})))
    p = cli("repro", str(b), "--check-in", "host")
    assert p.returncode == 1
    one_line(p, "/opt/gone/check.py")

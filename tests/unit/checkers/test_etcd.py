"""etcd's workload, members and checker: the values pinned between workload and checker, a member's
argv and ports, etcd's own words for a member that stopped, the verdict from what the recovered
cluster served, the pinned build (idempotent; one line without Go), and -- where the pinned etcd is
built and we are root -- a real three-member cluster written by the workload's client and judged by
the checker."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from powercut import CheckInput
from powercut.checkers import etcd as chk
from powercut.workloads import etcd as wl
from powercut.workloads import etcdcluster as ec


def test_values_match_the_workload() -> None:
    assert chk.value(3, 7, 40) == wl.value(3, 7, 40) and len(wl.value(0, 1, 100)) == 100
    assert wl.value(0, 1, 16) != wl.value(1, 1, 16) != wl.value(0, 2, 16)
    assert all(chk.DEFAULTS[k] == wl.DEFAULTS[k] for k in chk.DEFAULTS)


def test_members_ports_and_argv() -> None:
    ms = ec.members(3, 2379)
    assert [(m.name, m.client_port, m.peer_port) for m in ms] == [
        ("m0", 2379, 2380),
        ("m1", 2381, 2382),
        ("m2", 2383, 2384),
    ]
    argv = ec.member_argv(
        "/x/etcd", ms[1], ms, "n1/etcd", fsync=True, heartbeat_ms=200, election_ms=2000
    )
    got = dict(zip(argv[1::2], argv[2::2]))
    assert argv[0] == "/x/etcd" and got["--name"] == "m1" and got["--data-dir"] == "n1/etcd"
    assert (
        got["--listen-peer-urls"] == got["--initial-advertise-peer-urls"] == "http://127.0.0.1:2382"
    )
    assert got["--initial-cluster"] == (
        "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2382,m2=http://127.0.0.1:2384"
    )
    assert got["--election-timeout"] == "2000" and "--unsafe-no-fsync" not in argv
    unsafe = ec.member_argv(
        "/x/etcd", ms[0], ms, "d", fsync=False, heartbeat_ms=200, election_ms=2000
    )
    assert unsafe[-1] == "--unsafe-no-fsync"


def test_last_error_quotes_etcds_own_words() -> None:
    log = "\n".join(
        [
            json.dumps({"level": "info", "msg": "starting"}),
            json.dumps(
                {"level": "error", "msg": "Opening bbolt db failed", "error": "invalid database"}
            ),
            json.dumps(
                {"level": "panic", "msg": "failed to open database", "error": "invalid database"}
            ),
            "panic: failed to open database",
            "",
            "goroutine 1 [running]:",
        ]
    )
    assert ec.last_error(log) == "failed to open database: invalid database"
    assert ec.last_error("x\npanic: runtime error\ngoroutine 7") == "panic: runtime error"
    assert (
        ec.last_error(
            "unexpected fault address 0x7f\nfatal error: fault\n[signal SIGBUS: bus error]\n"
            "goroutine 1:\n\tgo.etcd.io/bbolt@v1.4.3/db.go:1246"
        )
        == "fatal error: fault [signal SIGBUS: bus error]"
    )
    assert ec.last_error(json.dumps({"level": "error", "msg": "m"}) + "\nbye") == "m"
    assert ec.last_error("") == "(no output)"


def test_raft_state_says_why_there_is_no_leader() -> None:
    log = "\n".join(
        [
            json.dumps({"level": "info", "msg": "f31c switched to configuration voters=()"}),
            json.dumps({"level": "warn", "msg": "Running http and grpc server on single port."}),
            json.dumps(
                {"level": "warn", "msg": "failed to publish local member to cluster through raft"}
            ),
            json.dumps({"level": "warn", "msg": "simple token is not cryptographically signed"}),
            "not json",
        ]
    )
    assert ec.raft_state(log) == (
        "switched to configuration voters=(); "
        "failed to publish local member to cluster through raft"
    )
    assert ec.raft_state("") == "(nothing logged)"


def test_node_mounts_in_node_order(tmp_path: Path) -> None:
    for d in ("n10", "n2", "n0", "nx", "other", "n1"):
        (tmp_path / d).mkdir()
    assert wl.node_mounts(str(tmp_path)) == ["n0", "n1", "n2", "n10"]


def kvs(**given: bytes) -> dict[bytes, bytes]:
    return {k.encode(): v for k, v in given.items()}


def test_before_the_cluster_came_up_nothing_is_promised() -> None:
    r = chk.check(CheckInput("/nonexistent", (), ("up",), {}, "s", mounts=("/nonexistent",) * 3))
    assert r.verdict == "pass" and "before the cluster first came up" in r.reasons[0]


def test_judge() -> None:
    v = [wl.value(0, i, 10) for i in range(4)]
    assert chk.judge(kvs(k0=v[0], k1=v[1]), [0, 1], [], 0, 10).verdict == "pass"
    assert (
        chk.judge(kvs(k0=v[0], k1=v[1], k2=v[2]), [0, 1], [2], 0, 10).verdict == "pass"
    )  # begun, not acked
    lost = chk.judge(kvs(k0=v[0]), [0, 1, 2], [], 0, 10)
    assert (
        lost.verdict == "lost-ack"
        and "acked key k1 is missing" in lost.reasons[0]
        and "k1, k2" in lost.reasons[0]
    )
    wrong = chk.judge(kvs(k0=v[1]), [0], [], 0, 10)
    assert wrong.verdict == "corrupt-data" and "key k0 holds" in wrong.reasons[0]
    phantom = chk.judge(kvs(k0=v[0], k3=v[3]), [0], [], 0, 10)
    assert phantom.verdict == "corrupt-data" and "b'k3' was never put" in phantom.reasons[0]


def answer(
    kv: dict[bytes, bytes] | None, failed: list[dict[str, object]] = (), error: str = ""
) -> dict[str, object]:
    enc = (
        None
        if kv is None
        else {base64.b64encode(k).decode(): base64.b64encode(v).decode() for k, v in kv.items()}
    )
    return {"kvs": enc, "failed": list(failed), "error": error}


def test_verdict_from_the_recovery() -> None:
    v0 = wl.value(0, 0, 10)
    assert chk.verdict(answer(kvs(k0=v0)), [0], [], 0, 10).verdict == "pass"
    down = chk.verdict(
        answer(
            None,
            [{"node": 1, "code": 2, "line": "failed to open database: invalid database"}],
            "a majority of members exited (2 of 3)",
        ),
        [0],
        [],
        0,
        10,
    )
    assert down.verdict == "detected" and down.reasons == (
        "etcd did not serve: a majority of members exited (2 of 3)",
        "node 1: etcd exited 2: failed to open database: invalid database",
    )
    one = [{"node": 2, "code": 2, "line": "x"}]
    assert chk.verdict(answer(kvs(k0=v0), one), [0], [], 0, 10).verdict == "detected"
    worse = chk.verdict(answer({}, one), [0], [], 0, 10)
    assert worse.verdict == "lost-ack" and worse.reasons[-1] == "node 2: etcd exited 2: x"


def test_build_is_idempotent_and_says_one_line_without_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wl, "find_go", lambda: None)
    with pytest.raises(wl.BuildError, match=r"no Go toolchain .*apt-get install golang-go"):
        wl.build(str(tmp_path))
    assert wl.cli(["--build", "--cache", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("etcd: cannot build etcd v3.6.") and err.count("\n") == 1
    built = Path(wl.binary(str(tmp_path)))
    built.write_text("#!/bin/sh\n")
    built.chmod(0o755)
    assert wl.build(str(tmp_path), say=pytest.fail) == str(
        built
    )  # there already: nothing built, nothing said


HAVE_ETCD = os.access(wl.binary(), os.X_OK)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace per cluster needs root")
@pytest.mark.skipif(
    not HAVE_ETCD,
    reason=f"no pinned etcd at {wl.binary()}: python -m powercut.workloads.etcd "
    "--build (ci/setup.sh does)",
)
def test_a_real_cluster_written_then_judged(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"n{i}").mkdir()
    client = (
        "import powercut, sys\nfrom powercut.workloads import etcd, etcdcluster\n"
        "powercut.begin = powercut.ack = lambda k: None\netcdcluster.lo_up()\n"
        "sys.exit(etcd.main(etcd.WORKLOAD.params({'n': 5, 'size': 10})))\n"
    )
    run = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-c", client],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert run.returncode == 0, run.stderr
    mounts = tuple(str(tmp_path / f"n{i}") for i in range(3))

    def judged(acked: int) -> tuple[str, tuple[str, ...]]:
        keys = ("up", *map(str, range(acked)))
        r = chk.check(CheckInput(mounts[0], keys, (), {"size": 10}, "s", mounts=mounts))
        return r.verdict, r.reasons

    assert judged(5) == ("pass", ())
    assert judged(6)[0] == "lost-ack"
    (tmp_path / "n1" / "etcd" / "member" / "snap" / "db").write_bytes(b"\x01" * 65536)
    (tmp_path / "n2" / "etcd" / "member" / "snap" / "db").write_bytes(b"\x01" * 65536)
    verdict, reasons = judged(5)
    assert (
        verdict == "detected"
        and "node 1: etcd exited" in reasons[1]
        and "invalid database" in reasons[1]
    )
    left = subprocess.run(
        ["pgrep", "-f", str(tmp_path)], capture_output=True, text=True
    ).stdout.split()
    assert not left, f"etcd members left running: {left}"


def test_recover_refuses_bad_params_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert wl.cli(["--recover", "--params", '{"port": "x"}', "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("etcd: --params: ") and "port" in err and err.count("\n") == 1

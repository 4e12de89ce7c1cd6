"""pgsync (a PostgreSQL primary + synchronous standby on two nodes) without a VM.  The pure parts: its
parameters, what each node adds to postgresql.conf, the mark handshake psql's shell runs, the
verdict of both nodes combined.  Where this machine has PostgreSQL and runs as root, the real thing:
the workload runs both servers in a tmp dir (marks in timing mode), then the checker judges copies
of both nodes -- the primary recovered alone, the standby promoted alone."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from powercut import CheckInput, CheckResult
from powercut.checkers import pgsync as psc
from powercut.errors import UsageError
from powercut.workloads import pgsync as psw
from powercut.workloads import postgres as pgw

# -- the workload's pure parts ---------------------------------------------------------------------


def test_params_are_the_postgres_ones_without_the_fault_and_a_port() -> None:
    p = psw.WORKLOAD.params({"synchronous_commit": "remote_write"})
    assert p["synchronous_commit"] == "remote_write" and p["port"] == 5433 and p["n"] == 10
    assert "fault_at" not in p and "data_sync_retry" not in p
    with pytest.raises(UsageError, match="synchronous_commit"):
        psw.WORKLOAD.params({"synchronous_commit": "sometimes"})
    with pytest.raises(UsageError, match="fault_at"):
        psw.WORKLOAD.params({"fault_at": 1})


def test_the_primary_waits_for_the_standby_that_connects_by_that_name() -> None:
    prim, stby = psw.primary_settings(), psw.standby_settings(6001)
    assert prim["synchronous_standby_names"] == f"'{psw.STANDBY}'"
    assert f"application_name={psw.STANDBY}" in stby["primary_conninfo"]
    assert "host=127.0.0.1 port=6001" in stby["primary_conninfo"]
    assert (
        "port" not in prim
    )  # given at start: a port in postgresql.conf would move the checker's socket
    assert "fsync" not in stby and psw.standby_settings(6001, fsync=False)["fsync"] == "off"
    assert psw.WORKLOAD.params({"standby_fsync": "false"})["standby_fsync"] is False


def test_node_mounts_are_n0_n1_in_node_order(tmp_path: Path) -> None:
    for d in ("n10", "n1", "n0", "nx", "data"):
        (tmp_path / d).mkdir()
    assert psw.node_mounts(str(tmp_path)) == ["n0", "n1", "n10"]


def test_the_script_marks_through_the_given_command() -> None:
    text = pgw.script(pgw.Params.of(psw.WORKLOAD.params({"n": 2})), mark="MARK")
    assert "\\! MARK begin:1\n" in text and text.rstrip().endswith("\\! MARK ack:2")
    assert pgw.MARK_CMD not in text


# -- the checker's pure parts -----------------------------------------------------------------------


def test_the_verdict_is_the_worse_node_and_every_reason_names_its_node() -> None:
    ok = CheckResult("pass", ("3 acked txn(s) intact",))
    lost = CheckResult("lost-ack", ("acked txn(s) 3 lost: the database holds txns 1..2",))
    r = psc.combine([ok, lost])
    assert r.verdict == "lost-ack"
    assert r.reasons == (
        "node 1 (standby, promoted): acked txn(s) 3 lost: the database holds txns 1..2",
        "node 0 (primary): 3 acked txn(s) intact",
    )
    assert psc.combine([CheckResult("corrupt-data", ("x",)), lost]).verdict == "corrupt-data"
    assert psc.combine([ok, ok]).verdict == "pass"


def test_before_the_first_begin_nothing_is_started_and_a_wrong_cluster_is_refused(
    tmp_path: Path,
) -> None:
    m = (str(tmp_path / "n0"), str(tmp_path / "n1"))
    assert psc.check(CheckInput(m[0], (), (), {}, "s", mounts=m)).verdict == "pass"
    with pytest.raises(RuntimeError, match="2 node mounts"):
        psc.check(CheckInput(m[0], ("1",), (), {}, "s", mounts=m[:1]))


def test_no_data_directory_on_the_standby_after_an_ack_is_lost_ack_on_node_1(
    tmp_path: Path,
) -> None:
    m = (str(tmp_path / "n0"), str(tmp_path / "n1"))
    r = psc.check(CheckInput(m[0], ("1",), (), {}, "s", mounts=m))
    assert r.verdict == "lost-ack"
    assert any(x.startswith("node 1 (standby, promoted): no data directory") for x in r.reasons), r


# -- the real thing ----------------------------------------------------------------------------------

real = pytest.mark.skipif(
    os.geteuid() != 0 or pgw.bindir() is None,
    reason="needs root and PostgreSQL (apt-get install postgresql)",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ran() -> Iterator[Path]:
    """The workload (n=3, a CHECKPOINT after ack 2) run for real with both nodes in a tmp dir."""
    top = Path(tempfile.mkdtemp(prefix="powercut-test-pgsync-"))
    try:
        os.chmod(top, 0o755)  # the servers run as postgres: the path must be searchable
        for n in ("n0", "n1"):
            (top / "run" / n).mkdir(parents=True)
        with pytest.MonkeyPatch.context() as m:
            m.setenv("POWERCUT_TIMING", str(top / "marks"))
            port = free_port()
            m.setenv("PGPORT", str(port))  # as the workload sets it: restored afterwards
            m.chdir(top / "run")
            given = {"n": 3, "checkpoint_every": 2, "cache": str(top / "cache"), "port": port}
            assert psw.WORKLOAD.main(psw.WORKLOAD.params(given)) == 0
        assert [ln.split()[1] for ln in (top / "marks").read_text().splitlines()] == [
            f"{k}:{i}" for i in range(1, 4) for k in ("begin", "ack")
        ]
        yield top / "run"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def judged(mnt: Path, acked: list[int]) -> CheckResult:
    m = (str(mnt / "n0"), str(mnt / "n1"))
    return psc.check(CheckInput(m[0], tuple(map(str, acked)), (), {}, "flush~a+b", mounts=m))


@real
def test_a_real_pair_passes_on_both_nodes_and_a_missing_ack_is_named_per_node(
    ran: Path, tmp_path: Path
) -> None:
    assert (ran / "n1" / "pgdata" / "standby.signal").exists()
    assert "synchronous_standby_names" in (ran / "n0" / "pgdata" / "postgresql.conf").read_text()
    mnt = tmp_path / "mnt"
    subprocess.run(["cp", "-a", str(ran), str(mnt)], check=True, timeout=60)
    r = judged(mnt, [1, 2, 3])
    assert r.verdict == "pass", r
    assert any(
        x.startswith("node 1 (standby, promoted): 3 acked txn(s) intact") for x in r.reasons
    ), r
    assert not (mnt / "n1" / "pgdata" / "standby.signal").exists()  # promoted: a primary now
    r = judged(mnt, [1, 2, 3, 4])
    assert r.verdict == "lost-ack"
    assert {x.split(":")[0] for x in r.reasons if "lost" in x} == {
        "node 0 (primary)",
        "node 1 (standby, promoted)",
    }
    assert not processes_using(mnt)


@real
def test_a_standby_that_cannot_start_is_node_1s_finding(ran: Path, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    subprocess.run(["cp", "-a", str(ran), str(mnt)], check=True, timeout=60)
    (mnt / "n1" / "pgdata" / "global" / "pg_control").unlink()
    r = judged(mnt, [1, 2, 3])
    assert r.verdict == "corrupt-data", r
    assert (
        r.reasons[0]
        == "node 1 (standby, promoted): the server does not start on the recovered data directory"
    )
    assert any(x.startswith("node 0 (primary): 3 acked txn(s) intact") for x in r.reasons), r
    assert not processes_using(mnt)


def processes_using(path: Path) -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = (
                Path(f"/proc/{pid}/cmdline")
                .read_bytes()
                .replace(b"\0", b" ")
                .decode(errors="replace")
            )
        except OSError:
            continue
        if str(path) in cmd:
            out.append(f"{pid}: {cmd}")
    return out

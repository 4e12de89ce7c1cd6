"""Checker for pgsync (a two-node cluster workload): a whole-cluster power cut, judged twice -- what a
synchronous standby promises is that an acked commit survives losing the primary.

* **node 0 (primary), recovered alone**: its server started on ``<n0>/<dir>`` (crash recovery), as
  the postgres checker does (checkers/postgres.py: every acked transaction whole and byte-exact, the
  begun ones all or nothing, pg_amcheck clean, no row never begun), ``synchronous_standby_names``
  emptied (no standby comes back: nothing may wait for one).
* **node 1 (standby, promoted), alone**: a failover -- its disk is all there is.  The server starts on
  ``<n1>/<dir>`` as the standby it was (``standby.signal`` kept; ``primary_conninfo`` emptied: no
  primary, and never one on this machine), replays every WAL record it holds, and is promoted the way
  ``pg_ctl promote`` does it (a ``promote`` file in the data directory, SIGUSR1 to the postmaster): the
  startup process ends recovery once its local WAL is exhausted, and a standby that never reached a
  consistent state refuses ("WAL ends before consistent recovery point").  Starting it without
  ``standby.signal`` would be crash recovery instead, which skips that consistency check -- not what a
  failover does.  Then the same judgement.

Both servers: their own socket directory under /tmp (no TCP), ``fsync=off``, always stopped (SIGQUIT,
SIGKILL to the process group) -- checks in parallel never share a socket or leave a server behind.

The verdict is the worse of the two; every reason names its node (``node 1 (standby, promoted):
acked txn(s) 7 lost: ...``).  A server that does not start is the postgres checker's finding
(``CheckInput.noticed``: corrupt-data under a power cut)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence

from powercut import Checker, CheckInput, CheckResult
from powercut.checkers import postgres as pgc
from powercut.workloads.pgserver import chown, read_pidfile, started_by

DEFAULTS = {"dir": "pgdata"}
ROLES = ("primary", "standby, promoted")
# worst last (a subset of core/judging/verdict.SEVERITY: what the postgres checker answers)
ORDER = (
    "pass",
    "detected",
    "fail",
    "lost-ack",
    "corrupt-data",
    "silent-corruption",
    "checker-crashed",
)
PRIMARY_OPTIONS = ("-c", "synchronous_standby_names=")
# hot_standby off: no connections before the promotion, so "ready" in postmaster.pid means promoted
STANDBY_OPTIONS = (
    "-c",
    "primary_conninfo=",
    "-c",
    "synchronous_standby_names=",
    "-c",
    "hot_standby=off",
)
POKE_S = 0.25


class Primary(pgc.Server):
    """Node 0's server, alone: crash recovery, then nothing waits for a standby."""

    def __init__(self, bin_dir: str, datadir: str) -> None:
        super().__init__(bin_dir, datadir, PRIMARY_OPTIONS)


class Promoted(pgc.Server):
    """Node 1's server: started as the standby it was, promoted; ready once it runs as a primary."""

    def __init__(self, bin_dir: str, datadir: str) -> None:
        super().__init__(bin_dir, datadir, STANDBY_OPTIONS)
        self.poked = 0.0

    def _ready(self) -> bool:
        """Promoted and accepting connections; until then, the promotion asked for (every POKE_S)."""
        if super()._ready():  # "ready": PM_RUN, after the promotion ("standby" before it)
            return True
        proc = self.proc
        now = time.monotonic()
        if proc is None or proc.poll() is not None or now - self.poked < POKE_S:
            return False
        if not started_by(read_pidfile(self.datadir), proc.pid):  # its signal handlers not set yet
            return False
        # the postmaster removes a promote file it finds at start, and passes the request on only once
        # its startup process runs: the file after its start, the signal again until it is promoted
        self.poked = now
        trigger = os.path.join(self.datadir, "promote")
        if not os.path.exists(trigger):
            with open(trigger, "w"):
                pass
            chown(trigger)  # the startup process removes it when it promotes
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGUSR1)
        return False


def combine(results: Sequence[CheckResult]) -> CheckResult:
    """The worst verdict; every reason prefixed with its node and role."""
    worst = max(
        (r.verdict for r in results), key=lambda v: ORDER.index(v) if v in ORDER else len(ORDER)
    )
    failing = [i for i, r in enumerate(results) if r.verdict != "pass"]
    order = failing + [i for i in range(len(results)) if i not in failing]  # the findings first
    return CheckResult(
        worst, tuple(f"node {i} ({ROLES[i]}): {line}" for i in order for line in results[i].reasons)
    )


def check(inp: CheckInput) -> CheckResult:
    mounts = list(inp.mounts or (inp.mount,))
    if len(mounts) != 2:
        raise RuntimeError(
            f"pgsync: a two-node cluster recording's check wants 2 node mounts, got {len(mounts)}"
        )
    if not inp.acked and not inp.begun:
        return CheckResult("pass", ("no transaction begun yet: the cluster was being set up",))
    name = str(inp.params.get("dir", DEFAULTS["dir"]))
    return combine(
        [
            pgc.judge_datadir(os.path.join(mounts[0], name), inp, Primary),
            pgc.judge_datadir(os.path.join(mounts[1], name), inp, Promoted),
        ]
    )


CHECKER = Checker(
    name="pgsync",
    description="a whole-cluster power cut: the primary recovered alone and the standby "
    "promoted alone each hold every acked transaction, whole",
    check=check,
)

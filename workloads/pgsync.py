"""pgsync: a PostgreSQL primary and its synchronous streaming standby on a cluster recording's two
nodes (issue 40's second system).  Runs in the guest, as root, in the cwd that holds the node mounts
``n0`` (the primary) and ``n1`` (the standby).

Setup (before the first ``begin``): the postgres workload's prepared cluster (workloads/postgres.py:
initdb once on the host, a clean shutdown) is unpacked into ``n0/<dir>`` and ``n1/<dir>`` with the
settings under test.  A cleanly shut down copy of the primary is a valid base for a standby (the same
system identifier, the same WAL position), and it spares pg_basebackup in the guest: node 1 gets
``standby.signal`` and ``primary_conninfo`` (TCP to 127.0.0.1:``port``, application_name
``pgsync_standby``), node 0 ``synchronous_standby_names = 'pgsync_standby'`` and ``wal_keep_size``.
All synced; the primary starts (listening on 127.0.0.1:``port``), then the standby (hot standby, its
own socket directory, no TCP); the workload waits until the primary's ``pg_stat_replication`` shows
the standby ``streaming`` with ``sync_state = 'sync'``.

The run: the postgres workload's script on the primary (transaction i inserts row i and updates the
summary row; a CHECKPOINT after every ``checkpoint_every``-th ack), ``synchronous_commit`` as given
(on, remote_write, remote_apply, local, off).  Its marks: psql's ``\\!`` shell hands ``begin:i`` /
``ack:i`` to this process over a pipe and waits for the answer; this process marks (``powercut.mark``:
every node's log, in order) and answers -- no Python start-up per mark under emulation.  Each ack
follows a COMMIT that returned.  Then a fast shutdown of the primary (its shutdown checkpoint
streamed to the standby), then of the standby.

Params: those of the postgres workload but the fault ones (``n`` 10, ``synchronous_commit``, ``fsync``,
``full_page_writes``, ``row_bytes``, ``seed``, ``dir``, ``checkpoint_every``, ``data_checksums``,
``cache``), ``port`` (5433: the primary's, in the guest) and ``standby_fsync`` (true; false: the standby
alone runs with ``fsync=off`` -- the broken variant: its walreceiver reports as flushed WAL it never
fsynced, so the primary acks commits the standby's disk may not hold)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from powercut import Workload
from powercut.workloads import postgres as pg
from powercut.workloads.pgmarks import Marker
from powercut.workloads.pgserver import (
    MISSING,
    USER,
    append_conf,
    bindir,
    chown_tree,
    psql,
    query,
    start,
    stop,
)

STANDBY = "pgsync_standby"
DEFAULTS: dict[str, Any] = {
    **{k: v for k, v in pg.DEFAULTS.items() if k not in ("fault_at", "data_sync_retry")},
    "port": 5433,
    "standby_fsync": True,
}
SYNC_TIMEOUT_S = 300.0
SYNC_QUERY = (
    f"SELECT state, sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY}'"
)


def node_mounts(cwd: str = ".") -> list[str]:
    """The node mounts n0, n1, ... in ``cwd`` (a cluster recording's), in node order."""
    return sorted(
        (d for d in os.listdir(cwd) if d[:1] == "n" and d[1:].isdigit()), key=lambda d: int(d[1:])
    )


def primary_settings() -> dict[str, str]:
    """What node 0 adds to postgresql.conf: the standby it waits for (its port is given at start)."""
    return {"synchronous_standby_names": f"'{STANDBY}'", "wal_keep_size": "'64MB'"}


def standby_settings(port: int, fsync: bool = True) -> dict[str, str]:
    """What node 1 adds to postgresql.conf (plus an empty ``standby.signal``); ``fsync=False``: the
    broken standby (its walreceiver reports WAL flushed that it never fsynced)."""
    return {
        "primary_conninfo": f"'host=127.0.0.1 port={port} user={USER} application_name={STANDBY}'",
        "hot_standby": "on",
        "wal_receiver_status_interval": "'1s'",
        **({} if fsync else {"fsync": "off"}),
    }


def wait_sync(bin_dir: str, sockdir: str, timeout: float = SYNC_TIMEOUT_S) -> float:
    """Seconds until the primary shows the standby streaming as its synchronous standby."""
    began = time.monotonic()
    seen = ""  # what pg_stat_replication said last
    while time.monotonic() - began < timeout:
        res = query(bin_dir, sockdir, SYNC_QUERY, timeout=120)
        seen = res.stdout.strip() or res.stderr.strip()
        if seen == "streaming sync":
            return time.monotonic() - began
        time.sleep(0.2)
    raise RuntimeError(
        f"pgsync: the standby is not a synchronous standby after {timeout:g} s "
        f"(pg_stat_replication: {seen or 'no row'})"
    )


def setup(
    p: pg.Params, port: int, bin_dir: str, datadirs: list[str], standby_fsync: bool = True
) -> str:
    """Both data directories unpacked and configured, synced; where the cluster came from."""
    tar_path, origin = pg.cluster_tar(p, bin_dir)
    for d, extra in zip(datadirs, (primary_settings(), standby_settings(port, standby_fsync))):
        pg.install(tar_path, d, p)
        append_conf(d, extra)
    with open(os.path.join(datadirs[1], "standby.signal"), "w"):
        pass
    chown_tree(datadirs[1])
    os.sync()
    return origin


def main(params: dict[str, Any]) -> int:
    p = pg.Params.of(params)
    port = int(params.get("port", DEFAULTS["port"]))
    mounts = node_mounts()
    if len(mounts) != 2:
        raise SystemExit(
            "pgsync: needs a two-node cluster recording (record --nodes 2: node mounts n0, n1 "
            f"in its cwd), found {len(mounts)} node mount(s)"
        )
    bin_dir = bindir()
    if bin_dir is None:
        sys.stderr.write(MISSING + "\n")
        return 1
    began = time.monotonic()
    datadirs = [os.path.abspath(os.path.join(m, p.dir)) for m in mounts]
    origin = setup(p, port, bin_dir, datadirs, bool(params.get("standby_fsync", True)))
    sys.stderr.write(
        f"pgsync: {origin}; primary and standby unpacked in {time.monotonic() - began:.1f} s\n"
    )
    os.environ["PGPORT"] = str(port)  # psql's, to the primary's socket (its port is ``port``)
    socks = [tempfile.mkdtemp(prefix=f"powercut-pgsync{i}-") for i in range(2)]
    for s in socks:
        chown_tree(s)
    servers: list[subprocess.Popen[bytes]] = []
    marker = Marker(1)
    status = 0
    try:
        servers.append(
            start(
                bin_dir,
                datadirs[0],
                socks[0],
                sys.stderr,
                options=("-c", "listen_addresses=127.0.0.1", "-c", f"port={port}"),
            )
        )
        servers.append(start(bin_dir, datadirs[1], socks[1], sys.stderr))  # "ready": hot standby
        waited = wait_sync(bin_dir, socks[0])
        sys.stderr.write(
            f"pgsync: {STANDBY} streaming, sync_state = sync ({waited:.1f} s after the standby started);"
            f" synchronous_commit = {pg.settings(p)['synchronous_commit']}\n"
        )
        sys.stderr.flush()
        marker.start()
        try:
            res = psql(
                bin_dir,
                socks[0],
                pg.script(p, mark=marker.command(1)),
                check=False,
                pass_fds=marker.fds(1),
            )
        finally:
            marker.close_client_ends()
            marker.join(60)
        if marker.error is not None:
            sys.stderr.write(f"pgsync: a mark failed: {marker.error}\n")
            status = 1
        elif res.returncode != 0:
            sys.stderr.write(
                f"pgsync: psql exited {res.returncode}"
                + (" (killed: a mark's handshake failed)\n" if res.returncode < 0 else "\n")
            )
            status = 1
    finally:
        for srv in servers:  # the primary first: its shutdown checkpoint reaches the standby
            if stop(srv) != 0:
                sys.stderr.write(f"pgsync: a server's fast shutdown ended with {srv.returncode}\n")
                status = status or 1
        for s in socks:
            shutil.rmtree(s, ignore_errors=True)
    return status


WORKLOAD = Workload(
    name="pgsync",
    main=main,
    defaults=dict(DEFAULTS),
    minimum={"n": 1, "row_bytes": 1, "port": 1024},
    description="PostgreSQL primary (node 0) + synchronous streaming standby (node 1): "
    "INSERT + UPDATE transactions, synchronous_commit=on|remote_write|remote_apply|local|off",
    choices={"synchronous_commit": pg.SYNC_COMMIT},
    nodes=True,
)

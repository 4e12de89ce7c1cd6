"""The host half of a cluster recording (issue 40): N nodes, each with its own data disk on its own
dm-log-writes device, in **one** recording VM (guest/clusterrecord.py).

Why one VM: the marks that define a cluster crash instant (core/disks.py) must reach every node's
log in the same order, under one lock.  In one guest that lock is an flock and the order is the
order of a few ioctls; with one VM per node it would be a network round trip per mark and per node,
and the logs would share no clock.  One VM also costs one boot, not N (docs/clusters.md has the
figures).  What one VM cannot show -- a network between the nodes, independent kernels -- does not
change what reaches each disk, which is what a power cut judges.

Layout: ``log-n<i>.bin`` and ``data-n<i>-final.img`` per node; the manifest's ``[cluster]`` names
them (``node``: one table per node with its log, final image, mount and pinned log), and ``[log]``
and ``[data]`` describe node 0 so that ``recording.load`` reads a cluster recording unchanged."""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

from powercut.config import DiskSpec
from powercut.core.disks import MAX_NODES
from powercut.errors import PowercutError, UsageError
from powercut.images.build import tools_dir
from powercut.linux import runlock
from powercut.record import recording
from powercut.record.recording import Recording
from powercut.record.vm import (
    DM_NAME,
    RecordSpec,
    base_manifest,
    cluster_faults,
    finishing,
    judge_result,
    marks_of,
    note_trace,
    prepare_outdir,
    ready,
    run_recording_vm,
    vm_spec,
)
from powercut.vm import guestjob

log = logging.getLogger(__name__)



def node_files(i: int) -> tuple[str, str]:
    """(log, final data image) file names of node i."""
    return f"log-n{i}.bin", f"data-n{i}-final.img"


def check_spec(spec: RecordSpec, nodes: int) -> None:
    if not isinstance(nodes, int) or not 2 <= nodes <= MAX_NODES:
        raise UsageError(f"--nodes must be 2..{MAX_NODES} for a cluster recording, not {nodes!r}")
    spec.workload_for(nodes)   # a fault plan per node (core/nodefaults.py): one line if it does not fit


def record_cluster(spec: RecordSpec, out: str | os.PathLike[str], *, nodes: int, force: bool = False) -> Recording:
    """Record ``spec.workload`` on ``nodes`` disks (each ``spec.fs``) into ``out``; the manifest's
    status says how it ended, as for one disk."""
    check_spec(spec, nodes)
    spec, image = ready(spec, nodes)
    out = Path(out).absolute()
    with runlock.hold(out, "--out"):   # no other run records into it meanwhile
        prepare_outdir(out, force)
        data_bytes, log_bytes = spec.fs.size_mb << 20, spec.log_bytes()
        need = nodes * (data_bytes + log_bytes)
        if shutil.disk_usage(out).free < need:
            raise PowercutError(f"not enough free space in {out}: a {nodes}-node recording may need up to "
                                f"{need >> 20} MiB")
        disks, roles = [], {}
        for i in range(nodes):
            logf, final = node_files(i)
            for name, size in ((final, data_bytes), (logf, log_bytes)):
                with open(out / name, "wb") as f:
                    f.truncate(size)
            disks += [DiskSpec(str(out / final), f"pcdata{i}", bus=spec.bus, cache="unsafe", write_cache=True),  # type: ignore[arg-type]
                      DiskSpec(str(out / logf), f"pclog{i}", bus=spec.bus, cache="unsafe", write_cache=True)]  # type: ignore[arg-type]
            roles.update({f"data{i}": f"pcdata{i}", f"log{i}": f"pclog{i}"})
        jobdir = out / "job"
        guestjob.write(jobdir, guestjob.RecordJob(dm_name=DM_NAME, disks=roles, fs=spec.fs, workload=spec.workload,
                                                  tools_dir=tools_dir(image) or "", nodes=nodes,
                                                  latency=str(spec.latency)))
        vmspec = dataclasses.replace(vm_spec(spec, image, out, jobdir), disks=tuple(disks))
        manifest = base_manifest(spec, image, vmspec, data_bytes)
        manifest["log"]["file"], manifest["data"]["final"] = node_files(0)
        manifest["cluster"] = {"nodes": nodes, "node": [
            {"log": node_files(i)[0], "final": node_files(i)[1], "mount": f"n{i}"} for i in range(nodes)]}
        with finishing(out, manifest):
            result = run_recording_vm(vmspec, spec, out, jobdir, manifest)
            manifest["result"] = {"ok": result.ok, **{k: v for k, v in result.data.items() if k not in ("logs", "latency")},
                                  **({"error": result.error} if result.error else {})}
            if isinstance(result.get("latency"), dict):   # each node's delay layer, as the guest made it
                manifest["latency"] = dict(result.get("latency"))
            judge_result(result, manifest, out, logs=tuple(n["log"] for n in manifest["cluster"]["node"]))
            note_trace(result, manifest, spec.workload.trace)   # the one trace: every node's calls
            for i, node in enumerate(manifest["cluster"]["node"]):
                node.update(recording.pin_log(out / node["log"]))
                logged = (result.get("logs") or [{}] * nodes)[i].get("logged_entries")
                if isinstance(logged, int):
                    node["logged_entries"] = logged
            manifest["log"].update(recording.pin_log(out / manifest["log"]["file"]))
            manifest["marks"] = marks_of(out / manifest["log"]["file"])
            if section := cluster_faults(out, [n["log"] for n in manifest["cluster"]["node"]], result):
                manifest["faults"] = section   # each node's fault windows (its log's), the node named
        return Recording(out, manifest)

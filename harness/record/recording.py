"""A recording on disk (host): the manifest's schema, loading and validating it, writing it.

A recording directory holds::

    manifest.toml     what ran, on what, how it ended; one [[node]] table per data disk
    log.bin           the dm-log-writes log (the log disk, sparse); a cluster's node i: log-n<i>.bin
    data-final.img    the data disk after the run (= replaying the whole log onto the initial state);
                      a cluster's node i: data-n<i>-final.img
    console.log       the guest's serial console
    job/              job.json, job.sh, agent.log, workload.out/.err, result.json

Everything that reads a recording (check, replay, the CLI) goes through ``load``; a missing or
garbled key is one clear BadRecording line naming it, never a KeyError.  ``load`` reads every
recording into one form whatever its number of disks, ``Recording.nodes`` (one ``Node`` per data
disk: its log, final image, file map and pin): format 2 writes it as it is ([[node]]); format 1's
two layouts -- one disk's ``[log]``/``[data] final``/``[files] map`` and a cluster's ``[cluster]``
tables -- are read into it by one adapter, ``upgrade``.  One disk's files keep their
names (``log.bin``, ``data-final.img``): they are what its user types (``powercut log
runs/x/log.bin``, the docs' examples); the names are the node's values, not a second layout.

Each log is pinned at recording time (its node's ``entries``, ``used_bytes``, ``sha256``:
``pin_log``), and whatever judges states first calls ``verify_logs``: a log that was cut short,
damaged, or swapped for another recording's is refused in one line, never judged (a cut log has
fewer acks, and its states would pass).  Recordings made before the pin are still checked against
the guest's own count (``logged_entries``) and the teardown mark."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from powercut.config import dumps_toml, loads_toml
from powercut.core.log.dmlog import END_MARK, LogIndex, open_log
from powercut.errors import BadLog, BadRecording, UsageError

FORMAT_VERSION = 2  # 2: one [[node]] table per data disk; 1 (still read): [log] or [cluster]
MANIFEST = "manifest.toml"
# status values: "running" while the VM runs, "ok", "interrupted", or how it failed
OK = "ok"
RUNNING = "running"
INTERRUPTED = "interrupted"

# section -> keys every manifest has (more may be present)
REQUIRED: dict[str, tuple[str, ...]] = {
    "recording": ("format", "status"),
    "data": ("size_bytes", "initial"),
    "fs": ("fstype",),
    "workload": (),
}
PIN = ("entries", "used_bytes", "sha256")  # a node's log as recorded (pin_log)


@dataclass(frozen=True, slots=True)
class Node:
    """One data disk of a recording: its log, its image at the end, where the program's files lie
    on it (guest/filemap.py; None where the recording made no map: before maps, on btrfs), its log's
    pin (``PIN``: empty for recordings made before it) and the entries the guest said it logged."""

    log: Path
    final: Path
    file_map: Path | None = None
    pin: dict[str, Any] = field(default_factory=dict)
    logged_entries: int | None = None


def node_table(log: str, final: str) -> dict[str, Any]:
    """A [[node]] table as the recording VM starts it (record/vm.py adds the pin, the file map and
    the guest's values of that disk)."""
    return {"log": log, "final": final}


@dataclass(frozen=True, slots=True)
class Recording:
    dir: Path
    manifest: dict[str, Any]
    nodes: tuple[Node, ...]

    @property
    def log_path(self) -> Path:
        """Node 0's log (one disk's only one)."""
        return self.nodes[0].log

    @property
    def node_logs(self) -> tuple[Path, ...]:
        """Every node's log, node 0 first."""
        return tuple(n.log for n in self.nodes)

    @property
    def trace_path(self) -> Path | None:
        """The workload's system-call trace (core/trace/syscalls.py), if the recording took one."""
        f = self.manifest.get("trace", {}).get("file")
        return self.dir / f if f and (self.dir / f).is_file() else None

    @property
    def delay_log(self) -> Path | None:
        """The --delay-sync supervisor's log (core/recording/syncdelay.holds: where each held sync
        was called), if the recording held syncs and kept it."""
        f = (self.manifest.get("result", {}).get("delay_sync") or {}).get("log")
        return self.dir / "job" / f if f and (self.dir / "job" / f).is_file() else None

    @property
    def file_map(self) -> Path | None:
        """Node 0's file map (guest/filemap.py; one disk's only one): ``file_maps``."""
        return self.nodes[0].file_map

    @property
    def file_maps(self) -> list[Path | None]:
        """Each data disk's file map, in disk order (None where the recording made none)."""
        return [n.file_map for n in self.nodes]

    @property
    def final_image(self) -> Path:
        """Node 0's data disk at the end (one disk's only one)."""
        return self.nodes[0].final

    @property
    def data_size(self) -> int:
        return int(self.manifest["data"]["size_bytes"])

    @property
    def initial_image(self) -> Path | None:
        name = self.manifest["data"]["initial"]
        return None if name == "zeros" else self.dir / name

    @property
    def start(self) -> dict[str, Any]:
        """The crash state this recording started from (``record --from``: [from], its recording,
        state id and log pin); {} for one that started from an empty disk."""
        return dict(self.manifest.get("from") or {})

    @property
    def status(self) -> str:
        return str(self.manifest["recording"]["status"])

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def fstype(self) -> str:
        return str(self.manifest["fs"]["fstype"])

    @property
    def mount_opts(self) -> str:
        return str(self.manifest["fs"].get("mount_opts", ""))

    @property
    def workload(self) -> dict[str, Any]:
        return dict(self.manifest["workload"])

    @property
    def workload_label(self) -> str:
        return str(self.manifest["workload"].get("name") or "cmd")

    def require_ok(self) -> "Recording":
        if not self.ok:
            error = self.manifest["recording"].get("error", "")
            raise UsageError(
                f"{self.dir}: the recording did not finish ({self.status}"
                + (f": {error}" if error else "")
                + "); record again"
            )
        return self


def load(path: str | os.PathLike[str]) -> Recording:
    p = Path(path)
    f = p / MANIFEST
    if not f.is_file():
        raise BadRecording(f"{p}: not a recording (no {MANIFEST})")
    try:
        text = f.read_text()
    except OSError as e:
        raise BadRecording(f"{f}: cannot read: {e.strerror}") from None
    try:
        m = loads_toml(text, str(f))
    except UsageError as e:
        raise BadRecording(e.one_line()) from None
    validate(m, str(f))
    return of(p, m)


def of(directory: Path, m: dict[str, Any]) -> Recording:
    """The recording of a validated manifest, read in the one form (format 1's by ``upgrade``)."""
    m = upgrade(m)
    return Recording(directory, m, tuple(_node(directory, t) for t in m["node"]))


def _node(directory: Path, table: dict[str, Any]) -> Node:
    fmap = table.get("file_map")
    logged = table.get("logged_entries")
    return Node(
        log=directory / table["log"],
        final=directory / table["final"],
        file_map=directory / fmap if fmap and (directory / fmap).is_file() else None,
        pin={k: table[k] for k in PIN if k in table},
        logged_entries=logged if isinstance(logged, int) else None,
    )


def upgrade(m: dict[str, Any]) -> dict[str, Any]:
    """A validated manifest in format 2, the one form (the one adapter of format 1's two layouts;
    format 2 as it is).  A cluster's ``[cluster] node`` tables become the [[node]] tables; one
    disk's table is made of ``[log]``'s file and pin, ``[data] final``, ``[files] map`` and
    ``[result] logged_entries``, which leave their sections."""
    if m["recording"]["format"] == FORMAT_VERSION:
        return m
    m = {k: dict(v) if isinstance(v, dict) else v for k, v in m.items()}
    m["recording"]["format"] = FORMAT_VERSION
    cluster = m.pop("cluster", None)
    log = m["log"]
    table = node_table(log.pop("file"), m["data"].pop("final"))
    table.update({k: log.pop(k) for k in PIN if k in log})
    fmap = m.get("files", {}).pop("map", None)
    logged = m.get("result", {}).pop("logged_entries", None)
    if cluster is not None:
        m["node"] = [dict(t) for t in cluster["node"]]
        return m
    if fmap:
        table["file_map"] = fmap
    if logged is not None:
        table["logged_entries"] = logged
    m["node"] = [table]
    return m


def validate(m: dict[str, Any], source: str) -> None:
    for section, keys in REQUIRED.items():
        sec = m.get(section)
        if not isinstance(sec, dict):
            raise BadRecording(f"{source}: no [{section}] section")
        for key in keys:
            if key not in sec:
                raise BadRecording(f"{source}: [{section}] has no {key!r}")
    fmt = m["recording"]["format"]
    if fmt not in (1, FORMAT_VERSION) or isinstance(fmt, bool):
        raise BadRecording(
            f"{source}: recording format {fmt!r}, this powercut reads 1 and {FORMAT_VERSION}"
        )
    _validate_nodes(m, source)
    try:
        size = int(m["data"]["size_bytes"])
    except (TypeError, ValueError):
        raise BadRecording(f"{source}: [data] size_bytes is not a number") from None
    if size <= 0 or size % 512:
        raise BadRecording(f"{source}: [data] size_bytes {size} is not a positive multiple of 512")


def _validate_nodes(m: dict[str, Any], source: str) -> None:
    """Each node's log and final image named, in the manifest's format."""
    if m["recording"]["format"] == FORMAT_VERSION:
        nodes = m.get("node")
        if not isinstance(nodes, list) or not nodes:
            raise BadRecording(f"{source}: no [[node]] table (one per data disk)")
        where = "[[node]] table"
    elif "cluster" in m:
        nodes = m["cluster"].get("node") if isinstance(m["cluster"], dict) else None
        if not isinstance(nodes, list) or not nodes:
            raise BadRecording(f"{source}: [cluster] has no node tables")
        where = "[cluster] node table"
    else:
        for section, key in (("log", "file"), ("data", "final")):
            if not isinstance(m.get(section), dict) or key not in m[section]:
                raise BadRecording(f"{source}: [{section}] has no {key!r}")
        return
    for i, t in enumerate(nodes):
        for key in ("log", "final"):
            if not isinstance(t, dict) or not isinstance(t.get(key), str):
                raise BadRecording(f"{source}: {where} {i} has no {key!r}")


def write(directory: Path, manifest: dict[str, Any]) -> None:
    """Write the manifest atomically (a reader never sees half of it)."""
    tmp = directory / f".{MANIFEST}.tmp"
    tmp.write_text(dumps_toml(manifest))
    os.replace(tmp, directory / MANIFEST)


def _sha256(path: Path, nbytes: int) -> str:
    import hashlib  # here: hashlib loads OpenSSL, ~0.15 s of a TCG checker VM's start, which never hashes

    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = nbytes
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def pin_log(path: Path) -> dict[str, Any]:
    """What pins a finished log: its entry count, the bytes its entries use, their sha256."""
    with open_log(path) as index:
        used, n = index.stop_offset, len(index.entries)
    return {"entries": n, "used_bytes": used, "sha256": _sha256(path, used)}


def verify_logs(rec: Recording, indexes: Sequence[LogIndex] | None = None) -> None:
    """Refuse (BadRecording, one line; naming the node when there are several) a log that disagrees
    with its node's pin: missing, cut short, damaged, without dm-log-writes' teardown mark, or not
    the log this recording made.  ``indexes``: the logs already scanned (open_log, quiet), node 0
    first, by a caller that goes on to use them: not scanned again."""
    for i, node in enumerate(rec.nodes):
        try:
            _verify_node(rec, node, indexes[i] if indexes is not None else None)
        except BadRecording as e:
            if len(rec.nodes) == 1:
                raise
            raise BadRecording(f"node {i}: {e.one_line()}") from None


def _verify_node(rec: Recording, node: Node, index: LogIndex | None) -> None:
    if index is not None:
        _verify_index(rec, node, index)
        return
    if not node.log.is_file():
        raise BadRecording(f"{node.log}: the recording's log is missing")
    try:
        index = open_log(node.log, quiet=True)  # an early stop is reported below, as the refusal
    except BadLog as e:
        raise BadRecording(f"{rec.dir}: the log is not usable: {e.one_line()}") from None
    with index:
        _verify_index(rec, node, index)


def _verify_index(rec: Recording, node: Node, index: LogIndex) -> None:
    path = node.log
    pin = node.pin
    n = len(index.entries)
    used = index.stop_offset
    ended = n > 0 and index.entries[-1].mark == END_MARK
    logged = node.logged_entries
    want = pin.get("entries", logged + 1 if logged is not None else None)
    where = f"{rec.dir}: the log {path.name}"
    if not index.clean:
        raise BadRecording(
            f"{where} is damaged: its scan stops after {n} entries ({index.stop_reason}); "
            "record again"
        )
    if want is not None and n != want:
        raise BadRecording(
            f"{where} holds {n} entries, the recording logged {want}: it was cut short or "
            "replaced; record again"
        )
    if not ended:
        raise BadRecording(
            f"{where} does not end with dm-log-writes' teardown mark {END_MARK!r}: it was cut "
            "short; record again"
        )
    if "sha256" in pin and (used != pin.get("used_bytes") or _sha256(path, used) != pin["sha256"]):
        raise BadRecording(
            f"{where} is not the log this recording made (its sha256 differs from the "
            "manifest's): a damaged copy or another recording's log; record again"
        )


# the name the rest of the code knew it by
load_recording = load

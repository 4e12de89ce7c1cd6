"""A recording on disk (host): the manifest's schema, loading and validating it, writing it.

A recording directory holds::

    manifest.toml     what ran, on what, how it ended
    log.bin           the dm-log-writes log (the log disk, sparse)
    data-final.img    the data disk after the run (= replaying the whole log onto the initial state)
    console.log       the guest's serial console
    job/              job.json, job.sh, agent.log, workload.out/.err, result.json

Everything that reads a recording (check, replay, the CLI) goes through ``load``; a missing or
garbled key is one clear BadRecording line naming it, never a KeyError.

The log is pinned at recording time (``[log] entries``, ``used_bytes``, ``sha256``: ``pin_log``), and
whatever judges states first calls ``verify_log``: a log that was cut short, damaged, or swapped for
another recording's is refused in one line, never judged (a cut log has fewer acks, and its states
would pass).  Recordings made before the pin are still checked against the guest's own count
(``[result] logged_entries``) and the teardown mark."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powercut.config import dumps_toml, loads_toml
from powercut.core.log.dmlog import END_MARK, LogIndex, open_log
from powercut.errors import BadLog, BadRecording, UsageError

FORMAT_VERSION = 1
MANIFEST = "manifest.toml"
# status values: "running" while the VM runs, "ok", "interrupted", or how it failed
OK, RUNNING, INTERRUPTED = "ok", "running", "interrupted"

# section -> keys every manifest has (more may be present)
REQUIRED: dict[str, tuple[str, ...]] = {
    "recording": ("format", "status"),
    "log": ("file",),
    "data": ("size_bytes", "final", "initial"),
    "fs": ("fstype",),
    "workload": (),
}


@dataclass(frozen=True, slots=True)
class Recording:
    dir: Path
    manifest: dict[str, Any]

    @property
    def log_path(self) -> Path:
        return self.dir / self.manifest["log"]["file"]

    @property
    def trace_path(self) -> Path | None:
        """The workload's system-call trace (core/trace/syscalls.py), if the recording took one."""
        f = self.manifest.get("trace", {}).get("file")
        return self.dir / f if f and (self.dir / f).is_file() else None

    @property
    def delay_log(self) -> Path | None:
        """The --delay-sync supervisor's log (core/recording/syncdelay.holds: where each held sync was called), if
        the recording held syncs and kept it."""
        f = (self.manifest.get("result", {}).get("delay_sync") or {}).get("log")
        return self.dir / "job" / f if f and (self.dir / "job" / f).is_file() else None

    @property
    def file_map(self) -> Path | None:
        """Where the program's files lie on the data device at the end (guest/filemap.py), if the
        recording made the map (one disk's; a cluster's node 0's: ``file_maps``)."""
        return self.file_maps[0]

    @property
    def file_maps(self) -> list[Path | None]:
        """Each data disk's file map, in disk order (None where the recording made none: before
        cluster nodes had maps, on btrfs)."""
        if self.nodes == 1:
            names = [self.manifest.get("files", {}).get("map")]
        else:
            names = [n.get("file_map") for n in self.manifest["cluster"]["node"]]
        return [self.dir / f if f and (self.dir / f).is_file() else None for f in names]

    @property
    def final_image(self) -> Path:
        return self.dir / self.manifest["data"]["final"]

    @property
    def data_size(self) -> int:
        return int(self.manifest["data"]["size_bytes"])

    @property
    def initial_image(self) -> Path | None:
        name = self.manifest["data"]["initial"]
        return None if name == "zeros" else self.dir / name

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

    @property
    def nodes(self) -> int:
        """How many nodes recorded (1: a single-disk recording; > 1: a cluster, record/vm.py)."""
        return int(self.manifest.get("cluster", {}).get("nodes", 1))

    @property
    def node_logs(self) -> tuple[Path, ...]:
        """Every node's log, node 0 first (a single-disk recording: its one log)."""
        nodes = self.manifest.get("cluster", {}).get("node")
        return tuple(self.dir / n["log"] for n in nodes) if nodes else (self.log_path,)

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
    return Recording(p, m)


def validate(m: dict[str, Any], source: str) -> None:
    for section, keys in REQUIRED.items():
        sec = m.get(section)
        if not isinstance(sec, dict):
            raise BadRecording(f"{source}: no [{section}] section")
        for key in keys:
            if key not in sec:
                raise BadRecording(f"{source}: [{section}] has no {key!r}")
    fmt = m["recording"]["format"]
    if fmt != FORMAT_VERSION:
        raise BadRecording(
            f"{source}: recording format {fmt!r}, this powercut reads {FORMAT_VERSION}"
        )
    try:
        size = int(m["data"]["size_bytes"])
    except (TypeError, ValueError):
        raise BadRecording(f"{source}: [data] size_bytes is not a number") from None
    if size <= 0 or size % 512:
        raise BadRecording(f"{source}: [data] size_bytes {size} is not a positive multiple of 512")


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


def verify_log(rec: Recording, index: LogIndex | None = None) -> None:
    """Refuse (BadRecording, one line) a log that disagrees with its manifest: missing, cut short,
    damaged, without dm-log-writes' teardown mark, or not the log this recording made.  ``index``:
    the log already scanned (open_log, quiet) by a caller that goes on to use it: not scanned again."""
    path = rec.log_path
    if not path.is_file():
        raise BadRecording(f"{path}: the recording's log is missing")
    if index is None:
        try:
            index = open_log(path, quiet=True)  # an early stop is reported below, as the refusal
        except BadLog as e:
            raise BadRecording(f"{rec.dir}: the log is not usable: {e.one_line()}") from None
        with index:
            _verify_index(rec, index)
        return
    _verify_index(rec, index)


def _verify_index(rec: Recording, index: LogIndex) -> None:
    path, pin = rec.log_path, rec.manifest["log"]
    n, used, clean, reason = len(index.entries), index.stop_offset, index.clean, index.stop_reason
    ended = n > 0 and index.entries[-1].mark == END_MARK
    logged = rec.manifest.get("result", {}).get("logged_entries")
    want = pin.get("entries", logged + 1 if isinstance(logged, int) else None)
    where = f"{rec.dir}: the log {path.name}"
    if not clean:
        raise BadRecording(
            f"{where} is damaged: its scan stops after {n} entries ({reason}); record again"
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


def verify_node_logs(rec: Recording) -> None:
    """Every node log of a cluster recording as its manifest pinned it (verify_log on a view of
    each node); BadRecording naming the node."""
    for i, node in enumerate(rec.manifest["cluster"]["node"]):
        view = dict(rec.manifest)
        view["log"] = {
            "file": node["log"],
            **{k: node[k] for k in ("entries", "used_bytes", "sha256") if k in node},
        }
        view["result"] = (
            {"logged_entries": node["logged_entries"]} if "logged_entries" in node else {}
        )
        try:
            verify_log(Recording(rec.dir, view))
        except BadRecording as e:
            raise BadRecording(f"node {i}: {e.one_line()}") from None

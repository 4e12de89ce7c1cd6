"""The fio profile catalogue (pure; host and guest): one profile per (durability guarantee x block
size) plus group commit, each naming a job file in ``workloads/fio/`` and the ``${VAR}`` values that
file needs, and the exact fio command (argv + environment) that runs one.

A *commit* is one durable point: for the per-write sync profiles (fsync, fdatasync,
odirect-fdatasync) one write then one sync; for group commit ``sync_every`` writes then one fsync;
for O_SYNC / O_DSYNC one write (the flush is inside it).  Where the flush cost lands in fio's JSON:
``sync=``/``direct=`` profiles in the write ``clat_ns``; ``fsync=N``/``fdatasync=N`` profiles in the
separate ``sync`` object (``latency_in``).  Buffered and plain O_DIRECT profiles make nothing durable;
they are the baselines.

O_DIRECT profiles exist only for block sizes that are multiples of 4096 (O_DIRECT needs writes
aligned to the device's logical block size; 4096 is safe on every device).

Outside the catalogue, ``rewrite(method)`` profiles (``pg-<method>-8k``) rewrite one block in place
with PostgreSQL's wal_sync_method calls, exactly as ``pg_test_fsync``'s "one 8kB write" tests do
(``rewrite.fio``), so the two tools can be put side by side on the same target."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from powercut.errors import UsageError

LatencyIn = Literal["clat", "sync"]

#: Bytes per write(2): TLPI's buffer sizes, a 2 KiB transaction, an 8 KiB WAL page.
BLOCK_SIZES = (1, 16, 256, 2048, 4096, 8192)
DIRECT_ALIGN = 4096
GROUP_COMMIT_N = (2, 4, 8, 16, 32, 64)
GROUP_COMMIT_RANGE = (2, 64)
GROUP_COMMIT_BLOCK = 2048  # a group commit groups 2 KiB transactions
QUICK_BLOCK = 4096

#: The ``${VAR}`` names the job files use.
VAR_DIR = "PC_DIR"
VAR_BS = "PC_BS"
VAR_SIZE = "PC_SIZE"
VAR_RUNTIME = "PC_RUNTIME"
VAR_SYNC_EVERY = "PC_SYNC_EVERY"
VAR_FILE = "PC_FILE"
VAR_UNLINK = "PC_UNLINK"
REWRITE_JOB = "rewrite.fio"
#: pg_test_fsync's method -> (guarantee, O_DIRECT, fio sync=, fsync=, fdatasync=)
PG_METHODS: dict[str, tuple[str, int, str, int, int]] = {
    "open_datasync": ("odsync", 1, "dsync", 0, 0),
    "fdatasync": ("fdatasync", 0, "none", 0, 1),
    "fsync": ("fsync", 0, "none", 1, 0),
    "open_sync": ("osync", 1, "sync", 0, 0),
}
PG_BLOCK = 8192


@dataclass(frozen=True, slots=True)
class Guarantee:
    name: str
    job_file: str
    separate_sync: bool  # a sync call after the write(s) (fsync=N / fdatasync=N), reported apart
    durable: bool  # does an acknowledged write survive a power cut (with a correct disk)?
    direct: bool
    description: str


GUARANTEES: dict[str, Guarantee] = {
    g.name: g
    for g in (
        Guarantee(
            "buffered", "buffered.fio", False, False, False, "write(2) into the page cache, no sync"
        ),
        Guarantee("fsync", "fsync.fio", True, True, False, "write(2) + fsync(2) per write"),
        Guarantee(
            "fdatasync", "fdatasync.fio", True, True, False, "write(2) + fdatasync(2) per write"
        ),
        Guarantee("osync", "osync.fio", False, True, False, "O_SYNC write(2)"),
        Guarantee("odsync", "odsync.fio", False, True, False, "O_DSYNC write(2)"),
        Guarantee("odirect", "odirect.fio", False, False, True, "O_DIRECT write(2), no flush"),
        Guarantee(
            "odirect-fdatasync",
            "odirect-fdatasync.fio",
            True,
            True,
            True,
            "O_DIRECT write(2) + fdatasync(2)",
        ),
        Guarantee(
            "group-commit", "group-commit.fio", True, True, False, "N write(2)s + one fsync(2)"
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Profile:
    name: str  # e.g. "fsync-4k", "group-commit-8-2k"
    guarantee: str  # a key of GUARANTEES
    job_file: str  # file name under workloads/fio/
    env: tuple[tuple[str, str], ...]  # the profile's own ${VAR}s (block size, group size)
    block_size: int
    description: str
    sync_every: int = 0  # writes per sync call; 0: no separate sync

    @property
    def latency_in(self) -> LatencyIn:
        """Where fio reports the flush cost: the write ``clat`` or the separate ``sync`` object."""
        return "sync" if self.sync_every else "clat"

    @property
    def durable(self) -> bool:
        return GUARANTEES[self.guarantee].durable

    @property
    def writes_per_commit(self) -> int:
        return max(1, self.sync_every)


@dataclass(frozen=True, slots=True)
class FioCommand:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # add to the caller's environment (PATH etc. are not here)
    size_bytes: int  # what fio will write: rounded down to whole blocks

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def size_label(block_size: int) -> str:
    """1 -> "1b", 2048 -> "2k": the block-size part of a profile name."""
    if block_size >= 1024 and block_size % 1024 == 0:
        return f"{block_size // 1024}k"
    return f"{block_size}b"


def _profile(guarantee: str, block_size: int) -> Profile:
    g = GUARANTEES[guarantee]
    if guarantee == "group-commit":
        raise UsageError("a group commit profile needs its group size: use group_commit(n)")
    if block_size not in BLOCK_SIZES:
        raise UsageError(
            f"block size {block_size} is not one of {', '.join(map(str, BLOCK_SIZES))}"
        )
    if g.direct and block_size % DIRECT_ALIGN:
        raise UsageError(
            f"{guarantee} needs a block size that is a multiple of {DIRECT_ALIGN}, not {block_size}"
        )
    return Profile(
        f"{guarantee}-{size_label(block_size)}",
        guarantee,
        g.job_file,
        ((VAR_BS, str(block_size)),),
        block_size,
        f"{g.description}, {block_size}-byte writes",
        int(g.separate_sync),
    )


def group_commit(n: int, block_size: int = GROUP_COMMIT_BLOCK) -> Profile:
    """fsync once every ``n`` writes (2..64) of ``block_size`` bytes (a 2 KiB transaction by default)."""
    lo, hi = GROUP_COMMIT_RANGE
    if not isinstance(n, int) or isinstance(n, bool) or not lo <= n <= hi:
        raise UsageError(f"group commit size must be an integer in {lo}..{hi}, not {n!r}")
    if block_size not in BLOCK_SIZES:
        raise UsageError(
            f"block size {block_size} is not one of {', '.join(map(str, BLOCK_SIZES))}"
        )
    return Profile(
        f"group-commit-{n}-{size_label(block_size)}",
        "group-commit",
        GUARANTEES["group-commit"].job_file,
        ((VAR_BS, str(block_size)), (VAR_SYNC_EVERY, str(n))),
        block_size,
        f"{n} write(2)s of {block_size} bytes + one fsync(2)",
        n,
    )


def _catalogue() -> tuple[Profile, ...]:
    out = [
        _profile(g.name, bs)
        for g in GUARANTEES.values()
        if g.name != "group-commit"
        for bs in BLOCK_SIZES
        if not (g.direct and bs % DIRECT_ALIGN)
    ]
    out += [group_commit(n) for n in GROUP_COMMIT_N]
    return tuple(out)


_ALL = _catalogue()
_QUICK = frozenset(
    {f"{g}-{size_label(QUICK_BLOCK)}" for g in GUARANTEES if g != "group-commit"}
    | {f"fsync-{size_label(GROUP_COMMIT_BLOCK)}", group_commit(8).name}
)


def profiles(quick: bool = False) -> tuple[Profile, ...]:
    """Every profile in catalogue order; ``quick``: the CI subset (each guarantee at 4 KiB, plus
    group commit of 8 next to its one-fsync-per-2-KiB-transaction baseline)."""
    return tuple(p for p in _ALL if p.name in _QUICK) if quick else _ALL


def by_name(name: str) -> Profile:
    """A catalogue profile, or any ``group-commit-N-SIZE`` with N in 2..64."""
    for p in _ALL:
        if p.name == name:
            return p
    if name.startswith("pg-"):
        method, _, label = name[3:].rpartition("-")
        if method in PG_METHODS and label == size_label(PG_BLOCK):
            return rewrite(method)
    if name.startswith("group-commit-"):
        n, _, label = name[len("group-commit-") :].partition("-")
        sizes = {size_label(bs): bs for bs in BLOCK_SIZES}
        if n.isdigit() and label in sizes:
            return group_commit(int(n), sizes[label])
    raise UsageError(
        f"unknown fio profile {name!r} (known: {', '.join(p.name for p in _ALL[:6])}, ...; "
        f"`powercut bench --list` shows all)"
    )


def rewrite(method: str, block_size: int = PG_BLOCK) -> Profile:
    """One block rewritten in place with pg_test_fsync's ``method`` (open_datasync, fdatasync, fsync,
    open_sync): ``pg-<method>-8k``."""
    if method not in PG_METHODS:
        raise UsageError(f"unknown sync method {method!r}: one of {', '.join(PG_METHODS)}")
    if block_size % DIRECT_ALIGN:
        raise UsageError(
            f"a rewrite profile needs a block size that is a multiple of {DIRECT_ALIGN}, not {block_size}"
        )
    guarantee, direct, sync, fsync, fdatasync = PG_METHODS[method]
    env = (
        (VAR_BS, str(block_size)),
        ("PC_DIRECT", str(direct)),
        ("PC_SYNC", sync),
        ("PC_FSYNC", str(fsync)),
        ("PC_FDATASYNC", str(fdatasync)),
    )
    return Profile(
        f"pg-{method}-{size_label(block_size)}",
        guarantee,
        REWRITE_JOB,
        env,
        block_size,
        f"{method} as pg_test_fsync does it: one {block_size}-byte block rewritten in place",
        int(bool(fsync or fdatasync)),
    )


def job_dir() -> Path:
    """``workloads/fio`` (the ``powercut.workloads`` package's ``fio`` directory)."""
    return Path(str(resources.files("powercut.workloads"))) / "fio"


def job_path(profile: Profile) -> Path:
    return job_dir() / profile.job_file


def fio_command(
    profile: Profile,
    directory: str,
    size_bytes: int,
    *,
    fio: str = "fio",
    runtime_s: int = 0,
    device: str = "",
) -> FioCommand:
    """The exact fio run of ``profile`` in ``directory`` (absolute; fio splits ``directory=`` at
    ':'), writing ``size_bytes`` rounded down to whole blocks, capped at ``runtime_s`` (0: no cap).
    ``device``: write the block device ``device`` itself (raw; ``directory`` is ignored, nothing is
    unlinked)."""
    file = f"powercut-{Path(profile.job_file).stem}.dat"
    if device:
        if not device.startswith("/dev/") or ":" in device:
            raise UsageError(f"a raw fio target must be a /dev path without ':', not {device!r}")
        directory, file = os.path.split(device)
    if not directory.startswith("/") or ":" in directory:
        raise UsageError(
            f"fio target directory must be an absolute path without ':', not {directory!r}"
        )
    if size_bytes < profile.block_size:
        raise UsageError(
            f"{profile.name}: size {size_bytes} is smaller than one {profile.block_size}-byte write"
        )
    if runtime_s < 0:
        raise UsageError(f"runtime must be >= 0 s, not {runtime_s}")
    size = size_bytes - size_bytes % profile.block_size
    writes = size // profile.block_size
    if profile.sync_every and writes <= profile.sync_every:
        raise UsageError(
            f"{profile.name}: {writes} writes never reach a sync (fio syncs after every "
            f"{profile.sync_every}, never after the last); write more than {profile.sync_every}"
        )
    env = (
        (VAR_DIR, directory),
        (VAR_SIZE, str(size)),
        (VAR_RUNTIME, str(runtime_s)),
        (VAR_FILE, file),
        (VAR_UNLINK, "0" if device else "1"),
    ) + profile.env
    argv = (fio, "--output-format=json", "--eta=never", str(job_path(profile)))
    return FioCommand(argv, env, size)


def fio_argv(profile: Profile, directory: str, size_bytes: int, *, fio: str = "fio") -> list[str]:
    """argv of ``fio_command`` (its environment: ``fio_env``)."""
    return list(fio_command(profile, directory, size_bytes, fio=fio).argv)


def fio_env(
    profile: Profile, directory: str, size_bytes: int, *, runtime_s: int = 0
) -> dict[str, str]:
    """The ``PC_*`` variables ``fio_argv``'s job file needs; merge them into the caller's environment."""
    return fio_command(profile, directory, size_bytes, runtime_s=runtime_s).env_dict()

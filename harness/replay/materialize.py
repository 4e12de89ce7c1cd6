"""Materialize crash states by incremental replay (never replay-from-scratch per state).

One walk over the log advances a *pristine* image in log order (``os.pwrite`` straight from the
log's mmap views; DISCARD entries become holes, or written zeros where holes are impossible).  Each
state needs the pristine at some position ``base`` -- the longest prefix of the log whose every
data entry the state keeps in full -- plus a few *extra* writes after it:

* no-cache / flush: base = cut, no extras;
* write-cache: base = the first dropped entry (at or after the last FLUSH before the cut; the cut
  when nothing is dropped), extras = the kept data entries in [base, cut) (durable FUA writes and
  the kept volatile ones);
* torn: base = the torn entry, extra = its persisted sectors only;
* lying disks (core/crashmodels/lies.py): a lost or misdirected write is a dropped entry (a misdirected one's
  copy an extra at its new place, in log order); a corrupt sector's bits are flipped last.

States are processed sorted by base, so the walk is monotone; per state the work is one clone
(``snapshot.Provider``) plus the extras, whose number is bounded by the epoch, not the log.

``reference_image`` is the plain baseline (replay from entry 0, as fstests generic/482 does);
``replay_state`` rebuilds one state by id for ``powercut replay``.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import stat
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from powercut.core.crashmodels.lies import flip_of, with_lie
from powercut.core.log.dmlog import Entry, LogIndex, open_log
from powercut.core.states.crashstate import CrashState, DeviceChanges
from powercut.core.states.models import durable_entries, state_from_id
from powercut.core.states.stateid import runs
from powercut.errors import BadRecording, PowercutError, UsageError
from powercut.linux.imageio import pwrite_all, sparse_copy_fd, zero_range
from powercut.record.recording import load as load_recording
from powercut.replay.providers import PROVIDERS, choose_provider
from powercut.replay.snapshot import Provider
from powercut.replay.zeros import Written, ZeroRuns

log = logging.getLogger(__name__)

Extra = tuple[Entry, tuple[int, ...] | None]


@dataclass(frozen=True, slots=True)
class Plan:
    """How to build one state: the pristine at ``base`` (entries[:base] applied), then ``extras``."""

    state: CrashState
    base: int
    extras: tuple[Extra, ...]


@dataclass(slots=True)
class ReplayStats:
    """Filled in by ``materialize`` (for the bench and the logs)."""

    provider: str = ""
    provider_reason: str = ""
    states: int = 0
    walk_entries: int = 0
    walk_bytes: int = 0
    zero_skipped: int = 0  # bytes of all-zero writes not read (known_zero)
    walk_s: float = 0.0
    clone_s: float = 0.0
    extras_entries: int = 0
    extras_s: float = 0.0
    release_s: float = 0.0
    setup_s: float = 0.0
    per_state_s: list[float] = field(default_factory=list)


def plan(index: LogIndex | Sequence[Entry], state: CrashState) -> Plan:
    """The pristine position a state needs and the writes to add on the clone (cost: the size of
    the state's epoch, never the whole log)."""
    entries = index.entries if isinstance(index, LogIndex) else index
    if not 0 <= state.cut <= len(entries):
        raise UsageError(
            f"state {state.id}: cut {state.cut} is past the log's {len(entries)} entries"
        )
    base = state.base
    extras = tuple(
        (entries[i], torn) for i, torn in state.kept(DeviceChanges(entries), base)
    )  # CrashState's rule
    return Plan(
        state, base, tuple(with_lie(state, entries, extras))
    )  # a misdirected write's copy (core/crashmodels/lies)


def check_extents(index: LogIndex, size: int, upto: int | None = None) -> None:
    """Every data entry (of the first ``upto``) must fit the data device."""
    if size <= 0 or size % 512:
        raise UsageError(f"data device size must be a positive multiple of 512 bytes, not {size}")
    ss = index.sectorsize
    limit = size // ss
    for e in index.entries[:upto]:
        if e.changes_device and e.sector + e.nr_sectors > limit:
            raise UsageError(
                f"{index.path}: entry {e.index} ({e.describe()}) ends at byte "
                f"{(e.sector + e.nr_sectors) * ss}, past the end of the {size}-byte data device "
                f"(wrong size, or not this device's log)"
            )


class _Writer:
    """Applies entries to an open image (a file or a block device) from the log's mmap.
    ``punch``: discards become holes where possible (else written zeros).  ``zeros``: the image
    is still all zeros (nothing written yet), so discards are no-ops (mkfs discards the device).
    ``known_zero``: writes whose data is all zeros (``zero_writes``), skipped -- never read -- while
    the image started zeroed and nothing was written where they land."""

    def __init__(
        self, index: LogIndex, fd: int, punch: bool, zeros: bool = False, known_zero: ZeroRuns = ()
    ) -> None:
        self.index = index
        self.fd = fd
        self.punch = punch
        self.zeros = zeros
        self.ss = index.sectorsize
        self.bytes = 0
        self.skipped = 0
        self.known_zero = (
            tuple((int(lo), int(hi)) for lo, hi in known_zero) if zeros else ()
        )  # JSON: lists
        self.last_zero = max((hi for _, hi in self.known_zero), default=0)
        self.written = Written()

    def _zero_skip(self, e: Entry, off: int, n: int) -> bool:
        """Whether ``e`` is a known-zero write onto a still-zero range (skipped); else note its range."""
        if e.index >= self.last_zero:
            return False
        k = bisect.bisect_right(self.known_zero, (e.index, len(self.index.entries))) - 1
        if (
            k >= 0
            and self.known_zero[k][0] <= e.index < self.known_zero[k][1]
            and not self.written.overlaps(off, off + n)
        ):
            self.skipped += n
            return True
        self.written.add(off, off + n)
        return False

    def apply(self, e: Entry, sectors: tuple[int, ...] | None = None) -> None:
        ss = self.ss
        off = e.sector * ss
        if e.is_discard:
            if not self.zeros:
                zero_range(self.fd, off, e.nr_sectors * ss, not self.punch)
            return
        if self.known_zero and self._zero_skip(e, off, e.nr_sectors * ss):
            return
        self.zeros = False
        if sectors is None:
            data = self.index.data(
                self.index.entries[e.index]
            )  # e may be a misdirected copy (core/crashmodels/lies)
            pwrite_all(self.fd, data, off)
            self.bytes += len(data)
            return
        data = self.index.data(e)
        for lo, hi in runs(sectors):  # a torn write: only the persisted sectors
            pwrite_all(self.fd, data[lo * ss : hi * ss], off + lo * ss)
            self.bytes += (hi - lo) * ss


def _check_initial(initial: Path | None, size: int) -> Path | None:
    if initial is None:
        return None
    p = Path(initial)
    try:
        st = os.stat(p)
    except OSError as e:
        raise UsageError(f"initial image {p}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"initial image {p} is not a regular file")
    if st.st_size != size:
        raise UsageError(f"initial image {p} has {st.st_size} bytes, the data device {size}")
    return p


def materialize(
    index: LogIndex,
    initial: Path | None,
    size: int,
    states: Sequence[CrashState],
    workspace: Path,
    provider: str | Provider = "auto",
    *,
    stats: ReplayStats | None = None,
    known_zero: ZeroRuns = (),
) -> Generator[tuple[CrashState, Path], None, None]:
    """Yield (state, image) for every state, in walk order (sorted by the pristine position the
    state needs -- not necessarily the order given).

    ``initial``: the data device before the log (None: all zeros); ``size``: its size in bytes.
    ``provider``: a name for ``choose_provider`` (then made and closed here) or a Provider (left
    open).  Each image is a file in the provider's work directory (a block device for
    dm-snapshot) that the consumer may read and write; it is **valid until the next iteration**:
    advancing the iterator (or closing it) releases it.  Copy it if you need it longer.  Close the
    iterator (``contextlib.closing``) if you stop early, so the workspace is cleaned up at once.
    ``known_zero``: the log's all-zero writes (``zero_writes``, from where the log is local), never
    read while they land on a still-zero part of an image that started as zeros."""
    st = stats if stats is not None else ReplayStats()
    plans = sorted((plan(index, s) for s in states), key=lambda p: p.base)
    check_extents(index, size, max((p.state.cut for p in plans), default=0))
    initial = _check_initial(initial, size)
    if isinstance(provider, str) and provider != "auto":
        if provider not in PROVIDERS:
            raise UsageError(
                f"unknown snapshot provider {provider!r}; choose auto, {', '.join(PROVIDERS)}"
            )
    walk = _walk(index, initial, size, plans, Path(workspace), provider, st, known_zero, None)
    return cast(Generator[tuple[CrashState, Path], None, None], walk)


def materialize_some(
    index: LogIndex,
    initial: Path | None,
    size: int,
    states: Sequence[CrashState],
    workspace: Path,
    provider: Provider,
    skip: Callable[[CrashState], bool],
    *,
    stats: ReplayStats | None = None,
    known_zero: ZeroRuns = (),
) -> Generator[tuple[CrashState, Path | None], None, None]:
    """``materialize``, but a state ``skip`` says needs no image (asked when the walk reaches it)
    is yielded with None: the pristine walks on, no clone is made (the read-set rule's proven
    states, check/host.py)."""
    st = stats if stats is not None else ReplayStats()
    plans = sorted((plan(index, s) for s in states), key=lambda p: p.base)
    check_extents(index, size, max((p.state.cut for p in plans), default=0))
    initial = _check_initial(initial, size)
    return _walk(index, initial, size, plans, Path(workspace), provider, st, known_zero, skip)


def _walk(
    index: LogIndex,
    initial: Path | None,
    size: int,
    plans: list[Plan],
    workspace: Path,
    provider: str | Provider,
    st: ReplayStats,
    known_zero: ZeroRuns,
    skip: Callable[[CrashState], bool] | None,
) -> Generator[tuple[CrashState, Path | None], None, None]:
    if not plans:
        return
    t0 = time.perf_counter()
    prov = (
        choose_provider(workspace, provider, image_bytes=2 * size + (256 << 20))
        if isinstance(provider, str)
        else provider
    )
    st.provider, st.provider_reason = prov.name, prov.reason
    pristine = None
    try:
        try:
            pristine = prov.pristine(size, initial)
            pristine.sync()
        except OSError as e:
            raise PowercutError(
                f"cannot create the pristine image in {prov.workdir}: {e.strerror}"
            ) from None
        st.setup_s += time.perf_counter() - t0
        walker = _Writer(
            index,
            pristine.fd,
            punch=not (pristine.block or prov.dense),
            zeros=initial is None,
            known_zero=known_zero,
        )
        entries = index.entries
        pos = 0
        for p in plans:
            t_state = time.perf_counter()
            try:
                if p.base > pos:
                    t = time.perf_counter()
                    before, skipped = walker.bytes, walker.skipped
                    apply = walker.apply
                    for ent in entries[pos : p.base]:
                        if ent.changes_device:
                            apply(ent)
                    index.release(pos, p.base)  # the log pages written out: out of the resident set
                    st.walk_entries += p.base - pos
                    st.walk_bytes += walker.bytes - before
                    st.zero_skipped += walker.skipped - skipped
                    pos = p.base
                    pristine.sync()
                    st.walk_s += time.perf_counter() - t
                if skip is not None and skip(p.state):
                    yield p.state, None
                    continue
                t = time.perf_counter()
                img = prov.clone(pristine.path, prov.path("state"))
                st.clone_s += time.perf_counter() - t
            except OSError as e:
                raise _io_error(e, f"replaying into {prov.workdir}") from None
            try:
                if p.extras or p.state.lie is not None:
                    t = time.perf_counter()
                    _apply_extras(index, img, p.extras, prov.block, flip_of(p.state))
                    st.extras_entries += len(p.extras)
                    st.extras_s += time.perf_counter() - t
                st.states += 1
                st.per_state_s.append(time.perf_counter() - t_state)
                yield p.state, img
            finally:
                t = time.perf_counter()
                prov.release(img)
                st.release_s += time.perf_counter() - t
    finally:
        if pristine is not None:
            prov.drop_pristine(pristine)
        if isinstance(provider, str):
            prov.close()


def _apply_extras(
    index: LogIndex,
    img: Path,
    extras: Sequence[Extra],
    block: bool,
    flip: tuple[int, tuple[int, ...]] | None = None,
) -> None:
    try:
        fd = os.open(img, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        raise _io_error(e, f"opening {img}") from None
    try:
        w = _Writer(index, fd, punch=not block)
        for ent, sectors in extras:
            w.apply(ent, sectors)
        if flip is not None:
            flip_bits(fd, *flip, index.sectorsize)
        if block:
            os.fsync(fd)
    except OSError as e:
        raise _io_error(e, f"writing {img}") from None
    finally:
        os.close(fd)


def flip_bits(fd: int, offset: int, bits: Sequence[int], sectorsize: int) -> None:
    """A corrupt-sector state's rot (core/crashmodels/lies.py): flip ``bits`` of the sector at byte ``offset``."""
    buf = bytearray(os.pread(fd, sectorsize, offset).ljust(sectorsize, b"\0"))
    for b in bits:
        buf[b // 8] ^= 1 << (b % 8)
    pwrite_all(fd, bytes(buf), offset)


def _io_error(e: OSError, doing: str) -> PowercutError:
    what = "no space left" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e))
    return PowercutError(f"{doing}: {what}")


# -- the plain baseline ---------------------------------------------------------------------------------
def reference_image(
    index: LogIndex, state: CrashState, size: int, out: Path, initial: Path | None = None
) -> Path:
    """Replay the state from entry 0 into ``out`` the straightforward way (generic/482's
    replay-index): start from the initial image (or zeros), write every durable entry in index order,
    zeros for discards, only the persisted sectors of a torn write."""
    ss = index.sectorsize
    with open(out, "w+b") as f:
        if initial is None:
            f.truncate(size)
        else:
            with open(initial, "rb") as src:
                while chunk := src.read(1 << 20):
                    f.write(chunk)
            f.truncate(size)
        for e, sectors in with_lie(state, index.entries, durable_entries(index, state)):
            f.seek(e.sector * ss)
            if e.is_discard:
                f.write(bytes(e.nr_sectors * ss))
            elif sectors is None:
                f.write(index.data(index.entries[e.index]))
            else:
                for s in sectors:
                    f.seek((e.sector + s) * ss)
                    f.write(index.sector_data(e, s))
        f.flush()
        if (flip := flip_of(state)) is not None:
            flip_bits(f.fileno(), *flip, ss)
    return Path(out)


def replay_into(
    index: LogIndex,
    state: CrashState,
    size: int,
    out: Path,
    initial: Path | None = None,
    *,
    fsync: bool = True,
) -> Path:
    """Build one state from entry 0 into the new file ``out`` on the walk's fast path (pwrite from
    the mmap, holes for discards).  OSError on I/O errors (the caller cleans up)."""
    fd = os.open(out, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        if initial is None:
            os.ftruncate(fd, size)
        else:
            src = os.open(initial, os.O_RDONLY | os.O_CLOEXEC)
            try:
                sparse_copy_fd(src, fd, size)
            finally:
                os.close(src)
        w = _Writer(index, fd, punch=True, zeros=initial is None)
        for e, sectors in with_lie(state, index.entries, durable_entries(index, state)):
            w.apply(e, sectors)
        if (flip := flip_of(state)) is not None:
            flip_bits(fd, *flip, index.sectorsize)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return out


# -- one state by id --------------------------------------------------------------------------------------
def _source(source: str | os.PathLike[str], size: int | None) -> tuple[Path, int, Path | None]:
    """(log path, data size, initial image) for a recording directory or a bare log file."""
    src = Path(source)
    if src.is_dir():
        rec = load_recording(src)
        dsize = rec.data_size
        log_path = rec.log_path
        initial = rec.initial_image
        if size is not None and size != dsize:
            raise UsageError(
                f"{src}: the recording's data device has {dsize} bytes; drop --size or give {dsize}"
            )
        if not log_path.is_file():
            raise BadRecording(f"{src}: the log {log_path.name} is missing")
        if initial is not None and not initial.is_file():
            raise BadRecording(f"{src}: the initial image {initial.name} is missing")
        if not rec.ok:
            log.warning("%s: recording status is %r; replaying what the log holds", src, rec.status)
        return log_path, dsize, initial
    if not src.exists():
        raise UsageError(f"{src}: no such recording directory or log file")
    if size is None:
        raise UsageError(f"{src} is a bare log file: give the data device size (--size BYTES)")
    return src, size, None


def replay_state(
    source: str | os.PathLike[str],
    state_id: str,
    out_path: str | os.PathLike[str],
    *,
    size: int | None = None,
    initial: str | os.PathLike[str] | None = None,
) -> Path:
    """Rebuild the crash state ``state_id`` of a recording (or of a bare log, with ``size``)
    into the image file ``out_path``, bit for bit what ``materialize`` yields for it.  The file is
    written under a temporary name and renamed; on any error nothing is left behind."""
    log_path, dsize, init = _source(source, size)
    if initial is not None:
        init = Path(initial)
    out = Path(out_path)
    if out.is_dir():
        raise UsageError(f"output {out} is a directory; give an image file name")
    if out.exists() and not out.is_file():
        raise UsageError(f"output {out} exists and is not a regular file")
    if not out.parent.is_dir():
        raise UsageError(f"output directory {out.parent} does not exist")
    init = _check_initial(init, dsize)
    with open_log(log_path) as index:
        state = state_from_id(index, state_id)
        check_extents(index, dsize, state.cut)
        tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
        try:
            replay_into(index, state, dsize, tmp, init)
            os.replace(tmp, out)
        except OSError as e:
            raise _io_error(e, f"cannot write {out}") from None
        finally:
            tmp.unlink(missing_ok=True)
    log.info("replayed %s (%d entries) into %s", state.id, state.cut, out)
    return out


__all__ = [
    "Plan",
    "ReplayStats",
    "check_extents",
    "materialize",
    "plan",
    "reference_image",
    "replay_into",
    "replay_state",
]

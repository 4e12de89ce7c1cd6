"""Snapshot providers (snapshot.py, dmsnap.py) and the image I/O under them (imageio.py): every
provider that works here materializes the same bytes as the from-scratch reference; auto picks
native reflink or the XFS workspace; setup and teardown leave nothing behind.  Root-only parts (XFS
workspace, reflink on XFS, dm-snapshot) skip when not root; dm-snapshot also needs a kernel with
device-mapper (tests/vm/test_replay_real.py runs it in the guest VM when the host lacks it)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from powercut.core.log.dmlog import LogIndex
from powercut.core.states.models import enumerate_states
from powercut.errors import EnvironmentNotReady, UsageError
from powercut.linux import dm, mounts
from powercut.linux.imageio import (
    data_extents,
    new_image,
    probe_reflink,
    punch_hole,
    pwrite_all,
    sparse_copy_fd,
)
from powercut.replay.materialize import materialize, reference_image
from powercut.replay.providers import choose_provider
from powercut.replay.snapshot import CopyProvider, Provider, XfsWorkspaceProvider
from tests.unit.replay.test_materialize import HAND, LOGS, NSECT, build, check_all, sha

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root (loop devices, mount)")


def dm_missing() -> str | None:
    if not ROOT:
        return "needs root"
    if not dm.dm_available(("dm-snapshot",)):
        return "this kernel has no device-mapper (tests/vm/test_replay_real.py runs these in the guest)"
    return None


DM_MISSING = dm_missing()
needs_dm = pytest.mark.skipif(DM_MISSING is not None, reason=str(DM_MISSING))


# -- image I/O ----------------------------------------------------------------------------------------------
def test_sparse_copy_keeps_holes_and_bytes(tmp_path: Path) -> None:
    src, dst = tmp_path / "s.img", tmp_path / "d.img"
    size = 8 << 20
    fd = os.open(src, os.O_RDWR | os.O_CREAT, 0o600)
    d = os.open(dst, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)
        pwrite_all(fd, b"a" * 8192, 1 << 20)
        pwrite_all(fd, memoryview(b"b" * 4096), 6 << 20)
        extents = data_extents(fd, size)
        assert sum(n for _, n in extents) < size // 2
        assert sparse_copy_fd(fd, d, size) == sum(n for _, n in extents)
        assert os.fstat(d).st_size == size and os.fstat(d).st_blocks * 512 < size // 2
        if punch_hole(fd, 1 << 20, 4096):
            assert os.pread(fd, 8192, 1 << 20) == bytes(4096) + b"a" * 4096
    finally:
        os.close(fd)
        os.close(d)
    data = dst.read_bytes()
    assert (
        data[1 << 20 : (1 << 20) + 8192] == b"a" * 8192
        and data[6 << 20 : (6 << 20) + 4096] == b"b" * 4096
    )
    assert data.count(0) == size - 8192 - 4096


def test_new_image_dense_and_sparse(tmp_path: Path) -> None:
    init = tmp_path / "init.img"
    init.write_bytes(b"x" * 5000)
    for dense in (False, True):
        p = tmp_path / f"img-{dense}"
        os.close(new_image(p, 3 << 20, init, dense))
        data = p.read_bytes()
        assert (
            len(data) == 3 << 20
            and data[:5000] == b"x" * 5000
            and data[5000:] == bytes(len(data) - 5000)
        )


def test_probe_reflink_names_the_reason(tmp_path: Path) -> None:
    why = probe_reflink(tmp_path)
    assert why is None or str(tmp_path) in why
    assert "cannot create files" in (probe_reflink(tmp_path / "missing") or "")


# -- file providers ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def xfs_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    if not ROOT:
        pytest.skip("needs root (loop devices, mount)")
    with XfsWorkspaceProvider(tmp_path_factory.mktemp("xfsws"), "test", image_bytes=512 << 20) as p:
        assert mounts.fs_type(p.workdir) == "xfs"
        yield p
    assert not p.outer.exists()


@needs_root
def test_xfs_workspace_provider(
    small_log: LogIndex, xfs_provider: Provider, tmp_path: Path
) -> None:
    assert check_all(
        small_log,
        NSECT * small_log.sectorsize,
        tmp_path,
        xfs_provider,
        exhaustive_bound=5,
        samples=4,
    )
    assert [p.name for p in xfs_provider.workdir.iterdir() if p.suffix == ".img"] == []


@needs_root
def test_native_reflink_provider(xfs_provider: Provider, tmp_path: Path) -> None:
    """On a filesystem with reflink (here: inside the XFS workspace), auto picks plain reflink."""
    ws = xfs_provider.workdir / "native"
    ws.mkdir()
    assert probe_reflink(ws) is None
    with choose_provider(ws) as p:
        assert p.name == "reflink"
        with build(tmp_path / "l.bin", LOGS["r2"], 4096) as idx:
            check_all(idx, NSECT * 4096, tmp_path, p, exhaustive_bound=5, samples=4)


@needs_root
def test_auto_without_reflink_uses_xfs_workspace(tmp_path: Path) -> None:
    """The XFS workspace is a loop device + mount(2); close unmounts it and frees the loop."""
    from powercut.linux.loopdev import loops_backed_under

    if probe_reflink(tmp_path) is None:
        pytest.skip(f"{tmp_path} supports reflink natively")
    with choose_provider(tmp_path) as p:
        assert p.name == "xfs" and "no reflink" in p.reason
        outer = p.outer  # type: ignore[attr-defined]
        assert [m.fstype for m in mounts.mounts_under(outer)] == ["xfs"]
        assert [b for _, b in loops_backed_under(outer)] == [str(outer / "xfs.img")]
    assert not outer.exists()
    assert mounts.mounts_under(outer) == [] and loops_backed_under(outer) == []


@needs_root
def test_xfs_workspace_loop_is_write_through_until_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flushes inside the workspace stop at its loop device (no fsync of the image below); the
    loop's write cache is on again before the workspace lets it go, and a killed run's is turned
    back on by the host's stale-run cleanup before the unmount lets autoclear detach it.  Once the
    device is free another program (another powercut run) may attach it at once: what is asserted
    of it then is that it was given back as it was found, seen at the detach itself."""
    from powercut.check.host import cleanup_stale
    from powercut.linux import loopdev
    from powercut.linux.loopcache import has_write_cache

    seen: list[bool] = []
    real_clear = loopdev._clear

    def spy(fd: int, path: str, attempts: int = 50) -> None:
        seen.append(has_write_cache(path))
        real_clear(fd, path, attempts)

    monkeypatch.setattr(loopdev, "_clear", spy)
    p = XfsWorkspaceProvider(tmp_path, "test", image_bytes=512 << 20)
    dev = p.loop.path  # type: ignore[union-attr]
    assert not has_write_cache(dev)
    p.close()
    assert seen == [True]
    p = XfsWorkspaceProvider(tmp_path, "test", image_bytes=512 << 20)
    dev = p.loop.path  # type: ignore[union-attr]
    os.close(p.loop.fd)  # type: ignore[union-attr]  # killed: its fds closed, its mount still there
    p.loop.fd = -1  # type: ignore[union-attr]
    p._closed = True
    cleanup_stale(tmp_path)
    assert seen == [True, True]  # the cleanup's detach, after the cache came back
    assert mounts.mounts_under(tmp_path) == []


@needs_root
def test_xfs_workspace_busy_at_close_is_detached(tmp_path: Path) -> None:
    """A file left open in the workspace: close still unmounts (lazily) and removes everything."""
    p = XfsWorkspaceProvider(tmp_path, "test", image_bytes=512 << 20)
    f = open(p.workdir / "held", "wb")
    try:
        p.close()
        assert not p.outer.exists() and mounts.mounts_under(tmp_path) == []
    finally:
        f.close()


# -- dm-snapshot ----------------------------------------------------------------------------------------------
@needs_dm
def test_dm_snapshot_provider(small_log: LogIndex, tmp_path: Path) -> None:
    with choose_provider(tmp_path, "dm-snapshot") as p:
        assert p.block
        check_all(
            small_log, NSECT * small_log.sectorsize, tmp_path, p, exhaustive_bound=5, samples=4
        )
        assert p.live == {}  # type: ignore[attr-defined]
    assert [d.name for d in dm.devices() if d.name.startswith(p.prefix)] == []  # type: ignore[attr-defined]
    assert not p.loops  # type: ignore[attr-defined]


@needs_dm
def test_dm_snapshot_clone_release_cost(tmp_path: Path) -> None:
    """Prints the cost of one clone+release (ioctls, no dmsetup fork); the VM test reports it."""
    n = 20
    with choose_provider(tmp_path, "dm-snapshot") as p:
        pr = p.pristine(64 << 20, None)
        p.release(p.clone(pr.path, p.path("clone")))  # warm: the COW device
        t = time.perf_counter()
        for _ in range(n):
            node = p.clone(pr.path, p.path("clone"))
            assert node.is_block_device()
            p.release(node)
        per = (time.perf_counter() - t) / n
        p.drop_pristine(pr)
    print(f"dm-snapshot clone+release: {per * 1e3:.2f} ms (n={n})")
    assert per < 5.0


# -- all providers -------------------------------------------------------------------------------------------
def test_providers_agree(tmp_path: Path) -> None:
    """Same states, every provider that works here (at least two), the reference's bytes."""
    names = ["copy"] + (["xfs"] if ROOT else []) + (["dm-snapshot"] if DM_MISSING is None else [])
    if len(names) < 2:
        pytest.skip(
            "only the copy provider works here: the XFS workspace and dm-snapshot need root"
        )
    with build(tmp_path / "l.bin", LOGS["r2"], 512) as idx:
        states = enumerate_states(idx, "write-cache", exhaustive_bound=5, samples=4)
        ref = tmp_path / "ref.img"
        want = {}
        for s in states:
            reference_image(idx, s, NSECT * 512, ref)
            want[s.id] = sha(ref)
        assert len(set(want.values())) > 1
        for name in names:
            got = {
                s.id: sha(img)
                for s, img in materialize(idx, None, NSECT * 512, states, tmp_path, name)
            }
            assert got == want, f"{name} differs from the reference"


def test_choose_provider_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown snapshot provider"):
        choose_provider(tmp_path, "zfs")
    with pytest.raises(UsageError, match="not a directory"):
        choose_provider(tmp_path / "nope")
    with CopyProvider(tmp_path, "x") as p:
        assert p.name == "copy"
    if DM_MISSING is not None:
        with pytest.raises(EnvironmentNotReady):
            choose_provider(tmp_path, "dm-snapshot")
    with (
        build(tmp_path / "l.bin", HAND, 512) as idx,
        pytest.raises(UsageError, match="unknown snapshot provider"),
    ):
        materialize(idx, None, NSECT * 512, enumerate_states(idx, "flush"), tmp_path, "zfs")

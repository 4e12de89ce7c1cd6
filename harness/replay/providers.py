"""Which snapshot provider a replay uses (host and guest): the catalogue, and the first that works for
a work directory (reflink, XFS workspace, dm-snapshot, plain copy)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from powercut.errors import EnvironmentNotReady, UsageError
from powercut.linux import mounts
from powercut.linux.imageio import probe_reflink
from powercut.replay.dmsnapshot import DmSnapshotProvider
from powercut.replay.snapshot import CopyProvider, Provider, ReflinkProvider, XfsWorkspaceProvider

log = logging.getLogger(__name__)

PROVIDERS = ("reflink", "xfs", "copy", "dm-snapshot")


# -- choosing -----------------------------------------------------------------------------------------------
def choose_provider(
    workspace: Path, prefer: str = "auto", *, image_bytes: int = 1 << 30
) -> Provider:
    """The best provider for ``workspace``: native reflink, else (root) an XFS workspace image,
    else sparse copy.  ``prefer`` forces one (EnvironmentNotReady if it cannot work here);
    dm-snapshot is only used when asked for (its clones are block devices)."""
    workspace = Path(workspace)
    if prefer not in ("auto", *PROVIDERS):
        raise UsageError(
            f"unknown snapshot provider {prefer!r}; choose auto, {', '.join(PROVIDERS)}"
        )
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} is not a directory")
    fstype = mounts.fs_type(workspace)
    if prefer == "copy":
        return _chosen(CopyProvider(workspace, "asked for"))
    if prefer == "dm-snapshot":
        return _chosen(DmSnapshotProvider(workspace, "asked for"))
    why_not = probe_reflink(workspace)
    if why_not is None and prefer in ("auto", "reflink"):
        return _chosen(ReflinkProvider(workspace, f"{fstype} workspace supports FICLONE"))
    if prefer == "reflink" and why_not and os.geteuid() != 0:
        raise EnvironmentNotReady(f"no reflink: {why_not}; an XFS workspace would need root")
    if prefer in ("auto", "reflink", "xfs"):
        try:
            return _chosen(
                XfsWorkspaceProvider(
                    workspace,
                    f"{fstype} workspace has no reflink "
                    f"({why_not or 'asked for xfs'}); loop-mounted XFS image",
                    image_bytes=image_bytes,
                )
            )
        except EnvironmentNotReady as e:
            if prefer != "auto":
                raise
            why_not = f"{why_not}; {e.one_line()}"
    return _chosen(CopyProvider(workspace, f"no reflink ({why_not}): sparse copy"))


def _chosen(p: Provider) -> Provider:
    log.info("snapshot provider: %s (%s)", p.name, p.reason)
    return p

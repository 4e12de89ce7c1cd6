"""``$POWERCUT_RUN_DIR`` (``/run/powercut``; host and guest): where live powercut runs keep the
state the whole host shares -- output-directory locks (linux/runlock), the write-through loop
devices they hold (linux/loopcache).  A tmpfs, emptied at boot, as is what it describes.  Where
/run is not writable (not root) it is a directory of the user's in the temporary directory."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from powercut.errors import UsageError
from powercut.linux import environ

log = logging.getLogger(__name__)

DEFAULT = "/run/powercut"


def run_dir(sub: str) -> Path:
    """``$POWERCUT_RUN_DIR/sub``, made if missing; a bad setting is one UsageError line naming it."""
    top = Path(environ.text(environ.RUN_DIR, DEFAULT))
    for base in (top, Path(os.environ.get("TMPDIR") or "/tmp") / f"powercut-run-{os.getuid()}"):
        path = base / sub
        try:
            path.mkdir(parents=True, exist_ok=True)
            return path
        except OSError as e:
            if base != top or e.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
                raise UsageError(
                    f"cannot use {path} for powercut's run state: {e.strerror}"
                ) from None
            log.debug("%s: %s; run state goes to the temporary directory", path, e.strerror)
    raise AssertionError("unreachable")

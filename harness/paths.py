"""Where powercut keeps its per-user state on the host: the cache root that holds guest images,
kernel packages and the acceleration verdicts (accel.json).  Host only; standard library only, so
any layer (vm/, the image builder) may import it.

``POWERCUT_CACHE`` wins; else ``$XDG_CACHE_HOME/powercut``; else ``~/.cache/powercut``."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("POWERCUT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "powercut")
    return Path(root)
